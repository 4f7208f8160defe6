// AVX2+FMA array kernels for f32 elementwise ops (x86 only; call them only when
// has_avx2_fma()). Transcendental functions are vectorized and accurate to a few ULP; the
// bounds are measured by tests/cpp/test_ops_elementwise.cc and listed in docs/ops.md.
#pragma once

#include <cstdint>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/float16.h"

namespace kiln::cpu {

// out[i] = f(in[i]) for i < n.
using UnaryArrayFn = void (*)(const float* in, float* out, int64_t n);
// out[i] = a[i * a_step] op b[i * b_step] for i < n; each step is 1 or 0 (broadcast).
using BinaryArrayFn = void (*)(const float* a, int64_t a_step, const float* b, int64_t b_step,
                               float* out, int64_t n);
// The same on bf16 operands and result.
using Bf16BinaryArrayFn = void (*)(const BFloat16* a, int64_t a_step, const BFloat16* b,
                                   int64_t b_step, BFloat16* out, int64_t n);
// The same with a bool result (comparisons).
using CompareArrayFn = void (*)(const float* a, int64_t a_step, const float* b, int64_t b_step,
                                bool* out, int64_t n);

#ifdef KILN_X86
namespace avx2 {

// Float outputs of at least this many bytes per call are written with streaming stores, which
// bypass the caches: half the last-level cache, so that with two threads (a call each) an output
// larger than the cache, which no reader would find there, streams; never when Linux lists no
// cache (the figures are in elementwise_avx2.cc). Tests lower it to run that path on small
// tensors.
int64_t streaming_store_min_bytes();
void set_streaming_store_min_bytes(int64_t bytes);

// Whether a call writing `call_bytes` of float output streams it: when those bytes, or those
// of the calling thread's StreamingRegion, reach streaming_store_min_bytes().
bool streams_output(int64_t call_bytes);

// How far ahead of a streaming loop its inputs are prefetched. Without it, only the ops with a
// few instructions a vector gained from streaming stores: the loads of the others stalled
// (960 MiB, 2 threads, 16 lanes, share of memcpy: sigmoid streaming 43%, cached 56%, streaming
// and prefetching 4 KiB ahead 106%; 2 KiB ahead 99%, 8 KiB 105%).
inline constexpr int64_t kStreamingPrefetchFloats = 1024;

// After a call's streaming stores: a store fence, which orders them before what follows, except
// inside a StreamingRegion, whose end fences once for all its calls (a fence a row cost most of
// the gain on rows of 1024 floats).
void fence_streamed_stores();

// The calling thread writes `bytes` of one output through several calls in this scope (a row
// broadcast's rows, a call each): streams_output judges them by the whole.
class StreamingRegion {
 public:
  explicit StreamingRegion(int64_t bytes);
  ~StreamingRegion();
  StreamingRegion(const StreamingRegion&) = delete;
  StreamingRegion& operator=(const StreamingRegion&) = delete;

 private:
  int64_t enclosing_;
};

void relu(const float* in, float* out, int64_t n);
void neg(const float* in, float* out, int64_t n);
void exp(const float* in, float* out, int64_t n);
void sigmoid(const float* in, float* out, int64_t n);
void tanh(const float* in, float* out, int64_t n);
void gelu_erf(const float* in, float* out, int64_t n);   // x * Phi(x)
void gelu_tanh(const float* in, float* out, int64_t n);  // PyTorch's approximate="tanh"
void sqrt(const float* in, float* out, int64_t n);
void rsqrt(const float* in, float* out, int64_t n);
void abs(const float* in, float* out, int64_t n);
void floor(const float* in, float* out, int64_t n);
void ceil(const float* in, float* out, int64_t n);
void trunc(const float* in, float* out, int64_t n);
void round(const float* in, float* out, int64_t n);  // half to even
void reciprocal(const float* in, float* out, int64_t n);
// PyTorch's pow(x, 2), pow(x, 3) and pow(x, -2), rounded as it computes them: x * x,
// (x * x) * x and 1 / (x * x).
void square(const float* in, float* out, int64_t n);
void cube(const float* in, float* out, int64_t n);
void reciprocal_square(const float* in, float* out, int64_t n);
void erf(const float* in, float* out, int64_t n);
void log(const float* in, float* out, int64_t n);
void silu(const float* in, float* out, int64_t n);
void expm1(const float* in, float* out, int64_t n);
void log1p(const float* in, float* out, int64_t n);
void log2(const float* in, float* out, int64_t n);
void mish(const float* in, float* out, int64_t n);  // x * tanh(log1p(exp(x)))
void sin(const float* in, float* out, int64_t n);
void cos(const float* in, float* out, int64_t n);
// PyTorch's formulas, rounded as it computes them: x * min(max(x + 3, 0), 6) / 6 and
// min(max(x + 3, 0), 6) / 6.
void hardswish(const float* in, float* out, int64_t n);
void hardsigmoid(const float* in, float* out, int64_t n);
// min(max(x, lo), hi); x where x equals a bound or is NaN (callers handle NaN bounds).
void clamp(const float* in, float* out, int64_t n, float lo, float hi);
// x > 0 ? x : x * negative_slope.
void leaky_relu(const float* in, float* out, int64_t n, float negative_slope);
// x > 0 ? x * scale : expm1(x * input_scale) * negative_factor (alpha * scale).
void elu(const float* in, float* out, int64_t n, float scale, float input_scale,
         float negative_factor);
// x * beta > threshold ? x : log1p(exp(x * beta)) / beta.
void softplus(const float* in, float* out, int64_t n, float beta, float threshold);

void add(const float* a, int64_t a_step, const float* b, int64_t b_step, float* out, int64_t n);
void sub(const float* a, int64_t a_step, const float* b, int64_t b_step, float* out, int64_t n);
void mul(const float* a, int64_t a_step, const float* b, int64_t b_step, float* out, int64_t n);
void div(const float* a, int64_t a_step, const float* b, int64_t b_step, float* out, int64_t n);
// a + alpha * b rounded once (fused multiply-add), PyTorch's add with alpha.
void add_scaled(const float* a, int64_t a_step, const float* b, int64_t b_step, float* out,
                int64_t n, float alpha);
// NaN when either input is NaN; a when a and b compare equal (+0 and -0).
void maximum(const float* a, int64_t a_step, const float* b, int64_t b_step, float* out,
             int64_t n);
void minimum(const float* a, int64_t a_step, const float* b, int64_t b_step, float* out,
             int64_t n);
// add, sub, mul, div, maximum and minimum on bf16 operands and result, in one pass: each vector
// widened on load, computed in f32 and rounded to bf16 on store (nearest even, as the f32
// result's conversion rounds), so the bits of the f32 function between the two conversions.
void add(const BFloat16* a, int64_t a_step, const BFloat16* b, int64_t b_step, BFloat16* out,
         int64_t n);
void sub(const BFloat16* a, int64_t a_step, const BFloat16* b, int64_t b_step, BFloat16* out,
         int64_t n);
void mul(const BFloat16* a, int64_t a_step, const BFloat16* b, int64_t b_step, BFloat16* out,
         int64_t n);
void div(const BFloat16* a, int64_t a_step, const BFloat16* b, int64_t b_step, BFloat16* out,
         int64_t n);
void maximum(const BFloat16* a, int64_t a_step, const BFloat16* b, int64_t b_step,
             BFloat16* out, int64_t n);
void minimum(const BFloat16* a, int64_t a_step, const BFloat16* b, int64_t b_step,
             BFloat16* out, int64_t n);
// C's fmod, exactly, and PyTorch's remainder of floats (fmod, plus b where the signs differ).
void fmod(const float* a, int64_t a_step, const float* b, int64_t b_step, float* out, int64_t n);
void remainder(const float* a, int64_t a_step, const float* b, int64_t b_step, float* out,
               int64_t n);

// IEEE comparisons: false with a NaN, except ne.
void eq(const float* a, int64_t a_step, const float* b, int64_t b_step, bool* out, int64_t n);
void ne(const float* a, int64_t a_step, const float* b, int64_t b_step, bool* out, int64_t n);
void lt(const float* a, int64_t a_step, const float* b, int64_t b_step, bool* out, int64_t n);
void le(const float* a, int64_t a_step, const float* b, int64_t b_step, bool* out, int64_t n);
void gt(const float* a, int64_t a_step, const float* b, int64_t b_step, bool* out, int64_t n);
void ge(const float* a, int64_t a_step, const float* b, int64_t b_step, bool* out, int64_t n);

// out[i] = cond[i * c_step] ? a[i * a_step] : b[i * b_step].
void where(const bool* cond, int64_t c_step, const float* a, int64_t a_step, const float* b,
           int64_t b_step, float* out, int64_t n);

}  // namespace avx2

// The transcendental ones 16 lanes at a time, for CPUs with AVX-512 (call them only when
// has_avx512f()): bit for bit the avx2 functions of the same names (vec_math_avx512.h), which
// are compute-bound on 8 lanes, but for gelu's 16-lane fast paths (both forms, vectors within
// [-7, 7]), which round differently, within the same bounds.
namespace avx512 {

void exp(const float* in, float* out, int64_t n);
void sigmoid(const float* in, float* out, int64_t n);
void tanh(const float* in, float* out, int64_t n);
void gelu_erf(const float* in, float* out, int64_t n);
void gelu_tanh(const float* in, float* out, int64_t n);
void erf(const float* in, float* out, int64_t n);
void silu(const float* in, float* out, int64_t n);
void mish(const float* in, float* out, int64_t n);
void log(const float* in, float* out, int64_t n);
void log1p(const float* in, float* out, int64_t n);
void log2(const float* in, float* out, int64_t n);
void expm1(const float* in, float* out, int64_t n);
void sin(const float* in, float* out, int64_t n);
void cos(const float* in, float* out, int64_t n);
void elu(const float* in, float* out, int64_t n, float scale, float input_scale,
         float negative_factor);
void softplus(const float* in, float* out, int64_t n, float beta, float threshold);

}  // namespace avx512

// `eight` (an avx2 unary function), or its avx512 version on CPUs with AVX-512 where it has one.
// Every caller of a unary function picks it through here (the op's kernel, fused elementwise
// chains, GEMM epilogues), so that an op gives the same bits wherever it runs on one CPU.
UnaryArrayFn widest(UnaryArrayFn eight);
#endif

}  // namespace kiln::cpu
