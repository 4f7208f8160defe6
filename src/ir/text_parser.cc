// Parses Kiln's textual IR (docs/ir.md) into a Graph. Any input gives either a graph or a
// kiln::Error: E10010 with "line L, column C" for malformed text, or the builder's own code (E50001,
// E40002) with the position prefixed. Every read is bounds-checked and every size overflow-checked,
// so hostile input can't crash it.
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <set>
#include <unordered_map>

#include "kiln/graph.h"
#include "ir/text_syntax.h"
#include "ops/low_precision.h"
#include "ops/op_registry.h"

namespace kiln {

namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_word_start(char c) { return is_name_char(c) && !is_digit(c) && c != '.'; }
int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Text from the input shown inside an error message: short, with control bytes escaped.
std::string shown(std::string_view s) {
  constexpr size_t kMax = 40;
  std::string out;
  for (size_t i = 0; i < s.size() && i < kMax; ++i) {
    auto byte = static_cast<unsigned char>(s[i]);
    if (byte < 0x20 || byte == 0x7f) {
      static const char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[byte >> 4];
      out += kHex[byte & 15];
    } else {
      out += s[i];
    }
  }
  if (s.size() > kMax) out += "...";
  return out;
}

std::string dtype_list() {
  std::string out;
  for (DType d : kAllDTypes) {
    if (!out.empty()) out += ", ";
    out += dtype_name(d);
  }
  return out;
}

// The element count of a tensor of these sizes, or nullopt when it is too large to hold (the
// bound leaves room for bytes = count * 8 and for twice that in hex digits).
std::optional<int64_t> checked_numel(const std::vector<int64_t>& sizes) {
  for (int64_t s : sizes)
    if (s == 0) return 0;
  int64_t n = 1;
  for (int64_t s : sizes)
    if (__builtin_mul_overflow(n, s, &n) || n > std::numeric_limits<int64_t>::max() / 16)
      return std::nullopt;
  return n;
}

// Rounds a finite double to a binary float with `exp_bits` exponent and `mant_bits` mantissa
// bits (f16: 5, 10; bf16: 8, 7), to nearest with ties to even; nullopt when it overflows.
std::optional<uint16_t> round_to_half(double x, int exp_bits, int mant_bits) {
  auto sign = static_cast<uint16_t>(std::signbit(x) ? 1u << (exp_bits + mant_bits) : 0u);
  double magnitude = std::fabs(x);
  if (magnitude == 0) return sign;
  const int bias = (1 << (exp_bits - 1)) - 1;
  const int min_exp = 1 - bias;
  int exp;
  std::frexp(magnitude, &exp);
  --exp;  // magnitude = 1.f * 2^exp
  bool subnormal = exp < min_exp;
  if (subnormal) exp = min_exp;
  // Units of the last mantissa bit: exact, as it scales by a power of two.
  double units = std::ldexp(magnitude, mant_bits - exp);
  double rounded = std::floor(units);
  double rest = units - rounded;
  if (rest > 0.5 || (rest == 0.5 && std::fmod(rounded, 2.0) != 0)) rounded += 1;
  auto u = static_cast<uint64_t>(rounded);
  // A carry out of the mantissa lands in the exponent field, which is the right encoding both
  // for subnormal -> smallest normal and for the next binade.
  uint64_t bits = subnormal ? u
                            : (static_cast<uint64_t>(exp + bias) << mant_bits) +
                                  (u - (uint64_t{1} << mant_bits));
  if (bits >= ((uint64_t{1} << exp_bits) - 1) << mant_bits) return std::nullopt;
  return static_cast<uint16_t>(sign | bits);
}

struct Token {
  enum Kind { End, Word, Int, Float, String, Hex, ValueName, AtName, Punct };
  Kind kind = End;
  // The word, name, decoded string, hex digits, punctuation char or number as written.
  std::string text;
  int64_t int_value = 0;
  double float_value = 0;
  size_t offset = 0;
};

struct Result {
  std::string name;
  size_t offset;
  std::optional<TensorType> type;
};

class Parser {
 public:
  explicit Parser(const std::string& text) : text_(text) { advance(); }

  std::unique_ptr<Graph> parse() {
    expect_word("graph", "'graph' at the start of the text");
    if (tok_.kind != Token::AtName) unexpected("the graph's name, like @main");
    graph_ = std::make_unique<Graph>(tok_.text);
    advance();
    expect_punct('{', "'{' to open the graph body");
    while (!at_punct('}')) {
      if (at_word("sym"))
        parse_symbol();
      else if (at_word("input"))
        parse_input();
      else if (at_word("const"))
        parse_constant();
      else if (at_word("output"))
        parse_outputs();
      else if (tok_.kind == Token::ValueName || at_punct('='))
        parse_node();
      else
        unexpected("a statement (sym, input, const, output or %result = op(...)) or '}'");
    }
    advance();
    if (tok_.kind != Token::End) unexpected("end of input after the graph's closing '}'");
    return std::move(graph_);
  }

 private:
  // ------------------------------------------------------------------ errors

  std::string position(size_t offset) const {
    size_t line = 1, line_start = 0;
    for (size_t i = 0; i < offset && i < text_.size(); ++i)
      if (text_[i] == '\n') {
        ++line;
        line_start = i + 1;
      }
    return "line " + std::to_string(line) + ", column " + std::to_string(offset - line_start + 1);
  }

  [[noreturn]] void fail_at(size_t offset, const std::string& what) const {
    throw Error(ErrorCode::ParseError, position(offset) + ": " + what);
  }

  static std::string describe(const Token& t) {
    switch (t.kind) {
      case Token::End: return "end of input";
      case Token::Word: return "'" + shown(t.text) + "'";
      case Token::Int:
      case Token::Float: return "number " + t.text;
      case Token::String: return "string \"" + shown(t.text) + "\"";
      case Token::Hex: return "hex data";
      case Token::ValueName: return "value %" + shown(t.text);
      case Token::AtName: return "name @" + shown(t.text);
      case Token::Punct: return "'" + t.text + "'";
    }
    return "?";
  }

  [[noreturn]] void unexpected(const std::string& expected) const {
    fail_at(tok_.offset, "expected " + expected + ", found " + describe(tok_));
  }

  // ------------------------------------------------------------------ lexing

  bool more() const { return pos_ < text_.size(); }

  void skip_space_and_comments() {
    while (more()) {
      char c = text_[pos_];
      if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
        ++pos_;
      } else if (c == '#') {
        while (more() && text_[pos_] != '\n') ++pos_;
      } else {
        break;
      }
    }
  }

  std::string lex_name_chars() {
    size_t start = pos_;
    while (more() && is_name_char(text_[pos_])) ++pos_;
    return text_.substr(start, pos_ - start);
  }

  // At the opening '"'; returns the decoded contents.
  std::string lex_quoted() {
    size_t start = pos_++;
    std::string out;
    for (;;) {
      if (!more() || text_[pos_] == '\n')
        fail_at(start, "unterminated string: no closing '\"' on this line");
      char c = text_[pos_++];
      if (c == '"') return out;
      if (c != '\\') {
        out += c;
        continue;
      }
      size_t escape_at = pos_ - 1;
      if (!more()) fail_at(start, "unterminated string: no closing '\"' on this line");
      char e = text_[pos_++];
      switch (e) {
        case '\\': out += '\\'; break;
        case '"': out += '"'; break;
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'x': {
          int hi = more() ? hex_value(text_[pos_]) : -1;
          int lo = pos_ + 1 < text_.size() ? hex_value(text_[pos_ + 1]) : -1;
          if (hi < 0 || lo < 0) fail_at(escape_at, "'\\x' must be followed by two hex digits");
          out += static_cast<char>(hi * 16 + lo);
          pos_ += 2;
          break;
        }
        default:
          fail_at(escape_at, "unknown escape '\\" + shown(std::string(1, e)) +
                                 "' in a string; use \\\\, \\\", \\n, \\t or \\xHH");
      }
    }
  }

  // At the '"' after `hex`.
  void lex_hex() {
    size_t digits_start = ++pos_;
    while (more() && text_[pos_] != '"') {
      if (text_[pos_] == '\n') break;
      if (hex_value(text_[pos_]) < 0)
        fail_at(pos_, "'" + shown(std::string(1, text_[pos_])) + "' is not a hex digit");
      ++pos_;
    }
    if (!more() || text_[pos_] != '"')
      fail_at(tok_.offset, "unterminated hex data: no closing '\"' on this line");
    tok_.kind = Token::Hex;
    tok_.text = text_.substr(digits_start, pos_ - digits_start);
    ++pos_;
  }

  void lex_number() {
    size_t start = pos_;
    auto digits = [this] {
      while (more() && is_digit(text_[pos_])) ++pos_;
    };
    if (text_[pos_] == '-') ++pos_;
    digits();
    bool is_float = false;
    if (more() && text_[pos_] == '.') {
      is_float = true;
      ++pos_;
      digits();
    }
    if (more() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
      size_t p = pos_ + 1;
      if (p < text_.size() && (text_[p] == '+' || text_[p] == '-')) ++p;
      if (p < text_.size() && is_digit(text_[p])) {
        is_float = true;
        pos_ = p;
        digits();
      }
    }
    while (more() && is_name_char(text_[pos_])) ++pos_;  // swallow "3x" to report it whole
    tok_.text = text_.substr(start, pos_ - start);
    const char* first = text_.data() + start;
    const char* last = text_.data() + pos_;
    std::from_chars_result r;
    if (is_float) {
      tok_.kind = Token::Float;
      r = std::from_chars(first, last, tok_.float_value);
    } else {
      tok_.kind = Token::Int;
      r = std::from_chars(first, last, tok_.int_value);
    }
    if (r.ec == std::errc::result_out_of_range)
      fail_at(start, "number " + shown(tok_.text) + " is out of range for a 64-bit " +
                         (is_float ? "float" : "integer"));
    if (r.ec != std::errc() || r.ptr != last) fail_at(start, "malformed number '" + shown(tok_.text) + "'");
  }

  void advance() {
    skip_space_and_comments();
    tok_ = Token{};
    tok_.offset = pos_;
    if (!more()) return;
    char c = text_[pos_];
    if (c == '%' || c == '@') {
      tok_.kind = c == '%' ? Token::ValueName : Token::AtName;
      ++pos_;
      if (more() && text_[pos_] == '"')
        tok_.text = lex_quoted();
      else
        tok_.text = lex_name_chars();
      if (tok_.text.empty()) fail_at(tok_.offset, std::string("expected a name after '") + c + "'");
    } else if (c == '"') {
      tok_.kind = Token::String;
      tok_.text = lex_quoted();
    } else if (is_word_start(c)) {
      tok_.kind = Token::Word;
      tok_.text = lex_name_chars();
      if (tok_.text == "hex" && more() && text_[pos_] == '"') lex_hex();
    } else if (is_digit(c) || (c == '-' && pos_ + 1 < text_.size() && is_digit(text_[pos_ + 1]))) {
      lex_number();
    } else if (c == '-' && text_.compare(pos_ + 1, 3, "inf") == 0 &&
               !(pos_ + 4 < text_.size() && is_name_char(text_[pos_ + 4]))) {
      tok_.kind = Token::Float;
      tok_.text = "-inf";
      tok_.float_value = -std::numeric_limits<double>::infinity();
      pos_ += 4;
    } else if (c != '\0' && std::strchr("{}[](),:=<>", c)) {
      tok_.kind = Token::Punct;
      tok_.text = std::string(1, c);
      ++pos_;
    } else {
      fail_at(pos_, "unexpected character '" + shown(std::string(1, c)) + "'");
    }
  }

  // ------------------------------------------------------------------ token helpers

  bool at_punct(char c) const { return tok_.kind == Token::Punct && tok_.text[0] == c; }
  bool at_word(const char* w) const { return tok_.kind == Token::Word && tok_.text == w; }

  void expect_punct(char c, const char* expected) {
    if (!at_punct(c)) unexpected(expected);
    advance();
  }
  void expect_word(const char* w, const char* expected) {
    if (!at_word(w)) unexpected(expected);
    advance();
  }
  // Symbol names, op names and attribute keys: a bare word or a quoted string.
  std::string expect_word_or_string(const char* expected) {
    if (tok_.kind != Token::Word && tok_.kind != Token::String) unexpected(expected);
    if (tok_.text.empty()) fail_at(tok_.offset, std::string(expected) + " can't be empty");
    std::string text = std::move(tok_.text);
    advance();
    return text;
  }
  int64_t expect_int(const char* expected) {
    if (tok_.kind != Token::Int) unexpected(expected);
    int64_t v = tok_.int_value;
    advance();
    return v;
  }

  // ------------------------------------------------------------------ types and data

  // A type with an optional layout suffix `<nChw8c>`, which only node results may have: graph
  // inputs, constants and tensor attributes are plain, as PyTorch hands them over.
  TensorType parse_type(bool results = false) {
    TensorType type = parse_plain_type();
    if (!at_punct('<')) return type;
    size_t offset = tok_.offset;
    if (!results)
      fail_at(offset, "only node results have layouts; graph inputs, constants and tensor "
                      "attributes are plain");
    advance();
    if (tok_.kind != Token::Word || !parse_layout(tok_.text, type.layout))
      unexpected("a layout: plain, nhwc, nChw8c or nChw16c");
    advance();
    expect_punct('>', "'>' to end the layout");
    if (type.layout == Layout::Plain)
      fail_at(offset, "write a plain type without a layout suffix (the printer never writes <plain>)");
    std::string problem = layout_problem(type.shape, type.layout);
    if (!problem.empty()) fail_at(offset, problem);
    return type;
  }

  TensorType parse_plain_type() {
    if (tok_.kind != Token::Word) unexpected("a type like f32[2, 3]");
    std::optional<DType> dtype = parse_dtype(tok_.text);
    if (!dtype)
      fail_at(tok_.offset, "unknown dtype '" + shown(tok_.text) + "'; expected one of " + dtype_list());
    TensorType type{*dtype, {}, Layout::Plain};
    advance();
    expect_punct('[', "'[' to start the shape");
    if (at_punct(']')) {
      advance();
      return type;
    }
    for (;;) {
      if (tok_.kind == Token::Int) {
        if (tok_.int_value < 0) fail_at(tok_.offset, "a dim can't be negative, found " + tok_.text);
        type.shape.push_back(Dim(tok_.int_value));
      } else if (tok_.kind == Token::Word || tok_.kind == Token::String) {
        int32_t id = graph_->symbols().find(tok_.text);
        if (id < 0)
          fail_at(tok_.offset, "undeclared symbol '" + shown(tok_.text) +
                                   "'; declare it before use with `sym NAME in [min, max]`");
        type.shape.push_back(Dim::symbolic(id));
      } else {
        unexpected("a dim (a size or a symbol name)");
      }
      advance();
      if (at_punct(']')) break;
      expect_punct(',', "',' or ']' in the shape");
    }
    advance();
    return type;
  }

  // The type of a constant or a tensor attribute, which must be static.
  TensorType parse_static_type(const char* what) {
    size_t offset = tok_.offset;
    TensorType type = parse_type();
    if (!is_static(type.shape))
      fail_at(offset, std::string("the shape of ") + what + " must be static, found " +
                          shown(type_string(type, &graph_->symbols())));
    return type;
  }

  // Writes one element of a readable list into a tensor's storage.
  void store_element(DType dtype, std::byte* dst, const Token& t) {
    auto fail_kind = [&](const char* expected) {
      fail_at(t.offset, std::string("expected ") + expected + " for a " +
                            std::string(dtype_name(dtype)) + " element, found " + describe(t));
    };
    auto out_of_range = [&] {
      fail_at(t.offset, shown(t.text) + " is out of range for " + std::string(dtype_name(dtype)));
    };
    auto store = [&](auto v) { std::memcpy(dst, &v, sizeof v); };
    auto store_int = [&]<typename T>(T) {
      if (t.kind != Token::Int) fail_kind("an integer");
      if (t.int_value < std::numeric_limits<T>::min() || t.int_value > std::numeric_limits<T>::max())
        out_of_range();
      store(static_cast<T>(t.int_value));
    };
    switch (dtype) {
      case DType::Bool: {
        bool is_bool_word = t.kind == Token::Word && (t.text == "true" || t.text == "false");
        bool is_bit = t.kind == Token::Int && (t.int_value == 0 || t.int_value == 1);
        if (!is_bool_word && !is_bit) fail_kind("true, false, 0 or 1");
        store(static_cast<uint8_t>(t.text == "true" || (is_bit && t.int_value == 1)));
        return;
      }
      case DType::I64: return store_int(int64_t{});
      case DType::I32: return store_int(int32_t{});
      case DType::I16: return store_int(int16_t{});
      case DType::I8: return store_int(int8_t{});
      case DType::U8: return store_int(uint8_t{});
      case DType::F64:
      case DType::F32:
      case DType::F16:
      case DType::BF16: break;
    }
    const bool named = t.kind == Token::Word && (t.text == "inf" || t.text == "nan");
    if (t.kind != Token::Int && t.kind != Token::Float && !named) fail_kind("a number");
    const bool finite = !named && t.text != "-inf";
    constexpr double kInf = std::numeric_limits<double>::infinity();
    double value = t.text == "nan" ? std::numeric_limits<double>::quiet_NaN()
                   : t.text == "-inf" ? -kInf
                                      : kInf;  // finite values are read from the spelling below
    const char* first = t.text.data();
    const char* last = first + t.text.size();
    if (dtype == DType::F32) {
      // Straight from the decimal, not through double, so it is rounded once.
      auto f = static_cast<float>(value);
      if (finite && std::from_chars(first, last, f).ec != std::errc()) out_of_range();
      return store(f);
    }
    if (finite && std::from_chars(first, last, value).ec != std::errc()) out_of_range();
    if (dtype == DType::F64) return store(value);
    const int exp_bits = dtype == DType::F16 ? 5 : 8, mant_bits = dtype == DType::F16 ? 10 : 7;
    const uint16_t exp_mask = static_cast<uint16_t>(((1u << exp_bits) - 1) << mant_bits);
    uint16_t bits;
    if (std::isnan(value)) {
      bits = static_cast<uint16_t>(exp_mask | (1u << (mant_bits - 1)));  // quiet NaN
    } else if (std::isinf(value)) {
      bits = static_cast<uint16_t>(exp_mask | (value < 0 ? 0x8000u : 0u));
    } else {
      std::optional<uint16_t> rounded = round_to_half(value, exp_bits, mant_bits);
      // A nonzero literal that becomes zero or infinity is a typo or the wrong dtype.
      if (!rounded || (value != 0 && (*rounded & 0x7fff) == 0)) out_of_range();
      bits = *rounded;
    }
    store(bits);
  }

  // Tensor contents for a known dtype and sizes: hex"..." of the raw little-endian bytes, or a
  // flat list of elements. `type_offset` locates the type for size errors.
  Tensor parse_tensor_data(DType dtype, const std::vector<int64_t>& sizes, size_t type_offset) {
    std::string type_text = std::string(dtype_name(dtype)) + shape_string(sizes);
    std::optional<int64_t> numel = checked_numel(sizes);
    if (!numel) fail_at(type_offset, "a tensor of type " + type_text + " is too large to hold");
    size_t count = static_cast<size_t>(*numel);
    size_t nbytes = count * dtype_size(dtype);
    if (tok_.kind == Token::Hex) {
      if (tok_.text.size() != 2 * nbytes)
        fail_at(tok_.offset, "hex data for " + type_text + " must have exactly " +
                                 std::to_string(2 * nbytes) + " hex digits (" +
                                 std::to_string(nbytes) + " bytes), found " +
                                 std::to_string(tok_.text.size()));
      Tensor t = Tensor::empty(dtype, sizes);
      auto* bytes = static_cast<unsigned char*>(t.data());
      for (size_t i = 0; i < nbytes; ++i)
        bytes[i] = static_cast<unsigned char>(hex_value(tok_.text[2 * i]) * 16 +
                                              hex_value(tok_.text[2 * i + 1]));
      advance();
      return t;
    }
    if (!at_punct('[')) unexpected("hex\"...\" data or a list of elements like [1.0, 2.0]");
    size_t list_offset = tok_.offset;
    advance();
    std::vector<Token> elements;
    while (!at_punct(']')) {
      if (!elements.empty()) expect_punct(',', "',' or ']' in the element list");
      if (tok_.kind != Token::Int && tok_.kind != Token::Float && tok_.kind != Token::Word)
        unexpected("an element (a number, true or false)");
      elements.push_back(tok_);
      advance();
    }
    advance();
    if (elements.size() != count)
      fail_at(list_offset, type_text + " needs " + std::to_string(count) + " elements, found " +
                               std::to_string(elements.size()));
    Tensor t = Tensor::empty(dtype, sizes);
    auto* dst = static_cast<std::byte*>(t.data());
    for (size_t i = 0; i < count; ++i) store_element(dtype, dst + i * dtype_size(dtype), elements[i]);
    return t;
  }

  // ------------------------------------------------------------------ attributes

  // An int, float, bool or string literal, or nullopt if the token is none of these.
  std::optional<Attr> scalar_attr() const {
    switch (tok_.kind) {
      case Token::Int: return Attr(tok_.int_value);
      case Token::Float: return Attr(tok_.float_value);
      case Token::String: return Attr(tok_.text);
      case Token::Word:
        if (tok_.text == "true" || tok_.text == "false") return Attr(tok_.text == "true");
        if (tok_.text == "inf") return Attr(std::numeric_limits<double>::infinity());
        if (tok_.text == "nan") return Attr(std::numeric_limits<double>::quiet_NaN());
        return std::nullopt;
      default: return std::nullopt;
    }
  }

  Attr parse_attr_list() {
    advance();  // '['
    std::vector<std::pair<Attr, size_t>> items;
    while (!at_punct(']')) {
      if (!items.empty()) expect_punct(',', "',' or ']' in the list");
      std::optional<Attr> item = scalar_attr();
      if (!item) unexpected("a list element (a number, true, false or a string)");
      items.emplace_back(std::move(*item), tok_.offset);
      advance();
    }
    advance();
    // Lists hold one kind; ints widen to floats when any element is a float.
    enum Category { Number, Boolean, Text };
    auto category = [](const Attr& a) {
      return std::holds_alternative<bool>(a)          ? Boolean
             : std::holds_alternative<std::string>(a) ? Text
                                                      : Number;
    };
    static const char* kCategoryName[] = {"a number", "a bool", "a string"};
    bool any_float = false;
    for (const auto& [item, offset] : items) {
      if (category(item) != category(items[0].first))
        fail_at(offset, std::string("a list holds one kind of element: found ") +
                            kCategoryName[category(item)] + " after " +
                            kCategoryName[category(items[0].first)]);
      any_float |= std::holds_alternative<double>(item);
    }
    auto collect = [&items]<typename T>(T, auto convert) {
      std::vector<T> out;
      for (const auto& item : items) out.push_back(convert(item.first));
      return Attr(std::move(out));
    };
    if (items.empty()) return Attr(std::vector<int64_t>{});  // the registry fixes the kind
    switch (category(items[0].first)) {
      case Boolean: return collect(bool{}, [](const Attr& a) { return std::get<bool>(a); });
      case Text: return collect(std::string{}, [](const Attr& a) { return std::get<std::string>(a); });
      case Number: break;
    }
    if (!any_float) return collect(int64_t{}, [](const Attr& a) { return std::get<int64_t>(a); });
    return collect(double{}, [](const Attr& a) {
      const int64_t* i = std::get_if<int64_t>(&a);
      return i ? static_cast<double>(*i) : std::get<double>(a);
    });
  }

  Attr parse_tensor_attr() {
    advance();  // 'tensor'
    expect_punct('<', "'<' after 'tensor'");
    if (at_punct('>')) {  // an undefined tensor
      advance();
      return Attr(Tensor());
    }
    size_t type_offset = tok_.offset;
    TensorType type = parse_static_type("a tensor attribute");
    expect_punct(',', "',' between the tensor's type and its data");
    Tensor t = parse_tensor_data(type.dtype, static_sizes(type.shape), type_offset);
    expect_punct('>', "'>' to close the tensor");
    return Attr(std::move(t));
  }

  AttrMap parse_attrs() {
    AttrMap attrs;
    advance();  // '{'
    while (!at_punct('}')) {
      if (!attrs.empty()) expect_punct(',', "',' or '}' in the attributes");
      size_t key_offset = tok_.offset;
      std::string key = expect_word_or_string("an attribute name");
      if (attrs.count(key)) fail_at(key_offset, "attribute '" + shown(key) + "' is given twice");
      expect_punct('=', "'=' after the attribute name");
      Attr value;
      if (at_punct('[')) {
        value = parse_attr_list();
      } else if (at_word("tensor")) {
        value = parse_tensor_attr();
      } else {
        std::optional<Attr> scalar = scalar_attr();
        if (!scalar)
          unexpected("an attribute value (a number, true, false, a string, a list or tensor<...>)");
        value = std::move(*scalar);
        advance();
      }
      attrs.emplace(std::move(key), std::move(value));
    }
    advance();
    return attrs;
  }

  // ------------------------------------------------------------------ statements

  // A %name about to be defined: it must be new.
  std::string take_new_value_name() {
    if (tok_.kind != Token::ValueName) unexpected("a value name like %x");
    if (values_.count(tok_.text))
      fail_at(tok_.offset, "value %" + shown(tok_.text) +
                               " is defined twice; every value has exactly one definition");
    std::string name = std::move(tok_.text);
    advance();
    return name;
  }

  Value* take_defined_value() {
    if (tok_.kind != Token::ValueName) unexpected("a value name like %x");
    auto it = values_.find(tok_.text);
    if (it == values_.end())
      fail_at(tok_.offset, "undefined value %" + shown(tok_.text) +
                               "; a value must be defined before it is used");
    advance();
    return it->second;
  }

  void define(const std::string& name, Value* value) {
    KILN_ASSERT(value->name() == name, "parsed value " << name << " was renamed " << value->name());
    values_.emplace(name, value);
  }

  void parse_symbol() {
    advance();  // 'sym'
    size_t name_offset = tok_.offset;
    std::string name = expect_word_or_string("a symbol name");
    if (graph_->symbols().find(name) >= 0)
      fail_at(name_offset, "symbol '" + shown(name) + "' is declared twice");
    expect_word("in", "'in' after the symbol name");
    size_t range_offset = tok_.offset;
    expect_punct('[', "'[' to start the symbol's range");
    int64_t min = expect_int("the symbol's minimum (an integer)");
    expect_punct(',', "',' between the symbol's minimum and maximum");
    int64_t max = expect_int("the symbol's maximum (an integer)");
    expect_punct(']', "']' to end the symbol's range");
    if (min > max)
      fail_at(range_offset, "symbol '" + shown(name) + "' has an empty range [" +
                                std::to_string(min) + ", " + std::to_string(max) +
                                "]; the minimum must not exceed the maximum");
    // Added directly rather than by Graph::add_symbol, whose range rules are for symbols a user
    // declares: a dump must read back whatever ranges inference derived.
    graph_->symbols().add(std::move(name), min, max);
  }

  void parse_input() {
    advance();  // 'input'
    std::string name = take_new_value_name();
    expect_punct(':', "':' and the input's type");
    define(name, graph_->add_input(name, parse_type()));
  }

  void parse_constant() {
    advance();  // 'const'
    std::string name = take_new_value_name();
    expect_punct(':', "':' and the constant's type");
    size_t type_offset = tok_.offset;
    TensorType type = parse_static_type("a constant");
    expect_punct('=', "'=' and the constant's data");
    define(name, graph_->add_constant(
                     name, parse_tensor_data(type.dtype, static_sizes(type.shape), type_offset)));
  }

  void parse_outputs() {
    size_t offset = tok_.offset;
    if (has_outputs_)
      fail_at(offset, "a second output statement; list all the graph's outputs in one");
    has_outputs_ = true;
    advance();  // 'output'
    std::vector<Value*> outputs{take_defined_value()};
    while (at_punct(',')) {
      advance();
      outputs.push_back(take_defined_value());
    }
    graph_->set_outputs(std::move(outputs));
  }

  void check_result_count(const std::string& op, size_t op_offset, size_t given, size_t written) {
    if (given != written)
      fail_at(op_offset, "'" + shown(op) + "' gives " + std::to_string(given) +
                             (given == 1 ? " result" : " results") + " here, but " +
                             std::to_string(written) + " are written");
  }

  void parse_node() {
    std::vector<Result> results;
    if (tok_.kind == Token::ValueName) {
      for (;;) {
        Result r{"", tok_.offset, std::nullopt};
        for (const Result& earlier : results)
          if (earlier.name == tok_.text)
            fail_at(tok_.offset, "result %" + shown(tok_.text) + " is written twice");
        r.name = take_new_value_name();
        if (at_punct(':')) {
          advance();
          r.type = parse_type(/*results=*/true);
        }
        if (!results.empty() && r.type.has_value() != results[0].type.has_value())
          fail_at(r.offset, "give a type to every result of a node or to none");
        results.push_back(std::move(r));
        if (!at_punct(',')) break;
        advance();
      }
    }
    expect_punct('=', "',' or '=' after the results");
    size_t op_offset = tok_.offset;
    std::string op = expect_word_or_string("an operator name");
    const OpDef* def = OpRegistry::instance().find(op);
    if (!def)
      throw Error(ErrorCode::UnsupportedOperator,
                  position(op_offset) + ": unknown operator '" + shown(op) +
                      "'; see docs/ops.md for the ops Kiln supports");
    expect_punct('(', "'(' and the operands");
    std::vector<Value*> inputs;
    while (!at_punct(')')) {
      if (!inputs.empty()) expect_punct(',', "',' or ')' in the operands");
      inputs.push_back(take_defined_value());
    }
    advance();
    AttrMap attrs = at_punct('{') ? parse_attrs() : AttrMap{};
    std::string node_name = results.empty() ? "" : results[0].name;
    if (tok_.kind == Token::AtName) {
      if (node_names_.count(tok_.text))
        fail_at(tok_.offset, "node name @" + shown(tok_.text) + " is used twice");
      node_name = std::move(tok_.text);
      advance();
    }

    std::vector<TensorType> in_types;
    for (Value* in : inputs) in_types.push_back(in->type());
    bool typed = !results.empty() && results[0].type.has_value();
    const std::optional<DType> low = !typed && def->computes_low_precision_in_f32
                                         ? low_precision_result(*def, inputs)
                                         : std::nullopt;
    if (low) {
      // f16/bf16 operands: built as the builder builds it (casts, the op in f32, casts back;
      // docs/ops.md), the results naming the casts back.
      std::vector<std::string> names;
      for (const Result& r : results) names.push_back(r.name);
      std::vector<Value*> outs;
      try {
        outs = add_node_through_f32(*graph_, *def, inputs, std::move(attrs),
                                    node_name.empty() ? op : node_name, *low, names);
      } catch (const Error& e) {
        throw Error(e.code(), position(op_offset) + ": " + e.detail());
      }
      check_result_count(op, op_offset, outs.size(), results.size());
      for (size_t i = 0; i < results.size(); ++i) define(names[i], outs[i]);
      return;
    }
    std::vector<TensorType> out_types;
    try {
      if (typed) {
        for (const Result& r : results) out_types.push_back(*r.type);
        // Defaults and declared kinds as the builder would give them. Typed text may describe
        // an invalid node on purpose (verifier tests): then it is kept as written, for the
        // verifier to report.
        AttrMap completed = attrs;
        try {
          complete_attrs(*def, node_name, completed);
          attrs = std::move(completed);
        } catch (const Error&) {
        }
      } else {
        out_types = infer_node_types(*def, node_name.empty() ? op : node_name, in_types, attrs,
                                     graph_->symbols());
      }
    } catch (const Error& e) {
      throw Error(e.code(), position(op_offset) + ": " + e.detail());
    }
    check_result_count(op, op_offset, out_types.size(), results.size());
    std::vector<std::string> names;
    for (const Result& r : results) names.push_back(r.name);
    Node* node = graph_->add_node_with_types(op, inputs, std::move(attrs), out_types, node_name, names);
    node_names_.insert(node->name());
    for (size_t i = 0; i < results.size(); ++i) define(names[i], node->output(i));
  }

  const std::string& text_;
  size_t pos_ = 0;
  Token tok_;
  std::unique_ptr<Graph> graph_;
  std::unordered_map<std::string, Value*> values_;
  std::set<std::string> node_names_;
  bool has_outputs_ = false;
};

}  // namespace

std::unique_ptr<Graph> parse_graph(const std::string& text) { return Parser(text).parse(); }

}  // namespace kiln
