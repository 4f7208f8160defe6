// Run-time CPU feature checks: optimized kernels are compiled for their instruction set with
// function target attributes (never a global -march) and chosen only when the CPU has it.
#pragma once

#include <cstdint>
#include <string>

#include "kiln/dtype.h"

#if defined(__x86_64__) || defined(__i386__)
#define KILN_X86 1
// A function compiled for AVX2+FMA; call it only when has_avx2_fma(). Per function rather than
// per file, so that inline library code instantiated next to it stays portable.
#define KILN_TARGET_AVX2 __attribute__((target("avx2,fma")))
// The same for AVX-512 Foundation (with AVX2 and FMA); call it only when has_avx512f().
#define KILN_TARGET_AVX512 __attribute__((target("avx512f,avx2,fma")))
// `x` on x86 builds, where the AVX2 kernels exist; null elsewhere.
#define KILN_IF_X86(x) x
#else
#define KILN_IF_X86(x) nullptr
#endif

namespace kiln::cpu {

// The widest instruction set Kiln's own kernels may use: the CPU's, capped by the environment
// variable KILN_MAX_CPU_ISA, as ONEDNN_MAX_CPU_ISA caps oneDNN's (which Kiln leaves to that
// one): "avx512" (the default: no cap), "avx2" (8-lane kernels, so an AVX2 machine's bits on an
// AVX-512 one) or "portable" (no vector kernels of Kiln's own). Read once; any other value is
// E10001 from every call, so the first compile or kernel choice reports it.
enum class Isa { Portable, Avx2, Avx512 };
Isa max_isa();

// Why Kiln's kernels can't use `needed`: the CPU lacks it, or KILN_MAX_CPU_ISA excludes it;
// empty when they can.
std::string isa_unavailable_reason(Isa needed);

// AVX2 and FMA together (Haswell and Zen onward): what Kiln's vectorized kernels need. False
// when KILN_MAX_CPU_ISA is "portable"; so are the checks below.
bool has_avx2_fma();

// AVX-512 Foundation with AVX2 and FMA (Skylake-SP, Ice Lake, Zen 4 onward), the OS saving the
// 512-bit registers: twice the f32 lanes per instruction. False when KILN_MAX_CPU_ISA is below
// "avx512"; so is has_avx512_bf16.
bool has_avx512f();

// Whether this CPU's AVX-512 FMAs run at the rate of its AVX2 ones, so twice the f32 FLOPs: its
// FMA units are 512 bits wide (Zen 5, most Xeons), not 256-bit units paired up for one 512-bit
// instruction (Zen 4). Measured once, on the calling thread (about a millisecond); false
// without AVX-512.
bool avx512_fma_full_width();

// AVX512-BF16 (Cooper Lake, Sapphire Rapids, Zen 4 onward): bf16 dot products at twice the f32
// FMA rate.
bool has_avx512_bf16();

// Why Kiln's AMX kernels can't run here (empty when they can): AMX-TILE and AMX-BF16 (Sapphire
// Rapids onward) with AVX512-BF16 within KILN_MAX_CPU_ISA, and Linux granting this process the
// tile registers (arch_prctl, asked once; a CPU or kernel without them says no).
std::string amx_bf16_unavailable_reason();

// Whether oneDNN runs bf16 natively here: AVX512-BF16 in the ISA it uses, which
// ONEDNN_MAX_CPU_ISA can cap below the CPU's. Its bf16 matmuls and convolutions run only then;
// elsewhere they would be emulated or missing.
bool onednn_has_bf16();

// The largest cache Linux lists for CPU 0 in sysfs (glibc's sysconf overstated the L3 of a Zen 4
// EPYC tenfold), 0 when it lists none.
int64_t last_level_cache_bytes();

// Why an AVX2 kernel for f32 can't run on this CPU with this dtype; empty when it can.
std::string avx2_f32_unsupported_reason(DType dtype);

}  // namespace kiln::cpu
