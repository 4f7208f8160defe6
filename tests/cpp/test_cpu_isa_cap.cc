// KILN_MAX_CPU_ISA caps the instruction set of Kiln's own kernels. The cap is read once per
// process, so these tests assert only under the value ctest's cpu_isa_cap_* entries set
// (CMakeLists.txt) and skip elsewhere.
#include <cstdlib>
#include <random>
#include <string>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/elementwise_avx2.h"
#include "kiln/error.h"
#include "ops_test_util.h"

namespace kiln {
namespace {

using test::OneNode;
using test::type_of;

bool cap_is(const char* value) {
  const char* cap = std::getenv("KILN_MAX_CPU_ISA");
  return cap && std::string(cap) == value;
}

#ifdef KILN_X86
// Under "avx2" on an AVX-512 CPU: the AVX-512 kernels decline, naming the cap, and an op with
// 16-lane code gives the 8-lane bits (gelu's differ between the two on [-7, 7]).
TEST(CpuIsaCap, Avx2KeepsKilnKernelsToEightLanes) {
  if (!cap_is("avx2")) GTEST_SKIP() << "runs under KILN_MAX_CPU_ISA=avx2 (ctest cpu_isa_cap_avx2)";
  if (!__builtin_cpu_supports("avx512f")) GTEST_SKIP() << "the CPU lacks AVX-512: nothing to cap";
  EXPECT_EQ(cpu::max_isa(), cpu::Isa::Avx2);
  EXPECT_TRUE(cpu::has_avx2_fma());
  EXPECT_FALSE(cpu::has_avx512f());
  EXPECT_FALSE(cpu::has_avx512_bf16());
  EXPECT_EQ(cpu::isa_unavailable_reason(cpu::Isa::Avx512), "KILN_MAX_CPU_ISA=avx2 excludes AVX-512");
  // AMX kernels too, on a CPU with AMX as on one without.
  const std::string amx = cpu::amx_bf16_unavailable_reason();
  EXPECT_TRUE(amx == "KILN_MAX_CPU_ISA=avx2 excludes AVX-512" || amx == "the CPU lacks AMX-BF16")
      << amx;

  OneNode norm("layer_norm", {type_of(DType::F32, {4, 8})});
  EXPECT_EQ(test::unsupported_reason(*norm.node, "avx512"), "KILN_MAX_CPU_ISA=avx2 excludes AVX-512");

  const int64_t n = 4096;
  Tensor x = Tensor::empty(DType::F32, {n});
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> spread(-6, 6);
  for (int64_t i = 0; i < n; ++i) x.data<float>()[i] = spread(rng);
  OneNode gelu("gelu", {type_of(DType::F32, {n})});
  const Tensor got = test::run_kernel(*gelu.node, "avx2", {x})[0];
  Tensor eight = Tensor::empty(DType::F32, {n});
  cpu::avx2::gelu_erf(x.data<float>(), eight.data<float>(), n);
  EXPECT_TRUE(test::same_values(got, eight));
}
#endif

// An unknown value is E10001 from every check, naming the variable and the values it takes.
TEST(CpuIsaCap, UnknownValueIsE10001) {
  if (!cap_is("avx3")) GTEST_SKIP() << "runs under KILN_MAX_CPU_ISA=avx3 (ctest cpu_isa_cap_unknown)";
  for (int attempt = 0; attempt < 2; ++attempt) {
    try {
      cpu::has_avx2_fma();
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
      EXPECT_NE(std::string(e.what()).find("KILN_MAX_CPU_ISA is 'avx3'; set it to avx512, avx2 or "
                                           "portable"),
                std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace kiln
