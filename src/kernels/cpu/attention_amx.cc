// bf16 scaled dot-product attention in AMX tiles, flash style: a task is a block of 32 query rows
// of one head, which walks the keys in blocks of kBlockKeys. For each key block, q k^T goes into
// a small f32 score block (in L2), an online softmax (running maximum and sum per row) turns it
// into weights rounded to bf16 P, and P v accumulates into the task's f32 output rows, rescaled
// whenever a row's maximum grows; the next block's q k^T is issued between this block's softmax
// rows, so that the AMX unit and the vector units work at once. The score matrix is never held
// whole, and the scores never leave the core's caches, where the onednn kernel writes a chunk of
// heads' scores out and reads them back twice (docs/benchmarks.md, 2026-12-05).
// Numerics as the onednn kernel's (docs/ops.md): f32 scores and softmax, P rounded to bf16
// before P v, the output divided by the sum of the rounded weights, so each output stays a
// weighted mean of v's rows; a weight rounded under an earlier maximum is rescaled later in f32
// (with its row's sum and output alike), which keeps it within 2^-9 of its exact value.
// AMX multiplies 16 x 32 bf16 tiles by 32 x 16 ones held pairwise ("VNNI": row p holds keys'
// elements 2p and 2p + 1 side by side), so each thread first packs its head's k (transposed) and
// v into such tiles, zero-padded to whole tiles, once for all its tasks on that head.
#include "kernels/cpu/attention.h"

#ifdef KILN_X86
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/cpu/attention_rows_avx512.h"
#include "kernels/cpu/float16.h"
#include "kernels/cpu/vec_math_avx512.h"

// AMX tiles beside the AVX-512 softmax; call only where amx_bf16_unavailable_reason() is empty.
#define KILN_TARGET_AMX \
  __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma")))

namespace kiln::cpu {

namespace {

constexpr int64_t kTileRows = 16;              // a tile's rows
constexpr int64_t kTileBytes = 64;             // a tile row's bytes: 16 f32 or 32 bf16
constexpr int64_t kTaskRows = 2 * kTileRows;   // query rows per task
constexpr int64_t kPairCols = kTileBytes / 4;  // keys (or v columns) per packed tile
constexpr int64_t kDepth = kTileBytes / 2;     // the bf16 products' depth per tile (E or keys)
// Keys per block: the score block (32 x 512 f32, 64 KiB) and P stay in L2. 128, 256, 512 and
// 1024 keys ran [1, 12, 4096, 64] in 74.5, 73.3, 65.4 and 66.2 ms, [8, 12, 197, 64] (one block
// of 197 keys) alike (2 threads, docs/benchmarks.md 2026-12-05).
constexpr int64_t kBlockKeys = 512;

int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

// Tiles 0-3 accumulate (16 x 16 f32), 4-5 hold the left operand (16 x 32 bf16), 6-7 the right
// one (16 pairs x 16): all 16 rows of 64 bytes.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
  TileConfig() {
    for (int t = 0; t < 8; ++t) {
      colsb[t] = kTileBytes;
      rows[t] = kTileRows;
    }
  }
};

// One thread's working memory, carved from its slot of the kernel's scratch (64-byte aligned).
struct Workspace {
  uint16_t* k;      // the head's k^T: [key tiles][E tiles][16 pairs][16 keys][2]
  uint16_t* v;      // the head's v: [key pairs of 32][v column tiles][16 pairs][16 cols][2]
  uint16_t* q;      // the task's query rows: [32][e_pad]
  float* scores[2]; // [32][kBlockKeys] each: this key block's, and the next one's
  uint16_t* p;      // [32][kBlockKeys]
  float* o;         // [32][ev_pad]: the unnormalized output rows
  float* row_max;   // [32]
  float* row_sum;   // [32]
  uint8_t* row_nan; // [32]
};

struct Sizes {
  int64_t s_pad, e_pad, ev_pad;
  // Each buffer's bytes, in Workspace's order; the slot is their sum.
  std::array<int64_t, 10> bytes() const {
    auto a = [](int64_t b) { return round_up(b, 64); };
    return {a(s_pad * e_pad * 2), a(s_pad * ev_pad * 2), a(kTaskRows * e_pad * 2),
            a(kTaskRows * kBlockKeys * 4), a(kTaskRows * kBlockKeys * 4),
            a(kTaskRows * kBlockKeys * 2),
            a(kTaskRows * ev_pad * 4), a(kTaskRows * 4), a(kTaskRows * 4), a(kTaskRows)};
  }
  int64_t slot_bytes() const {
    int64_t total = 0;
    for (int64_t b : bytes()) total += b;
    return total;
  }
  Workspace carve(std::byte* slot) const {
    const std::array<int64_t, 10> b = bytes();
    std::array<std::byte*, 10> at;
    for (size_t i = 0; i < b.size(); ++i) {
      at[i] = slot;
      slot += b[i];
    }
    return {reinterpret_cast<uint16_t*>(at[0]),
            reinterpret_cast<uint16_t*>(at[1]),
            reinterpret_cast<uint16_t*>(at[2]),
            {reinterpret_cast<float*>(at[3]), reinterpret_cast<float*>(at[4])},
            reinterpret_cast<uint16_t*>(at[5]),
            reinterpret_cast<float*>(at[6]),
            reinterpret_cast<float*>(at[7]),
            reinterpret_cast<float*>(at[8]),
            reinterpret_cast<uint8_t*>(at[9])};
  }
};
Sizes sizes_of(const AttentionGeometry& g) {
  return {round_up(g.s, kDepth), round_up(g.e, kDepth), round_up(g.ev, kPairCols)};
}

// Fewer query rows than this decline the node: the packing of k and v, which the rows share,
// then outweighs the products (2 threads, 12 heads of S = 1024, E = 64, against onednn: L = 8
// 0.25 against 0.18 ms, L = 16 0.24 against 0.28, L = 1 with S = 4096 1.65 against 1.15).
constexpr int64_t kMinRows = 16;

// A thread's scratch beyond this declines the node (the onednn kernel takes it): k and v
// packed whole per head.
constexpr int64_t kMaxSlotBytes = int64_t{64} << 20;

// x's lanes rounded to bf16 (to nearest, ties to even), as 16-bit integers.
KILN_TARGET_AMX inline __m256i bf16_bits(__m512 x) { return (__m256i)_mm512_cvtneps_pbh(x); }

// 2^t for t <= 0 with a relative error below 2^-22 (plenty before a weight is rounded to bf16;
// a polynomial fitted on [-1/2, 1/2]), 0 below -150; NaN passes. One scalef replaces exp's
// exponent arithmetic, and the log2(e) factor rides on the caller's FMA.
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kExp2[] = {1.0f, 6.931469440e-01f, 2.402212173e-01f, 5.550742522e-02f,
                           9.675459936e-03f, 1.326697064e-03f};
KILN_TARGET_AMX inline __m512 exp2_weight(__m512 t) {
  using avx512::kAllLanes;
  t = _mm512_maskz_max_ps(kAllLanes, _mm512_set1_ps(-150.0f), t);  // (NaN: the second operand)
  const __m512 n =
      _mm512_maskz_roundscale_ps(kAllLanes, t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  return _mm512_maskz_scalef_ps(kAllLanes, avx512::polynomial(_mm512_sub_ps(t, n), kExp2), n);
}


class AmxAttention final : public KernelInstance {
 public:
  AmxAttention(AttentionGeometry g, int threads)
      : g_(std::move(g)), threads_(std::max(threads, 1)), sizes_(sizes_of(g_)) {}

  size_t scratch_bytes() const override {
    return static_cast<size_t>(threads_ * sizes_.slot_bytes());
  }

  void run(std::span<const void* const> in, std::span<void* const> out,
           void* scratch) const override {
    const Operands x{static_cast<const uint16_t*>(in[0]), static_cast<const uint16_t*>(in[1]),
                     static_cast<const uint16_t*>(in[2]),
                     g_.mask == AttentionMask::None ? nullptr : static_cast<const char*>(in[3]),
                     static_cast<BFloat16*>(out[0])};
    const int64_t row_blocks = (g_.l + kTaskRows - 1) / kTaskRows;
    const int64_t tasks = g_.batch_count() * row_blocks;
    const int team = static_cast<int>(std::min<int64_t>(threads_, tasks));
    auto* slots = static_cast<std::byte*>(scratch);
    // Contiguous ranges of tasks per thread, so that a thread packs each head once.
#pragma omp parallel num_threads(team) if (team > 1)
    {
      const int t = omp_get_thread_num(), n = omp_get_num_threads();
      run_tasks(x, tasks * t / n, tasks * (t + 1) / n, row_blocks,
                sizes_.carve(slots + t * sizes_.slot_bytes()));
    }
  }

 private:
  struct Operands {
    const uint16_t *q, *k, *v;
    const char* mask;
    BFloat16* y;
  };

  KILN_TARGET_AMX void run_tasks(const Operands& x, int64_t begin, int64_t end,
                                 int64_t row_blocks, const Workspace& ws) const {
    if (begin >= end) return;
    const TileConfig config;
    _tile_loadconfig(&config);
    int64_t packed_k = -1, packed_v = -1;  // offsets of the head whose k and v ws holds
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / row_blocks, j = task % row_blocks;
      // Causal: the cost of a block grows with its row, so the blocks alternate from both ends
      // and contiguous ranges of tasks cost alike.
      const int64_t block = !g_.causal ? j : j % 2 == 0 ? j / 2 : row_blocks - 1 - j / 2;
      const int64_t i0 = block * kTaskRows;
      if (g_.k_offsets[b] != packed_k) {
        pack_k(x.k + g_.k_offsets[b], ws.k);
        packed_k = g_.k_offsets[b];
      }
      if (g_.v_offsets[b] != packed_v) {
        pack_v(x.v + g_.v_offsets[b], ws.v);
        packed_v = g_.v_offsets[b];
      }
      run_task(x, b, i0, std::min(kTaskRows, g_.l - i0), ws);
    }
    _tile_release();
  }

  // k^T of one head as the right operand of q k^T: tile (key tile kt, E tile et) holds, in row p
  // and pair column n, k[16 kt + n][32 et + 2p, + 1]; zeros past S and E. A 32-bit transpose of
  // each 16 keys x 16 pairs.
  KILN_TARGET_AMX void pack_k(const uint16_t* k, uint16_t* packed) const {
    const int64_t e_tiles = sizes_.e_pad / kDepth;
    for (int64_t et = 0; et < e_tiles; ++et) {
      const int64_t width = std::min(kDepth, g_.e - et * kDepth);  // bf16 elements
      const __mmask32 cols = width >= 32 ? ~__mmask32{0} : (__mmask32{1} << width) - 1;
      for (int64_t kt = 0; kt < sizes_.s_pad / kPairCols; ++kt) {
        __m512i r[16];
        for (int64_t n = 0; n < kPairCols; ++n) {
          const int64_t key = kt * kPairCols + n;
          r[n] = key < g_.s ? _mm512_maskz_loadu_epi16(cols, k + key * g_.k_row_stride +
                                                                 et * kDepth)
                            : _mm512_setzero_si512();
        }
        transpose_dwords(r);
        uint16_t* tile = packed + (kt * e_tiles + et) * kTileRows * kDepth;
        for (int64_t row = 0; row < kTileRows; ++row)
          _mm512_storeu_si512(tile + row * kDepth, r[row]);
      }
    }
  }

  // r[i]'s 32-bit element j into r[j]'s element i (16 x 16): interleaves of 32 and 64 bits
  // within 128-bit lanes, then two rounds of lane shuffles.
  KILN_TARGET_AMX static void transpose_dwords(__m512i (&r)[16]) {
    constexpr __mmask16 kAll16 = 0xFFFF;
    constexpr __mmask8 kAll8 = 0xFF;
    __m512i a[16], b[16];
    for (int i = 0; i < 8; ++i) {
      a[2 * i] = _mm512_maskz_unpacklo_epi32(kAll16, r[2 * i], r[2 * i + 1]);
      a[2 * i + 1] = _mm512_maskz_unpackhi_epi32(kAll16, r[2 * i], r[2 * i + 1]);
    }
    // b[4i + c], in 128-bit lane L: rows 4i .. 4i + 3 of element 4L + c.
    for (int i = 0; i < 4; ++i) {
      b[4 * i] = _mm512_maskz_unpacklo_epi64(kAll8, a[4 * i], a[4 * i + 2]);
      b[4 * i + 1] = _mm512_maskz_unpackhi_epi64(kAll8, a[4 * i], a[4 * i + 2]);
      b[4 * i + 2] = _mm512_maskz_unpacklo_epi64(kAll8, a[4 * i + 1], a[4 * i + 3]);
      b[4 * i + 3] = _mm512_maskz_unpackhi_epi64(kAll8, a[4 * i + 1], a[4 * i + 3]);
    }
    for (int c = 0; c < 4; ++c) {
      // Lanes 0 and 2 (x), 1 and 3 (y) of rows 0-7, then of rows 8-15.
      const __m512i x = _mm512_maskz_shuffle_i32x4(kAll16, b[c], b[4 + c], 0x88);
      const __m512i y = _mm512_maskz_shuffle_i32x4(kAll16, b[c], b[4 + c], 0xDD);
      const __m512i x2 = _mm512_maskz_shuffle_i32x4(kAll16, b[8 + c], b[12 + c], 0x88);
      const __m512i y2 = _mm512_maskz_shuffle_i32x4(kAll16, b[8 + c], b[12 + c], 0xDD);
      r[c] = _mm512_maskz_shuffle_i32x4(kAll16, x, x2, 0x88);
      r[8 + c] = _mm512_maskz_shuffle_i32x4(kAll16, x, x2, 0xDD);
      r[4 + c] = _mm512_maskz_shuffle_i32x4(kAll16, y, y2, 0x88);
      r[12 + c] = _mm512_maskz_shuffle_i32x4(kAll16, y, y2, 0xDD);
    }
  }

  // v of one head as the right operand of P v: tile (key block kb of 32, column tile ct) holds,
  // in row p and pair column n, v[32 kb + 2p, + 1][16 ct + n]; zeros past S and Ev.
  KILN_TARGET_AMX void pack_v(const uint16_t* v, uint16_t* packed) const {
    const int64_t col_tiles = sizes_.ev_pad / kPairCols;
    for (int64_t kb = 0; kb < sizes_.s_pad / kDepth; ++kb)
      for (int64_t p = 0; p < kTileRows; ++p) {
        const int64_t r0 = kb * kDepth + 2 * p;
        for (int64_t ct = 0; ct < col_tiles; ++ct) {
          const __mmask16 cols = avx512::lanes_from(ct * kPairCols, g_.ev);
          auto row = [&](int64_t r) KILN_TARGET_AMX {
            return r < g_.s ? _mm256_maskz_loadu_epi16(
                                  cols, v + r * g_.v_row_stride + ct * kPairCols)
                            : _mm256_setzero_si256();
          };
          const __m256i a = row(r0), c = row(r0 + 1);
          // Interleave a's and c's 16 elements: (a0 c0 a1 c1 ...), within then across lanes.
          const __m256i lo = _mm256_unpacklo_epi16(a, c), hi = _mm256_unpackhi_epi16(a, c);
          uint16_t* dst = packed + ((kb * col_tiles + ct) * kTileRows + p) * kDepth;
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst),
                              _mm256_permute2x128_si256(lo, hi, 0x20));
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 16),
                              _mm256_permute2x128_si256(lo, hi, 0x31));
        }
      }
  }

  // Query rows [i0, i0 + rows) of batch index b.
  KILN_TARGET_AMX void run_task(const Operands& x, int64_t b, int64_t i0, int64_t rows,
                                const Workspace& ws) const {
    const int64_t e_pad = sizes_.e_pad, ev_pad = sizes_.ev_pad;
    // The task's rows of q, zero-padded to 32 rows of e_pad.
    for (int64_t i = 0; i < kTaskRows; ++i) {
      uint16_t* dst = ws.q + i * e_pad;
      if (i < rows) {
        const uint16_t* src = x.q + g_.q_offsets[b] + (i0 + i) * g_.q_row_stride;
        std::memcpy(dst, src, static_cast<size_t>(g_.e) * 2);
        std::fill(dst + g_.e, dst + e_pad, uint16_t{0});
      } else {
        std::fill(dst, dst + e_pad, uint16_t{0});
      }
    }
    std::fill_n(ws.o, kTaskRows * ev_pad, 0.0f);
    // The tile products read all 32 rows of P: those past `rows` stay zero (the others are
    // written whole for each key block).
    std::fill_n(ws.p + rows * kBlockKeys, (kTaskRows - rows) * kBlockKeys, uint16_t{0});
    std::fill_n(ws.row_max, kTaskRows, -std::numeric_limits<float>::infinity());
    std::fill_n(ws.row_sum, kTaskRows, 0.0f);
    std::fill_n(ws.row_nan, kTaskRows, uint8_t{0});
    const int64_t key_end = g_.causal ? std::min(g_.s, i0 + rows) : g_.s;
    const int64_t blocks = (key_end + kBlockKeys - 1) / kBlockKeys;
    auto pairs_of = [&](int64_t block) {  // the block's key tile pairs
      return round_up(std::min(kBlockKeys, key_end - block * kBlockKeys), kDepth) / kDepth;
    };
    for (int64_t pair = 0; pair < pairs_of(0); ++pair) score_pair(ws, ws.scores[0], 0, pair);
    for (int64_t block = 0; block < blocks; ++block) {
      const int64_t j0 = block * kBlockKeys;
      const int64_t keys = std::min(kBlockKeys, key_end - j0);
      const int64_t keys_pad = round_up(keys, kDepth);
      float* scores = ws.scores[block % 2];
      // The next block's q k^T in AMX tiles, spread over this block's softmax rows: the AMX
      // unit multiplies while the vector units take the softmax ([1, 12, 4096, 64] 65.7-66.9 ->
      // 60.9-62.3 ms, 2048 keys 17.3 -> 16.4-16.8; docs/benchmarks.md 2026-12-05).
      float* next = ws.scores[(block + 1) % 2];
      const int64_t next_pairs = block + 1 < blocks ? pairs_of(block + 1) : 0;
      int64_t issued = 0;
      for (int64_t i = 0; i < rows; ++i) {
        softmax_row(x, b, i0 + i, i, j0, keys, keys_pad, scores, ws);
        for (; issued < next_pairs * (i + 1) / rows; ++issued)
          score_pair(ws, next, j0 + kBlockKeys, issued);
      }
      accumulate(ws, j0, keys_pad, rows > kTileRows ? 2 : 1);
    }
    for (int64_t i = 0; i < rows; ++i)
      write_row(ws, i, x.y + g_.out_offsets[b] + (i0 + i) * g_.out_row_stride);
  }

  // scores[32][32 pair, + 32) = q k^T for keys j0 + [32 pair, + 32), unscaled.
  KILN_TARGET_AMX void score_pair(const Workspace& ws, float* scores, int64_t j0,
                                  int64_t pair) const {
    const int64_t e_tiles = sizes_.e_pad / kDepth;
    const int64_t q_stride = sizes_.e_pad * 2, s_stride = kBlockKeys * 4;
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    const int64_t kt = (j0 + pair * kDepth) / kPairCols;
    for (int64_t et = 0; et < e_tiles; ++et) {
      _tile_loadd(4, ws.q + et * kDepth, q_stride);
      _tile_loadd(5, ws.q + kTileRows * sizes_.e_pad + et * kDepth, q_stride);
      _tile_loadd(6, ws.k + (kt * e_tiles + et) * kTileRows * kDepth, kTileBytes);
      _tile_loadd(7, ws.k + ((kt + 1) * e_tiles + et) * kTileRows * kDepth, kTileBytes);
      _tile_dpbf16ps(0, 4, 6);
      _tile_dpbf16ps(1, 4, 7);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
    float* s = scores + pair * kDepth;
    _tile_stored(0, s, s_stride);
    _tile_stored(1, s + kPairCols, s_stride);
    _tile_stored(2, s + kTileRows * kBlockKeys, s_stride);
    _tile_stored(3, s + kTileRows * kBlockKeys + kPairCols, s_stride);
  }

  // Row i of the task (query `query`) over keys [j0, j0 + keys): the row's running maximum and
  // sum updated (its output row rescaled), its weights exp(score * scale + mask - max) rounded
  // to bf16 into ws.p (zeros up to keys_pad). A NaN score marks the row NaN. Rows without a mask
  // whose keys are all attended (all but causal attention's diagonal blocks) take the maximum
  // of the raw scores and fold the scale into exp's argument (one FMA); the others first write
  // their scores scaled and masked (-inf where a key is not attended).
  KILN_TARGET_AMX void softmax_row(const Operands& x, int64_t b, int64_t query, int64_t i,
                                   int64_t j0, int64_t keys, int64_t keys_pad, float* scores,
                                   const Workspace& ws) const {
    using namespace avx512;
    constexpr float kInf = std::numeric_limits<float>::infinity();
    float* s = scores + i * kBlockKeys;
    uint16_t* p = ws.p + i * kBlockKeys;
    const int64_t attended = g_.causal ? std::clamp<int64_t>(query + 1 - j0, 0, keys) : keys;
    const float scale = static_cast<float>(g_.scale);
    float block_max = -kInf, exp_scale = 1;
    bool raw = g_.mask == AttentionMask::None && attended == keys && scale > 0;
    if (raw) {
      // Two maxima, a chain each (a max's latency would otherwise pace the loop).
      __m512 m0 = splat(-kInf), m1 = m0;
      for (int64_t j = 0; j < keys; j += 32) {
        const __mmask16 first = lanes_from(j, keys), second = lanes_from(j + 16, keys);
        m0 = _mm512_mask_max_ps(m0, first, m0, _mm512_maskz_loadu_ps(first, s + j));
        m1 = _mm512_mask_max_ps(m1, second, m1, _mm512_maskz_loadu_ps(second, s + j + 16));
      }
      block_max = max_lanes(_mm512_maskz_max_ps(kAllLanes, m0, m1)) * scale;
      exp_scale = scale;
      // A NaN or infinite score takes the general path, which tells them apart.
      raw = std::isfinite(block_max);
    }
    if (!raw) {
      exp_scale = 1;
      if (!scale_and_mask_row(x, b, query, j0, keys, attended, s, block_max)) ws.row_nan[i] = 1;
    }
    const float old_max = ws.row_max[i];
    const float new_max = std::max(old_max, block_max);
    if (ws.row_nan[i] || new_max == -kInf) {  // the row is NaN, or nothing attended yet
      std::fill(p, p + keys_pad, uint16_t{0});
      return;
    }
    // Weights 2^t, t = (s * exp_scale - new_max) log2(e) <= 0 (up to a rounding), for the
    // attended keys (the general path's -inf gives exactly 0). Two sums, as the maxima.
    const __m512 c = splat(exp_scale * kLog2e), minus_max = splat(-new_max * kLog2e);
    const __m512 neg_inf = splat(-kInf);
    auto weights = [&](int64_t j, __mmask16 lanes) KILN_TARGET_AMX {
      const __m512 v = _mm512_maskz_loadu_ps(lanes, s + j);
      const __mmask16 live =
          raw ? lanes : _mm512_mask_cmp_ps_mask(lanes, v, neg_inf, _CMP_NEQ_OQ);
      const __m256i rounded = bf16_bits(
          _mm512_maskz_mov_ps(live, exp2_weight(_mm512_fmadd_ps(v, c, minus_max))));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(p + j), rounded);
      return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(
          kAllLanes, _mm512_maskz_cvtepu16_epi32(kAllLanes, rounded), 16));
    };
    __m512 sum0 = _mm512_setzero_ps(), sum1 = sum0;
    int64_t j = 0;
    for (; j + 32 <= keys; j += 32) {
      sum0 = _mm512_add_ps(sum0, weights(j, kAllLanes));
      sum1 = _mm512_add_ps(sum1, weights(j + 16, kAllLanes));
    }
    for (; j < keys_pad; j += 16) sum0 = _mm512_add_ps(sum0, weights(j, lanes_from(j, keys)));
    const float alpha = old_max == -kInf ? 0.0f : std::exp(old_max - new_max);
    ws.row_sum[i] = ws.row_sum[i] * alpha + sum_lanes(_mm512_add_ps(sum0, sum1));
    ws.row_max[i] = new_max;
    if (old_max != -kInf && alpha != 1.0f) {  // (before any weight the row is zeros)
      float* o = ws.o + i * sizes_.ev_pad;
      const __m512 a = splat(alpha);
      for (int64_t c = 0; c < sizes_.ev_pad; c += 16)
        _mm512_storeu_ps(o + c, _mm512_mul_ps(_mm512_loadu_ps(o + c), a));
    }
  }

  // The general path of softmax_row: scores s[0, keys) scaled, the mask added (or applied) and
  // -inf from `attended` on, written back; their maximum into `max`. False on a NaN among the
  // attended ones.
  KILN_TARGET_AMX bool scale_and_mask_row(const Operands& x, int64_t b, int64_t query,
                                          int64_t j0, int64_t keys, int64_t attended, float* s,
                                          float& max) const {
    using namespace avx512;
    const char* mask_row = nullptr;
    if (x.mask) {
      const size_t element = g_.mask == AttentionMask::Bool ? 1 : sizeof(float);
      mask_row = x.mask + static_cast<size_t>(g_.mask_offsets[b] + query * g_.mask_row_stride +
                                              j0 * g_.mask_col_stride) *
                              element;
    }
    const __m512 scale = splat(static_cast<float>(g_.scale));
    __m512 m = splat(-std::numeric_limits<float>::infinity());
    __mmask16 nan = 0;
    for (int64_t j = 0; j < keys; j += 16) {
      const __mmask16 lanes = lanes_from(j, keys);
      const __m512 v = masked_scores(g_, s, mask_row, j, keys, lanes, attended, scale);
      nan |= _mm512_mask_cmp_ps_mask(lanes, v, v, _CMP_UNORD_Q);
      m = _mm512_mask_max_ps(m, lanes, m, v);
      _mm512_mask_storeu_ps(s + j, lanes, v);
    }
    max = max_lanes(m);
    return nan == 0;
  }

  // ws.o += P v over keys [j0, j0 + keys_pad), for the task's first `halves` 16-row halves.
  KILN_TARGET_AMX void accumulate(const Workspace& ws, int64_t j0, int64_t keys_pad,
                                  int halves) const {
    const int64_t col_tiles = sizes_.ev_pad / kPairCols;
    const int64_t o_stride = sizes_.ev_pad * 4, p_stride = kBlockKeys * 2;
    for (int half = 0; half < halves; ++half)
      for (int64_t c0 = 0; c0 < col_tiles; c0 += 4) {
        const int64_t n = std::min<int64_t>(4, col_tiles - c0);
        float* o = ws.o + half * kTileRows * sizes_.ev_pad + c0 * kPairCols;
        _tile_loadd(0, o, o_stride);
        if (n > 1) _tile_loadd(1, o + kPairCols, o_stride);
        if (n > 2) _tile_loadd(2, o + 2 * kPairCols, o_stride);
        if (n > 3) _tile_loadd(3, o + 3 * kPairCols, o_stride);
        for (int64_t kb = 0; kb < keys_pad / kDepth; ++kb) {
          _tile_loadd(4, ws.p + half * kTileRows * kBlockKeys + kb * kDepth, p_stride);
          const uint16_t* v = ws.v + ((j0 / kDepth + kb) * col_tiles + c0) * kTileRows * kDepth;
          constexpr int64_t kTile = kTileRows * kDepth;
          _tile_loadd(6, v, kTileBytes);
          _tile_dpbf16ps(0, 4, 6);
          if (n > 1) {
            _tile_loadd(7, v + kTile, kTileBytes);
            _tile_dpbf16ps(1, 4, 7);
          }
          if (n > 2) {
            _tile_loadd(6, v + 2 * kTile, kTileBytes);
            _tile_dpbf16ps(2, 4, 6);
          }
          if (n > 3) {
            _tile_loadd(7, v + 3 * kTile, kTileBytes);
            _tile_dpbf16ps(3, 4, 7);
          }
        }
        _tile_stored(0, o, o_stride);
        if (n > 1) _tile_stored(1, o + kPairCols, o_stride);
        if (n > 2) _tile_stored(2, o + 2 * kPairCols, o_stride);
        if (n > 3) _tile_stored(3, o + 3 * kPairCols, o_stride);
      }
  }

  // Output row i: its accumulated P v divided by the sum of its weights, rounded once to bf16;
  // NaN for a NaN row, zeros for a row attending no key.
  KILN_TARGET_AMX void write_row(const Workspace& ws, int64_t i, BFloat16* out) const {
    const float sum = ws.row_nan[i] ? std::numeric_limits<float>::quiet_NaN() : ws.row_sum[i];
    avx512::store_normalized_row(ws.o + i * sizes_.ev_pad, sum, g_.ev, out);
  }

  AttentionGeometry g_;
  int threads_;
  Sizes sizes_;
};

}  // namespace

std::string amx_attention_unsupported(const KernelSpec& spec) {
  if (spec.inputs[0].dtype != DType::BF16) return "takes bf16 q, k and v";
  if (std::string why = amx_bf16_unavailable_reason(); !why.empty()) return why;
  const AttentionGeometry g = make_attention_geometry(spec);
  if (g.l == 0 || g.s == 0 || g.e == 0 || g.ev == 0 || g.batch_count() == 0)
    return "an empty attention (a zero dim)";
  if (g.l < kMinRows)
    return "fewer than " + std::to_string(kMinRows) +
           " query rows: packing each head's k and v for AMX costs more than onednn's products";
  if (sizes_of(g).slot_bytes() > kMaxSlotBytes)
    return "one head's k and v packed for AMX exceed " + std::to_string(kMaxSlotBytes >> 20) +
           " MiB per thread";
  return "";
}

std::unique_ptr<KernelInstance> create_amx_attention(const KernelSpec& spec) {
  return std::make_unique<AmxAttention>(make_attention_geometry(spec), spec.threads);
}

}  // namespace kiln::cpu

#endif  // KILN_X86
