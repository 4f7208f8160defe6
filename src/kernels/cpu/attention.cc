// Scaled dot-product attention: the geometry, and the fused f32 kernel for AVX2+FMA.
//
// The fused kernel (flash attention, Dao et al. 2022, on the CPU): each task is one block of
// query rows of one batch matrix. It streams over blocks of keys: scores = q_blk k_blk^T (a
// register-tiled GEMM on the block's keys transposed; plain dot products for fewer than 6 rows,
// e.g. decoding), then an online softmax that keeps each row's running max m and sum l and
// rescales what it accumulated so far by exp(m_old - m_new), then O += P v_blk (a second GEMM).
// Memory per thread is one score block and one output block, never L x S. Causal attention
// stops at the block's last row, skipping the key blocks it would mask entirely.
// Rows of q, k, v and out are addressed through row strides, so any of them may come with the
// heads second last ([B, S, H, E], straight from the projections): the head permutes around
// attention fold into the node (fold_permute_into_attention) and the arithmetic stays the same.
//
// bf16 q, k and v (with f32 or bool masks) are widened block by block into the task's workspace
// and the f32 arithmetic runs there; each output row is rounded to bf16 at the end: the bits of
// the f32 kernel between casts, without the casts' passes over the tensors.
//
// The GEMMs are Kiln's own AVX2 micro-kernels (6 x 16 register tiles) rather than cblas_sgemm
// per block: on one Zen 4 core they reach about 100 GFLOP/s for q k^T (transposing the keys
// included) and 110 for P v, where cblas_sgemm on the same 48 x 64 x 64 blocks reached 81 and
// 113, and the core's FMA peak is 117 (docs/ops.md).
#include "kernels/cpu/attention.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "kernels/cpu/parallel_chunks.h"
#ifdef KILN_X86
#include "kernels/cpu/bf16_avx2.h"
#include "kernels/cpu/vec_math_avx2.h"
#include "kernels/cpu/vec_math_avx512.h"
#endif

namespace kiln::cpu {

namespace {

// An operand broadcast over the output's batch dims: its matrix offset per output batch index,
// and its strides over the two matrix dims (0 where broadcast).
struct BroadcastOperand {
  std::vector<int64_t> offsets;
  int64_t row_stride = 0, col_stride = 0;
};

// `sizes` (as stored, dense row-major) has at most out_batch.size() + 2 dims and broadcasts to
// [out_batch..., *, *] (type inference checked it); with heads_second_last its dims -3 and -2
// are stored swapped, so they are swapped back along with their strides. With heads_group > 1
// (grouped-query attention) its dim -3 has out_batch.back() / heads_group heads, and output
// head h reads head h / heads_group.
BroadcastOperand broadcast_operand(const std::vector<int64_t>& sizes,
                                   const std::vector<int64_t>& out_batch,
                                   bool heads_second_last = false, int64_t heads_group = 1) {
  const size_t rank = out_batch.size() + 2;
  KILN_ASSERT(sizes.size() <= rank, "attention operand of rank " << sizes.size());
  KILN_ASSERT(!heads_second_last || sizes.size() >= 3,
              "attention operand of rank " << sizes.size() << " with heads second last");
  std::vector<int64_t> padded(rank - sizes.size(), 1);
  padded.insert(padded.end(), sizes.begin(), sizes.end());
  std::vector<int64_t> strides(rank, 0);
  int64_t stride = 1;
  for (size_t d = rank; d-- > 0;) {
    strides[d] = stride;
    stride *= padded[d];
  }
  if (heads_second_last) {
    std::swap(padded[rank - 3], padded[rank - 2]);
    std::swap(strides[rank - 3], strides[rank - 2]);
  }
  for (size_t d = 0; d < rank; ++d)
    if (padded[d] == 1) strides[d] = 0;
  BroadcastOperand op;
  op.row_stride = strides[rank - 2];
  op.col_stride = strides[rank - 1];
  int64_t count = 1;
  for (int64_t d : out_batch) count *= d;
  op.offsets.reserve(static_cast<size_t>(count));
  std::vector<int64_t> index(out_batch.size(), 0);
  for (int64_t i = 0; i < count; ++i) {
    int64_t offset = 0;
    for (size_t d = 0; d < out_batch.size(); ++d)
      offset += (d + 1 == out_batch.size() ? index[d] / heads_group : index[d]) * strides[d];
    op.offsets.push_back(offset);
    for (size_t d = out_batch.size(); d-- > 0;) {
      if (++index[d] < out_batch[d]) break;
      index[d] = 0;
    }
  }
  return op;
}

}  // namespace

AttentionGeometry make_attention_geometry(const KernelSpec& spec) {
  bool heads_second_last[4];
  for (int i = 0; i < 4; ++i) heads_second_last[i] = spec.node.attr_bool(kHeadsSecondLastAttrs[i]);
  // The sizes as written in attention.h: [..., rows, cols], heads third last.
  auto logical = [&](std::vector<int64_t> sizes, int which) {
    if (heads_second_last[which]) std::swap(sizes[sizes.size() - 3], sizes[sizes.size() - 2]);
    return sizes;
  };
  const std::vector<int64_t> q = logical(spec.input_sizes(0), 0),
                             k = logical(spec.input_sizes(1), 1),
                             v = logical(spec.input_sizes(2), 2),
                             out = logical(spec.output_sizes(0), 3);
  const std::vector<int64_t> out_batch(out.begin(), out.end() - 2);
  AttentionGeometry g;
  g.l = q[q.size() - 2];
  g.e = q.back();
  g.s = k[k.size() - 2];
  g.ev = v.back();
  const double scale = spec.node.attr_float("scale");
  // An empty dot product is 0 whatever the scale (PyTorch scales q and k by sqrt(scale) each).
  g.scale = scale != 0 ? scale : g.e > 0 ? 1 / std::sqrt(static_cast<double>(g.e)) : 1;
  g.causal = spec.node.attr_bool("is_causal");
  // Grouped-query attention: k and v have fewer heads (dim -3) than the output.
  const int64_t heads_group =
      spec.node.attr_bool("enable_gqa") ? out_batch.back() / k[k.size() - 3] : 1;
  BroadcastOperand operands[4];
  for (int i = 0; i < 4; ++i)
    operands[i] = broadcast_operand(i < 3 ? spec.input_sizes(i) : spec.output_sizes(0),
                                    out_batch, heads_second_last[i],
                                    i == 1 || i == 2 ? heads_group : 1);
  g.q_offsets = std::move(operands[0].offsets);
  g.k_offsets = std::move(operands[1].offsets);
  g.v_offsets = std::move(operands[2].offsets);
  g.out_offsets = std::move(operands[3].offsets);
  g.q_row_stride = operands[0].row_stride;
  g.k_row_stride = operands[1].row_stride;
  g.v_row_stride = operands[2].row_stride;
  g.out_row_stride = operands[3].row_stride;
  if (spec.inputs.size() > 3) {
    g.mask = spec.inputs[3].dtype == DType::Bool ? AttentionMask::Bool : AttentionMask::Additive;
    BroadcastOperand mask = broadcast_operand(spec.input_sizes(3), out_batch);
    g.mask_offsets = std::move(mask.offsets);
    g.mask_row_stride = mask.row_stride;
    g.mask_col_stride = mask.col_stride;
  }
  return g;
}

#ifdef KILN_X86
namespace {

using avx2::max_lanes;
using avx2::splat;
using avx2::sum_lanes;
using avx2::transpose8;

// Block sizes: a task's query rows and the keys per step, the rows a multiple of the GEMM tiles'
// 6, the keys of their 16 columns. On the 2-core EPYC, 48-192 rows and 64-128 keys ran within a
// few percent of each other; on the Xeon, 96 rows and 128 keys ran 6-11% faster than 48 and 64
// (ViT-B/16's and BERT-base's shapes, L = 1024), except causal, where 96 rows compute more
// masked scores (L = 128: 8% slower), so causal tasks take 48 (docs/ops.md).
constexpr int64_t kTileRows = 6;
constexpr int64_t kBlockQ = 96;
constexpr int64_t kCausalBlockQ = 48;
constexpr int64_t kBlockK = 128;

int64_t round_up(int64_t n, int64_t multiple) { return (n + multiple - 1) / multiple * multiple; }

// kt[e][j] = k[j][e] for the block's keys j < keys; columns up to the next multiple of 16 are 0.
// Row strides: k k_stride, kt kBlockK.
KILN_TARGET_AVX2 void pack_keys_transposed(const float* k, int64_t k_stride, int64_t keys,
                                           int64_t e_count, float* kt) {
  const int64_t columns = round_up(keys, 16);
  int64_t j = 0;
  // 8 x 8 transposes in registers where whole, element by element at the edges.
  for (; j + 8 <= keys; j += 8) {
    int64_t e = 0;
    for (; e + 8 <= e_count; e += 8) {
      __m256 r[8];
      for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(k + (j + i) * k_stride + e);
      transpose8(r);
      for (int c = 0; c < 8; ++c) _mm256_storeu_ps(kt + (e + c) * kBlockK + j, r[c]);
    }
    for (; e < e_count; ++e)
      for (int64_t i = 0; i < 8; ++i) kt[e * kBlockK + j + i] = k[(j + i) * k_stride + e];
  }
  for (int64_t e = 0; e < e_count; ++e) {
    for (int64_t jj = j; jj < keys; ++jj) kt[e * kBlockK + jj] = k[jj * k_stride + e];
    for (int64_t jj = keys; jj < columns; ++jj) kt[e * kBlockK + jj] = 0;
  }
}

// s[r][0..16) = sum_e q[r][e] kt[e][0..16) for R rows: 12 accumulators in registers, two
// loads of kt and R broadcasts of q per step of e. Row strides: q q_stride, kt and s kBlockK.
template <int R>
KILN_TARGET_AVX2 void scores_tile(const float* q, int64_t q_stride, const float* kt,
                                  int64_t e_count, float* s) {
  __m256 acc[R][2];
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  for (int64_t e = 0; e < e_count; ++e) {
    const __m256 b0 = _mm256_loadu_ps(kt + e * kBlockK);
    const __m256 b1 = _mm256_loadu_ps(kt + e * kBlockK + 8);
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      const __m256 a = _mm256_broadcast_ss(q + r * q_stride + e);
      acc[r][0] = _mm256_fmadd_ps(a, b0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(a, b1, acc[r][1]);
    }
  }
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) {
    _mm256_storeu_ps(s + r * kBlockK, acc[r][0]);
    _mm256_storeu_ps(s + r * kBlockK + 8, acc[r][1]);
  }
}

// [sum a, sum b, sum c, sum d] of four vectors.
KILN_TARGET_AVX2 inline __m128 sum_lanes4(__m256 a, __m256 b, __m256 c, __m256 d) {
  const __m256 t = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
  return _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
}

// The scores of one or two query rows (R) against `keys` rows of k as dot products along e,
// four keys at a time: for so few rows, transposing the keys would cost as much as the GEMM.
// Row strides: q q_stride, k k_stride, s kBlockK.
template <int R>
KILN_TARGET_AVX2 void scores_by_dots(const float* q, int64_t q_stride, const float* k,
                                     int64_t k_stride, int64_t keys, int64_t e_count, float* s) {
  const int64_t whole = e_count - e_count % 8;
  const __m256i tail = avx2::tail_mask(e_count - whole);
  auto load = [&](const float* row, int64_t e) KILN_TARGET_AVX2 {
    return e < whole ? _mm256_loadu_ps(row + e) : _mm256_maskload_ps(row + e, tail);
  };
  int64_t j = 0;
  for (; j + 4 <= keys; j += 4) {
    __m256 acc[R][4];
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < 4; ++c) acc[r][c] = _mm256_setzero_ps();
    for (int64_t e = 0; e < e_count; e += 8) {
      __m256 kv[4];
      for (int c = 0; c < 4; ++c) kv[c] = load(k + (j + c) * k_stride, e);
      for (int r = 0; r < R; ++r) {
        const __m256 qv = load(q + r * q_stride, e);
        for (int c = 0; c < 4; ++c) acc[r][c] = _mm256_fmadd_ps(qv, kv[c], acc[r][c]);
      }
    }
    for (int r = 0; r < R; ++r)
      _mm_storeu_ps(s + r * kBlockK + j, sum_lanes4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]));
  }
  for (; j < keys; ++j)
    for (int r = 0; r < R; ++r) {
      __m256 acc = _mm256_setzero_ps();
      for (int64_t e = 0; e < e_count; e += 8)
        acc = _mm256_fmadd_ps(load(q + r * q_stride, e), load(k + j * k_stride, e), acc);
      s[r * kBlockK + j] = sum_lanes(acc);
    }
}

// o[r][0..8 NV) = alpha[r] o[r] + sum_{j < keys} p[r][j] v[j][0..8 NV) for R rows (o starts
// from 0 when `first`). With kTail the last vector of v is read under `tail` (the end of a row
// of v, where a full load could leave the tensor); o's rows are padded to whole vectors. Row
// strides: p kBlockK, v v_stride, o o_stride.
template <int R, int NV, bool kTail>
KILN_TARGET_AVX2 void weighted_values_tile(const float* p, int64_t keys, const float* v,
                                           int64_t v_stride, __m256i tail, const float* alpha,
                                           bool first, float* o, int64_t o_stride) {
  __m256 acc[R][NV];
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) {
    const __m256 a = splat(alpha[r]);
    for (int n = 0; n < NV; ++n)
      acc[r][n] = first ? _mm256_setzero_ps()
                        : _mm256_mul_ps(_mm256_loadu_ps(o + r * o_stride + 8 * n), a);
  }
  for (int64_t j = 0; j < keys; ++j) {
    __m256 b[NV];
    for (int n = 0; n < NV; ++n)
      b[n] = kTail && n == NV - 1 ? _mm256_maskload_ps(v + j * v_stride + 8 * n, tail)
                                  : _mm256_loadu_ps(v + j * v_stride + 8 * n);
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      const __m256 a = _mm256_broadcast_ss(p + r * kBlockK + j);
      for (int n = 0; n < NV; ++n) acc[r][n] = _mm256_fmadd_ps(a, b[n], acc[r][n]);
    }
  }
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r)
    for (int n = 0; n < NV; ++n) _mm256_storeu_ps(o + r * o_stride + 8 * n, acc[r][n]);
}

// Calls fn(std::integral_constant<int, N>) for N = count clamped to [1, kMax]: a runtime count
// (a tile's rows, its vectors) as the template argument its loops are unrolled for.
template <int kMax, typename Fn>
inline void with_constant(int64_t count, const Fn& fn) {
  [&]<int... N>(std::integer_sequence<int, N...>) {
    const int n = static_cast<int>(std::clamp<int64_t>(count, 1, kMax));
    ((n == N + 1 ? (fn(std::integral_constant<int, N + 1>{}), 0) : 0), ...);
  }(std::make_integer_sequence<int, kMax>{});
}

template <typename Fn>
void with_tile_rows(int64_t rows, const Fn& fn) {
  with_constant<kTileRows>(rows, fn);
}

// ---------------------------------------------------------------- AVX-512 tiles
// The same tiles 16 lanes a vector, for the key block's 64 columns or ev's 64 at once: each
// output lane sums in the same order as in the AVX2 tiles above, so both give the same bits.

// acc[r][0..16 NV) += sum_{i < steps} a[r a_stride + i] b[i b_stride + 0..16 NV) for R rows: the
// register tile of both GEMMs, NV loads of b and R broadcasts of a per step; the last vector of
// b is read on the lanes of `last` only.
template <int R, int NV>
KILN_TARGET_AVX512 inline __attribute__((always_inline)) void accumulate_tile_avx512(
    __m512 (&acc)[R][NV], const float* a, int64_t a_stride, const float* b, int64_t b_stride,
    int64_t steps, __mmask16 last) {
  for (int64_t i = 0; i < steps; ++i) {
    __m512 bv[NV];
#pragma GCC unroll 4
    for (int n = 0; n < NV; ++n) {
      const __mmask16 lanes = n == NV - 1 ? last : __mmask16(0xFFFF);
      bv[n] = _mm512_maskz_loadu_ps(lanes, b + i * b_stride + 16 * n);
    }
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      const __m512 av = _mm512_set1_ps(a[r * a_stride + i]);
#pragma GCC unroll 4
      for (int n = 0; n < NV; ++n) acc[r][n] = _mm512_fmadd_ps(av, bv[n], acc[r][n]);
    }
  }
}

// s[r][0..16 NV) = sum_e q[r][e] kt[e][0..16 NV) for R rows. Row strides as in scores_tile.
template <int R, int NV>
KILN_TARGET_AVX512 void scores_tile_avx512(const float* q, int64_t q_stride, const float* kt,
                                           int64_t e_count, float* s) {
  __m512 acc[R][NV];
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int n = 0; n < NV; ++n) acc[r][n] = _mm512_setzero_ps();
  accumulate_tile_avx512(acc, q, q_stride, kt, kBlockK, e_count, 0xFFFF);
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int n = 0; n < NV; ++n) _mm512_storeu_ps(s + r * kBlockK + 16 * n, acc[r][n]);
}

// The scores of `rows` query rows against the block's `keys` packed keys (kt, zero beyond the
// keys up to a multiple of 16). Row strides: q q_stride, kt and s kBlockK.
KILN_TARGET_AVX512 void scores_avx512(const float* q, int64_t q_stride, int64_t rows,
                                      const float* kt, int64_t keys, int64_t e_count, float* s) {
  for (int64_t r = 0; r < rows; r += kTileRows)
    with_tile_rows(rows - r, [&](auto rows_constant) KILN_TARGET_AVX512 {
      for (int64_t c = 0; c < keys; c += 4 * 16) {
        const int64_t vectors = (std::min<int64_t>(4 * 16, keys - c) + 15) / 16;
        with_constant<4>(vectors, [&](auto vectors_constant) KILN_TARGET_AVX512 {
          scores_tile_avx512<decltype(rows_constant)::value, decltype(vectors_constant)::value>(
              q + r * q_stride, q_stride, kt + c, e_count, s + r * kBlockK + c);
        });
      }
    });
}

// o[r][0..16 NV) = alpha[r] o[r] + sum_{j < keys} p[r][j] v[j][0..16 NV) for R rows (o starts
// from 0 when `first`); the last vector of each row only on the lanes of `last`, so neither v
// nor o is touched past its row's end. Row strides as in weighted_values_tile.
template <int R, int NV>
KILN_TARGET_AVX512 void weighted_values_tile_avx512(const float* p, int64_t keys, const float* v,
                                                    int64_t v_stride, __mmask16 last,
                                                    const float* alpha, bool first, float* o,
                                                    int64_t o_stride) {
  auto lanes = [last](int n) { return n == NV - 1 ? last : __mmask16(0xFFFF); };
  __m512 acc[R][NV];
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) {
    const __m512 a = _mm512_set1_ps(alpha[r]);
#pragma GCC unroll 4
    for (int n = 0; n < NV; ++n)
      acc[r][n] = first ? _mm512_setzero_ps()
                        : _mm512_mul_ps(_mm512_maskz_loadu_ps(lanes(n), o + r * o_stride + 16 * n),
                                        a);
  }
  accumulate_tile_avx512(acc, p, kBlockK, v, v_stride, keys, last);
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int n = 0; n < NV; ++n)
      _mm512_mask_storeu_ps(o + r * o_stride + 16 * n, lanes(n), acc[r][n]);
}

// One thread's working memory, carved from its slot of the kernel's scratch.
struct Workspace {
  float* kt;         // [e][kBlockK]: the key block, transposed
  float* p;          // [kBlockQ][kBlockK]: scores, then their exponentials
  float* o;          // [kBlockQ][o_stride]: the unnormalized output rows
  float* row_max;    // [kBlockQ]
  float* row_sum;    // [kBlockQ]
  float* alpha;      // [kBlockQ]: this step's rescale of o
  // (kBlockQ, the most rows a task takes: causal tasks take fewer)
  int64_t o_stride;  // ev rounded up to whole vectors
  // bf16 operands only (null otherwise): the task's query rows, the key and value blocks
  // widened to f32 (rows E, E and ev apart), and the output rows before rounding (ev apart).
  float* q32 = nullptr;
  float* k32 = nullptr;
  float* v32 = nullptr;
  float* y32 = nullptr;

  // Floats per thread for a geometry, and the layout within them (each part 64-byte aligned
  // relative to the slot).
  static int64_t floats(const AttentionGeometry& g, bool bf16) {
    const int64_t f32 = round_up(g.e * kBlockK, 16) + kBlockQ * kBlockK +
                        kBlockQ * round_up(g.ev, 8) + 3 * round_up(kBlockQ, 16);
    if (!bf16) return f32;
    return f32 + round_up(kBlockQ * g.e, 16) + round_up(kBlockK * g.e, 16) +
           round_up(kBlockK * g.ev, 16) + round_up(kBlockQ * g.ev, 16);
  }
  Workspace(const AttentionGeometry& g, bool bf16, float* slot) : o_stride(round_up(g.ev, 8)) {
    kt = slot;
    p = kt + round_up(g.e * kBlockK, 16);
    o = p + kBlockQ * kBlockK;
    row_max = o + kBlockQ * o_stride;
    row_sum = row_max + round_up(kBlockQ, 16);
    alpha = row_sum + round_up(kBlockQ, 16);
    if (!bf16) return;
    q32 = alpha + round_up(kBlockQ, 16);
    k32 = q32 + round_up(kBlockQ * g.e, 16);
    v32 = k32 + round_up(kBlockK * g.e, 16);
    y32 = v32 + round_up(kBlockK * g.ev, 16);
  }
};

// `rows` rows of n bf16 values `stride` apart, widened into dense f32 rows of n.
KILN_TARGET_AVX2 void widen_rows(const BFloat16* x, int64_t stride, int64_t rows, int64_t n,
                                 float* out) {
  for (int64_t r = 0; r < rows; ++r) avx2::widen_bf16_row(x + r * stride, out + r * n, n);
}

// f32 or bf16, as the kernel's dtype says.
struct Operands {
  const void* q;
  const void* k;
  const void* v;
  const void* mask;
  void* out;
};

// Reads the mask for 8 keys of one query row: which to keep (bool) or what to add (additive).
// `row` points at the row's element for the block's first key; col_stride is 1 or 0.
// Every lane of a 16-lane vector. Where an intrinsic has a zero-masked form, the AVX-512 code
// takes that one: GCC 12 warns of the unmasked forms' undefined passthrough operand as maybe
// uninitialized.
constexpr __mmask16 kAllLanes = 0xFFFF;

template <AttentionMask kMask>
class MaskRow {
 public:
  MaskRow(const void* row, int64_t col_stride) : row_(row), contiguous_(col_stride != 0) {}

  // The scores of keys [j, j + 8), of which `valid` (1..8) are in the block, scaled and masked
  // (-inf where the mask is false; an additive mask added in the same rounding as the scale).
  KILN_TARGET_AVX2 __m256 apply(__m256 score, __m256 scale, int64_t j, int64_t valid) const {
    if constexpr (kMask == AttentionMask::Additive) {
      const auto* m = static_cast<const float*>(row_);
      __m256 add = !contiguous_ ? splat(m[0])
                   : valid == 8 ? _mm256_loadu_ps(m + j)
                                : _mm256_maskload_ps(m + j, avx2::tail_mask(valid));
      return _mm256_fmadd_ps(score, scale, add);
    }
    const __m256 x = _mm256_mul_ps(score, scale);
    if constexpr (kMask == AttentionMask::Bool) {
      const auto* m = static_cast<const uint8_t*>(row_);
      uint64_t bytes = 0;
      if (!contiguous_) bytes = m[0] ? ~uint64_t{0} : 0;
      else std::memcpy(&bytes, m + j, static_cast<size_t>(valid));  // stays inside the mask
      const __m256i keep = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<int64_t>(bytes)));
      const __m256 drop = _mm256_castsi256_ps(_mm256_cmpeq_epi32(keep, _mm256_setzero_si256()));
      return _mm256_blendv_ps(x, splat(-INFINITY), drop);
    }
    return x;
  }

  // The same for keys [j, j + 16) (`valid` 1..16), 16 lanes at a time.
  KILN_TARGET_AVX512 __m512 apply(__m512 score, __m512 scale, int64_t j, int64_t valid) const {
    if constexpr (kMask == AttentionMask::Additive) {
      const auto* m = static_cast<const float*>(row_);
      const __m512 add =
          !contiguous_ ? _mm512_set1_ps(m[0])
                       : _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << valid) - 1), m + j);
      return _mm512_fmadd_ps(score, scale, add);
    }
    const __m512 x = _mm512_mul_ps(score, scale);
    if constexpr (kMask == AttentionMask::Bool) {
      const auto* m = static_cast<const uint8_t*>(row_);
      alignas(16) uint8_t bytes[16] = {};
      if (!contiguous_) std::memset(bytes, m[0], sizeof(bytes));
      else std::memcpy(bytes, m + j, static_cast<size_t>(valid));  // stays inside the mask
      const __m512i keep =
          _mm512_maskz_cvtepu8_epi32(kAllLanes, _mm_load_si128(reinterpret_cast<__m128i*>(bytes)));
      return _mm512_mask_blend_ps(_mm512_test_epi32_mask(keep, keep), _mm512_set1_ps(-INFINITY),
                                  x);
    }
    return x;
  }

 private:
  const void* row_;
  bool contiguous_;
};

// exp(x) for x <= 0, and NaN for NaN: avx2::exp's reduction and polynomial, but results below
// 2^-124 (x < -86) flushed to 0, which leaves the scaling by 2^n to one exponent add. A softmax
// weight that small next to the row max's weight of 1 changes no f32 sum.
KILN_TARGET_AVX2 inline __m256 exp_nonpositive(__m256 x) {
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, splat(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, splat(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, splat(-2.12194440e-4f), r);
  static constexpr float P[] = {5.0000001201e-1f, 1.6666665459e-1f, 4.1665795894e-2f,
                                8.3334519073e-3f, 1.3981999507e-3f, 1.9875691500e-4f};
  __m256 m = _mm256_fmadd_ps(avx2::polynomial(r, P), _mm256_mul_ps(r, r), r);
  m = _mm256_add_ps(m, splat(1.0f));
  const __m256i scaled = _mm256_add_epi32(_mm256_castps_si256(m),
                                          _mm256_slli_epi32(_mm256_cvtps_epi32(n), 23));
  return _mm256_andnot_ps(_mm256_cmp_ps(x, splat(-86.0f), _CMP_LT_OQ),
                          _mm256_castsi256_ps(scaled));
}

// exp_nonpositive for 16 lanes: the same arithmetic in each lane.
KILN_TARGET_AVX512 inline __m512 exp_nonpositive16(__m512 x) {
  const __m512 n = _mm512_maskz_roundscale_ps(
      kAllLanes, _mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  static constexpr float P[] = {5.0000001201e-1f, 1.6666665459e-1f, 4.1665795894e-2f,
                                8.3334519073e-3f, 1.3981999507e-3f, 1.9875691500e-4f};
  __m512 p = _mm512_set1_ps(P[5]);
  for (int i = 4; i >= 0; --i) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(P[i]));
  __m512 m = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r);
  m = _mm512_add_ps(m, _mm512_set1_ps(1.0f));
  const __m512i scaled = _mm512_add_epi32(
      _mm512_castps_si512(m),
      _mm512_maskz_slli_epi32(kAllLanes, _mm512_maskz_cvtps_epi32(kAllLanes, n), 23));
  const __mmask16 underflow = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-86.0f), _CMP_LT_OQ);
  return _mm512_maskz_mov_ps(static_cast<__mmask16>(~underflow), _mm512_castsi512_ps(scaled));
}

class FlashAttention final : public KernelInstance {
 public:
  FlashAttention(AttentionGeometry g, int threads, bool avx512, bool bf16)
      : g_(std::move(g)),
        threads_(std::max(threads, 1)),
        slot_floats_(Workspace::floats(g_, bf16)),
        avx512_(avx512),
        bf16_(bf16) {}

  size_t scratch_bytes() const override {
    return static_cast<size_t>(threads_) * static_cast<size_t>(slot_floats_) * sizeof(float);
  }

  void run(std::span<const void* const> inputs, std::span<void* const> outputs,
           void* scratch) const override {
    const Operands ops{inputs[0], inputs[1], inputs[2],
                       g_.mask == AttentionMask::None ? nullptr : inputs[3], outputs[0]};
    if (g_.l == 0 || g_.ev == 0 || g_.batch_count() == 0) return;
    const int64_t block_rows = g_.causal ? kCausalBlockQ : kBlockQ;
    const int64_t row_blocks = (g_.l + block_rows - 1) / block_rows;
    const int64_t tasks = g_.batch_count() * row_blocks;
    const int64_t work = g_.batch_count() * g_.l * std::max<int64_t>(g_.s, 1) * (g_.e + g_.ev);
    const int team =
        work < kParallelMinWork ? 1 : static_cast<int>(std::min<int64_t>(threads_, tasks));
    auto* slots = static_cast<float*>(scratch);
    // Dynamic: causal tasks near the top of the matrix are cheaper than those near the bottom.
#pragma omp parallel for num_threads(team) if (team > 1) schedule(dynamic, 1)
    for (int64_t t = 0; t < tasks; ++t) {
      Workspace ws(g_, bf16_, slots + omp_get_thread_num() * slot_floats_);
      run_task(ops, t / row_blocks, (t % row_blocks) * block_rows, block_rows, ws);
    }
  }

 private:
  // Rows of an operand from `offset` on, `stride` apart, as f32: in place, or (bf16) widened
  // into `buffer`, where they are `n` apart.
  struct Rows {
    const float* data;
    int64_t stride;
  };
  KILN_TARGET_AVX2 Rows f32_rows(const void* operand, int64_t offset, int64_t stride,
                                 int64_t rows, int64_t n, float* buffer) const {
    if (!bf16_) return {static_cast<const float*>(operand) + offset, stride};
    widen_rows(static_cast<const BFloat16*>(operand) + offset, stride, rows, n, buffer);
    return {buffer, n};
  }

  // Query rows [i0, i0 + block_rows) of batch matrix b.
  KILN_TARGET_AVX2 void run_task(const Operands& ops, int64_t b, int64_t i0, int64_t block_rows,
                                 Workspace& ws) const {
    const int64_t rows = std::min(block_rows, g_.l - i0);
    const Rows q_rows = f32_rows(ops.q, g_.q_offsets[b] + i0 * g_.q_row_stride, g_.q_row_stride,
                                 rows, g_.e, ws.q32);
    const float* q = q_rows.data;
    const int64_t qs = q_rows.stride;
    // Causal: keys past the last row are masked for every row of the block.
    const int64_t key_end = g_.causal ? std::min(g_.s, i0 + rows) : g_.s;
    std::fill_n(ws.row_max, rows, -INFINITY);
    std::fill_n(ws.row_sum, rows, 0.0f);
    for (int64_t j0 = 0; j0 < key_end; j0 += kBlockK) {
      const int64_t keys = std::min(kBlockK, key_end - j0);
      const Rows k_rows = f32_rows(ops.k, g_.k_offsets[b] + j0 * g_.k_row_stride,
                                   g_.k_row_stride, keys, g_.e, ws.k32);
      const float* k = k_rows.data;
      const int64_t ks = k_rows.stride;
      if (rows < kTileRows) {
        int64_t r = 0;
        for (; r + 2 <= rows; r += 2)
          scores_by_dots<2>(q + r * qs, qs, k, ks, keys, g_.e, ws.p + r * kBlockK);
        if (r < rows) scores_by_dots<1>(q + r * qs, qs, k, ks, keys, g_.e, ws.p + r * kBlockK);
      } else {
        pack_keys_transposed(k, ks, keys, g_.e, ws.kt);
        if (avx512_) {
          scores_avx512(q, qs, rows, ws.kt, keys, g_.e, ws.p);
        } else {
          for (int64_t r = 0; r < rows; r += kTileRows)
            with_tile_rows(rows - r, [&](auto rows_constant) KILN_TARGET_AVX2 {
              constexpr int R = decltype(rows_constant)::value;
              for (int64_t c = 0; c < keys; c += 16)
                scores_tile<R>(q + r * qs, qs, ws.kt + c, g_.e, ws.p + r * kBlockK + c);
            });
        }
      }
      switch (g_.mask) {
        case AttentionMask::None:
          avx512_ ? online_softmax_avx512<AttentionMask::None>(ops, b, i0, rows, j0, keys, ws)
                  : online_softmax<AttentionMask::None>(ops, b, i0, rows, j0, keys, ws);
          break;
        case AttentionMask::Bool:
          avx512_ ? online_softmax_avx512<AttentionMask::Bool>(ops, b, i0, rows, j0, keys, ws)
                  : online_softmax<AttentionMask::Bool>(ops, b, i0, rows, j0, keys, ws);
          break;
        case AttentionMask::Additive:
          avx512_ ? online_softmax_avx512<AttentionMask::Additive>(ops, b, i0, rows, j0, keys, ws)
                  : online_softmax<AttentionMask::Additive>(ops, b, i0, rows, j0, keys, ws);
          break;
      }
      const Rows v = f32_rows(ops.v, g_.v_offsets[b] + j0 * g_.v_row_stride, g_.v_row_stride,
                              keys, g_.ev, ws.v32);
      if (avx512_) accumulate_values_avx512(v, rows, keys, j0 == 0, ws);
      else accumulate_values(v, rows, keys, j0 == 0, ws);
    }
    const int64_t out_offset = g_.out_offsets[b] + i0 * g_.out_row_stride;
    if (!bf16_) {
      normalize(rows, key_end > 0, ws, static_cast<float*>(ops.out) + out_offset,
                g_.out_row_stride);
      return;
    }
    normalize(rows, key_end > 0, ws, ws.y32, g_.ev);
    auto* out = static_cast<BFloat16*>(ops.out) + out_offset;
    for (int64_t r = 0; r < rows; ++r)
      avx2::narrow_to_bf16_row(ws.y32 + r * g_.ev, out + r * g_.out_row_stride, g_.ev);
  }

  // Turns the scores of keys [j0, j0 + keys) into exp(x - m) in place, x the scaled and masked
  // score and m each row's running max, and updates the rows' max, sum and rescale factor.
  template <AttentionMask kMask>
  KILN_TARGET_AVX2 void online_softmax(const Operands& ops, int64_t b, int64_t i0, int64_t rows,
                                       int64_t j0, int64_t keys, Workspace& ws) const {
    const __m256 scale = splat(static_cast<float>(g_.scale));
    const __m256 neg_inf = splat(-INFINITY);
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const char* mask_plane =
        kMask == AttentionMask::None
            ? nullptr
            : static_cast<const char*>(ops.mask) +
                  (g_.mask_offsets[b] + j0 * g_.mask_col_stride) *
                      static_cast<int64_t>(kMask == AttentionMask::Bool ? 1 : sizeof(float));
    const int64_t mask_row_bytes =
        g_.mask_row_stride * static_cast<int64_t>(kMask == AttentionMask::Bool ? 1 : sizeof(float));
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t i = i0 + r;
      // Keys [j0, j0 + attended) pass the causal rule; the rest of the block is masked.
      const int64_t attended = g_.causal ? std::clamp<int64_t>(i - j0 + 1, 0, keys) : keys;
      const MaskRow<kMask> mask(mask_plane + i * mask_row_bytes, g_.mask_col_stride);
      float* x = ws.p + r * kBlockK;
      __m256 block_max = neg_inf;
      for (int64_t j = 0; j < keys; j += 8) {
        __m256 v = mask.apply(_mm256_loadu_ps(x + j), scale, j, std::min<int64_t>(8, keys - j));
        if (j + 8 > attended) {
          const __m256i limit = _mm256_set1_epi32(static_cast<int32_t>(attended - j));
          v = _mm256_blendv_ps(neg_inf, v, _mm256_castsi256_ps(_mm256_cmpgt_epi32(limit, lane)));
        }
        _mm256_storeu_ps(x + j, v);
        block_max = _mm256_max_ps(block_max, v);
      }
      // A NaN score is lost from the max but not from the sum: exp(NaN - m) is NaN.
      const float m_old = ws.row_max[r];
      const float m_new = std::max(m_old, max_lanes(block_max));
      // Rows with nothing attended yet keep m = -inf; subtracting 0 instead keeps exp(-inf) = 0.
      const float m_safe = m_new == -INFINITY ? 0.0f : m_new;
      const __m256 m = splat(m_safe);
      __m256 sum = _mm256_setzero_ps();
      for (int64_t j = 0; j < keys; j += 8) {
        const __m256 e = exp_nonpositive(_mm256_sub_ps(_mm256_loadu_ps(x + j), m));
        _mm256_storeu_ps(x + j, e);
        sum = _mm256_add_ps(sum, e);
      }
      const float alpha = std::exp(m_old - m_safe);
      ws.row_sum[r] = ws.row_sum[r] * alpha + sum_lanes(sum);
      ws.row_max[r] = m_new;
      ws.alpha[r] = alpha;
    }
  }

  // online_softmax 16 lanes at a time. The row sums add the two 8-lane halves one after the
  // other, in online_softmax's order (its sum over one block of 8 keys more is a sum of zeros):
  // the same bits.
  template <AttentionMask kMask>
  KILN_TARGET_AVX512 void online_softmax_avx512(const Operands& ops, int64_t b, int64_t i0,
                                                int64_t rows, int64_t j0, int64_t keys,
                                                Workspace& ws) const {
    const __m512 scale = _mm512_set1_ps(static_cast<float>(g_.scale));
    const __m512 neg_inf = _mm512_set1_ps(-INFINITY);
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const int64_t element = kMask == AttentionMask::Bool ? 1 : sizeof(float);
    const char* mask_plane =
        kMask == AttentionMask::None
            ? nullptr
            : static_cast<const char*>(ops.mask) +
                  (g_.mask_offsets[b] + j0 * g_.mask_col_stride) * element;
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t i = i0 + r;
      const int64_t attended = g_.causal ? std::clamp<int64_t>(i - j0 + 1, 0, keys) : keys;
      const MaskRow<kMask> mask(mask_plane + i * g_.mask_row_stride * element,
                                  g_.mask_col_stride);
      float* x = ws.p + r * kBlockK;
      __m512 block_max = neg_inf;
      for (int64_t j = 0; j < keys; j += 16) {
        __m512 v = mask.apply(_mm512_loadu_ps(x + j), scale, j, std::min<int64_t>(16, keys - j));
        if (j + 16 > attended) {
          const __m512i limit = _mm512_set1_epi32(static_cast<int32_t>(attended - j));
          v = _mm512_mask_blend_ps(_mm512_cmpgt_epi32_mask(limit, lane), neg_inf, v);
        }
        _mm512_storeu_ps(x + j, v);
        block_max = _mm512_maskz_max_ps(kAllLanes, block_max, v);
      }
      const float m_old = ws.row_max[r];
      const float m_new = std::max(m_old, avx512::max_lanes(block_max));
      const float m_safe = m_new == -INFINITY ? 0.0f : m_new;
      const __m512 m = _mm512_set1_ps(m_safe);
      __m256 sum = _mm256_setzero_ps();
      for (int64_t j = 0; j < keys; j += 16) {
        const __m512 e = exp_nonpositive16(_mm512_sub_ps(_mm512_loadu_ps(x + j), m));
        _mm512_storeu_ps(x + j, e);
        sum = _mm256_add_ps(sum, avx512::low_half(e));
        sum = _mm256_add_ps(sum, avx512::high_half(e));
      }
      const float alpha = std::exp(m_old - m_safe);
      ws.row_sum[r] = ws.row_sum[r] * alpha + sum_lanes(sum);
      ws.row_max[r] = m_new;
      ws.alpha[r] = alpha;
    }
  }

  // o = alpha o + p v for the block's keys, in tiles of 16 columns of v and a narrower last one.
  KILN_TARGET_AVX2 void accumulate_values(Rows v, int64_t rows, int64_t keys, bool first,
                                          Workspace& ws) const {
    const int64_t ev = g_.ev;
    const int64_t whole = ev - ev % 16, rest = ev - whole;
    const __m256i tail = avx2::tail_mask(rest > 8 ? rest - 8 : rest);
    for (int64_t r = 0; r < rows; r += kTileRows)
      with_tile_rows(rows - r, [&](auto rows_constant) KILN_TARGET_AVX2 {
        constexpr int R = decltype(rows_constant)::value;
        const float* p = ws.p + r * kBlockK;
        const float* alpha = ws.alpha + r;
        float* o = ws.o + r * ws.o_stride;
        auto tile = [&](auto fn, int64_t c) KILN_TARGET_AVX2 {
          fn(p, keys, v.data + c, v.stride, tail, alpha, first, o + c, ws.o_stride);
        };
        for (int64_t c = 0; c < whole; c += 16) tile(weighted_values_tile<R, 2, false>, c);
        if (rest > 8) tile(weighted_values_tile<R, 2, true>, whole);
        else if (rest == 8) tile(weighted_values_tile<R, 1, false>, whole);
        else if (rest > 0) tile(weighted_values_tile<R, 1, true>, whole);
      });
  }

  // accumulate_values in 64 columns of v at a time.
  KILN_TARGET_AVX512 void accumulate_values_avx512(Rows v, int64_t rows, int64_t keys,
                                                   bool first, Workspace& ws) const {
    for (int64_t r = 0; r < rows; r += kTileRows)
      with_tile_rows(rows - r, [&](auto rows_constant) KILN_TARGET_AVX512 {
        for (int64_t c = 0; c < g_.ev; c += 4 * 16) {
          const int64_t width = std::min<int64_t>(4 * 16, g_.ev - c);
          const int64_t vectors = (width + 15) / 16;
          const auto last = static_cast<__mmask16>((1u << (width - 16 * (vectors - 1))) - 1);
          with_constant<4>(vectors, [&](auto vectors_constant) KILN_TARGET_AVX512 {
            weighted_values_tile_avx512<decltype(rows_constant)::value,
                                        decltype(vectors_constant)::value>(
                ws.p + r * kBlockK, keys, v.data + c, v.stride, last, ws.alpha + r, first,
                ws.o + r * ws.o_stride + c, ws.o_stride);
          });
        }
      });
  }

  // out = o / l; rows that attended no key (l = 0, or no keys at all) are 0, as in PyTorch.
  // Row strides: out out_stride.
  KILN_TARGET_AVX2 void normalize(int64_t rows, bool any_keys, const Workspace& ws, float* out,
                                  int64_t out_stride) const {
    const int64_t ev = g_.ev;
    const int64_t full = ev - ev % 8;
    const __m256i tail = avx2::tail_mask(ev - full);
    for (int64_t r = 0; r < rows; ++r) {
      const float l = any_keys ? ws.row_sum[r] : 0.0f;
      float* y = out + r * out_stride;
      if (l == 0) {
        std::fill_n(y, ev, 0.0f);
        continue;
      }
      const float* o = ws.o + r * ws.o_stride;
      const __m256 sum = splat(l);
      for (int64_t c = 0; c < full; c += 8)
        _mm256_storeu_ps(y + c, _mm256_div_ps(_mm256_loadu_ps(o + c), sum));
      if (full < ev)
        _mm256_maskstore_ps(y + full, tail, _mm256_div_ps(_mm256_loadu_ps(o + full), sum));
    }
  }

  AttentionGeometry g_;
  int threads_;
  int64_t slot_floats_;
  bool avx512_;  // the GEMM tiles in AVX-512 (the rest stays AVX2)
  bool bf16_;    // q, k, v and out bf16 (widened in the workspace), else f32
};

}  // namespace

std::unique_ptr<KernelInstance> create_flash_attention(const KernelSpec& spec) {
  return std::make_unique<FlashAttention>(make_attention_geometry(spec), spec.threads, false,
                                          spec.inputs[0].dtype == DType::BF16);
}

std::unique_ptr<KernelInstance> create_flash_attention_avx512(const KernelSpec& spec) {
  return std::make_unique<FlashAttention>(make_attention_geometry(spec), spec.threads, true,
                                          spec.inputs[0].dtype == DType::BF16);
}
#endif  // KILN_X86

}  // namespace kiln::cpu
