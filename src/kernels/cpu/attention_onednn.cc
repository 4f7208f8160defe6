// Scaled dot-product attention through oneDNN's matmul, for a chunk of heads at a time: S = q k^T
// into scratch, a row softmax in f32 (scale, mask), then P v divided by the weights' sum.
//  * bf16: oneDNN's AMX (or AVX512-BF16) dot products run at several times the
//    f32 FMA rate, where the flash kernel widens bf16 to f32. The weights exp(s - max) are
//    rounded to bf16 P before the second product, as PyTorch's CPU kernel does, and P v is
//    divided by the sum of the rounded weights, which keeps each output a weighted mean of v's
//    rows: the error P adds is at most 2^-8 max |v - y| (docs/ops.md); the result rounds once.
//  * f32: P stays f32, written over S. Each product is one large oneDNN GEMM where the flash
//    kernel multiplies small tiles: faster from L = S = 512 on, without a causal mask (below).
// Grouped-query attention multiplies each group's query heads by its one k (and v) matrix,
// broadcast in a 4-D batch [groups, heads of a group, rows, cols].
// A chunk's scores for a block of query rows are held whole, within kMaxChunkBytes: blocks of all
// L rows where one head's L x S scores fit, else equal blocks that do. Causal attention goes in
// blocks of at most 128 query rows, each multiplying only the keys up to its last row.
#include "kernels/cpu/attention.h"

#ifdef KILN_X86
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "kernels/cpu/attention_rows_avx512.h"
#include "kernels/cpu/float16.h"
#include "kernels/cpu/library_threads.h"
#include "kernels/cpu/onednn_util.h"
#include "kernels/cpu/parallel_chunks.h"
#include "kernels/cpu/vec_math_avx512.h"

namespace kiln::cpu {

namespace {

using dnnl::memory;

// The scores and P of one chunk of heads. Larger chunks make fewer, larger oneDNN calls: 2, 8
// and 32 MiB ran [8, 12, 197, 64] alike (the softmax's passes over the scores cost the same
// either way), and [1, 12, 1024, 64] in 17, 12 and 8.5 ms (docs/benchmarks.md, 2026-12-04).
constexpr int64_t kMaxChunkBytes = int64_t{16} << 20;

// f32 takes this kernel from this many query rows and keys on (non-causal): against the flash
// kernel, 2 threads, [1, 12, 1024, 64] 13.9 against 14.6 ms, [1, 32, 512, 128] 17.2 against
// 19.2, [1, 16, 1024, 128] 33.2 against 36.9, [4, 12, 512, 64] level, and [8, 12, 197, 64]
// 5.05 against 4.79 (docs/benchmarks.md).
constexpr int64_t kF32MinRows = 512;

// Per element type: oneDNN's, and the scratch bytes per score (S, and bf16's separate P).
template <typename T>
struct Element;
template <>
struct Element<BFloat16> {
  static constexpr memory::data_type type = memory::data_type::bf16;
  static constexpr int64_t score_bytes = sizeof(float) + sizeof(BFloat16);
};
template <>
struct Element<float> {
  static constexpr memory::data_type type = memory::data_type::f32;
  static constexpr int64_t score_bytes = sizeof(float);
};

// The heads (the output's last batch dim; 1 without batch dims) and, per operand, the element
// stride from one head's matrix to the next within each outer index. q and the output step
// evenly through the heads; k and v through groups of `group` consecutive heads that share one
// matrix (grouped-query attention; 1 without it, all the heads where k and v are broadcast).
struct Heads {
  int64_t count = 1, outer = 1, group = 1;
  int64_t q = 0, out = 0;  // per head; 0 where the operand is broadcast
  int64_t k = 0, v = 0;    // per group of heads
  bool even() const { return q >= 0 && out >= 0 && k >= 0 && v >= 0; }
};

// The stride of `offsets` through groups of `group` heads (offset h is the first one's plus
// h / group strides), or -1 where they don't step so.
int64_t group_stride(const std::vector<int64_t>& offsets, int64_t heads, int64_t group) {
  const int64_t stride = heads > group ? offsets[static_cast<size_t>(group)] - offsets[0] : 0;
  for (size_t o = 0; o < offsets.size(); o += static_cast<size_t>(heads))
    for (int64_t h = 0; h < heads; ++h)
      if (offsets[o + static_cast<size_t>(h)] != offsets[o] + h / group * stride) return -1;
  return stride;
}

Heads heads_of(const KernelSpec& spec, const AttentionGeometry& g) {
  Heads h;
  const std::vector<int64_t> out = spec.output_sizes(0);
  if (out.size() >= 3)
    h.count = spec.node.attr_bool(kHeadsSecondLastAttrs[3]) ? out[out.size() - 2]
                                                             : out[out.size() - 3];
  h.outer = h.count > 0 ? g.batch_count() / h.count : 0;
  h.q = group_stride(g.q_offsets, h.count, 1);
  h.out = group_stride(g.out_offsets, h.count, 1);
  // The smallest group that k and v both step through: 1 unless they are shared by heads.
  for (h.group = 1; h.group <= h.count; ++h.group) {
    if (h.count % h.group) continue;
    h.k = group_stride(g.k_offsets, h.count, h.group);
    h.v = group_stride(g.v_offsets, h.count, h.group);
    if (h.k >= 0 && h.v >= 0) break;
  }
  return h;
}

// Causal attention in blocks of query rows: block [r0, r0 + rows) needs only the keys up to its
// last row, so the products skip most of the masked triangle. 64, 128 and 256 rows took
// [1, 12, 1024, 64] in 7.0, 6.6 and 8.8 ms (docs/benchmarks.md, 2026-12-04 19:45).
constexpr int64_t kCausalBlockRows = 128;

// Query rows per block: all L (causal: kCausalBlockRows), or where one head's scores for them
// exceed kMaxChunkBytes, the size of the fewest equal blocks that fit; 0 where one row's
// scores alone exceed it.
int64_t block_rows(const AttentionGeometry& g, int64_t score_bytes) {
  const int64_t most = g.causal ? std::min(g.l, kCausalBlockRows) : g.l;
  const int64_t fit = kMaxChunkBytes / (g.s * score_bytes);
  if (fit >= most || fit == 0) return std::min(most, fit);
  const int64_t blocks = (g.l + fit - 1) / fit;
  return (g.l + blocks - 1) / blocks;
}

// Heads per chunk: the largest divisor of the head count whose scores for `rows` query rows fit
// kMaxChunkBytes and that holds whole groups of heads or lies within one.
int64_t chunk_heads(const AttentionGeometry& g, const Heads& heads, int64_t rows,
                    int64_t score_bytes) {
  const int64_t per_head = rows * g.s * score_bytes;
  for (int64_t c = heads.count; c >= 1; --c)
    if (heads.count % c == 0 && (c % heads.group == 0 || heads.group % c == 0) &&
        c * per_head <= kMaxChunkBytes)
      return c;
  return 0;
}

// A chunk's matrices for oneDNN as [groups, heads of a group, rows, cols]: a broadcast
// dim (stride 0) has size 1, and a dim of size 1 gets a stride oneDNN accepts.
memory::desc batch_desc(int64_t groups, int64_t group_stride, int64_t heads, int64_t head_stride,
                        int64_t rows, int64_t row_stride, int64_t cols, int64_t col_stride,
                        memory::data_type type) {
  if (group_stride == 0) groups = 1;
  if (head_stride == 0) heads = 1;
  if (rows == 1) row_stride = cols * col_stride;
  // A size-1 dim steps over the whole of what is inside it, as a dense layout's would: the
  // matrix, then the group's heads (oneDNN's fast kernels take plain and transposed layouts).
  if (heads == 1) head_stride = std::max(rows * row_stride, cols * col_stride);
  if (groups == 1) group_stride = heads * head_stride;
  return memory::desc({groups, heads, rows, cols}, type,
                      {group_stride, head_stride, row_stride, col_stride});
}

// x rounded to the nearest bf16, ties to even, into p's lanes; returns the rounded values (a
// bf16 is an f32's top half).
KILN_TARGET_AVX512 __m512 store_weights(__m512 x, BFloat16* p, __mmask16 lanes) {
  const __m512i top = avx512::round_to_bf16(x);
  _mm512_mask_cvtepi32_storeu_epi16(p, lanes, top);
  return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(avx512::kAllLanes, top, 16));
}
KILN_TARGET_AVX512 __m512 store_weights(__m512 x, float* p, __mmask16 lanes) {
  _mm512_mask_storeu_ps(p, lanes, x);
  return x;
}

template <typename T>
class OneDnnAttention final : public KernelInstance {
 public:
  OneDnnAttention(const KernelSpec& spec, AttentionGeometry g, Heads heads, int64_t block_rows,
                  int64_t chunk)
      : g_(std::move(g)),
        heads_(heads),
        chunk_(chunk),
        threads_(spec.threads),
        group_(std::min(chunk_, heads_.group)),
        q_(operand(heads_.q, g_.q_row_stride, chunk_, g_.l, g_.e)),
        k_(operand(heads_.k, g_.k_row_stride, heads_.k ? chunk_ / group_ : 1, g_.s, g_.e)),
        v_(operand(heads_.v, g_.v_row_stride, heads_.v ? chunk_ / group_ : 1, g_.s, g_.ev)) {
    LibraryThreads scope(threads_);
    for (int64_t r0 = 0; r0 < g_.l; r0 += block_rows) {
      const int64_t rows = std::min(block_rows, g_.l - r0);
      blocks_.push_back(make_block(r0, rows, g_.causal ? std::min(g_.s, r0 + rows) : g_.s));
    }
  }

  size_t scratch_bytes() const override {
    size_t largest = 0;
    for (const Block& k : blocks_) {
      const size_t pad = std::max(k.scores_pad.get_size(), k.values_pad.get_size());
      const int64_t rows = chunk_ * k.rows;
      largest = std::max(largest, static_cast<size_t>(rows * (k.keys * Element<T>::score_bytes +
                                                              (g_.ev + 1) * 4)) + pad + 64);
    }
    return dense_bytes() + largest;
  }

  void run(std::span<const void* const> in, std::span<void* const> out,
           void* scratch) const override {
    LibraryThreads scope(threads_);
    const Operands x{static_cast<const T*>(in[0]), static_cast<const T*>(in[1]),
                     static_cast<const T*>(in[2]),
                     g_.mask == AttentionMask::None ? nullptr : static_cast<const char*>(in[3]),
                     static_cast<T*>(out[0])};
    auto* dense = static_cast<T*>(scratch);
    void* block_scratch = static_cast<std::byte*>(scratch) + dense_bytes();
    for (int64_t o = 0; o < heads_.outer; ++o)
      for (int64_t h0 = 0; h0 < heads_.count; h0 += chunk_) {
        const size_t b = static_cast<size_t>(o * heads_.count + h0);
        // The chunk's q, k and v, each where it is or in its dense copy.
        T* q_copy = dense;
        T* k_copy = q_copy + (q_.copy ? q_.elements() : 0);
        T* v_copy = k_copy + (k_.copy ? k_.elements() : 0);
        const Chunk c{gather(q_, x.q, g_.q_offsets, b, 1, q_copy),
                      gather(k_, x.k, g_.k_offsets, b, group_, k_copy),
                      gather(v_, x.v, g_.v_offsets, b, group_, v_copy)};
        for (const Block& k : blocks_) run_block(k, b, c, x, block_scratch);
      }
  }

 private:
  // The products of one block of query rows, for a chunk of heads: keys [0, keys).
  struct Block {
    int64_t r0, rows, keys;
    dnnl::matmul scores, values;
    memory::desc q, kt, s, p, v, weighted, scores_pad, values_pad;
  };
  struct Operands {
    const T *q, *k, *v;
    const char* mask;
    T* y;
  };
  // Where a chunk's first q, k and v matrices start.
  struct Chunk {
    const T *q, *k, *v;
  };

  // One of q, k and v for the products: its matrices (the chunk's, or k's and v's per group) of
  // `rows` rows of `width` elements, and their strides. oneDNN's AMX and AVX512-BF16 matmul
  // kernels (brgemm) take batches whose matrices lie one after another; with the heads second
  // last (rows further apart than heads) it runs its slower gemm:jit (BERT's [12, 128, 64]
  // products: 38.7 and 28.0 against 15.9 and 10.9 us, docs/benchmarks.md 2026-12-05), so such
  // an operand is first copied, a row at a time, into dense matrices in scratch.
  struct Operand {
    bool copy = false;
    int64_t matrices = 1, rows = 0, width = 0;
    int64_t source_row_stride = 0;
    int64_t matrix_stride = 0, row_stride = 0;  // as the products read it
    int64_t elements() const { return matrices * rows * width; }
  };
  static Operand operand(int64_t matrix_stride, int64_t row_stride, int64_t matrices,
                         int64_t rows, int64_t width) {
    Operand op{matrix_stride > 0 && matrix_stride < row_stride, matrices, rows, width,
               row_stride, matrix_stride, row_stride};
    if (op.copy) {
      op.matrix_stride = rows * width;
      op.row_stride = width;
    }
    return op;
  }
  size_t dense_bytes() const {
    const int64_t elements = (q_.copy ? q_.elements() : 0) + (k_.copy ? k_.elements() : 0) +
                             (v_.copy ? v_.elements() : 0);
    return static_cast<size_t>(elements * static_cast<int64_t>(sizeof(T)) + 63) / 64 * 64;
  }
  // The chunk's matrices of `op` from batch index b on (a matrix per `step` heads): where they
  // are, or copied into `copy` when op.copy.
  const T* gather(const Operand& op, const T* base, const std::vector<int64_t>& offsets, size_t b,
                  int64_t step, T* copy) const {
    if (!op.copy) return base + offsets[b];
    parallel_chunks(op.matrices * op.rows, op.width, threads_, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const int64_t m = r / op.rows, i = r % op.rows;
        const T* row =
            base + offsets[b + static_cast<size_t>(m * step)] + i * op.source_row_stride;
        std::copy(row, row + op.width, copy + r * op.width);
      }
    });
    return copy;
  }

  Block make_block(int64_t r0, int64_t rows, int64_t keys) const {
    const auto type = Element<T>::type, f32 = memory::data_type::f32;
    Block k{r0, rows, keys, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}};
    // The chunk as groups of heads sharing k and v (or, within one group, its heads).
    const int64_t group = group_, groups = chunk_ / group_;
    k.q = batch_desc(groups, group * q_.matrix_stride, group, q_.matrix_stride, rows,
                     q_.row_stride, g_.e, 1, type);
    // k^T: k's rows are its columns.
    k.kt = batch_desc(groups, k_.matrix_stride, 1, 0, g_.e, 1, keys, k_.row_stride, type);
    k.s = plain_desc({groups, group, rows, keys}, f32);
    k.p = plain_desc({groups, group, rows, keys}, type);
    k.v = batch_desc(groups, v_.matrix_stride, 1, 0, keys, v_.row_stride, g_.ev, 1, type);
    k.weighted = plain_desc({groups, group, rows, g_.ev}, f32);
    const dnnl::primitive_attr attr = user_scratchpad_attr();
    const dnnl::matmul::primitive_desc scores_pd(dnnl::matmul::desc(k.q, k.kt, k.s), attr,
                                                 onednn_engine());
    const dnnl::matmul::primitive_desc values_pd(dnnl::matmul::desc(k.p, k.v, k.weighted), attr,
                                                 onednn_engine());
    k.scores = dnnl::matmul(scores_pd);
    k.values = dnnl::matmul(values_pd);
    k.scores_pad = scores_pd.scratchpad_desc();
    k.values_pad = values_pd.scratchpad_desc();
    return k;
  }

  // Block k of the chunk of heads from batch index b on, whose matrices start at c.
  void run_block(const Block& k, size_t b, const Chunk& c, const Operands& x,
                 void* scratch) const {
    const int64_t rows = chunk_ * k.rows;
    // Scratch: the scores (f32), P v (f32), each row's sum of P, the weights P (bf16; f32 P
    // overwrites the scores).
    auto* scores = static_cast<float*>(scratch);
    auto* weighted = scores + rows * k.keys;
    auto* sums = weighted + rows * g_.ev;
    T* p;
    void* end;
    if constexpr (std::is_same_v<T, float>) {
      p = scores;
      end = sums + rows;
    } else {
      p = reinterpret_cast<T*>(sums + rows);
      end = p + rows * k.keys;
    }
    void* pad = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(end) + 63) / 64 * 64);
    const dnnl::engine& engine = onednn_engine();
    auto mem = [&](const memory::desc& d, const void* data) {
      return memory(d, engine, const_cast<void*>(data));
    };
    execute_and_wait(k.scores,
                     {{DNNL_ARG_SRC, mem(k.q, c.q + k.r0 * q_.row_stride)},
                      {DNNL_ARG_WEIGHTS, mem(k.kt, c.k)},
                      {DNNL_ARG_DST, mem(k.s, scores)},
                      {DNNL_ARG_SCRATCHPAD, mem(k.scores_pad, pad)}});
    parallel_chunks(rows, k.keys * 8, threads_, [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row) {
        const int64_t head = row / k.rows, i = k.r0 + row % k.rows;
        const void* mask_row =
            x.mask ? x.mask + static_cast<size_t>(g_.mask_offsets[b + static_cast<size_t>(head)] +
                                                  i * g_.mask_row_stride) *
                                  (g_.mask == AttentionMask::Bool ? 1 : sizeof(float))
                   : nullptr;
        const int64_t attended = g_.causal ? std::min(k.keys, i + 1) : k.keys;
        sums[row] = softmax_row(scores + row * k.keys, k.keys, attended, mask_row,
                                p + row * k.keys);
      }
    });
    execute_and_wait(k.values, {{DNNL_ARG_SRC, mem(k.p, p)},
                                {DNNL_ARG_WEIGHTS, mem(k.v, c.v)},
                                {DNNL_ARG_DST, mem(k.weighted, weighted)},
                                {DNNL_ARG_SCRATCHPAD, mem(k.values_pad, pad)}});
    parallel_chunks(rows, g_.ev, threads_, [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row) {
        const int64_t head = row / k.rows, i = k.r0 + row % k.rows;
        avx512::store_normalized_row(
            weighted + row * g_.ev, sums[row], g_.ev,
            x.y + g_.out_offsets[b + static_cast<size_t>(head)] + i * g_.out_row_stride);
      }
    });
  }

  // Row x of the scores: scaled, masked (-inf where a key is not attended), then its weights
  // exp(x - max) into p (bf16: rounded; the largest is 1, exactly; p may be x itself). Returns
  // the sum of the stored weights, which store_normalized_row divides by: the result is then a
  // weighted mean of v's rows whose weights sum to 1 however P rounded. As the reference: a row
  // attending no key gives zeros (sum 0), a NaN score makes the row NaN. Two passes over x, the
  // second recomputing the scaled and masked scores rather than storing them in the first.
  KILN_TARGET_AVX512 float softmax_row(const float* x, int64_t n, int64_t attended,
                                       const void* mask_row, T* p) const {
    using namespace avx512;
    const __m512 scale = splat(static_cast<float>(g_.scale));
    const __m512 neg_inf = splat(-std::numeric_limits<float>::infinity());
    auto masked = [&](int64_t j, __mmask16 lanes) KILN_TARGET_AVX512 {
      return masked_scores(g_, x, mask_row, j, n, lanes, attended, scale);
    };
    __m512 max = neg_inf;
    __mmask16 nan = 0;
    for (int64_t j = 0; j < n; j += 16) {
      const __mmask16 lanes = avx512::lanes_from(j, n);
      const __m512 s = masked(j, lanes);
      nan |= _mm512_mask_cmp_ps_mask(lanes, s, s, _CMP_UNORD_Q);
      max = _mm512_mask_max_ps(max, lanes, max, s);
    }
    const float row_max = avx512::max_lanes(max);
    if (nan || row_max == -std::numeric_limits<float>::infinity()) {
      std::fill(p, p + n, element(nan ? std::numeric_limits<float>::quiet_NaN() : 0.0f));
      return nan ? std::numeric_limits<float>::quiet_NaN() : 0.0f;
    }
    const __m512 m = splat(row_max);
    __m512 sum = _mm512_setzero_ps();
    for (int64_t j = 0; j < n; j += 16) {
      const __mmask16 lanes = avx512::lanes_from(j, n);
      const __m512 e = exp(_mm512_sub_ps(masked(j, lanes), m));
      sum = _mm512_mask_add_ps(sum, lanes, sum, store_weights(e, p + j, lanes));
    }
    return avx512::sum_lanes(sum);
  }

  static T element(float value) {
    if constexpr (std::is_same_v<T, float>)
      return value;
    else
      return to_bfloat16(value);
  }

  AttentionGeometry g_;
  Heads heads_;
  int64_t chunk_;
  int threads_;
  int64_t group_;  // heads of the chunk that share one k and v matrix
  Operand q_, k_, v_;
  std::vector<Block> blocks_;
};

}  // namespace

std::string onednn_attention_unsupported(const KernelSpec& spec) {
  const DType dtype = spec.inputs[0].dtype;
  if (dtype != DType::F32 && dtype != DType::BF16) return "takes f32 or bf16 q, k and v";
  if (std::string why = isa_unavailable_reason(Isa::Avx512); !why.empty()) return why;
  if (dtype == DType::BF16 && !onednn_has_bf16())
    return "oneDNN has no native bf16 dot products on this CPU";
  const AttentionGeometry g = make_attention_geometry(spec);
  if (g.l == 0 || g.s == 0 || g.e == 0 || g.ev == 0 || g.batch_count() == 0)
    return "an empty attention (a zero dim)";
  const Heads heads = heads_of(spec, g);
  if (!heads.even()) return "the heads' matrices are not evenly spaced";
  const int64_t score_bytes = dtype == DType::F32 ? Element<float>::score_bytes
                                                  : Element<BFloat16>::score_bytes;
  if (block_rows(g, score_bytes) == 0)
    return "one query row's " + std::to_string(g.s) + " scores exceed " +
           std::to_string(kMaxChunkBytes >> 20) + " MiB: the flash kernel keeps memory bounded";
  // f32: where the flash kernel is faster (docs/benchmarks.md, 2026-12-04 21:50).
  if (dtype == DType::F32 && g.causal)
    return "f32 causal attention: the flash kernel, which skips the masked blocks, is faster";
  if (dtype == DType::F32 && (g.l < kF32MinRows || g.s < kF32MinRows))
    return "f32 with L or S below " + std::to_string(kF32MinRows) +
           ": the flash kernel's tiles are faster there";
  return "";
}

std::unique_ptr<KernelInstance> create_onednn_attention(const KernelSpec& spec) {
  AttentionGeometry g = make_attention_geometry(spec);
  const Heads heads = heads_of(spec, g);
  auto make = [&](auto element) -> std::unique_ptr<KernelInstance> {
    using T = decltype(element);
    const int64_t rows = block_rows(g, Element<T>::score_bytes);
    const int64_t chunk = chunk_heads(g, heads, rows, Element<T>::score_bytes);
    return std::make_unique<OneDnnAttention<T>>(spec, std::move(g), heads, rows, chunk);
  };
  if (spec.inputs[0].dtype == DType::F32) return make(float{});
  return make(BFloat16{});
}

}  // namespace kiln::cpu

#endif  // KILN_X86
