#include "kernels/cpu/elementwise_avx2.h"

#ifdef KILN_X86
#include "kernels/cpu/vec_math_avx2.h"

namespace kiln::cpu::avx2 {

namespace {

// The vector functions of the elementwise ops, one struct each; tails go through masked loads
// and stores so every element takes the same vector code (results don't depend on position).
struct ReluOp {
  KILN_TARGET_AVX2 static __m256 apply(__m256 x) {
    // max(0, x) returns x when x is NaN, and keeps -0, like the reference's x < 0 ? 0 : x.
    return _mm256_max_ps(_mm256_setzero_ps(), x);
  }
};
struct NegOp {
  KILN_TARGET_AVX2 static __m256 apply(__m256 x) { return _mm256_xor_ps(x, splat(-0.0f)); }
};
struct ExpOp {
  KILN_TARGET_AVX2 static __m256 apply(__m256 x) { return avx2::exp(x); }
};
struct SigmoidOp {
  KILN_TARGET_AVX2 static __m256 apply(__m256 x) { return avx2::sigmoid(x); }
};
struct TanhOp {
  KILN_TARGET_AVX2 static __m256 apply(__m256 x) { return avx2::tanh(x); }
};
struct GeluErfOp {
  KILN_TARGET_AVX2 static __m256 apply(__m256 x) { return avx2::gelu_erf(x); }
};
struct GeluTanhOp {
  KILN_TARGET_AVX2 static __m256 apply(__m256 x) { return avx2::gelu_tanh(x); }
};
struct SqrtOp {
  KILN_TARGET_AVX2 static __m256 apply(__m256 x) { return _mm256_sqrt_ps(x); }
};
struct RsqrtOp {
  // A true division rather than the 12-bit rsqrt approximation.
  KILN_TARGET_AVX2 static __m256 apply(__m256 x) {
    return _mm256_div_ps(splat(1.0f), _mm256_sqrt_ps(x));
  }
};

struct AddOp {
  KILN_TARGET_AVX2 static __m256 apply(__m256 a, __m256 b) { return _mm256_add_ps(a, b); }
};
struct SubOp {
  KILN_TARGET_AVX2 static __m256 apply(__m256 a, __m256 b) { return _mm256_sub_ps(a, b); }
};
struct MulOp {
  KILN_TARGET_AVX2 static __m256 apply(__m256 a, __m256 b) { return _mm256_mul_ps(a, b); }
};
struct DivOp {
  KILN_TARGET_AVX2 static __m256 apply(__m256 a, __m256 b) { return _mm256_div_ps(a, b); }
};

template <typename Op>
KILN_TARGET_AVX2 void unary_loop(const float* in, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, Op::apply(_mm256_loadu_ps(in + i)));
  if (i < n) {
    const __m256i mask = tail_mask(n - i);
    _mm256_maskstore_ps(out + i, mask, Op::apply(_mm256_maskload_ps(in + i, mask)));
  }
}

// out = a op b over n elements, each operand a Contiguous or a Broadcast.
template <typename Op, typename A, typename B>
KILN_TARGET_AVX2 void binary_loop(const A& a, const B& b, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, Op::apply(a.load(i), b.load(i)));
  if (i < n) {
    const __m256i mask = tail_mask(n - i);
    _mm256_maskstore_ps(out + i, mask, Op::apply(a.load_tail(i, mask), b.load_tail(i, mask)));
  }
}

// Vector operands: 8 consecutive elements, or one element broadcast (step 0).
struct Contiguous {
  const float* p;
  KILN_TARGET_AVX2 __m256 load(int64_t i) const { return _mm256_loadu_ps(p + i); }
  KILN_TARGET_AVX2 __m256 load_tail(int64_t i, __m256i mask) const {
    return _mm256_maskload_ps(p + i, mask);
  }
};
struct Broadcast {
  __m256 v;
  KILN_TARGET_AVX2 __m256 load(int64_t) const { return v; }
  KILN_TARGET_AVX2 __m256 load_tail(int64_t, __m256i) const { return v; }
};

template <typename Op>
KILN_TARGET_AVX2 void binary(const float* a, int64_t a_step, const float* b, int64_t b_step,
                             float* out, int64_t n) {
  if (a_step && b_step)
    binary_loop<Op>(Contiguous{a}, Contiguous{b}, out, n);
  else if (!b_step)
    binary_loop<Op>(Contiguous{a}, Broadcast{_mm256_set1_ps(*b)}, out, n);
  else
    binary_loop<Op>(Broadcast{_mm256_set1_ps(*a)}, Contiguous{b}, out, n);
}

}  // namespace

KILN_TARGET_AVX2 void relu(const float* in, float* out, int64_t n) {
  unary_loop<ReluOp>(in, out, n);
}
KILN_TARGET_AVX2 void neg(const float* in, float* out, int64_t n) {
  unary_loop<NegOp>(in, out, n);
}
KILN_TARGET_AVX2 void exp(const float* in, float* out, int64_t n) {
  unary_loop<ExpOp>(in, out, n);
}
KILN_TARGET_AVX2 void sigmoid(const float* in, float* out, int64_t n) {
  unary_loop<SigmoidOp>(in, out, n);
}
KILN_TARGET_AVX2 void tanh(const float* in, float* out, int64_t n) {
  unary_loop<TanhOp>(in, out, n);
}
KILN_TARGET_AVX2 void gelu_erf(const float* in, float* out, int64_t n) {
  unary_loop<GeluErfOp>(in, out, n);
}
KILN_TARGET_AVX2 void gelu_tanh(const float* in, float* out, int64_t n) {
  unary_loop<GeluTanhOp>(in, out, n);
}
KILN_TARGET_AVX2 void sqrt(const float* in, float* out, int64_t n) {
  unary_loop<SqrtOp>(in, out, n);
}
KILN_TARGET_AVX2 void rsqrt(const float* in, float* out, int64_t n) {
  unary_loop<RsqrtOp>(in, out, n);
}

KILN_TARGET_AVX2 void add(const float* a, int64_t sa, const float* b, int64_t sb, float* out,
                          int64_t n) {
  binary<AddOp>(a, sa, b, sb, out, n);
}
KILN_TARGET_AVX2 void sub(const float* a, int64_t sa, const float* b, int64_t sb, float* out,
                          int64_t n) {
  binary<SubOp>(a, sa, b, sb, out, n);
}
KILN_TARGET_AVX2 void mul(const float* a, int64_t sa, const float* b, int64_t sb, float* out,
                          int64_t n) {
  binary<MulOp>(a, sa, b, sb, out, n);
}
KILN_TARGET_AVX2 void div(const float* a, int64_t sa, const float* b, int64_t sb, float* out,
                          int64_t n) {
  binary<DivOp>(a, sa, b, sb, out, n);
}

}  // namespace kiln::cpu::avx2

#endif  // KILN_X86
