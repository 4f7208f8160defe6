#include "ir/sym_expr.h"

#include <algorithm>
#include <cctype>

#include "kiln/error.h"

namespace kiln {

struct SymExpr::Node {
  enum class Kind { Int, Symbol, Add, Sub, Mul, FloorDiv, Mod, Max, Min } kind;
  int64_t value = 0;
  std::string name;
  std::shared_ptr<const Node> lhs, rhs;
};

namespace {

using NodePtr = std::shared_ptr<const SymExpr::Node>;
using Kind = SymExpr::Node::Kind;

class Parser {
 public:
  explicit Parser(const std::string& text) : text_(text) {}

  NodePtr parse() {
    NodePtr e = expr();
    skip_space();
    if (pos_ != text_.size()) fail("unexpected '" + text_.substr(pos_, 1) + "'");
    return e;
  }

 private:
  [[noreturn]] void fail(const std::string& why) const {
    throw_error(ErrorCode::ParseError, "symbolic size '", text_, "' at offset ", pos_, ": ", why,
                "; sizes may use integers, symbols, +, -, *, //, ** (by an integer), Mod, "
                "Max and Min");
  }
  void skip_space() {
    while (pos_ < text_.size() && text_[pos_] == ' ') ++pos_;
  }
  bool eat(const char* token) {
    skip_space();
    const size_t n = std::char_traits<char>::length(token);
    if (text_.compare(pos_, n, token) != 0) return false;
    pos_ += n;
    return true;
  }
  static NodePtr binary(Kind kind, NodePtr lhs, NodePtr rhs) {
    return std::make_shared<const SymExpr::Node>(
        SymExpr::Node{kind, 0, "", std::move(lhs), std::move(rhs)});
  }
  NodePtr expr() {
    NodePtr e = term();
    for (;;) {
      if (eat("+")) e = binary(Kind::Add, e, term());
      else if (eat("-")) e = binary(Kind::Sub, e, term());
      else return e;
    }
  }
  NodePtr term() {
    NodePtr e = power();
    for (;;) {
      if (eat("//")) e = binary(Kind::FloorDiv, e, power());
      else if (eat("*")) e = binary(Kind::Mul, e, power());
      else return e;
    }
  }
  // atom ** n (sympy prints squares so): n - 1 products of the one parsed atom.
  NodePtr power() {
    NodePtr base = atom();
    if (!eat("**")) return base;
    skip_space();
    const size_t start = pos_;
    int64_t n = 0;
    while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_])) && n < 64)
      n = n * 10 + (text_[pos_++] - '0');
    if (pos_ == start || n < 1 || n > 63) fail("the exponent must be an integer in [1, 63]");
    NodePtr e = base;
    for (int64_t i = 1; i < n; ++i) e = binary(Kind::Mul, e, base);
    return e;
  }
  // Mod(a, b), Max(a, b), Min(a, b): sympy's functions of sizes.
  NodePtr call(const std::string& name) {
    const Kind kind = name == "Mod" ? Kind::Mod : name == "Max" ? Kind::Max
                    : name == "Min" ? Kind::Min : Kind::Int;
    if (kind == Kind::Int) fail("function '" + name + "' is not supported");
    eat("(");
    NodePtr a = expr();
    if (!eat(",")) fail("'" + name + "' takes two arguments");
    NodePtr b = expr();
    if (!eat(")")) fail("missing ')'");
    return binary(kind, a, b);
  }
  NodePtr atom() {
    skip_space();
    if (++depth_ > 64) fail("nested too deeply");
    NodePtr result;
    if (eat("(")) {
      result = expr();
      if (!eat(")")) fail("missing ')'");
    } else if (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
      int64_t v = 0;
      while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
        if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, text_[pos_] - '0', &v))
          fail("integer out of range");
        ++pos_;
      }
      result = std::make_shared<const SymExpr::Node>(SymExpr::Node{Kind::Int, v, "", {}, {}});
    } else if (pos_ < text_.size() &&
               (std::isalpha(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '_')) {
      const size_t start = pos_;
      while (pos_ < text_.size() &&
             (std::isalnum(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '_'))
        ++pos_;
      if (pos_ < text_.size() && text_[pos_] == '(')
        result = call(text_.substr(start, pos_ - start));
      else
        result = std::make_shared<const SymExpr::Node>(
            SymExpr::Node{Kind::Symbol, 0, text_.substr(start, pos_ - start), {}, {}});
    } else {
      fail(pos_ < text_.size() ? "unexpected '" + text_.substr(pos_, 1) + "'"
                               : "unexpected end");
    }
    --depth_;
    return result;
  }

  const std::string& text_;
  size_t pos_ = 0;
  int depth_ = 0;
};

void collect_names(const SymExpr::Node& n, std::vector<std::string>& names) {
  if (n.kind == Kind::Symbol) {
    if (std::find(names.begin(), names.end(), n.name) == names.end()) names.push_back(n.name);
    return;
  }
  if (n.lhs) collect_names(*n.lhs, names);
  if (n.rhs) collect_names(*n.rhs, names);
}

int64_t floor_div(int64_t a, int64_t b) {
  const int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

int64_t saturate(__int128 v) {
  return v > INT64_MAX ? INT64_MAX : v < INT64_MIN ? INT64_MIN : static_cast<int64_t>(v);
}

}  // namespace

SymExpr SymExpr::parse(const std::string& text) {
  SymExpr e;
  e.root_ = Parser(text).parse();
  return e;
}

std::vector<std::string> SymExpr::symbol_names() const {
  std::vector<std::string> names;
  collect_names(*root_, names);
  return names;
}

std::string SymExpr::single_symbol() const {
  return root_->kind == Kind::Symbol ? root_->name : "";
}

std::optional<SymExpr::Linear> SymExpr::linear() const {
  std::function<std::optional<Linear>(const Node&)> form = [&](const Node& n) -> std::optional<Linear> {
    if (n.kind == Kind::Int) return Linear{n.value, {}};
    if (n.kind == Kind::Symbol) return Linear{0, {{n.name, 1}}};
    if (n.kind != Kind::Add && n.kind != Kind::Sub && n.kind != Kind::Mul) return std::nullopt;
    std::optional<Linear> a = form(*n.lhs), b = form(*n.rhs);
    if (!a || !b) return std::nullopt;
    if (n.kind == Kind::Mul) {
      if (!a->coefficients.empty()) std::swap(a, b);  // a: the constant factor
      if (!a->coefficients.empty()) return std::nullopt;
      const int64_t k = a->constant;
      Linear out;
      if (__builtin_mul_overflow(b->constant, k, &out.constant)) return std::nullopt;
      for (const auto& [symbol, c] : b->coefficients) {
        int64_t scaled;
        if (__builtin_mul_overflow(c, k, &scaled)) return std::nullopt;
        if (scaled != 0) out.coefficients[symbol] = scaled;
      }
      return out;
    }
    const int64_t sign = n.kind == Kind::Add ? 1 : -1;
    if (__builtin_add_overflow(a->constant, sign * b->constant, &a->constant)) return std::nullopt;
    for (const auto& [symbol, c] : b->coefficients) {
      int64_t& sum = a->coefficients[symbol];
      if (__builtin_add_overflow(sum, sign * c, &sum)) return std::nullopt;
      if (sum == 0) a->coefficients.erase(symbol);
    }
    return a;
  };
  return form(*root_);
}

Value* SymExpr::fold(const std::function<Value*(int64_t)>& integer,
                     const std::function<Value*(const std::string&)>& symbol,
                     const std::function<Value*(Op, Value*, Value*)>& apply) const {
  std::function<Value*(const Node&)> build = [&](const Node& n) -> Value* {
    switch (n.kind) {
      case Kind::Int: return integer(n.value);
      case Kind::Symbol: return symbol(n.name);
      case Kind::Add: return apply(Op::Add, build(*n.lhs), build(*n.rhs));
      case Kind::Sub: return apply(Op::Sub, build(*n.lhs), build(*n.rhs));
      case Kind::Mul: return apply(Op::Mul, build(*n.lhs), build(*n.rhs));
      case Kind::FloorDiv: return apply(Op::FloorDiv, build(*n.lhs), build(*n.rhs));
      case Kind::Mod: return apply(Op::Mod, build(*n.lhs), build(*n.rhs));
      case Kind::Max: return apply(Op::Max, build(*n.lhs), build(*n.rhs));
      case Kind::Min: return apply(Op::Min, build(*n.lhs), build(*n.rhs));
    }
    return nullptr;
  };
  return build(*root_);
}

std::optional<int64_t> SymExpr::evaluate(
    const std::function<std::optional<int64_t>(const std::string&)>& value_of) const {
  std::function<std::optional<int64_t>(const Node&)> eval = [&](const Node& n)
      -> std::optional<int64_t> {
    if (n.kind == Kind::Int) return n.value;
    if (n.kind == Kind::Symbol) return value_of(n.name);
    std::optional<int64_t> a = eval(*n.lhs), b = eval(*n.rhs);
    if (!a || !b) return std::nullopt;
    int64_t r = 0;
    switch (n.kind) {
      case Kind::Add: if (__builtin_add_overflow(*a, *b, &r)) return std::nullopt; return r;
      case Kind::Sub: if (__builtin_sub_overflow(*a, *b, &r)) return std::nullopt; return r;
      case Kind::Mul: if (__builtin_mul_overflow(*a, *b, &r)) return std::nullopt; return r;
      case Kind::FloorDiv:
        if (*b == 0 || (*a == INT64_MIN && *b == -1)) return std::nullopt;
        return floor_div(*a, *b);
      case Kind::Mod:  // Python's: the sign of the divisor
        if (*b == 0 || (*a == INT64_MIN && *b == -1)) return std::nullopt;
        return *a - floor_div(*a, *b) * *b;
      case Kind::Max: return std::max(*a, *b);
      case Kind::Min: return std::min(*a, *b);
      default: return std::nullopt;
    }
  };
  return eval(*root_);
}

std::pair<int64_t, int64_t> SymExpr::range(
    const std::function<std::pair<int64_t, int64_t>(const std::string&)>& range_of) const {
  using Range = std::pair<__int128, __int128>;
  std::function<Range(const Node&)> eval = [&](const Node& n) -> Range {
    if (n.kind == Kind::Int) return {n.value, n.value};
    if (n.kind == Kind::Symbol) {
      auto [lo, hi] = range_of(n.name);
      return {lo, hi};
    }
    const Range a = eval(*n.lhs), b = eval(*n.rhs);
    auto clamp = [](__int128 v) { return std::clamp<__int128>(v, INT64_MIN, INT64_MAX); };
    switch (n.kind) {
      case Kind::Add: return {clamp(a.first + b.first), clamp(a.second + b.second)};
      case Kind::Sub: return {clamp(a.first - b.second), clamp(a.second - b.first)};
      case Kind::Mul: {
        const __int128 c[] = {a.first * b.first, a.first * b.second, a.second * b.first,
                              a.second * b.second};
        return {clamp(*std::min_element(c, c + 4)), clamp(*std::max_element(c, c + 4))};
      }
      case Kind::FloorDiv: {
        // Sizes are non-negative; a divisor range touching 0 bounds nothing.
        if (b.first <= 0 || a.first < 0) return {0, INT64_MAX};
        return {a.first / b.second, a.second / b.first};
      }
      case Kind::Mod:
        if (b.first <= 0 || a.first < 0) return {0, INT64_MAX};
        return {0, std::min(a.second, b.second - 1)};
      case Kind::Max: return {std::max(a.first, b.first), std::max(a.second, b.second)};
      case Kind::Min: return {std::min(a.first, b.first), std::min(a.second, b.second)};
      default: return {0, INT64_MAX};
    }
  };
  const Range r = eval(*root_);
  return {std::max<int64_t>(0, saturate(r.first)), std::max<int64_t>(0, saturate(r.second))};
}

Dim resolve_sym_dim(const std::string& text, SymbolTable& symbols,
                    const std::function<void(const std::string&)>& fail) {
  const SymExpr e = SymExpr::parse(text);
  const std::vector<std::string> names = e.symbol_names();
  for (const std::string& name : names)
    if (symbols.find(name) < 0) fail("size '" + text + "' reads symbol '" + name +
                                     "', which no input shape of the graph declares");
  const std::optional<int64_t> value = e.evaluate(
      [&](const std::string& name) { return symbols.value(symbols.find(name)); });
  const bool all_bound = std::all_of(
      names.begin(), names.end(),
      [&](const std::string& name) { return symbols.value(symbols.find(name)).has_value(); });
  if (all_bound && !value) fail("size '" + text + "' overflows or divides by zero for this run");
  if (value) {
    if (*value < 0) fail("size '" + text + "' is " + std::to_string(*value) + " for this run");
    return Dim(*value);
  }
  const std::string single = e.single_symbol();
  if (!single.empty()) return Dim::symbolic(symbols.find(single));
  const int32_t existing = symbols.find(text);
  if (existing >= 0) return Dim::symbolic(existing);
  auto [lo, hi] = e.range([&](const std::string& name) {
    const Symbol& s = symbols[symbols.find(name)];
    return std::pair<int64_t, int64_t>{s.min, s.max};
  });
  return Dim::symbolic(symbols.add(text, lo, hi));
}

}  // namespace kiln
