// scaled_dot_product_attention: torch.nn.functional.scaled_dot_product_attention at inference
// (no dropout).
//
//   scaled_dot_product_attention(q [..., L, E], k [..., S, E], v [..., S, Ev], [attn_mask];
//                                is_causal = false, scale = 0.0, enable_gqa = false,
//                                q_heads_second_last = false, k_heads_second_last = false,
//                                v_heads_second_last = false, out_heads_second_last = false)
//                                -> [..., L, Ev]
//     batch dims of q, k and v broadcast; enable_gqa (grouped-query attention, as PyTorch's):
//     k and v have Hkv heads (their dim -3, static) where q has Hq, a multiple, and query head
//     h reads key and value head h / (Hq / Hkv), as if k and v were repeat_interleave'd.
//     attn_mask (bool: true = attend; or q's dtype: added to the scores) broadcasts to
//     [..., L, S] without enlarging it. is_causal masks key j for query i when j > i (top-left
//     aligned, as PyTorch), combined with attn_mask when both are given. scale = 0.0 means
//     unset: 1/sqrt(E), PyTorch's default. *_heads_second_last: that operand (rank >= 3) is
//     given, or the output wanted, with its last two batch dims swapped, [..., L, H, E] for
//     [..., H, L, E]: the layout a projection has before the head permute, which
//     fold_permute_into_attention removes. Only addressing changes (row strides).
//
// A query row that attends no key (every key masked) gives zeros, as PyTorch does on the CPU.
//
// bf16 q, k and v (made by fold_bf16_casts_into_widening_kernels: the builder computes bf16
// attention in f32 between casts) give the f32 result on the widened operands rounded to bf16,
// the bits of those casts; an additive mask is then f32, as the widened one was.
//
// Kernels, best first: the fused flash-attention kernel (f32, bf16; kernels/cpu/attention.cc)
// with its GEMM tiles in AVX-512 or in AVX2+FMA, then the reference (f32, f64, bf16), which
// computes each row's scores, softmax and weighted sum in double (bf16: the f32 reference on
// widened operands, rounded).
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/parallel_chunks.h"
#include "kernels/cpu/widened_bf16.h"
#include "ops/op_registry.h"

namespace kiln {

namespace {

using cpu::AttentionGeometry;
using cpu::AttentionMask;
using cpu::kHeadsSecondLastAttrs;

void infer_attention(InferContext& ctx) {
  ctx.check(ctx.num_inputs() >= 3 && ctx.num_inputs() <= 4,
            "takes q, k, v and at most one attn_mask, got " + std::to_string(ctx.num_inputs()) +
                " inputs");
  // q, k and v as [..., H, rows, cols]: an operand given heads second last has them swapped.
  TensorType operands[3];
  for (int i = 0; i < 3; ++i) {
    operands[i] = ctx.input(static_cast<size_t>(i));
    if (!ctx.attr_bool(kHeadsSecondLastAttrs[i])) continue;
    Shape& shape = operands[i].shape;
    ctx.check(shape.size() >= 3, std::string(kHeadsSecondLastAttrs[i]) +
                                     " needs an operand of rank >= 3 ([..., S, H, E]), not " +
                                     shape_string(shape, &ctx.symbols()));
    std::swap(shape[shape.size() - 3], shape[shape.size() - 2]);
  }
  const TensorType& q = operands[0];
  const TensorType& k = operands[1];
  const TensorType& v = operands[2];
  ctx.check(q.dtype == DType::F32 || q.dtype == DType::F64 || q.dtype == DType::BF16,
            "q, k and v must be f32, f64 or bf16, not " + std::string(dtype_name(q.dtype)) +
                "; insert a cast");
  ctx.check(k.dtype == q.dtype && v.dtype == q.dtype,
            "q, k and v must have the same dtype; insert a cast");
  ctx.check(q.rank() >= 2 && k.rank() >= 2 && v.rank() >= 2,
            "q, k and v need at least two dims each ([..., L, E], [..., S, E], [..., S, Ev])");
  const double scale = ctx.attr_float("scale");
  ctx.check(std::isfinite(scale), "scale must be finite (0.0 means 1/sqrt(E))");

  auto batch_of = [](const TensorType& t) { return Shape(t.shape.begin(), t.shape.end() - 2); };
  ctx.unify(q.shape.back(), k.shape.back(), "q's and k's last dims (E)");
  Dim s = ctx.unify(k.shape[k.rank() - 2], v.shape[v.rank() - 2],
                    "k's and v's second-last dims (S, the number of keys)");
  Dim l = q.shape[q.rank() - 2];
  Shape k_batch = batch_of(k), v_batch = batch_of(v);
  if (ctx.attr_bool("enable_gqa")) {
    ctx.check(q.rank() >= 3 && k.rank() >= 3 && v.rank() >= 3,
              "enable_gqa needs q, k and v of rank >= 3 ([..., H, L, E])");
    const Dim hq = q.shape[q.rank() - 3];
    const Dim hkv = ctx.unify(k.shape[k.rank() - 3], v.shape[v.rank() - 3],
                              "k's and v's head dims (-3)");
    ctx.check(hq.is_static() && hkv.is_static() && hkv.size() > 0 &&
                  hq.size() % hkv.size() == 0,
              "enable_gqa needs static head counts, q's (" +
                  shape_string(Shape{hq}, &ctx.symbols()) + ") a multiple of k's and v's (" +
                  shape_string(Shape{hkv}, &ctx.symbols()) + ")");
    // Each query head reads its group's key and value head: for broadcasting, k and v have q's.
    k_batch.back() = v_batch.back() = hq;
  }
  Shape batch = ctx.broadcast(ctx.broadcast(batch_of(q), k_batch), v_batch);

  if (ctx.num_inputs() == 4) {
    const TensorType& mask = ctx.input(3);
    // bf16 attention adds its mask to f32 scores.
    const DType additive = q.dtype == DType::BF16 ? DType::F32 : q.dtype;
    ctx.check(mask.dtype == DType::Bool || mask.dtype == additive,
              "attn_mask must be bool (true = attend) or " + std::string(dtype_name(additive)) +
                  " (added to the scores), not " + std::string(dtype_name(mask.dtype)));
    // Each mask dim is 1 (broadcast) or the score matrix's [..., L, S] dim there.
    Shape scores = batch;
    scores.push_back(l);
    scores.push_back(s);
    ctx.check(mask.rank() <= scores.size(),
              "attn_mask " + shape_string(mask.shape, &ctx.symbols()) +
                  " has more dims than the scores " + shape_string(scores, &ctx.symbols()));
    const size_t lead = scores.size() - mask.rank();
    for (size_t d = 0; d < mask.rank(); ++d) {
      const Dim m = mask.shape[d];
      if (m.is_static() && m.size() == 1) continue;
      scores[lead + d] = ctx.unify(
          scores[lead + d], m,
          "attn_mask " + shape_string(mask.shape, &ctx.symbols()) +
              " must broadcast to the scores " + shape_string(scores, &ctx.symbols()) +
              " without enlarging them: dims");
    }
    batch.assign(scores.begin(), scores.end() - 2);
    l = scores[scores.size() - 2];
  }
  Shape out = batch;
  out.push_back(l);
  out.push_back(v.shape.back());
  if (ctx.attr_bool(kHeadsSecondLastAttrs[3])) {
    ctx.check(out.size() >= 3, std::string(kHeadsSecondLastAttrs[3]) +
                                   " needs an output of rank >= 3 ([..., L, H, Ev]), not " +
                                   shape_string(out, &ctx.symbols()));
    std::swap(out[out.size() - 3], out[out.size() - 2]);
  }
  ctx.set_output(0, TensorType{q.dtype, out, Layout::Plain});
}

template <typename T>
using Wide = std::conditional_t<std::is_same_v<T, float>, double, T>;

// One query row: out = sum_j p_j v_j / sum_j p_j, p_j = exp(x_j - max x), over the attended
// keys (x_j > -inf). x_j = q.k_j * scale + mask_j, accumulated in Wide<T> and rounded to T as the
// score tensor of PyTorch's math backend is (a score that overflows T becomes inf there too).
template <typename T>
void reference_row(const AttentionGeometry& g, const T* q, const T* k, const T* v,
                   const void* mask_row, int64_t query, std::vector<Wide<T>>& weights,
                   std::vector<Wide<T>>& acc, T* out) {
  using W = Wide<T>;
  constexpr W kNegInf = -std::numeric_limits<W>::infinity();
  W max = kNegInf;
  for (int64_t j = 0; j < g.s; ++j) {
    const int64_t m = j * g.mask_col_stride;
    bool attended = !g.causal || j <= query;
    if (g.mask == AttentionMask::Bool)
      attended = attended && static_cast<const uint8_t*>(mask_row)[m] != 0;
    if (!attended) {
      weights[j] = kNegInf;
      continue;
    }
    W dot = 0;
    for (int64_t e = 0; e < g.e; ++e) dot += W(q[e]) * W(k[j * g.k_row_stride + e]);
    W x = dot * W(g.scale);
    if (g.mask == AttentionMask::Additive) x += W(static_cast<const T*>(mask_row)[m]);
    weights[j] = W(T(x));
    if (std::isnan(weights[j]) || weights[j] > max) max = weights[j];  // a NaN stays
  }
  std::fill(acc.begin(), acc.end(), W(0));
  W sum = 0;
  if (max != kNegInf) {
    for (int64_t j = 0; j < g.s; ++j) {
      if (weights[j] == kNegInf) continue;
      const W p = std::exp(weights[j] - max);
      sum += p;
      for (int64_t c = 0; c < g.ev; ++c) acc[c] += p * W(v[j * g.v_row_stride + c]);
    }
  }
  for (int64_t c = 0; c < g.ev; ++c) out[c] = sum == 0 ? T(0) : T(acc[c] / sum);
}

// Each query row of every batch matrix through reference_row, rows split over threads.
template <typename T>
void run_reference(const AttentionGeometry& g, int threads, const T* q, const T* k, const T* v,
                   const void* mask_operand, T* y) {
  const auto* mask = static_cast<const char*>(mask_operand);
  const size_t mask_element = g.mask == AttentionMask::Bool ? 1 : sizeof(T);
  cpu::parallel_chunks(
      g.batch_count() * g.l, g.s * (g.e + g.ev), threads, [&](int64_t begin, int64_t end) {
        std::vector<Wide<T>> weights(static_cast<size_t>(g.s)), acc(static_cast<size_t>(g.ev));
        for (int64_t row = begin; row < end; ++row) {
          const int64_t b = row / g.l, i = row % g.l;
          const void* mask_row =
              mask ? mask + static_cast<size_t>(g.mask_offsets[b] + i * g.mask_row_stride) *
                                mask_element
                   : nullptr;
          reference_row(g, q + g.q_offsets[b] + i * g.q_row_stride, k + g.k_offsets[b],
                        v + g.v_offsets[b], mask_row, i, weights, acc,
                        y + g.out_offsets[b] + i * g.out_row_stride);
        }
      });
}

template <typename T>
std::unique_ptr<KernelInstance> create_reference(const KernelSpec& spec) {
  return make_kernel([g = cpu::make_attention_geometry(spec), threads = spec.threads](
                         std::span<const void* const> in, std::span<void* const> out) {
    run_reference(g, threads, static_cast<const T*>(in[0]), static_cast<const T*>(in[1]),
                  static_cast<const T*>(in[2]), g.mask == AttentionMask::None ? nullptr : in[3],
                  static_cast<T*>(out[0]));
  });
}

#ifdef KILN_X86
std::string flash_unsupported(const KernelSpec& spec) {
  // bf16 is widened in the kernel.
  const DType dtype = spec.inputs[0].dtype == DType::BF16 ? DType::F32 : spec.inputs[0].dtype;
  return cpu::avx2_f32_unsupported_reason(dtype);
}
std::string flash_avx512_unsupported(const KernelSpec& spec) {
  if (std::string why = cpu::isa_unavailable_reason(cpu::Isa::Avx512); !why.empty()) return why;
  return flash_unsupported(spec);
}
#endif

}  // namespace

void register_attention_ops(OpRegistry& registry) {
  OpDef def;
  def.name = "scaled_dot_product_attention";
  def.inputs = {{"q"}, {"k"}, {"v"}, {"attn_mask", true}};
  def.attrs = {{"is_causal", false}, {"scale", 0.0}, {"enable_gqa", false}};
  for (const char* name : kHeadsSecondLastAttrs) def.attrs.push_back({name, false});
  def.infer = infer_attention;
  def.computes_low_precision_in_f32 = true;
#ifdef KILN_X86
  def.kernels.push_back({"flash_amx", "native", cpu::amx_attention_unsupported,
                         cpu::create_amx_attention});
  def.kernels.push_back({"onednn", "onednn", cpu::onednn_attention_unsupported,
                         cpu::create_onednn_attention});
  def.kernels.push_back({"flash_avx512", "native", flash_avx512_unsupported,
                         cpu::create_flash_attention_avx512});
  def.kernels.push_back({"flash", "native", flash_unsupported, cpu::create_flash_attention});
#endif
  def.kernels.push_back({"reference", "native", [](const KernelSpec&) { return std::string(); },
                         [](const KernelSpec& spec) {
                           switch (spec.inputs[0].dtype) {
                             case DType::F32: return create_reference<float>(spec);
                             case DType::BF16:  // the f32 loops on widened copies
                               return cpu::create_widened_bf16(spec, create_reference<float>);
                             default: return create_reference<double>(spec);
                           }
                         }});
  registry.add(std::move(def));
}

}  // namespace kiln
