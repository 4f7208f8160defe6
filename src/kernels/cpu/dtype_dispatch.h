// From a run-time DType to a template: one templated kernel serves every dtype.
//
//   dispatch_dtype(dtype, [&](auto zero) { using T = decltype(zero); ... });
//
// T is the dtype's storage type: float, double, int64_t, ..., bool, and cpu::Float16 /
// cpu::BFloat16 for the 16-bit floats. Kernels that only move elements (never look at their
// values) dispatch on the element size instead (with_element_type in block_copy.h): 4
// instantiations rather than 10.
#pragma once

#include <cstdint>

#include "kernels/cpu/float16.h"
#include "kiln/dtype.h"
#include "kiln/error.h"

namespace kiln::cpu {

template <typename Fn>
decltype(auto) dispatch_dtype(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::F32: return fn(float{});
    case DType::F16: return fn(Float16{});
    case DType::BF16: return fn(BFloat16{});
    case DType::F64: return fn(double{});
    case DType::I64: return fn(int64_t{});
    case DType::I32: return fn(int32_t{});
    case DType::I16: return fn(int16_t{});
    case DType::I8: return fn(int8_t{});
    case DType::U8: return fn(uint8_t{});
    case DType::Bool: return fn(bool{});
  }
  KILN_ASSERT(false, "unknown dtype " << static_cast<int>(dtype));
  __builtin_unreachable();
}

}  // namespace kiln::cpu
