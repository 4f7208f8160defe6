// Prints a Graph in Kiln's textual IR (docs/ir.md). The output parses back to the same graph:
// names, symbols, types, attributes and constant bytes are all exact.
#include <charconv>
#include <cstdint>
#include <cmath>
#include <string>
#include <type_traits>
#include <variant>

#include "kiln/error.h"
#include "kiln/graph.h"
#include "ir/text_syntax.h"

namespace kiln {

namespace {


// A string literal with \\ \" \n \t and \xHH escapes for the other control bytes.
void append_quoted(std::string& out, const std::string& s) {
  static const char kHex[] = "0123456789abcdef";
  out += '"';
  for (char c : s) {
    auto byte = static_cast<unsigned char>(c);
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (byte < 0x20 || byte == 0x7f) {
      out += "\\x";
      out += kHex[byte >> 4];
      out += kHex[byte & 15];
    } else {
      out += c;
    }
  }
  out += '"';
}

bool all_name_chars(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s)
    if (!is_name_char(c)) return false;
  return true;
}

// After a sigil (%value, @graph, @node) any run of name characters is unambiguous.
void append_sigil_name(std::string& out, char sigil, const std::string& name) {
  out += sigil;
  if (all_name_chars(name))
    out += name;
  else
    append_quoted(out, name);
}

// Symbols, op names and attribute keys stand alone, so a bare one must not look like a number.
void append_word(std::string& out, const std::string& word) {
  bool bare = all_name_chars(word) && !(word[0] >= '0' && word[0] <= '9') && word[0] != '.';
  if (bare)
    out += word;
  else
    append_quoted(out, word);
}

void append_float(std::string& out, double x) {
  if (std::isnan(x)) {
    out += "nan";
    return;
  }
  if (std::isinf(x)) {
    out += x < 0 ? "-inf" : "inf";
    return;
  }
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, x);
  KILN_ASSERT(ec == std::errc(), "to_chars failed on a double");
  std::string text(buf, end);
  // Shortest form may be "2"; a float always shows a decimal point or an exponent.
  if (text.find_first_of(".e") == std::string::npos) text += ".0";
  out += text;
}

void append_type(std::string& out, DType dtype, const Shape& shape, const SymbolTable& symbols) {
  out += dtype_name(dtype);
  out += '[';
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) out += ", ";
    const Dim& d = shape[i];
    if (d.is_static()) {
      out += std::to_string(d.size());
    } else if (d.symbol() >= 0 && static_cast<size_t>(d.symbol()) < symbols.size()) {
      append_word(out, symbols[d.symbol()].name);
    } else {
      // A dangling symbol id (a broken graph): print something the parser reports as undeclared.
      append_quoted(out, std::string("?").append(std::to_string(d.symbol())));
    }
  }
  out += ']';
}

void append_type(std::string& out, const TensorType& type, const SymbolTable& symbols) {
  append_type(out, type.dtype, type.shape, symbols);
  if (type.layout != Layout::Plain) out.append("<").append(layout_name(type.layout)).append(">");
}

void append_hex(std::string& out, const Tensor& t) {
  static const char kHex[] = "0123456789abcdef";
  out += "hex\"";
  const auto* bytes = static_cast<const unsigned char*>(t.data());
  size_t n = t.nbytes();
  out.reserve(out.size() + 2 * n + 1);
  for (size_t i = 0; i < n; ++i) {
    out += kHex[bytes[i] >> 4];
    out += kHex[bytes[i] & 15];
  }
  out += '"';
}

void append_attr(std::string& out, const Attr& attr, const SymbolTable& symbols) {
  auto scalar = [&out](const auto& v) {
    using T = std::decay_t<decltype(v)>;
    if constexpr (std::is_same_v<T, int64_t>)
      out += std::to_string(v);
    else if constexpr (std::is_same_v<T, double>)
      append_float(out, v);
    else if constexpr (std::is_same_v<T, bool>)
      out += v ? "true" : "false";
    else
      append_quoted(out, v);
  };
  std::visit(
      [&](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, Tensor>) {
          // An undefined tensor (e.g. a "none" default) has no bytes to show.
          if (!v.defined()) {
            out += "tensor<>";
            return;
          }
          out += "tensor<";
          append_type(out, v.dtype(), make_shape(v.sizes()), symbols);
          out += ", ";
          append_hex(out, v);
          out += '>';
        } else if constexpr (requires { v.size(); v[0]; } && !std::is_same_v<T, std::string>) {
          out += '[';
          for (size_t i = 0; i < v.size(); ++i) {
            if (i) out += ", ";
            scalar(static_cast<typename T::value_type>(v[i]));
          }
          out += ']';
        } else {
          scalar(v);
        }
      },
      attr);
}

void append_node(std::string& out, const Node& node, const SymbolTable& symbols,
                 bool annotations) {
  out += "  ";
  const auto& results = node.outputs();
  for (size_t i = 0; i < results.size(); ++i) {
    if (i) out += ", ";
    append_sigil_name(out, '%', results[i]->name());
    out += " : ";
    append_type(out, results[i]->type(), symbols);
  }
  out += results.empty() ? "= " : " = ";
  append_word(out, node.op());
  out += '(';
  for (size_t i = 0; i < node.inputs().size(); ++i) {
    if (i) out += ", ";
    append_sigil_name(out, '%', node.input(i)->name());
  }
  out += ')';
  if (!node.attrs().empty()) {
    out += " {";
    bool first = true;
    for (const auto& [key, value] : node.attrs()) {
      if (!first) out += ", ";
      first = false;
      append_word(out, key);
      out += " = ";
      append_attr(out, value, symbols);
    }
    out += '}';
  }
  if (results.empty() || node.name() != results[0]->name()) {
    out += ' ';
    append_sigil_name(out, '@', node.name());
  }
  if (annotations && !node.annotations().empty()) {
    out += "  #";
    // A comment runs to the end of the line: control bytes in a value would end it early.
    for (const auto& [key, value] : node.annotations()) {
      out += ' ' + key + '=';
      for (char c : value) out += static_cast<unsigned char>(c) < 0x20 ? ' ' : c;
    }
  }
  out += '\n';
}

std::string print(const Graph& graph, bool annotations, size_t max_constant_bytes) {
  const SymbolTable& symbols = graph.symbols();
  std::string out = "graph ";
  append_sigil_name(out, '@', graph.name());
  out += " {\n";
  for (const Symbol& s : symbols.all()) {
    out += "  sym ";
    append_word(out, s.name);
    out += " in [" + std::to_string(s.min) + ", " + std::to_string(s.max) + "]\n";
  }
  for (const Value* in : graph.inputs()) {
    out += "  input ";
    append_sigil_name(out, '%', in->name());
    out += " : ";
    append_type(out, in->type(), symbols);
    out += '\n';
  }
  for (const Value* c : graph.constants()) {
    // The data decides the type: the hex must hold exactly its bytes.
    const Tensor& data = c->constant();
    // Dumps of real models would hold every weight once per stage; a compiled graph may have
    // released a constant's data (CompileOptions::release_prepacked_constants).
    if (data.nbytes() > max_constant_bytes || !data.defined()) {
      out += "  input ";
      append_sigil_name(out, '%', c->name());
      out += " : ";
      append_type(out, c->type(), symbols);
      out += "  # constant, " + std::to_string(data.nbytes()) +
             (data.defined() ? " bytes elided\n" : " bytes released after prepacking\n");
      continue;
    }
    out += "  const ";
    append_sigil_name(out, '%', c->name());
    out += " : ";
    append_type(out, data.dtype(), make_shape(data.sizes()), symbols);
    out += " = ";
    append_hex(out, data);
    out += '\n';
  }
  for (const Node* node : graph.nodes()) append_node(out, *node, symbols, annotations);
  if (!graph.outputs().empty()) {
    out += "  output ";
    for (size_t i = 0; i < graph.outputs().size(); ++i) {
      if (i) out += ", ";
      append_sigil_name(out, '%', graph.outputs()[i]->name());
    }
    out += '\n';
  }
  out += "}\n";
  return out;
}

}  // namespace

std::string print_graph(const Graph& graph) { return print(graph, false, SIZE_MAX); }
std::string print_graph_annotated(const Graph& graph, size_t max_constant_bytes) {
  return print(graph, true, max_constant_bytes);
}

}  // namespace kiln
