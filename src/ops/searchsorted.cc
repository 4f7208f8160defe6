// searchsorted(sorted, values; right = false, out_int32 = false): torch.searchsorted, the index in
// each sorted line at which each value would be inserted to keep it sorted; torch.bucketize is
// the same op with its arguments swapped (its boundaries are one line).
//
// `sorted` is one line [m] that every value searches, or lines [..., m] whose leading dims are
// values' own (values [..., k]); the result has values' shape, i64 (i32 with out_int32). Both
// inputs have one dtype (the converter casts them to torch.promote_types of theirs), any but
// bool; f16 and bf16 compare as the f32 they hold, exactly.
//
// PyTorch's CPU kernel (aten/src/ATen/native/Bucketization.cpp) bisects with !(s >= v) (left) and
// !(s > v) (right) deciding to go right, so a NaN value lands past every element, and a NaN that
// the bisection meets in the line sends it past that NaN; the same bisection here gives the same
// indices whatever the line holds, sorted or not.
#include <algorithm>
#include <string>
#include <vector>

#include "kernels/cpu/dtype_dispatch.h"
#include "kernels/cpu/parallel_chunks.h"
#include "ops/op_registry.h"

namespace kiln {

namespace {

void infer_searchsorted(InferContext& ctx) {
  const TensorType& sorted = ctx.input(0);
  const TensorType& values = ctx.input(1);
  ctx.check(sorted.dtype == values.dtype,
            "sorted is " + std::string(dtype_name(sorted.dtype)) + " and values " +
                std::string(dtype_name(values.dtype)) + "; cast both to one dtype");
  ctx.check(sorted.dtype != DType::Bool, "searchsorted takes numbers, not bool; insert a cast");
  ctx.check(sorted.rank() >= 1, "sorted is a rank-0 tensor; it must hold at least one dim");
  if (sorted.rank() > 1) {
    const Shape leading(sorted.shape.begin(), sorted.shape.end() - 1);
    const bool same = values.rank() == sorted.rank() &&
                      std::equal(leading.begin(), leading.end(), values.shape.begin());
    ctx.check(same, "sorted " + shape_string(sorted.shape) + " holds several lines, so values " +
                        shape_string(values.shape) +
                        " must have the same dims but the last; pass one line (1-d) to search "
                        "every value in it");
  }
  ctx.set_output(0, TensorType{ctx.attr_bool("out_int32") ? DType::I32 : DType::I64,
                               values.shape, Layout::Plain});
}

template <typename T, typename Index>
void search(const T* sorted, const T* values, Index* out, int64_t count, int64_t line,
            int64_t per_line, bool right, int threads) {
  auto key = [](T v) {
    if constexpr (cpu::kIsHalfFloat<T>) return cpu::to_float(v);
    else return v;
  };
  cpu::parallel_chunks(count, 16, threads, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      // per_line = 0: one line for every value.
      const T* first = sorted + (per_line ? i / per_line * line : 0);
      const auto v = key(values[i]);
      int64_t low = 0, high = line;
      while (low < high) {
        const int64_t mid = low + (high - low) / 2;
        const auto s = key(first[mid]);
        if (right ? !(s > v) : !(s >= v)) low = mid + 1;
        else high = mid;
      }
      out[i] = static_cast<Index>(low);
    }
  });
}

std::unique_ptr<KernelInstance> create_reference(const KernelSpec& spec) {
  const std::vector<int64_t> sorted = spec.input_sizes(0), values = spec.input_sizes(1);
  int64_t count = 1;
  for (int64_t size : values) count *= size;
  const int64_t line = sorted.back();
  const int64_t per_line = sorted.size() > 1 ? values.back() : 0;
  const bool right = spec.node.attr_bool("right");
  const bool i32 = spec.node.attr_bool("out_int32");
  return cpu::dispatch_dtype(spec.inputs[0].dtype, [&](auto zero) {
    using T = decltype(zero);
    return make_kernel([=, threads = spec.threads](std::span<const void* const> in,
                                                   std::span<void* const> out) {
      const T* s = static_cast<const T*>(in[0]);
      const T* v = static_cast<const T*>(in[1]);
      if (i32) search(s, v, static_cast<int32_t*>(out[0]), count, line, per_line, right, threads);
      else search(s, v, static_cast<int64_t*>(out[0]), count, line, per_line, right, threads);
    });
  });
}

}  // namespace

void register_searchsorted_ops(OpRegistry& registry) {
  OpDef def;
  def.name = "searchsorted";
  def.inputs = {{"sorted"}, {"values"}};
  def.attrs = {{"right", false}, {"out_int32", false}};
  def.infer = infer_searchsorted;
  def.kernels = {{"reference", "native", [](const KernelSpec&) { return std::string(); },
                  create_reference}};
  registry.add(std::move(def));
}

}  // namespace kiln
