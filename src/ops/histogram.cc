// histc(x; bins, min, max): torch.histc, the count of x's elements in each of `bins` equal-width
// bins over [min, max], as a [bins] tensor of x's dtype (f32 or f64). Mixture-of-experts layers
// count the rows routed to each expert with it.
//
// PyTorch's semantics (aten/src/ATen/native/Histogram.cpp and cpu/HistogramKernel.cpp): when
// min == max the range is the data's own minimum and maximum (and [v - 1, v + 1] when those are
// equal too, or the input is empty), which the kernel finds at run time; the range must then be
// finite with min < max, else E40002. An element's bin is trunc((x - min) · bins / (max - min))
// computed in x's dtype, x = max counting in the last bin; elements outside [min, max], NaN
// included, are not counted. PyTorch sums bf16 and f16 counts in that dtype on each of its
// threads, so their counts past 256 depend on its thread split: those dtypes are refused.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "ops/op_registry.h"

namespace kiln {

namespace {

// The range check PyTorch makes once the bin range is known.
std::string invalid_range(double lo, double hi) {
  if (!std::isfinite(lo) || !std::isfinite(hi))
    return "the range [" + std::to_string(lo) + ", " + std::to_string(hi) + "] is not finite";
  if (!(lo < hi)) return "max must be larger than min";
  return "";
}

void infer_histc(InferContext& ctx) {
  const TensorType& x = ctx.input(0);
  ctx.check(x.dtype == DType::F32 || x.dtype == DType::F64,
            "histc takes f32 and f64 (PyTorch counts bf16 and f16 in their own dtype, per thread)");
  const int64_t bins = ctx.attr_int("bins");
  ctx.check(bins > 0, "bins must be > 0, got " + std::to_string(bins));
  const double lo = ctx.attr_float("min"), hi = ctx.attr_float("max");
  if (lo != hi) {  // equal bounds take the data's range, checked at run time
    const std::string why = invalid_range(lo, hi);
    ctx.check(why.empty(), why);
  }
  ctx.set_output(0, TensorType{x.dtype, {Dim(bins)}, Layout::Plain});
}

template <typename T>
void histogram(const T* x, int64_t count, int64_t bins, double lo, double hi, T* out,
               const std::string& node) {
  if (lo == hi && count > 0) {
    // The data's range; a NaN makes it NaN, as torch.aminmax does.
    lo = std::numeric_limits<double>::infinity();
    hi = -lo;
    for (int64_t i = 0; i < count; ++i) {
      if (std::isnan(x[i])) {
        lo = hi = std::numeric_limits<double>::quiet_NaN();
        break;
      }
      lo = std::min<double>(lo, x[i]);
      hi = std::max<double>(hi, x[i]);
    }
  }
  if (lo == hi) {
    lo -= 1;
    hi += 1;
  }
  if (const std::string why = invalid_range(lo, hi); !why.empty())
    throw_error(ErrorCode::ShapeInference, "node '", node, "' (histc): ", why,
                " (min == max takes the input's own range). Pass finite min < max.");
  // PyTorch's bin edges are linspace(min, max) in T: its first and last are min and max in T.
  const T left = static_cast<T>(lo), right = static_cast<T>(hi);
  std::vector<int64_t> counts(bins, 0);
  for (int64_t i = 0; i < count; ++i) {
    const T v = x[i];
    if (!(v >= left && v <= right)) continue;
    const auto bin = static_cast<int64_t>((v - left) * static_cast<T>(bins) / (right - left));
    ++counts[std::min(bin, bins - 1)];
  }
  for (int64_t b = 0; b < bins; ++b) out[b] = static_cast<T>(counts[b]);
}

std::unique_ptr<KernelInstance> create_reference(const KernelSpec& spec) {
  int64_t count = 1;
  for (int64_t size : spec.input_sizes(0)) count *= size;
  return make_kernel([node = spec.node.name(), count, bins = spec.node.attr_int("bins"),
                      lo = spec.node.attr_float("min"), hi = spec.node.attr_float("max"),
                      f64 = spec.inputs[0].dtype == DType::F64](std::span<const void* const> in,
                                                                std::span<void* const> out) {
    if (f64)
      histogram(static_cast<const double*>(in[0]), count, bins, lo, hi,
                static_cast<double*>(out[0]), node);
    else
      histogram(static_cast<const float*>(in[0]), count, bins, lo, hi,
                static_cast<float*>(out[0]), node);
  });
}

}  // namespace

void register_histogram_ops(OpRegistry& registry) {
  OpDef def;
  def.name = "histc";
  def.inputs = {{"x"}};
  def.attrs = {{"bins", int64_t{100}}, {"min", 0.0}, {"max", 0.0}};
  def.infer = infer_histc;
  def.kernels = {{"reference", "native", nullptr, create_reference}};
  registry.add(std::move(def));
}

}  // namespace kiln
