#include "kiln/shape.h"

#include "kiln/error.h"

namespace kiln {

int64_t Dim::size() const {
  KILN_ASSERT(is_static(), "size() of symbolic dim " << symbol_);
  return value_;
}

int32_t SymbolTable::add(std::string name, int64_t min, int64_t max) {
  KILN_ASSERT(find(name) < 0, "symbol " << name << " declared twice");
  symbols_.push_back(Symbol{std::move(name), min, max});
  return static_cast<int32_t>(symbols_.size() - 1);
}

int32_t SymbolTable::find(const std::string& name) const {
  for (size_t i = 0; i < symbols_.size(); ++i)
    if (symbols_[i].name == name) return static_cast<int32_t>(i);
  return -1;
}

bool SymbolTable::operator==(const SymbolTable& other) const { return symbols_ == other.symbols_; }

bool is_static(const Shape& shape) {
  for (const Dim& d : shape)
    if (!d.is_static()) return false;
  return true;
}

std::vector<int64_t> static_sizes(const Shape& shape) {
  std::vector<int64_t> sizes;
  sizes.reserve(shape.size());
  for (const Dim& d : shape) sizes.push_back(d.size());
  return sizes;
}

Shape make_shape(const std::vector<int64_t>& sizes) { return Shape(sizes.begin(), sizes.end()); }

int64_t num_elements(const std::vector<int64_t>& sizes) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

std::string shape_string(const Shape& shape, const SymbolTable* symbols) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) out += ", ";
    const Dim& d = shape[i];
    if (d.is_static())
      out += std::to_string(d.size());
    else if (symbols && static_cast<size_t>(d.symbol()) < symbols->size())
      out += (*symbols)[d.symbol()].name;
    else
      out += "?" + std::to_string(d.symbol());
  }
  return out + "]";
}

std::string shape_string(const std::vector<int64_t>& sizes) {
  return shape_string(make_shape(sizes));
}

std::string type_string(const TensorType& type, const SymbolTable* symbols) {
  return std::string(dtype_name(type.dtype)) + shape_string(type.shape, symbols);
}

}  // namespace kiln
