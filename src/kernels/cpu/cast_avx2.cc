// Vector casts f32 <-> f16 (F16C, 8 lanes) and f32 <-> bf16 (integer ops: 16 lanes where the CPU
// has AVX-512, else 8; the row conversions of bf16_avx512.h and bf16_avx2.h). f16 tails go
// through the scalar conversions of float16.h, which give the same bits as the vector
// instructions (tested on every f16 value and a dense sample of f32 ones); bf16 tails through the
// same vector code under a mask, or (16 lanes, widening) the scalar conversion.
#include "kernels/cpu/cast.h"

#include "kernels/cpu/bf16_avx2.h"
#include "kernels/cpu/bf16_avx512.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/float16.h"
#include "kiln/error.h"

#ifdef KILN_X86
#include <immintrin.h>

#define KILN_TARGET_AVX2_F16C __attribute__((target("avx2,fma,f16c")))
#endif

namespace kiln::cpu {

namespace {

#ifdef KILN_X86
bool has_f16c() {
  static const bool supported = __builtin_cpu_supports("f16c");
  return supported;
}

KILN_TARGET_AVX2_F16C void f32_to_f16(const void* in, void* out, int64_t n) {
  const float* x = static_cast<const float*>(in);
  Float16* y = static_cast<Float16*>(out);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(x + i),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  for (; i < n; ++i) y[i] = to_float16(x[i]);
}

KILN_TARGET_AVX2_F16C void f16_to_f32(const void* in, void* out, int64_t n) {
  const Float16* x = static_cast<const Float16*>(in);
  float* y = static_cast<float*>(out);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i))));
  for (; i < n; ++i) y[i] = to_float(x[i]);
}

KILN_TARGET_AVX2 void f32_to_bf16(const void* in, void* out, int64_t n) {
  avx2::narrow_to_bf16_row(static_cast<const float*>(in), static_cast<BFloat16*>(out), n);
}

KILN_TARGET_AVX2 void bf16_to_f32(const void* in, void* out, int64_t n) {
  avx2::widen_bf16_row(static_cast<const BFloat16*>(in), static_cast<float*>(out), n);
}

// The same bits on 16 lanes: twice as fast, which a bf16 elementwise op's conversions around
// its f32 kernel need (gelu on [1576, 3072]: the two conversions took a third of its time).
KILN_TARGET_AVX512 void f32_to_bf16_16(const void* in, void* out, int64_t n) {
  avx512::narrow_to_bf16_row(static_cast<const float*>(in), static_cast<BFloat16*>(out), n);
}

KILN_TARGET_AVX512 void bf16_to_f32_16(const void* in, void* out, int64_t n) {
  avx512::widen_bf16_row(static_cast<const BFloat16*>(in), static_cast<float*>(out), n);
}
#endif

struct VectorCast {
  DType from, to;
  bool needs_f16c;
  CastArrayFn fn;
  CastArrayFn fn16 = nullptr;  // the AVX-512 version, where there is one
};

constexpr VectorCast kVectorCasts[] = {
    {DType::F32, DType::F16, true, KILN_IF_X86(&f32_to_f16)},
    {DType::F16, DType::F32, true, KILN_IF_X86(&f16_to_f32)},
    {DType::F32, DType::BF16, false, KILN_IF_X86(&f32_to_bf16), KILN_IF_X86(&f32_to_bf16_16)},
    {DType::BF16, DType::F32, false, KILN_IF_X86(&bf16_to_f32), KILN_IF_X86(&bf16_to_f32_16)},
};

const VectorCast* find_vector_cast(DType from, DType to) {
  for (const VectorCast& c : kVectorCasts)
    if (c.from == from && c.to == to) return &c;
  return nullptr;
}

}  // namespace

std::string vector_cast_unsupported_reason(DType from, DType to) {
  const VectorCast* cast = find_vector_cast(from, to);
  if (!cast)
    return "no vector kernel casts " + std::string(dtype_name(from)) + " to " +
           std::string(dtype_name(to)) + " (only f32 <-> f16 and f32 <-> bf16)";
#ifdef KILN_X86
  if (std::string why = isa_unavailable_reason(Isa::Avx2); !why.empty()) return why;
  if (cast->needs_f16c && !has_f16c()) return "the CPU lacks F16C";
  return "";
#else
  return "vector casts are x86 only";
#endif
}

CastArrayFn vector_cast(DType from, DType to) {
  KILN_ASSERT(vector_cast_unsupported_reason(from, to).empty(),
              vector_cast_unsupported_reason(from, to));
  const VectorCast* cast = find_vector_cast(from, to);
  return cast->fn16 && has_avx512f() ? cast->fn16 : cast->fn;
}

}  // namespace kiln::cpu
