#include "kernels/cpu/cpu_features.h"

#include <algorithm>
#include <fstream>

#include "dnnl.hpp"

namespace kiln::cpu {

bool has_avx2_fma() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool supported = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return supported;
#else
  return false;
#endif
}

bool has_avx512f() {
#if defined(__x86_64__) || defined(__i386__)
  // libgcc's check includes the OS's support for the registers (XCR0).
  static const bool supported = has_avx2_fma() && __builtin_cpu_supports("avx512f");
  return supported;
#else
  return false;
#endif
}

bool has_avx512_bf16() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool supported = __builtin_cpu_supports("avx512bf16");
  return supported;
#else
  return false;
#endif
}

bool onednn_has_bf16() {
  static const bool supported = [] {
    const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
    const auto bf16 = static_cast<unsigned>(dnnl::cpu_isa::avx512_core_bf16);
    return (isa & bf16) == bf16;  // oneDNN's ISAs are cumulative bit sets
  }();
  return supported;
}

int64_t last_level_cache_bytes() {
  static const int64_t bytes = [] {
    int64_t largest = 0;
    for (int index = 0; index < 8; ++index) {
      std::ifstream file("/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) +
                         "/size");
      int64_t size = 0;
      std::string unit;
      if (!(file >> size)) continue;
      file >> unit;
      const int64_t scale =
          unit == "K" ? 1 << 10 : unit == "M" ? 1 << 20 : unit == "G" ? 1 << 30 : 1;
      largest = std::max(largest, size * scale);
    }
    return largest;
  }();
  return bytes;
}

std::string avx2_f32_unsupported_reason(DType dtype) {
  if (!has_avx2_fma()) return "the CPU lacks AVX2 and FMA";
  if (dtype != DType::F32)
    return "the AVX2 kernel takes f32, not " + std::string(dtype_name(dtype));
  return "";
}

}  // namespace kiln::cpu
