// conv2d and conv3d through oneDNN's convolution (forward inference): the direct algorithm, and the
// Winograd one for f32 3x3 stride-1 convolutions in nChw16c where oneDNN has it (AVX-512: its
// F(2x2, 3x3) kernel at small batches, F(4x4, 3x3) at larger ones). Winograd computes in
// transformed tiles: on ResNet-50's 3x3 shapes its error against a float64 convolution was
// 0.4-0.5x the direct kernels' at batch 1 and 1.4-2.5x at batch 8, under 3e-6 of the largest
// |y|; a NaN or inf in x makes NaN every output of the tiles whose inputs it is in, where
// the direct kernels keep it to the outputs that read it (docs/ops.md). Source and
// destination stay in the layouts and dtypes of the node's types: plain NCHW, nhwc or oneDNN's
// blocked nChw8c/nChw16c, which the format stage picks; f32, or bf16 x and w with an f32 or a
// bf16 y, which oneDNN rounds once, after the post-ops, as conv2d's reference does. The weights
// take the primitive's preferred blocked layout when they are a constant. The epilogue becomes
// oneDNN's bias input and post-ops: the residual, eltwise activation, eltwise clip.
//
// In the channels-inner layouts the residual is oneDNN's sum post-op, which reads it from y
// itself: y holds r when the convolution runs and the result overwrites it. The memory plan
// gives y r's buffer where r dies at the convolution (conv2d's kernel declares r in place, as
// the last of its four inputs: ResNet's and MobileNetV2's residual convolutions); elsewhere
// run() copies r into y first. In place, r is read once and no other buffer is written: ResNet-
// 50's residual convolutions at batch 1 took 5.7-5.9 against 6.3-6.6 ms a call with r as a
// binary post-op (docs/benchmarks.md). Plain NCHW keeps the binary post-op: oneDNN's GEMM-based
// kernel there adds a sum before the bias, where conv2d adds r after it (as the unfused ops
// do); given y in r's buffer, it reads a copy of r in its scratch.
//
// conv3d's nodes are plain (the format stage lays out 4-D tensors only): its primitive takes the
// layout format `any` picks, and the kernel reorders x and y around it (OneDnnConvolution).
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <optional>

#include "kernels/cpu/conv.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/layout.h"
#include "kernels/cpu/library_threads.h"
#include "kernels/cpu/onednn_activation.h"
#include "kernels/cpu/onednn_layout.h"
#include "kernels/cpu/onednn_util.h"
#include "kernels/cpu/widened_bf16.h"

namespace kiln::cpu {

namespace {

// In the channels-inner layouts the residual is the sum post-op, read from y itself.
bool residual_in_y(const ConvEpilogue& epilogue, const KernelSpec& spec) {
  return epilogue.residual && spec.outputs[0].layout != Layout::Plain;
}

dnnl::memory::dims weight_dims(const Conv2dGeometry& g) {
  // Grouped weights [O, C/g, KH, KW] are the same memory as oneDNN's [g, O/g, C/g, KH, KW].
  return g.groups > 1 ? dnnl::memory::dims{g.groups, g.o / g.groups, g.c / g.groups, g.kh, g.kw}
                      : dnnl::memory::dims{g.o, g.c, g.kh, g.kw};
}

dnnl::memory::desc plain_weights_desc(const Conv2dGeometry& g, const KernelSpec& spec) {
  using tag = dnnl::memory::format_tag;
  return dnnl::memory::desc(weight_dims(g), onednn_data_type(spec.inputs[1].dtype),
                            g.groups > 1 ? tag::goihw : tag::oihw);
}

const Tensor* constant_weights(const KernelSpec& spec) {
  return spec.constant_inputs.size() > 1 ? spec.constant_inputs[1] : nullptr;
}

// conv2d's convolution with `algorithm` and the epilogue as bias and post-ops; throws
// dnnl::error where oneDNN has no kernel for it. Source and destination in the node's layouts;
// constant weights in the layout the primitive picks (format `any`), others plain.
dnnl::convolution_forward::primitive_desc conv_primitive_desc(const Conv2dGeometry& g,
                                                              const ConvEpilogue& epilogue,
                                                              const KernelSpec& spec,
                                                              dnnl::algorithm algorithm) {
  using dt = dnnl::memory::data_type;
  using tag = dnnl::memory::format_tag;
  const dnnl::memory::desc src_desc =
      onednn_desc({g.n, g.c, g.h, g.w}, spec.inputs[0].layout, spec.inputs[0].dtype);
  const dnnl::memory::desc dst_desc =
      onednn_desc({g.n, g.o, g.oh, g.ow}, spec.outputs[0].layout, spec.outputs[0].dtype);
  const dnnl::memory::desc w_request =
      constant_weights(spec)
          ? dnnl::memory::desc(weight_dims(g), onednn_data_type(spec.inputs[1].dtype), tag::any)
          : plain_weights_desc(g, spec);
  // f32 also for bf16 operands: conv2d accumulates those in f32.
  const dnnl::memory::desc bias_desc =
      epilogue.bias ? dnnl::memory::desc({g.o}, dt::f32, tag::x) : dnnl::memory::desc();
  // oneDNN counts dilation from 0 (no gaps); Kiln and PyTorch from 1.
  dnnl::convolution_forward::desc desc(
      dnnl::prop_kind::forward_inference, algorithm, src_desc, w_request, bias_desc, dst_desc,
      {g.stride_h, g.stride_w}, {g.dilation_h - 1, g.dilation_w - 1}, {g.pad_top, g.pad_left},
      {g.pad_bottom, g.pad_right});
  dnnl::primitive_attr attr = user_scratchpad_attr();
  dnnl::post_ops ops;
  // The residual is in y's layout and dtype (conv2d's inference checks).
  if (residual_in_y(epilogue, spec)) ops.append_sum(1.f);
  else if (epilogue.residual) ops.append_binary(dnnl::algorithm::binary_add, dst_desc);
  if (epilogue.activation != Activation::None) append_activation(ops, epilogue.activation);
  // The direct kernels' relu gives alpha * x = -0 for negative x where PyTorch gives +0; adding
  // +0 turns -0 into +0 and keeps everything else. The Winograd kernels' relu is max(x, +0),
  // which gives +0 already, and they take no second eltwise.
  if (epilogue.activation == Activation::Relu &&
      algorithm != dnnl::algorithm::convolution_winograd)
    ops.append_eltwise(1.f, dnnl::algorithm::eltwise_linear, 1.f, 0.f);
  if (epilogue.clamps())
    ops.append_eltwise(1.f, dnnl::algorithm::eltwise_clip, static_cast<float>(epilogue.clamp_min),
                       static_cast<float>(epilogue.clamp_max));
  attr.set_post_ops(ops);
  return dnnl::convolution_forward::primitive_desc(desc, attr, onednn_engine());
}

// A oneDNN convolution primitive run on the node's buffers. x, w and y are in the node's layouts
// (`x_desc`, `plain_w_desc`, `y_desc`); where the primitive's differ (conv3d asks for format
// `any`), run() reorders x and w into scratch before and y out of it after; constant weights are
// reordered once, here. Created under a LibraryThreads scope of spec.threads, as the primitive
// descriptor was.
class OneDnnConvolution final : public KernelInstance {
 public:
  OneDnnConvolution(const dnnl::convolution_forward::primitive_desc& pd,
                    const ConvEpilogue& epilogue, const KernelSpec& spec,
                    const dnnl::memory::desc& plain_w_desc, const dnnl::memory::desc& x_desc,
                    const dnnl::memory::desc& y_desc)
      : threads_(spec.threads),
        epilogue_(epilogue),
        residual_in_y_(residual_in_y(epilogue, spec)),
        x_desc_(x_desc),
        y_desc_(y_desc),
        src_desc_(pd.src_desc()),
        weights_desc_(pd.weights_desc()),
        bias_desc_(pd.bias_desc()),
        dst_desc_(pd.dst_desc()),
        primitive_(pd) {
    size_t library_scratch = pd.scratchpad_desc().get_size();
    auto reorder = [&](const dnnl::memory::desc& from, const dnnl::memory::desc& to) {
      const dnnl::reorder::primitive_desc reorder_pd(onednn_engine(), from, onednn_engine(), to,
                                                     user_scratchpad_attr());
      library_scratch = std::max(library_scratch, reorder_pd.scratchpad_desc().get_size());
      return std::optional<dnnl::reorder>(dnnl::reorder(reorder_pd));
    };
    if (x_desc_ != src_desc_) x_reorder_ = reorder(x_desc_, src_desc_);
    if (y_desc_ != dst_desc_) y_reorder_ = reorder(dst_desc_, y_desc_);
    const bool constant_w = constant_weights(spec);
    if (!constant_w && plain_w_desc != weights_desc_) {
      w_desc_ = plain_w_desc;
      w_reorder_ = reorder(w_desc_, weights_desc_);
    }
    KILN_ASSERT(!epilogue.residual || (!x_reorder_ && !y_reorder_ && !w_reorder_),
                "a residual convolution runs in its node's layouts");
    // One region serves the primitives in turn: they run one after another.
    library_scratch_desc_ = dnnl::memory::desc({static_cast<dnnl::memory::dim>(library_scratch)},
                                               dnnl::memory::data_type::u8,
                                               dnnl::memory::format_tag::x);
    scratch_bytes_ = library_scratch;
    residual_copy_ = take(epilogue_.residual && !residual_in_y_ ? dst_desc_.get_size() : 0);
    x_copy_ = take(x_reorder_ ? src_desc_.get_size() : 0);
    y_copy_ = take(y_reorder_ ? dst_desc_.get_size() : 0);
    w_copy_ = take(w_reorder_ ? weights_desc_.get_size() : 0);
    if (constant_w) packed_w_ = prepacked_constant(spec, 1, plain_w_desc, weights_desc_);
  }

  size_t scratch_bytes() const override { return scratch_bytes_; }
  bool reads_input_at_run_time(size_t input) const override { return input != 1 || !packed_w_; }

  void run(std::span<const void* const> inputs, std::span<void* const> outputs,
           void* scratch) const override {
    LibraryThreads scope(threads_);
    std::byte* base = static_cast<std::byte*>(scratch);
    const dnnl::engine& engine = onednn_engine();
    const dnnl::memory library_scratch(library_scratch_desc_, engine, scratch);
    const void* residual = epilogue_.residual ? inputs.back() : nullptr;
    if (residual_in_y_ && outputs[0] != residual)
      std::memcpy(outputs[0], residual, dst_desc_.get_size());
    if (!residual_in_y_ && residual == outputs[0]) {
      std::memcpy(base + residual_copy_, residual, dst_desc_.get_size());
      residual = base + residual_copy_;
    }
    void* src = const_cast<void*>(inputs[0]);
    if (x_reorder_) {
      execute_and_wait(*x_reorder_, {{DNNL_ARG_FROM, dnnl::memory(x_desc_, engine, src)},
                                     {DNNL_ARG_TO, dnnl::memory(src_desc_, engine, base + x_copy_)},
                                     {DNNL_ARG_SCRATCHPAD, library_scratch}});
      src = base + x_copy_;
    }
    void* dst = y_reorder_ ? base + y_copy_ : outputs[0];
    void* w = packed_w_ ? packed_w_->data() : const_cast<void*>(inputs[1]);
    if (w_reorder_) {
      execute_and_wait(*w_reorder_, {{DNNL_ARG_FROM, dnnl::memory(w_desc_, engine, w)},
                                     {DNNL_ARG_TO, dnnl::memory(weights_desc_, engine, base + w_copy_)},
                                     {DNNL_ARG_SCRATCHPAD, library_scratch}});
      w = base + w_copy_;
    }
    std::unordered_map<int, dnnl::memory> args{
        {DNNL_ARG_SRC, dnnl::memory(src_desc_, engine, src)},
        {DNNL_ARG_WEIGHTS, dnnl::memory(weights_desc_, engine, w)},
        {DNNL_ARG_DST, dnnl::memory(dst_desc_, engine, dst)},
        {DNNL_ARG_SCRATCHPAD, library_scratch}};
    if (epilogue_.bias)
      args.emplace(DNNL_ARG_BIAS, dnnl::memory(bias_desc_, engine, const_cast<void*>(inputs[2])));
    if (epilogue_.residual && !residual_in_y_)
      args.emplace(DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1,
                   dnnl::memory(dst_desc_, engine, const_cast<void*>(residual)));
    execute_and_wait(primitive_, args);
    if (y_reorder_)
      execute_and_wait(*y_reorder_, {{DNNL_ARG_FROM, dnnl::memory(dst_desc_, engine, dst)},
                                     {DNNL_ARG_TO, dnnl::memory(y_desc_, engine, outputs[0])},
                                     {DNNL_ARG_SCRATCHPAD, library_scratch}});
  }

 private:
  // Reserves `bytes` of scratch after what is reserved; returns their offset (0 for none).
  size_t take(size_t bytes) {
    if (bytes == 0) return 0;
    const size_t offset = (scratch_bytes_ + kAlignment - 1) / kAlignment * kAlignment;
    scratch_bytes_ = offset + bytes;
    return offset;
  }

  int threads_;
  ConvEpilogue epilogue_;
  bool residual_in_y_;  // the residual as a sum post-op, read from y (channels-inner layouts)
  dnnl::memory::desc x_desc_, w_desc_, y_desc_;  // the node's layouts (w_desc_ when reordered)
  dnnl::memory::desc src_desc_, weights_desc_, bias_desc_, dst_desc_;  // the primitive's
  dnnl::memory::desc library_scratch_desc_;
  dnnl::convolution_forward primitive_;
  std::optional<dnnl::reorder> x_reorder_, w_reorder_, y_reorder_;  // where the layouts differ
  size_t scratch_bytes_ = 0, residual_copy_ = 0, x_copy_ = 0, y_copy_ = 0, w_copy_ = 0;
  std::shared_ptr<const Tensor> packed_w_;  // w in weights_desc_ when it is a constant, else null
};

// conv2d's primitive, run in the node's layouts (those it was asked for: no reorders).
std::unique_ptr<KernelInstance> make_conv2d(const Conv2dGeometry& g, const ConvEpilogue& epilogue,
                                            const KernelSpec& spec, dnnl::algorithm algorithm) {
  LibraryThreads scope(spec.threads);  // creation sizes the work split by the thread count
  const dnnl::convolution_forward::primitive_desc pd =
      conv_primitive_desc(g, epilogue, spec, algorithm);
  return std::make_unique<OneDnnConvolution>(pd, epilogue, spec, plain_weights_desc(g, spec),
                                             pd.src_desc(), pd.dst_desc());
}

// The layout of `desc` among Kiln's, if it is one of them.
std::optional<Layout> kiln_layout_of(const dnnl::memory::desc& desc, const dnnl::memory::dims& dims,
                                     DType dtype) {
  for (Layout l : {Layout::Plain, Layout::NHWC, Layout::NChw8c, Layout::NChw16c})
    if (desc == onednn_desc(dims, l, dtype)) return l;
  return std::nullopt;
}

}  // namespace

std::unique_ptr<KernelInstance> create_onednn_conv2d(const Conv2dGeometry& g,
                                                     const ConvEpilogue& epilogue,
                                                     const KernelSpec& spec) {
  // oneDNN 2.6 has no bf16 convolution before AVX-512 and emulates it without AVX512-BF16 (a
  // .kiln model compiled on a CPU with it): the f32 convolution on widened operands instead.
  if (spec.inputs[0].dtype == DType::BF16 && !onednn_has_bf16())
    return create_widened_bf16(spec, [&](const KernelSpec& f32) {
      return make_conv2d(g, epilogue, f32, dnnl::algorithm::convolution_direct);
    });
  return make_conv2d(g, epilogue, spec, dnnl::algorithm::convolution_direct);
}

std::unique_ptr<KernelInstance> create_onednn_conv3d(const Conv3dGeometry& g, bool bias,
                                                     const KernelSpec& spec) {
  using tag = dnnl::memory::format_tag;
  using dt = dnnl::memory::data_type;
  auto dims = [](int64_t n, int64_t c, const std::array<int64_t, 3>& spatial) {
    return dnnl::memory::dims{n, c, spatial[0], spatial[1], spatial[2]};
  };
  const dnnl::memory::dims x_dims = dims(g.n, g.c, g.in), y_dims = dims(g.n, g.o, g.out);
  // Grouped weights [O, C/g, KD, KH, KW] are the same memory as oneDNN's [g, O/g, C/g, KD, KH, KW].
  dnnl::memory::dims w_dims = dims(g.o, g.c / g.groups, g.kernel);
  if (g.groups > 1) {
    w_dims[0] = g.o / g.groups;
    w_dims.insert(w_dims.begin(), g.groups);
  }
  const dnnl::memory::desc plain_w(w_dims, dt::f32, g.groups > 1 ? tag::goidhw : tag::oidhw);
  const dnnl::memory::dims dilation{g.dilation[0] - 1, g.dilation[1] - 1, g.dilation[2] - 1};
  LibraryThreads scope(spec.threads);
  auto primitive_desc = [&](tag layout) {
    const dnnl::convolution_forward::desc desc(
        dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
        dnnl::memory::desc(x_dims, dt::f32, layout), dnnl::memory::desc(w_dims, dt::f32, tag::any),
        bias ? dnnl::memory::desc({g.o}, dt::f32, tag::x) : dnnl::memory::desc(),
        dnnl::memory::desc(y_dims, dt::f32, layout),
        dnnl::memory::dims(g.stride.begin(), g.stride.end()), dilation,
        dnnl::memory::dims(g.pad_begin.begin(), g.pad_begin.end()),
        dnnl::memory::dims(g.pad_end.begin(), g.pad_end.end()));
    return dnnl::convolution_forward::primitive_desc(desc, user_scratchpad_attr(),
                                                     onednn_engine());
  };
  // Format `any` takes ndhwc's brgconv kernels for dense convolutions but the GEMM-based kernel
  // for depthwise ones, where ndhwc has a jit kernel (3.2x faster, docs/ops.md): ndhwc first,
  // unless oneDNN runs it there by its reference or GEMM-based kernels only.
  dnnl::convolution_forward::primitive_desc pd;
  try {
    pd = primitive_desc(tag::ndhwc);
  } catch (const dnnl::error&) {
  }
  const std::string kernel = pd ? pd.impl_info_str() : "ref";
  if (kernel.starts_with("ref") || kernel.find("gemm") != std::string::npos)
    pd = primitive_desc(tag::any);
  return std::make_unique<OneDnnConvolution>(pd, ConvEpilogue{.bias = bias}, spec, plain_w,
                                             dnnl::memory::desc(x_dims, dt::f32, tag::ncdhw),
                                             dnnl::memory::desc(y_dims, dt::f32, tag::ncdhw));
}

std::string onednn_winograd_unsupported(const Conv2dGeometry& g, const ConvEpilogue& epilogue,
                                        const KernelSpec& spec) {
  if (!is_winograd_shape(g)) return "a dense 3x3 convolution of stride 1 and no dilation only";
  if (spec.inputs[0].dtype != DType::F32 || spec.outputs[0].dtype != DType::F32)
    return "f32 only";
  if (spec.inputs[0].layout != Layout::NChw16c || spec.outputs[0].layout != Layout::NChw16c)
    return "nChw16c only";
  if (!constant_weights(spec)) return "constant weights only";
  if (epilogue.residual || epilogue.clamps() ||
      (epilogue.activation != Activation::None && epilogue.activation != Activation::Relu))
    return "a bias and relu epilogue only";
  LibraryThreads scope(spec.threads);
  try {
    conv_primitive_desc(g, epilogue, spec, dnnl::algorithm::convolution_winograd);
  } catch (const dnnl::error&) {
    return "oneDNN has no Winograd kernel for this convolution on this CPU (AVX-512 only)";
  }
  return "";
}

std::unique_ptr<KernelInstance> create_onednn_winograd_conv2d(const Conv2dGeometry& g,
                                                              const ConvEpilogue& epilogue,
                                                              const KernelSpec& spec) {
  if (const std::string why = onednn_winograd_unsupported(g, epilogue, spec); !why.empty())
    throw_error(ErrorCode::UnsupportedOperator, "conv2d ", spec.node.name(),
                ": oneDNN's Winograd convolution can't run it: ", why,
                "; its kernel onednn takes every f32 convolution");
  return make_conv2d(g, epilogue, spec, dnnl::algorithm::convolution_winograd);
}

Layout onednn_preferred_conv_layout(DType dtype) {
  auto query = [](DType dtype) {
    // A 3x3 convolution of ResNet's second stage, with format `any` for everything.
    using tag = dnnl::memory::format_tag;
    const dnnl::memory::dims dims{1, 64, 56, 56};
    const dnnl::memory::data_type type = onednn_data_type(dtype);
    dnnl::convolution_forward::desc desc(
        dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
        dnnl::memory::desc(dims, type, tag::any),
        dnnl::memory::desc({64, 64, 3, 3}, type, tag::any),
        dnnl::memory::desc(dims, type, tag::any), {1, 1}, {1, 1}, {1, 1});
    dnnl::convolution_forward::primitive_desc pd(desc, onednn_engine());
    return kiln_layout_of(pd.src_desc(), dims, dtype).value_or(Layout::Plain);
  };
  if (dtype == DType::BF16) {
    static const Layout bf16 = query(DType::BF16);
    return bf16;
  }
  static const Layout f32 = query(DType::F32);
  return f32;
}

bool onednn_has_winograd() {
  static const bool has = [] {
    using tag = dnnl::memory::format_tag;
    using dt = dnnl::memory::data_type;
    const dnnl::memory::dims dims{1, 64, 56, 56};
    try {
      dnnl::convolution_forward::primitive_desc(
          dnnl::convolution_forward::desc(
              dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_winograd,
              dnnl::memory::desc(dims, dt::f32, tag::nChw16c),
              dnnl::memory::desc({64, 64, 3, 3}, dt::f32, tag::any),
              dnnl::memory::desc(dims, dt::f32, tag::nChw16c), {1, 1}, {1, 1}, {1, 1}),
          onednn_engine());
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return has;
}

namespace {

// A conv2d node of Winograd's shape (its weights' spatial dims known).
bool winograd_shaped(const Node* conv) {
  const Shape& w = conv->input(1)->type().shape;
  if (w.size() != 4 || !w[2].is_static() || !w[3].is_static()) return false;
  const auto& stride = conv->attr_ints("stride");
  const auto& dilation = conv->attr_ints("dilation");
  return is_winograd_shape(Conv2dGeometry{.kh = w[2].size(),
                                          .kw = w[3].size(),
                                          .groups = conv->attr_int("groups"),
                                          .stride_h = stride[0],
                                          .stride_w = stride[1],
                                          .dilation_h = dilation[0],
                                          .dilation_w = dilation[1]});
}

// Whether each group of a conv2d node's input and output channels is whole blocks of `block`
// (or one channel: depthwise), which oneDNN's blocked kernels of grouped convolutions need.
bool groups_fill_blocks(const Node* conv, int64_t block) {
  const int64_t groups = conv->attr_int("groups");
  if (groups == 1 || block == 1) return true;
  const Shape& w = conv->input(1)->type().shape;  // [out channels, in channels / groups, kh, kw]
  if (!w[0].is_static() || !w[1].is_static()) return false;
  const int64_t in_per_group = w[1].size(), out_per_group = w[0].size() / groups;
  return in_per_group == 1 || (in_per_group % block == 0 && out_per_group % block == 0);
}

// The layouts of `preferred` (in order) in which every one of `convs` gets a jit kernel: a
// blocked layout that splits a group of channels leaves oneDNN only its reference kernel (a
// ResNeXt block's 32 groups of 4 channels in nChw16c: 48x eager's time). None left: plain,
// where the convolution runs im2col and GEMM group by group.
std::vector<Layout> fitting(std::vector<Layout> preferred, const std::vector<const Node*>& convs) {
  std::erase_if(preferred, [&](Layout layout) {
    return !std::all_of(convs.begin(), convs.end(), [&](const Node* conv) {
      return groups_fill_blocks(conv, layout_channel_block(layout));
    });
  });
  if (preferred.empty()) return {Layout::Plain};
  return preferred;
}

// The layouts measured fastest for `convs`, in order.
std::vector<Layout> preferred_conv_layouts(DType dtype, const std::vector<const Node*>& convs) {
  // Measured on three CPUs of docs/benchmarks.md (2 threads): a Xeon with AMX, a Zen 4 with
  // AVX-512 on 256-bit FMA units (2026-12-01), a Zen 5 with 512-bit ones (2026-12-03).
  if (dtype == DType::BF16) {
    // Without AVX512-BF16 a bf16 convolution runs the f32 one on widened operands (and oneDNN
    // might have no bf16 convolution to ask about).
    if (!onednn_has_bf16()) return preferred_conv_layouts(DType::F32, {});
    const Layout preferred = onednn_preferred_conv_layout(DType::BF16);
    // What format `any` picks: nhwc with AMX, whose brgconv kernels ran ResNet-50 at batch 1 in
    // 10.2 ms against 39.6 in nChw16c's avx512_core_bf16 kernels. nhwc also takes any channel
    // count, where a blocked bf16 layout that doesn't fit would leave oneDNN only its reference
    // kernels (MobileNetV2 in nChw8c: seconds a call).
    if (preferred == Layout::NHWC) return {Layout::NHWC};
    return {preferred, Layout::NHWC};
  }
  // oneDNN's Winograd kernels (conv2d's first) read and write nChw16c only. They ran ResNet-50's
  // 3x3 convolutions about twice as fast as the direct ones, and ResNet-50 on the Xeon at batch
  // 1 in 26.0-27.0 against 28.5-29.3 ms in nhwc, at batch 8 in 173 against 203 ms (2026-12-02,
  // docs/benchmarks.md): a chain holding one of their shapes tries nChw16c first.
  if (onednn_has_winograd() && std::any_of(convs.begin(), convs.end(), winograd_shaped)) {
    std::vector<Layout> candidates = preferred_conv_layouts(DType::F32, {});
    candidates.erase(std::remove(candidates.begin(), candidates.end(), Layout::NChw16c),
                     candidates.end());
    candidates.insert(candidates.begin(), Layout::NChw16c);
    return candidates;
  }
  const Layout preferred = onednn_preferred_conv_layout(DType::F32);
  // Where format `any` picks nhwc (AVX-512: the brgconv kernels) on the Zen 4, whose 512-bit
  // FMAs run on paired 256-bit units, oneDNN's jit kernels of the blocked layouts ran whole chains
  // faster: ResNet-50 in nChw16c 40.4 against 43.2 ms at batch 1, 313 against 342 ms at batch 8
  // (nChw8c, whose kernels are AVX2's, was slower than either); MobileNetV2, whose 24-channel
  // layers rule out nChw16c, in nChw8c 29.5 against 34.7-44.6 ms at batch 8 and 4.1-4.3 against
  // 4.4-4.6 ms at batch 1. Channel counts that blocks of 8 don't divide keep nhwc. With 512-bit
  // FMA units format `any`'s pick stands: on a Xeon nhwc was as fast on ResNet-50 (30.8 against
  // 31.1 ms at batch 1) and faster on MobileNetV2 (3.24 against 4.45 ms at batch 1, 24.5 against
  // 28.6 at batch 8); on a Zen 5 MobileNetV2 in nhwc (brgconv_1x1, brdgmm_dw) took 2.2-2.5
  // against 3.7-4.0 ms in nChw8c at batch 1, 17.4-18.6 against 27.2-33.6 at batch 8.
  if (preferred == Layout::NHWC && !avx512_fma_full_width())
    return {Layout::NChw16c, Layout::NChw8c, Layout::NHWC};
  return {preferred};
}

}  // namespace

std::vector<Layout> conv_layout_candidates(DType dtype, const std::vector<const Node*>& convs) {
  return fitting(preferred_conv_layouts(dtype, convs), convs);
}

}  // namespace kiln::cpu
