// Scaled dot-product attention on the CPU: the problem description shared by the op's kernels,
// and the fused f32 kernel (flash-attention style: the L x S score matrix is never stored).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_features.h"
#include "ops/op_registry.h"

namespace kiln::cpu {

enum class AttentionMask : uint8_t { None, Bool, Additive };

// out[b..., L, Ev] = softmax(q k^T * scale + mask) v for q [b..., L, E], k [b..., S, E],
// v [b..., S, Ev], batch dims broadcast NumPy-style (the mask's too, over [b..., L, S]). Key j is
// attended by query i unless the mask is false there, or is_causal and j > i (PyTorch's top-left
// aligned lower triangle); an additive mask is added to the scaled scores.
// Each of q, k, v and out is dense row-major either as written, or with its last batch dim (the
// heads H) second last: [..., S, H, E] (its attribute *_heads_second_last), as the projections
// before a head split produce it. Either way each matrix row is contiguous; only the strides
// between rows and matrices differ, so the arithmetic is the same.
struct AttentionGeometry {
  int64_t l = 0, s = 0, e = 0, ev = 0;
  double scale = 1;  // resolved: the attribute, or 1/sqrt(E) when it is 0 (unset)
  bool causal = false;
  AttentionMask mask = AttentionMask::None;
  // Element offsets of q's, k's, v's and out's matrices and of the mask's [L, S] plane for each
  // output batch index (row-major over the output's batch dims as written above: [b..., H]).
  std::vector<int64_t> q_offsets, k_offsets, v_offsets, out_offsets, mask_offsets;
  // Element strides between consecutive rows of q, k, v and out (E, E, Ev, Ev when as written,
  // H times that with heads second last; 0 for an operand of one row).
  int64_t q_row_stride = 0, k_row_stride = 0, v_row_stride = 0, out_row_stride = 0;
  // The mask's strides in elements over L and S: 0 where it is broadcast.
  int64_t mask_row_stride = 0, mask_col_stride = 0;

  int64_t batch_count() const { return static_cast<int64_t>(q_offsets.size()); }
};

// The attributes that put the heads second last, for q, k, v and the output in that order.
inline constexpr const char* kHeadsSecondLastAttrs[4] = {
    "q_heads_second_last", "k_heads_second_last", "v_heads_second_last",
    "out_heads_second_last"};

// The geometry of a scaled_dot_product_attention node: inputs q, k, v[, attn_mask], attributes
// is_causal, scale and the *_heads_second_last flags.
AttentionGeometry make_attention_geometry(const KernelSpec& spec);

#ifdef KILN_X86
// The fused kernel for f32 with AVX2+FMA (call only when has_avx2_fma()). Its scratch holds,
// per thread, one block of scores and one block of output rows: O(block_q x (block_k + Ev)),
// whatever L and S are.
std::unique_ptr<KernelInstance> create_flash_attention(const KernelSpec& spec);
// The same with its two GEMMs (q k^T and P v) in AVX-512 tiles (call only when has_avx512f()):
// the same bits as the AVX2 kernel, in half the FMA instructions.
std::unique_ptr<KernelInstance> create_flash_attention_avx512(const KernelSpec& spec);
// f32 or bf16 q, k and v through oneDNN's matmul, the scores of a chunk of heads held whole
// (attention_onednn.cc); empty reason when it can take the node.
std::string onednn_attention_unsupported(const KernelSpec& spec);
std::unique_ptr<KernelInstance> create_onednn_attention(const KernelSpec& spec);
// bf16 q, k and v in AMX tiles, flash style: blocks of query rows walk blocks of keys whose
// scores stay in the core's caches (attention_amx.cc); empty reason when it can take the node.
std::string amx_attention_unsupported(const KernelSpec& spec);
std::unique_ptr<KernelInstance> create_amx_attention(const KernelSpec& spec);
#endif

}  // namespace kiln::cpu
