#include "kiln/shape.h"

#include <utility>

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

void SymbolTable::bind(int32_t id, int64_t value) {
  KILN_ASSERT(id >= 0 && static_cast<size_t>(id) < symbols_.size(), "no symbol " << id);
  values_.resize(symbols_.size());
  values_[static_cast<size_t>(id)] = value;
}

std::optional<int64_t> SymbolTable::value(int32_t id) const {
  const auto i = static_cast<size_t>(id);
  return i < values_.size() ? values_[i] : std::nullopt;
}

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
  std::string out = std::string(dtype_name(type.dtype)) + shape_string(type.shape, symbols);
  if (type.layout != Layout::Plain) out += std::string("<") + layout_name(type.layout) + ">";
  return out;
}

namespace {
constexpr std::pair<Layout, const char*> kLayoutNames[] = {
    {Layout::Plain, "plain"},
    {Layout::NHWC, "nhwc"},
    {Layout::NChw8c, "nChw8c"},
    {Layout::NChw16c, "nChw16c"}};
}  // namespace

const char* layout_name(Layout layout) {
  for (const auto& [l, name] : kLayoutNames)
    if (l == layout) return name;
  KILN_ASSERT(false, "unknown layout " << static_cast<int>(layout));
}

bool parse_layout(const std::string& name, Layout& layout) {
  for (const auto& [l, n] : kLayoutNames)
    if (name == n) {
      layout = l;
      return true;
    }
  return false;
}

int64_t layout_channel_block(Layout layout) {
  switch (layout) {
    case Layout::NChw8c: return 8;
    case Layout::NChw16c: return 16;
    default: return 1;
  }
}

std::string layout_problem(const Shape& shape, Layout layout) {
  if (layout == Layout::Plain) return "";
  const std::string name = layout_name(layout);
  if (shape.size() != 4) return name + " is for 4-D [N, C, H, W] tensors, not rank " +
                                std::to_string(shape.size());
  const int64_t block = layout_channel_block(layout);
  if (block > 1 && !(shape[1].is_static() && shape[1].size() % block == 0))
    return name + " needs a known channel count (dim 1) that is a multiple of " +
           std::to_string(block);
  return "";
}

}  // namespace kiln
