#include "kernels/cpu/cpu_features.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <optional>
#include <utility>

#if defined(__x86_64__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "dnnl.hpp"
#include "kernels/cpu/fma_loops.h"
#include "kiln/error.h"

namespace kiln::cpu {

namespace {

constexpr std::pair<Isa, const char*> kIsaNames[] = {
    {Isa::Portable, "portable"}, {Isa::Avx2, "avx2"}, {Isa::Avx512, "avx512"}};

const char* isa_name(Isa isa) {
  for (const auto& [candidate, name] : kIsaNames)
    if (candidate == isa) return name;
  return "?";
}

// The CPU's own, before any cap. libgcc's checks include the OS's support for the registers
// (XCR0).
Isa cpu_isa() {
#if defined(__x86_64__) || defined(__i386__)
  static const Isa isa = !(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
                             ? Isa::Portable
                         : __builtin_cpu_supports("avx512f") ? Isa::Avx512
                                                             : Isa::Avx2;
  return isa;
#else
  return Isa::Portable;
#endif
}

// KILN_MAX_CPU_ISA, Avx512 when unset; nullopt for a value that names no ISA.
std::optional<Isa> isa_cap() {
  const char* text = std::getenv("KILN_MAX_CPU_ISA");
  if (!text || !*text) return Isa::Avx512;
  std::string value(text);
  std::transform(value.begin(), value.end(), value.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (const auto& [isa, name] : kIsaNames)
    if (value == name) return isa;
  return std::nullopt;
}

}  // namespace

Isa max_isa() {
  static const std::optional<Isa> cap = isa_cap();
  if (!cap)
    throw_error(ErrorCode::InvalidArgument, "KILN_MAX_CPU_ISA is '",
                std::getenv("KILN_MAX_CPU_ISA"), "'; set it to avx512, avx2 or portable, or unset it");
  return std::min(cpu_isa(), *cap);
}

std::string isa_unavailable_reason(Isa needed) {
  if (cpu_isa() < needed)
    return needed == Isa::Avx512 ? "the CPU lacks AVX-512" : "the CPU lacks AVX2 and FMA";
  if (max_isa() < needed)
    return std::string("KILN_MAX_CPU_ISA=") + isa_name(max_isa()) + " excludes " +
           (needed == Isa::Avx512 ? "AVX-512" : "AVX2");
  return "";
}

bool has_avx2_fma() { return max_isa() >= Isa::Avx2; }

bool has_avx512f() { return max_isa() >= Isa::Avx512; }

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
  return supported && has_avx512f();
#else
  return false;
#endif
}

std::string amx_bf16_unavailable_reason() {
#if defined(__x86_64__)
  static const std::string cpu = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    const bool tile = __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) && (edx >> 24 & 1) &&
                      (edx >> 22 & 1);  // AMX-TILE, AMX-BF16
    if (!tile) return std::string("the CPU lacks AMX-BF16");
    // Linux hands out the 8 KiB of tile registers per process on request (ARCH_REQ_XCOMP_PERM
    // for XFEATURE_XTILEDATA); oneDNN asks the same, and a second request is harmless.
    constexpr long kReqXcompPerm = 0x1023, kXtileData = 18;
    if (syscall(SYS_arch_prctl, kReqXcompPerm, kXtileData) != 0)
      return std::string("the operating system does not grant the AMX tile registers");
    return std::string();
  }();
  if (!cpu.empty()) return cpu;
  if (!has_avx512_bf16())
    return has_avx512f() ? "the CPU lacks AVX512-BF16" : isa_unavailable_reason(Isa::Avx512);
  return "";
#else
  return "not an x86-64 CPU";
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
  if (std::string why = isa_unavailable_reason(Isa::Avx2); !why.empty()) return why;
  if (dtype != DType::F32)
    return "the AVX2 kernel takes f32, not " + std::string(dtype_name(dtype));
  return "";
}

}  // namespace kiln::cpu
