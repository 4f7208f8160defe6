// Pooling and batch norm → Kiln's CNN ops; 3-d pooling as two 2-d ones where the indices
// aren't read; max unpooling as a scatter.
#include <array>
#include <functional>

#include "frontend/converter.h"

namespace kiln {

namespace {

// A window argument as (depth, height, width); ATen takes one entry for all three, and an
// empty stride means the kernel's.
std::array<int64_t, 3> triple(ConvertContext& ctx, const char* arg,
                              std::array<int64_t, 3> fallback) {
  const std::vector<int64_t> v = ctx.has(arg) ? ctx.integers(arg) : std::vector<int64_t>{};
  if (v.empty()) return fallback;
  if (v.size() == 1) return {v[0], v[0], v[0]};
  if (v.size() != 3) ctx.unsupported(std::string(arg) + " with other than 1 or 3 entries");
  return {v[0], v[1], v[2]};
}

// The static size of x's dim d, or E50001.
int64_t static_dim(ConvertContext& ctx, Value* x, size_t d) {
  const Dim& dim = x->type().shape[d];
  if (!dim.is_static()) ctx.unsupported("3-d pooling with dynamic channels, depth, height or width");
  return dim.size();
}

// A 3-d pooling of x [N, C, D, H, W] (or [C, D, H, W]) as two 2-d ones: `pool(v, axes)` over
// (H, W) with the depth folded into the channels, then over (D, 1) with each pooled plane
// flattened into one row. A 3-d window is the product of its axes' windows (padding, dilation
// and ceil_mode included), so a maximum is exact and an average keeps PyTorch's divisor, the
// product of the axes' counts, though it rounds after each of its two sums. C, D, H and W
// static; the batch may be dynamic.
Value* pool3d(ConvertContext& ctx, const std::function<Value*(Value*, bool depth)>& pool) {
  Value* x = ctx.tensor("self");
  const size_t rank = x->type().rank();
  if (rank != 4 && rank != 5) ctx.unsupported("3-d pooling of a rank-" + std::to_string(rank) + " x");
  const int64_t n = rank == 5 ? (x->type().shape[0].is_static() ? x->type().shape[0].size() : -1) : 1;
  const int64_t c = static_dim(ctx, x, rank - 4), d = static_dim(ctx, x, rank - 3),
                h = static_dim(ctx, x, rank - 2), w = static_dim(ctx, x, rank - 1);
  Value* planes = pool(ctx.add("reshape", {x}, {{"shape", std::vector<int64_t>{n, c * d, h, w}}}), false);
  const Shape& pooled = planes->type().shape;  // [N, C·D, OH, OW], static
  const int64_t oh = pooled[2].size(), ow = pooled[3].size();
  Value* rows = pool(ctx.add("reshape", {planes}, {{"shape", std::vector<int64_t>{n, c, d, oh * ow}}}), true);
  const int64_t od = rows->type().shape[2].size();
  std::vector<int64_t> out{c, od, oh, ow};
  if (rank == 5) out.insert(out.begin(), n);
  return ctx.add("reshape", {rows}, {{"shape", out}});
}

// The 2-d window attributes of pool3d's two passes: (H, W), or (D, 1) for the depth.
AttrMap window_attrs(ConvertContext& ctx, bool depth, bool dilation) {
  const auto kernel = triple(ctx, "kernel_size", {1, 1, 1});
  const auto stride = triple(ctx, "stride", kernel);
  const auto padding = triple(ctx, "padding", {0, 0, 0});
  auto pass = [&](const std::array<int64_t, 3>& v, int64_t unit) {
    return depth ? std::vector<int64_t>{v[0], unit} : std::vector<int64_t>{v[1], v[2]};
  };
  AttrMap attrs{{"kernel_size", pass(kernel, 1)}, {"stride", pass(stride, 1)},
                {"padding", pass(padding, 0)}, {"ceil_mode", ctx.boolean("ceil_mode")}};
  if (dilation) attrs["dilation"] = pass(triple(ctx, "dilation", {1, 1, 1}), 1);
  return attrs;
}

// max_unpool2d and max_unpool3d (SegNet's decoder; nn.MaxUnpool): each plane of x written into a
// zero plane of output_size at its index (flattened within the plane, as max pooling returns
// them): a scatter over the planes flattened. An index outside the plane is the scatter's
// run-time E40002, where eager raises; of duplicates the last in order wins, as in eager's loop.
// Static shapes.
std::vector<Value*> max_unpool(ConvertContext& ctx) {
  Value* x = ctx.tensor("self");
  Value* index = ctx.tensor("indices");
  const std::vector<int64_t> out_size = ctx.integers("output_size");
  const TensorType& type = x->type();
  const size_t spatial = out_size.size();
  if (!is_static(type.shape) || index->type().shape != type.shape ||
      (type.rank() != spatial + 1 && type.rank() != spatial + 2))
    ctx.unsupported("max_unpool of dynamic shapes, or of indices shaped unlike x");
  // [planes, elements of a plane] for x and the index; [planes, output plane] zeros.
  const std::vector<int64_t> sizes = static_sizes(type.shape);
  const size_t lead = type.rank() - spatial;
  int64_t planes = 1, in_plane = 1, out_plane = 1;
  for (size_t d = 0; d < type.rank(); ++d) (d < lead ? planes : in_plane) *= sizes[d];
  for (int64_t s : out_size) out_plane *= s;
  auto flat = [&](Value* v) {
    return ctx.add("reshape", {v}, {{"shape", std::vector<int64_t>{planes, in_plane}}});
  };
  Value* zeros = ctx.add("zeros", {}, {{"size", std::vector<int64_t>{planes, out_plane}},
                                       {"dtype", std::string(dtype_name(type.dtype))}});
  Value* y = ctx.add("scatter", {zeros, flat(index), flat(x)}, {{"dim", int64_t{1}}});
  std::vector<int64_t> shape(sizes.begin(), sizes.begin() + static_cast<std::ptrdiff_t>(lead));
  shape.insert(shape.end(), out_size.begin(), out_size.end());
  return {ctx.add("reshape", {y}, {{"shape", shape}})};
}

}  // namespace

void register_aten_pooling_converters(ConverterRegistry& r) {
  r.add("aten.max_unpool2d.default", max_unpool);
  r.add("aten.max_unpool3d.default", max_unpool);
  // The values alone as two 2-d max poolings (their fast kernels); the indices from the 3-d op.
  r.add("aten.max_pool3d_with_indices.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    if (ctx.output_used(1)) {
      const auto dhw = [&](const char* arg, std::array<int64_t, 3> fallback) {
        const auto v = triple(ctx, arg, fallback);
        return std::vector<int64_t>(v.begin(), v.end());
      };
      const auto kernel = dhw("kernel_size", {1, 1, 1});
      return ctx.graph().add_node(
          "max_pool3d_with_indices", {ctx.tensor("self")},
          {{"kernel_size", kernel},
           {"stride", dhw("stride", {kernel[0], kernel[1], kernel[2]})},
           {"padding", dhw("padding", {0, 0, 0})},
           {"dilation", dhw("dilation", {1, 1, 1})},
           {"ceil_mode", ctx.boolean("ceil_mode")}},
          ctx.node_name());
    }
    return {pool3d(ctx, [&](Value* v, bool depth) {
              return ctx.add("max_pool2d", {v}, window_attrs(ctx, depth, true));
            }),
            nullptr};
  });
  r.add("aten.avg_pool3d.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    if (ctx.has("divisor_override"))
      ctx.unsupported("avg_pool3d with divisor_override (its two passes divide by counts)");
    return {pool3d(ctx, [&](Value* v, bool depth) {
      AttrMap attrs = window_attrs(ctx, depth, false);
      attrs["count_include_pad"] = ctx.boolean("count_include_pad");
      return ctx.add("avg_pool2d", {v}, std::move(attrs));
    })};
  });
  r.add("aten._adaptive_avg_pool3d.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    const auto size = triple(ctx, "output_size", {1, 1, 1});
    return {pool3d(ctx, [&](Value* v, bool depth) {
      const std::vector<int64_t> out =
          depth ? std::vector<int64_t>{size[0], v->type().shape[3].size()}
                : std::vector<int64_t>{size[1], size[2]};
      return ctx.add("adaptive_avg_pool2d", {v}, {{"output_size", out}});
    })};
  });
  // Returns (values, indices); inference graphs usually read only the values, which
  // max_pool2d computes faster.
  r.add("aten.max_pool2d_with_indices.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    const AttrMap attrs = {{"kernel_size", ctx.integers("kernel_size")},
                           {"stride", ctx.integers("stride")},
                           {"padding", ctx.integers("padding")},
                           {"dilation", ctx.integers("dilation")},
                           {"ceil_mode", ctx.boolean("ceil_mode")}};
    Value* x = ctx.tensor("self");
    if (!ctx.output_used(1)) return {ctx.add("max_pool2d", {x}, attrs), nullptr};
    return ctx.graph().add_node("max_pool2d_with_indices", {x}, attrs, ctx.node_name());
  });
  // adaptive max pooling: where only the values are read and the output divides a static input
  // (global max pooling, fastai's concat pooling), PyTorch's adaptive windows are max_pool2d's
  // with kernel = stride = in / out (and 3-d ones two such poolings); otherwise the op of the
  // same name, windows of any sizes, with indices.
  for (const size_t spatial : {size_t{2}, size_t{3}}) {
    const std::string target = "aten.adaptive_max_pool" + std::to_string(spatial) + "d.default";
    r.add(target, [spatial](ConvertContext& ctx) -> std::vector<Value*> {
      Value* x = ctx.tensor("self");
      const size_t rank = x->type().rank();
      std::vector<int64_t> out = ctx.integers("output_size");
      if (out.size() == 1) out.assign(spatial, out[0]);
      const std::string op = "adaptive_max_pool" + std::to_string(spatial) + "d";
      if (out.size() != spatial)
        ctx.unsupported(op + " with " + std::to_string(out.size()) + " output sizes");
      if (rank != spatial + 1 && rank != spatial + 2)
        ctx.unsupported(op + " of a rank-" + std::to_string(rank) + " x");
      std::vector<int64_t> window;
      for (size_t d = 0; d < spatial; ++d) {
        const Dim& in = x->type().shape[rank - spatial + d];
        if (in.is_static() && out[d] >= 1 && in.size() % out[d] == 0)
          window.push_back(in.size() / out[d]);
      }
      // pool3d folds the channels into its planes: they must be static too.
      const bool values_pooled = !ctx.output_used(1) && window.size() == spatial &&
                                 (spatial == 2 || x->type().shape[rank - 4].is_static());
      if (!values_pooled)
        return ctx.graph().add_node(op, {x}, {{"output_size", out}}, ctx.node_name());
      if (spatial == 2)
        return {ctx.add("max_pool2d", {x}, {{"kernel_size", window}, {"stride", window}}), nullptr};
      return {pool3d(ctx, [&](Value* v, bool depth) {
                const std::vector<int64_t> w =
                    depth ? std::vector<int64_t>{window[0], 1} : std::vector<int64_t>{window[1], window[2]};
                return ctx.add("max_pool2d", {v}, {{"kernel_size", w}, {"stride", w}});
              }),
              nullptr};
    });
  }
  r.add("aten.avg_pool2d.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    return {ctx.add("avg_pool2d", {ctx.tensor("self")},
                    {{"kernel_size", ctx.integers("kernel_size")},
                     {"stride", ctx.integers("stride")},
                     {"padding", ctx.integers("padding")},
                     {"ceil_mode", ctx.boolean("ceil_mode")},
                     {"count_include_pad", ctx.boolean("count_include_pad")},
                     {"divisor_override",
                      ctx.has("divisor_override") ? ctx.integer("divisor_override") : 0}})};
  });
  r.add("aten._adaptive_avg_pool2d.default", [](ConvertContext& ctx) -> std::vector<Value*> {
    return {ctx.add("adaptive_avg_pool2d", {ctx.tensor("self")},
                    {{"output_size", ctx.integers("output_size")}})};
  });
  // Returns (out, save_mean, save_invstd); inference uses only out.
  r.add("aten._native_batch_norm_legit_no_training.default",
        [](ConvertContext& ctx) -> std::vector<Value*> {
          Value* weight = ctx.optional_tensor("weight");
          Value* bias = ctx.optional_tensor("bias");
          if (!weight || !bias) ctx.unsupported("batch norm without affine weight and bias");
          return {ctx.add("batch_norm",
                          {ctx.tensor("input"), weight, bias, ctx.tensor("running_mean"),
                           ctx.tensor("running_var")},
                          {{"eps", ctx.number("eps")}}),
                  nullptr, nullptr};
        });
}

}  // namespace kiln
