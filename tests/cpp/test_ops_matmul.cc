// matmul: type inference, the reference kernel on hand-computed values, and every optimized
// kernel against the reference on random inputs (error bound in kernel_harness.h).
#include <gtest/gtest.h>

#include <thread>

#include "kernel_harness.h"
#include "kernels/cpu/gemm.h"

namespace kiln {
namespace {

using test::abs_of;
using test::create_and_run;
using test::error_message;
using test::run_instance;
using test::spec_with_constants;
using test::tensor_of;
using test::values_as_double;

TensorType f32(std::vector<int64_t> sizes) { return TensorType{DType::F32, make_shape(sizes)}; }

struct MatmulCase {
  std::vector<int64_t> a, b;
  bool transpose_b = false;
  bool b_constant = false;  // weights: the oneDNN kernel prepacks them at creation

  std::string name() const {
    return shape_string(a) + " x " + shape_string(b) + (transpose_b ? " transpose_b" : "") +
           (b_constant ? " (B constant)" : "");
  }
};

// A graph holding one matmul node on inputs of the case's sizes; B is a constant when asked.
struct MatmulGraph {
  Graph graph;
  Node* node = nullptr;
  std::vector<Tensor> inputs;

  MatmulGraph(const MatmulCase& c, std::mt19937& rng, DType dtype = DType::F32) {
    inputs = {test::random_tensor(dtype, c.a, rng, -1, 1),
              test::random_tensor(dtype, c.b, rng, -1, 1)};
    Value* a = graph.add_input("A", TensorType{dtype, make_shape(c.a)});
    Value* b = c.b_constant ? graph.add_constant("B", inputs[1])
                            : graph.add_input("B", TensorType{dtype, make_shape(c.b)});
    // Uncast: bf16 operands as fold_bf16_casts_into_matmul leaves them.
    graph.add_uncast("matmul", {a, b}, {{"transpose_b", c.transpose_b}});
    node = graph.nodes().at(0);
  }
};

// The library kernels against the reference: both for f32; for bf16 operands (which the
// reference widens, summing in double as for f32) oneDNN's, and the widened f32 GEMM it falls
// back to on CPUs without AVX512-BF16. create() is called whatever
// unsupported_reason says: the selection rule prefers one library per shape class, but each must
// be right on all.
void check_kernels_against_reference(const MatmulCase& c, DType dtype = DType::F32) {
  SCOPED_TRACE(c.name() + " " + std::string(dtype_name(dtype)));
  std::mt19937 rng(static_cast<uint32_t>(c.a.size() * 1000 + c.b.size() + c.a.back()));
  MatmulGraph m(c, rng, dtype);
  KernelSpec spec = spec_with_constants(*m.node);
  Tensor expected = create_and_run("matmul", "reference", spec, m.inputs);
  Tensor magnitude =
      create_and_run("matmul", "reference", spec, {abs_of(m.inputs[0]), abs_of(m.inputs[1])});
  const int64_t k = c.a.back();
  const std::vector<const char*> kernels = dtype == DType::BF16
                                               ? std::vector<const char*>{"onednn"}
                                               : std::vector<const char*>{"openblas", "onednn"};
  for (const char* name : kernels) {
    Tensor got = create_and_run("matmul", name, spec, m.inputs);
    test::expect_within_dot_bound(got, expected, magnitude, k, std::string(name) + " " + c.name());
    if (c.b_constant) {  // memory.gemm_weights_in_place: B read as stored, not prepacked
      KernelSpec in_place = spec;
      in_place.gemm_weights_in_place = true;
      Tensor read_in_place = create_and_run("matmul", name, in_place, m.inputs);
      test::expect_within_dot_bound(read_in_place, expected, magnitude, k,
                                    std::string(name) + " in place " + c.name());
    }
  }
  const cpu::MatmulGeometry geometry =
      cpu::make_matmul_geometry(c.a, c.b, c.transpose_b);
  if (dtype == DType::BF16 && !geometry.is_degenerate()) {  // what CPUs without AVX512-BF16 run
    auto widened = cpu::create_widened_bf16(
        spec, [&](const KernelSpec& f32) { return cpu::create_onednn_matmul(geometry, f32); });
    Tensor got = run_instance(*widened, spec, m.inputs);
    test::expect_within_dot_bound(got, expected, magnitude, k, "widened " + c.name());
    // A constant B is read from the f32 GEMM's prepacked copy: the graph may release it.
    EXPECT_EQ(widened->reads_input_at_run_time(1), !c.b_constant) << c.name();
  }
}

std::vector<int64_t> b_sizes(int64_t k, int64_t n, bool transpose_b) {
  return transpose_b ? std::vector<int64_t>{n, k} : std::vector<int64_t>{k, n};
}

// ---------------------------------------------------------------- reference, by hand

TEST(OpsMatmul, ReferenceMatchesHandComputedValues) {
  for (DType dtype : {DType::F32, DType::F64}) {
    for (bool transpose_b : {false, true}) {
      Graph g;
      Value* a = g.add_input("A", TensorType{dtype, make_shape({2, 2})});
      Value* b = g.add_input("B", TensorType{dtype, make_shape({2, 2})});
      g.add("matmul", {a, b}, {{"transpose_b", transpose_b}});
      Tensor lhs = tensor_of(dtype, {2, 2}, {1, 2, 3, 4});
      // [[5, 6], [7, 8]] as B, or stored transposed.
      Tensor rhs = tensor_of(
          dtype, {2, 2},
          transpose_b ? std::vector<double>{5, 7, 6, 8} : std::vector<double>{5, 6, 7, 8});
      Tensor out =
          create_and_run("matmul", "reference", spec_with_constants(*g.nodes()[0]), {lhs, rhs});
      EXPECT_EQ(values_as_double(out), (std::vector<double>{19, 22, 43, 50})) << dtype_name(dtype);
    }
  }
}

TEST(OpsMatmul, ReferenceBroadcastsBatchAndTakesVectors) {
  Graph g;
  // A [2, 1, 1, 2] x B [3, 2, 1]: out[i, j] = A[i] . B[j].
  Value* a = g.add_input("A", f32({2, 1, 1, 2}));
  Value* b = g.add_input("B", f32({3, 2, 1}));
  g.add("matmul", {a, b});
  Tensor out = create_and_run(
      "matmul", "reference", spec_with_constants(*g.nodes()[0]),
      {tensor_of({2, 1, 1, 2}, {1, 2, 3, 4}), tensor_of({3, 2, 1}, {1, 0, 0, 1, 1, 1})});
  EXPECT_EQ(out.sizes(), (std::vector<int64_t>{2, 3, 1, 1}));
  EXPECT_EQ(values_as_double(out), (std::vector<double>{1, 2, 3, 3, 4, 7}));

  Graph v;
  Value* x = v.add_input("x", f32({3}));
  Value* y = v.add_input("y", f32({3}));
  v.add("matmul", {x, y});
  Tensor dot = create_and_run("matmul", "reference", spec_with_constants(*v.nodes()[0]),
                              {tensor_of({3}, {1, 2, 3}), tensor_of({3}, {4, 5, 6})});
  EXPECT_EQ(dot.sizes(), std::vector<int64_t>{});
  EXPECT_EQ(values_as_double(dot), std::vector<double>{32});
}

// ---------------------------------------------------------------- optimized vs reference

TEST(OpsMatmul, KernelsMatchReferenceOnOddSizes) {
  const int64_t sizes[] = {1, 3, 7, 17, 64, 129};
  for (int64_t m : sizes)
    for (int64_t n : sizes)
      for (int64_t k : sizes) check_kernels_against_reference({{m, k}, {k, n}});
}

TEST(OpsMatmul, KernelsMatchReferenceWithTransposeAndConstantB) {
  const int64_t sizes[] = {1, 3, 17, 129};
  for (int64_t m : sizes)
    for (int64_t n : sizes)
      for (int64_t k : sizes)
        for (bool transpose_b : {false, true})
          check_kernels_against_reference({{m, k}, b_sizes(k, n, transpose_b), transpose_b, true});
  for (int64_t m : {1, 7, 64}) check_kernels_against_reference({{m, 33}, {40, 33}, true, false});
}

// A product of two bf16 values is exact in f32, so the f32 bound holds for bf16 operands too.
TEST(OpsMatmul, Bf16OperandKernelsMatchReference) {
  const int64_t sizes[] = {1, 3, 17, 129};
  for (int64_t m : sizes)
    for (int64_t n : sizes)
      for (int64_t k : sizes)
        for (bool transpose_b : {false, true})
          check_kernels_against_reference({{m, k}, b_sizes(k, n, transpose_b), transpose_b, true},
                                          DType::BF16);
  check_kernels_against_reference({{2, 1, 7, 33}, {3, 33, 5}}, DType::BF16);  // broadcast batch
  check_kernels_against_reference({{64, 40}, {40, 24}}, DType::BF16);  // B an input: widened per run
}

// A bf16 result (fuse_matmul_epilogue's dtype = bf16) with the whole epilogue: the f32 bias,
// gelu, a bf16 residual, rounded once. oneDNN against the reference: within the dot-product
// bound of the f32 value, plus one bf16 step where the two round apart.
TEST(OpsMatmul, Bf16ResultKernelsMatchReference) {
  std::mt19937 rng(31);
  for (auto [m, k, n] : {std::array<int64_t, 3>{1, 33, 17}, {17, 129, 64}, {64, 768, 96}}) {
    SCOPED_TRACE(std::to_string(m) + "x" + std::to_string(k) + "x" + std::to_string(n));
    Graph g;
    Value* a = g.add_input("A", TensorType{DType::BF16, make_shape({m, k})});
    Value* w = g.add_constant("W", test::random_tensor(DType::BF16, {n, k}, rng, -1, 1));
    Value* bias = g.add_input("bias", f32({n}));
    Value* r = g.add_input("r", TensorType{DType::BF16, make_shape({m, n})});
    Value* y = g.add_uncast("matmul", {a, w, bias, r},
                            {{"transpose_b", true}, {"bias", true}, {"residual", true},
                             {"fused_activation", std::string("gelu_erf")},
                             {"dtype", std::string("bf16")}});
    ASSERT_EQ(y->type().dtype, DType::BF16);
    KernelSpec spec = spec_with_constants(*y->producer());
    std::vector<Tensor> inputs{test::random_tensor(DType::BF16, {m, k}, rng, -1, 1),
                               w->constant(), test::random_tensor(DType::F32, {n}, rng, -1, 1),
                               test::random_tensor(DType::BF16, {m, n}, rng, -1, 1)};
    // Σ|a·w| + |bias| bounds the pre-activation error; gelu's slope is at most 1.13, and the
    // residual adds its own value's rounding.
    g.add_uncast("matmul", {a, w}, {{"transpose_b", true}});
    const std::vector<double> magnitude = values_as_double(
        create_and_run("matmul", "reference", spec_with_constants(*g.nodes().back()),
                       {abs_of(inputs[0]), abs_of(inputs[1])}));
    test::expect_bf16_kernel_close(
        "matmul", "onednn", spec, inputs, [&](size_t i) {
          return 1.13 * static_cast<double>(k + 4) * std::ldexp(magnitude[i] + 1, -24);
        });
  }
}

TEST(OpsMatmul, KernelsMatchReferenceOnBroadcastBatches) {
  for (int64_t m : {1, 7, 17})
    for (bool transpose_b : {false, true})
      for (bool b_constant : {false, true}) {
        const int64_t k = 9, n = 13;
        auto b = [&](std::vector<int64_t> batch) {
          std::vector<int64_t> sizes = b_sizes(k, n, transpose_b);
          batch.insert(batch.end(), sizes.begin(), sizes.end());
          return batch;
        };
        check_kernels_against_reference({{2, 1, m, k}, b({3}), transpose_b, b_constant});
        check_kernels_against_reference({{2, 3, m, k}, b({2, 3}), transpose_b, b_constant});
        check_kernels_against_reference({{m, k}, b({4}), transpose_b, b_constant});
        check_kernels_against_reference({{4, m, k}, b({}), transpose_b, b_constant});
        check_kernels_against_reference({{3, 1, m, k}, b({1, 2}), transpose_b, b_constant});
      }
}

TEST(OpsMatmul, KernelsMatchReferenceOnVectors) {
  check_kernels_against_reference({{17}, {17}});
  check_kernels_against_reference({{17}, {17, 5}});
  check_kernels_against_reference({{17}, {3, 17, 5}});
  check_kernels_against_reference({{4, 17}, {17}});
  check_kernels_against_reference({{2, 4, 17}, {17}, false, true});
  check_kernels_against_reference({{17}, {5, 17}, true, true});
}

TEST(OpsMatmul, ZeroSizeGivesZerosOrNothing) {
  const std::vector<MatmulCase> cases = {
      {{0, 5}, {5, 4}}, {{3, 0}, {0, 4}},    {{3, 0}, {4, 0}, true, true},
      {{3, 5}, {5, 0}}, {{0, 3, 5}, {5, 4}}, {{2, 3, 0}, {2, 0, 4}}};
  for (const MatmulCase& c : cases) {
    SCOPED_TRACE(c.name());
    std::mt19937 rng(7);
    MatmulGraph m(c, rng);
    KernelSpec spec = spec_with_constants(*m.node);
    for (const char* name : {"openblas", "onednn", "reference"}) {
      Tensor out = create_and_run("matmul", name, spec, m.inputs);
      EXPECT_EQ(out.sizes(), static_sizes(spec.outputs[0].shape));
      for (double v : values_as_double(out)) ASSERT_EQ(v, 0.0) << name;  // K = 0: all zeros
    }
  }
}

// One instance, four threads at once, each with its own scratch: the same bits as a serial run.
TEST(OpsMatmul, ConcurrentRunsOfOneInstanceMatchSerial) {
  for (bool b_constant : {false, true}) {
    const MatmulCase c{{3, 65, 96}, {80, 96}, true, b_constant};
    std::mt19937 rng(11);
    MatmulGraph m(c, rng);
    KernelSpec spec = spec_with_constants(*m.node);
    for (const char* name : {"openblas", "onednn", "reference"}) {
      SCOPED_TRACE(std::string(name) + " " + c.name());
      auto kernel = test::kernel_of("matmul", name).create(spec);
      Tensor serial = run_instance(*kernel, spec, m.inputs);
      std::vector<Tensor> results(4);
      std::vector<std::thread> threads;
      for (size_t t = 0; t < results.size(); ++t)
        threads.emplace_back([&, t] {
          for (int repeat = 0; repeat < 5; ++repeat)
            results[t] = run_instance(*kernel, spec, m.inputs);
        });
      for (std::thread& t : threads) t.join();
      for (const Tensor& r : results) EXPECT_TRUE(r.same_contents(serial));
    }
  }
}

// ---------------------------------------------------------------- kernel selection

TEST(OpsMatmul, SelectionFollowsTheMeasuredRule) {
  std::mt19937 rng(3);
  for (int64_t m : {1, 8, 16, 128}) {
    MatmulGraph g({{m, 64}, {64, 32}}, rng);
    KernelSpec spec = spec_with_constants(*g.node);
    std::string why;
    cpu::GemmLibrary preferred =
        cpu::preferred_gemm_library(cpu::make_matmul_geometry({m, 64}, {64, 32}, false), false,
                                    &why);
    std::string openblas_reason = test::kernel_of("matmul", "openblas").unsupported_reason(spec);
    // OpenBLAS, first in the list, steps aside with the measured reason when oneDNN is faster.
    EXPECT_EQ(openblas_reason, preferred == cpu::GemmLibrary::OpenBLAS ? "" : why) << "M=" << m;
    if (m < 16) {
      EXPECT_EQ(preferred, cpu::GemmLibrary::OneDNN) << "M=" << m;
    }
    EXPECT_EQ(test::kernel_of("matmul", "onednn").unsupported_reason(spec), "");
  }
  // The rule for each class of CPU, whatever this one is.
  const cpu::GemmLibraryKernels avx512_both{true, false, "SkylakeX"};
  const cpu::GemmLibraryKernels openblas_half_width{true, true, "Haswell"};
  const cpu::GemmLibraryKernels avx2_both{false, false, "Haswell"};
  const cpu::MatmulGeometry decode = cpu::make_matmul_geometry({12, 1, 64}, {12, 64, 128}, false);
  const cpu::MatmulGeometry kn = cpu::make_matmul_geometry({128, 64}, {64, 32}, false);
  const cpu::MatmulGeometry nk = cpu::make_matmul_geometry({128, 64}, {32, 64}, true);
  const cpu::MatmulGeometry small_kn = cpu::make_matmul_geometry({8, 64}, {64, 32}, false);
  std::string why;
  // AVX-512 in both libraries: oneDNN but for a batch of one-row products and, from M = 16,
  // constant weights [K, N] read in place ([N, K] stays with oneDNN).
  EXPECT_EQ(cpu::preferred_gemm_library(kn, false, &why, avx512_both), cpu::GemmLibrary::OneDNN);
  EXPECT_EQ(cpu::preferred_gemm_library(decode, false, &why, avx512_both),
            cpu::GemmLibrary::OpenBLAS);
  EXPECT_NE(why.find("M=1"), std::string::npos) << why;
  EXPECT_EQ(cpu::preferred_gemm_library(kn, true, &why, avx512_both), cpu::GemmLibrary::OpenBLAS);
  EXPECT_NE(why.find("in place"), std::string::npos) << why;
  EXPECT_EQ(cpu::preferred_gemm_library(nk, true, nullptr, avx512_both), cpu::GemmLibrary::OneDNN);
  EXPECT_EQ(cpu::preferred_gemm_library(small_kn, true, nullptr, avx512_both),
            cpu::GemmLibrary::OneDNN);
  // OpenBLAS at half the peak (AVX2 kernels, full-width AVX-512 FMAs): oneDNN everywhere, and
  // the reason names OpenBLAS's kernels.
  for (const auto* g : {&decode, &kn, &nk, &small_kn}) {
    EXPECT_EQ(cpu::preferred_gemm_library(*g, true, &why, openblas_half_width),
              cpu::GemmLibrary::OneDNN);
    EXPECT_NE(why.find("Haswell"), std::string::npos) << why;
  }
  // No AVX-512: oneDNN below M = 16, OpenBLAS from there.
  EXPECT_EQ(cpu::preferred_gemm_library(small_kn, false, nullptr, avx2_both),
            cpu::GemmLibrary::OneDNN);
  EXPECT_EQ(cpu::preferred_gemm_library(kn, false, nullptr, avx2_both),
            cpu::GemmLibrary::OpenBLAS);
  // A batch folds into M when B is shared: [8, 4, 64] x [64, 32] is one 32x32x64 GEMM.
  EXPECT_EQ(cpu::make_matmul_geometry({8, 4, 64}, {64, 32}, false).m, 32);

  MatmulGraph f64({{4, 4}, {4, 4}}, rng, DType::F64);
  KernelSpec spec = spec_with_constants(*f64.node);
  EXPECT_EQ(test::kernel_of("matmul", "openblas").unsupported_reason(spec), "f32 only");
  EXPECT_EQ(test::kernel_of("matmul", "onednn").unsupported_reason(spec), "f32 and bf16 only");

  MatmulGraph bf16({{4, 4}, {4, 4}}, rng, DType::BF16);
  KernelSpec bf16_spec = spec_with_constants(*bf16.node);
  EXPECT_EQ(test::kernel_of("matmul", "openblas").unsupported_reason(bf16_spec), "f32 only");
  EXPECT_EQ(test::kernel_of("matmul", "onednn").unsupported_reason(bf16_spec), "");
}

// ---------------------------------------------------------------- type inference

TEST(OpsMatmul, InfersShapesWithSymbolsAndBroadcast) {
  Graph g;
  Dim batch = g.add_symbol("batch", 1, 64);
  Value* a = g.add_input("A", TensorType{DType::F32, {batch, Dim(1), Dim(7), Dim(5)}});
  Value* w = g.add_input("W", f32({3, 11, 5}));
  Value* y = g.add("matmul", {a, w}, {{"transpose_b", true}});
  EXPECT_EQ(y->type().shape, (Shape{batch, Dim(3), Dim(7), Dim(11)}));

  Value* v = g.add_input("v", f32({5}));
  EXPECT_EQ(g.add("matmul", {a, v})->type().shape, (Shape{batch, Dim(1), Dim(7)}));
  EXPECT_EQ(g.add("matmul", {v, g.add_input("m", f32({5, 2}))})->type().shape, Shape{Dim(2)});
}

// bf16 operands (fold_bf16_casts_into_matmul's form) give an f32 result with an f32 epilogue.
TEST(OpsMatmul, Bf16OperandsGiveAnF32Result) {
  Graph g;
  Value* a = g.add_input("A", TensorType{DType::BF16, make_shape({7, 5})});
  Value* w = g.add_input("W", TensorType{DType::BF16, make_shape({3, 5})});
  Value* bias = g.add_input("bias", f32({3}));
  Value* y = g.add_uncast("matmul", {a, w, bias}, {{"transpose_b", true}, {"bias", true}});
  EXPECT_EQ(y->type(), f32({7, 3}));
  Value* f = g.add_input("F", f32({5, 3}));
  std::string msg = error_message([&] { g.add_uncast("matmul", {a, f}); },
                                  ErrorCode::ShapeInference);
  EXPECT_NE(msg.find("same dtype"), std::string::npos) << msg;
  Value* bf16_bias = g.add_input("bf16_bias", TensorType{DType::BF16, make_shape({3})});
  msg = error_message([&] {
    g.add_uncast("matmul", {a, w, bf16_bias}, {{"transpose_b", true}, {"bias", true}});
  }, ErrorCode::ShapeInference);
  EXPECT_NE(msg.find("the accumulator's dtype (f32)"), std::string::npos) << msg;
}

TEST(OpsMatmul, ShapeInferenceFailuresNameTheShapes) {
  Graph g;
  Value* a = g.add_input("A", f32({2, 3}));
  Value* b = g.add_input("B", f32({4, 5}));
  std::string msg = error_message([&] { g.add("matmul", {a, b}); }, ErrorCode::ShapeInference);
  EXPECT_NE(msg.find("f32[2, 3], f32[4, 5]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("contraction dims"), std::string::npos) << msg;

  Value* a3 = g.add_input("A3", f32({2, 3, 4}));
  Value* b3 = g.add_input("B3", f32({5, 4, 6}));
  msg = error_message([&] { g.add("matmul", {a3, b3}); }, ErrorCode::ShapeInference);
  EXPECT_NE(msg.find("can't be broadcast"), std::string::npos) << msg;
  EXPECT_NE(msg.find("f32[2, 3, 4], f32[5, 4, 6]"), std::string::npos) << msg;

  Value* d = g.add_input("D", TensorType{DType::F64, make_shape({3, 2})});
  msg = error_message([&] { g.add("matmul", {a, d}); }, ErrorCode::ShapeInference);
  EXPECT_NE(msg.find("same dtype"), std::string::npos) << msg;

  Value* s = g.add_input("S", f32({}));
  msg = error_message([&] { g.add("matmul", {s, a}); }, ErrorCode::ShapeInference);
  EXPECT_NE(msg.find("at least one dim"), std::string::npos) << msg;

  Value* i = g.add_input("I", TensorType{DType::I32, make_shape({2, 2})});
  msg = error_message([&] { g.add("matmul", {i, i}); }, ErrorCode::ShapeInference);
  EXPECT_NE(msg.find("f32 and f64"), std::string::npos) << msg;
}

}  // namespace
}  // namespace kiln
