// The fused matmul epilogue in every GEMM kernel: each kernel with an epilogue against the same
// kernel without one followed by the epilogue on its output, over shapes that split the output
// into several row panels, batches and broadcast batches, and every activation.
#include <gtest/gtest.h>

#include <cmath>

#include "kernel_harness.h"
#include "kernels/cpu/gemm_epilogue.h"

namespace kiln {
namespace {

using cpu::Activation;
using cpu::GemmEpilogue;

struct EpilogueCase {
  std::vector<int64_t> a, b;
  bool transpose_b = false;
  bool b_constant = false;
  GemmEpilogue epilogue;
};

struct Built {
  Graph graph;
  Node* fused = nullptr;
  Node* plain = nullptr;
  std::vector<Tensor> inputs;  // A, B, then the epilogue's
};

void build(const EpilogueCase& c, Built& out, std::mt19937& rng) {
  Graph& g = out.graph;
  out.inputs = {test::random_tensor(DType::F32, c.a, rng, -1, 1),
                test::random_tensor(DType::F32, c.b, rng, -1, 1)};
  Value* a = g.add_input("A", TensorType{DType::F32, make_shape(c.a)});
  Value* b = c.b_constant ? g.add_constant("B", out.inputs[1])
                          : g.add_input("B", TensorType{DType::F32, make_shape(c.b)});
  Value* plain = g.add("matmul", {a, b}, {{"transpose_b", c.transpose_b}});
  out.plain = plain->producer();
  std::vector<int64_t> c_sizes = static_sizes(plain->type().shape);
  std::vector<Value*> inputs{a, b};
  if (c.epilogue.bias) {
    out.inputs.push_back(test::random_tensor(DType::F32, {c_sizes.back()}, rng, -1, 1));
    inputs.push_back(g.add_input("bias", TensorType{DType::F32, make_shape({c_sizes.back()})}));
  }
  if (c.epilogue.residual) {
    out.inputs.push_back(test::random_tensor(DType::F32, c_sizes, rng, -1, 1));
    inputs.push_back(g.add_input("residual", plain->type()));
  }
  out.fused = g.add("matmul", inputs,
                    {{"transpose_b", c.transpose_b},
                     {"bias", c.epilogue.bias},
                     {"fused_activation", std::string(cpu::activation_name(c.epilogue.activation))},
                     {"residual", c.epilogue.residual}})
                  ->producer();
}

// The epilogue applied to a kernel's plain output: with Kiln's f32 path (what the OpenBLAS
// kernel runs per panel) or with the reference (the reference kernel's).
Tensor with_epilogue(const Tensor& plain, const EpilogueCase& c, const Built& built,
                     bool reference) {
  Tensor out = Tensor::empty(DType::F32, plain.sizes());
  std::copy_n(plain.data<float>(), plain.numel(), out.data<float>());
  const int64_t n = plain.sizes().back(), rows = plain.numel() / n;
  const float* bias = c.epilogue.bias ? built.inputs[2].data<float>() : nullptr;
  const float* residual = c.epilogue.residual ? built.inputs.back().data<float>() : nullptr;
  if (!reference) {
    cpu::apply_epilogue_f32(c.epilogue, out.data<float>(), rows, n, bias, residual);
    return out;
  }
  for (int64_t i = 0; i < out.numel(); ++i)
    out.data<float>()[i] = cpu::reference_epilogue(c.epilogue, out.data<float>()[i],
                                                   bias ? bias + i % n : nullptr,
                                                   residual ? residual + i : nullptr);
  return out;
}

void check(const EpilogueCase& c) {
  std::mt19937 rng(static_cast<uint32_t>(c.a.back() * 31 + c.b.back()));
  Built built;
  build(c, built, rng);
  const std::vector<Tensor> ab{built.inputs[0], built.inputs[1]};
  KernelSpec fused_spec = test::spec_with_constants(*built.fused);
  KernelSpec plain_spec = test::spec_with_constants(*built.plain);
  for (const char* kernel : {"reference", "openblas", "onednn"}) {
    SCOPED_TRACE(kernel);
    Tensor got = test::create_and_run("matmul", kernel, fused_spec, built.inputs);
    Tensor plain = test::create_and_run("matmul", kernel, plain_spec, ab);
    const bool reference = std::string(kernel) == "reference";
    Tensor want = with_epilogue(plain, c, built, reference);
    // oneDNN applies the activation as its own eltwise post-op: a few ULP of max(1, |y|) from
    // Kiln's (see test_passes_fuse_matmul.cc); everything else is the same arithmetic.
    const bool exact = std::string(kernel) != "onednn" ||
                       c.epilogue.activation == Activation::None ||
                       c.epilogue.activation == Activation::Relu;
    for (int64_t i = 0; i < want.numel(); ++i) {
      const float w = want.data<float>()[i], v = got.data<float>()[i];
      if (exact)
        ASSERT_EQ(v, w) << "element " << i;
      else
        ASSERT_LE(std::fabs(v - w), std::ldexp(std::max(1.f, std::fabs(w)), -19)) << "element " << i;
    }
  }
}

TEST(MatmulEpilogueKernels, EveryActivationWithBiasAndResidual) {
  for (Activation act : {Activation::None, Activation::Relu, Activation::GeluErf,
                         Activation::GeluTanh, Activation::Silu, Activation::Sigmoid,
                         Activation::Tanh}) {
    SCOPED_TRACE(cpu::activation_name(act));
    check({{37, 24}, {70, 24}, true, true, {true, act, true}});
    check({{5, 24}, {24, 70}, false, false, {false, act, false}});
  }
}

// 200 rows of 1024 columns: several 64-row panels and a tail in the OpenBLAS kernel.
TEST(MatmulEpilogueKernels, PanelsBatchesAndBroadcast) {
  const GemmEpilogue full{true, Activation::Relu, true};
  check({{200, 8}, {8, 1024}, false, false, full});
  check({{2, 100, 8}, {1024, 8}, true, true, full});     // batch folded into M
  check({{3, 50, 8}, {3, 8, 1024}, false, false, full});  // one GEMM per matrix
  check({{3, 1, 7, 8}, {2, 8, 9}, false, false, full});   // broadcast batch
  check({{8}, {8, 5}, false, false, full});               // rank-1 A
  check({{4, 0}, {0, 6}, false, false, full});            // K = 0: the epilogue of zeros
  check({{0, 8}, {8, 6}, false, false, {false, Activation::Tanh, true}});  // no rows
}

}  // namespace
}  // namespace kiln
