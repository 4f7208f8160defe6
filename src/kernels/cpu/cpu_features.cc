#include "kernels/cpu/cpu_features.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <limits>

#include "dnnl.hpp"
#include "kernels/cpu/fma_loops.h"

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

bool avx512_fma_full_width() {
#ifdef KILN_X86
  static const bool full = [] {
    if (!has_avx512f()) return false;
    // The same number of FMA instructions in each width, the best of several alternating runs
    // (a preemption only slows a run down). Paired 256-bit units take twice as long on 512-bit
    // ones; the threshold sits halfway.
    constexpr int64_t kIterations = 20000;
    volatile float sink = 0;
    auto seconds = [&](float (*loop)(int64_t)) {
      const auto start = std::chrono::steady_clock::now();
      sink = sink + loop(kIterations);
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    };
    seconds(fma_loop_avx512<12>);  // the first 512-bit instructions may wait for a power level
    double narrow = std::numeric_limits<double>::max(), wide = narrow;
    for (int run = 0; run < 7; ++run) {
      narrow = std::min(narrow, seconds(fma_loop_avx2<12>));
      wide = std::min(wide, seconds(fma_loop_avx512<12>));
    }
    return wide < 1.5 * narrow;
  }();
  return full;
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
