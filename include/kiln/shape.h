// Tensor types: dtype, a shape whose dims are static or symbolic, and a memory format.
#pragma once

#include <cstdint>
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
  bool operator==(const SymbolTable&) const;

 private:
  std::vector<Symbol> symbols_;
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

// Memory format of a tensor. Plain is row-major over the logical dims; the compile pipeline adds
// blocked formats (oneDNN's nChw8c, ...) and channels-last.
enum class Layout : uint8_t { Plain };

struct TensorType {
  DType dtype = DType::F32;
  Shape shape;
  Layout layout = Layout::Plain;

  size_t rank() const { return shape.size(); }
  bool operator==(const TensorType&) const = default;
};

std::string type_string(const TensorType& type, const SymbolTable* symbols = nullptr);

}  // namespace kiln
