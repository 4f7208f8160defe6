// Array casts between dtypes: a reference over every pair of dtypes (one template, the scalar
// rules of convert.h) and vector kernels for the conversions models spend time in, f32 <-> f16
// (F16C) and f32 <-> bf16 (AVX2), equal to the reference bit for bit.
#pragma once

#include <cstdint>
#include <string>

#include "kiln/dtype.h"

namespace kiln::cpu {

// out[i] = convert<to>(in[i]) for i in [begin, end).
void cast_reference(DType from, DType to, const void* in, void* out, int64_t begin, int64_t end);

// out[i] = convert<to>(in[i]) for i in [0, n).
using CastArrayFn = void (*)(const void* in, void* out, int64_t n);

// Why there is no vector cast from `from` to `to` on this CPU ("" when there is).
std::string vector_cast_unsupported_reason(DType from, DType to);
// The vector cast; only when vector_cast_unsupported_reason(from, to) is empty.
CastArrayFn vector_cast(DType from, DType to);

}  // namespace kiln::cpu
