// Tensor types: dtype, a shape whose dims are static or symbolic, and a memory format.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kiln/dtype.h"

namespace kiln {

// A named dynamic dimension with an inclusive range, e.g. "batch in [1, 32]".
struct Symbol {
  std::string name;
  int64_t min = 1;
  int64_t max = INT64_MAX;
};

// One dimension: a known size, or a reference to a symbol of the graph's SymbolTable.
class Dim {
 public:
  Dim(int64_t size = 0) : value_(size), symbol_(-1) {}  // NOLINT: dims read like integers
  static Dim symbolic(int32_t symbol_id) {
    Dim d;
    d.symbol_ = symbol_id;
    d.value_ = -1;
    return d;
  }
  bool is_static() const { return symbol_ < 0; }
  int64_t size() const;  // only for static dims
  int32_t symbol() const { return symbol_; }
  bool operator==(const Dim&) const = default;

 private:
  int64_t value_;
  int32_t symbol_;
};

class SymbolTable {
 public:
  int32_t add(std::string name, int64_t min, int64_t max);
  // The id of a symbol by name, or -1.
  int32_t find(const std::string& name) const;
  const Symbol& operator[](int32_t id) const { return symbols_.at(static_cast<size_t>(id)); }
  size_t size() const { return symbols_.size(); }
  const std::vector<Symbol>& all() const { return symbols_; }
  // Compares the symbols, not their bindings.
  bool operator==(const SymbolTable&) const;

  // A run binds the symbols its input sizes determine, so that sizes written as expressions
  // over them (SymExpr, src/ir/sym_expr.h) evaluate; a graph's own table has none bound.
  void bind(int32_t id, int64_t value);
  std::optional<int64_t> value(int32_t id) const;

 private:
  std::vector<Symbol> symbols_;
  std::vector<std::optional<int64_t>> values_;
};
inline bool operator==(const Symbol& a, const Symbol& b) {
  return a.name == b.name && a.min == b.min && a.max == b.max;
}

using Shape = std::vector<Dim>;

bool is_static(const Shape& shape);
std::vector<int64_t> static_sizes(const Shape& shape);  // asserts is_static
Shape make_shape(const std::vector<int64_t>& sizes);
int64_t num_elements(const std::vector<int64_t>& sizes);
// "1x3x224x224"-style rendering for messages; symbols shown by name when a table is given.
std::string shape_string(const Shape& shape, const SymbolTable* symbols = nullptr);
std::string shape_string(const std::vector<int64_t>& sizes);

// Memory format of a tensor. Plain is row-major over the logical dims. The others are for
// 4-D [N, C, H, W] tensors, chosen by the format stage (src/passes/choose_layouts.cc): NHWC is
// channels-last; NChw8c and NChw16c are oneDNN's blocked formats [N, C/b, H, W, b], which Kiln
// uses only when b divides C (so every layout stores exactly the tensor's elements).
enum class Layout : uint8_t { Plain, NHWC, NChw8c, NChw16c };

// "plain", "nhwc", "nChw8c", "nChw16c": the names the textual IR and attributes use.
const char* layout_name(Layout layout);
// The layout of a name, or false when there is none.
bool parse_layout(const std::string& name, Layout& layout);
// 8 or 16 for the blocked layouts, else 1.
int64_t layout_channel_block(Layout layout);
// Why `type` can't be stored in its layout (rank other than 4, channels not known or not a
// multiple of the block), or empty when it can.
std::string layout_problem(const Shape& shape, Layout layout);

struct TensorType {
  DType dtype = DType::F32;
  Shape shape;
  Layout layout = Layout::Plain;

  size_t rank() const { return shape.size(); }
  bool operator==(const TensorType&) const = default;
};

std::string type_string(const TensorType& type, const SymbolTable* symbols = nullptr);

}  // namespace kiln
