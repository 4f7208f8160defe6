// batch_norm (inference) and group_norm: type inference, the reference kernels against
// hand-computed values, and the AVX2 kernels against the reference kernels.
#include <cmath>

#include "kernel_harness.h"

namespace kiln {
namespace {

using test::OneNode;
using test::type_of;
using Ints = std::vector<int64_t>;

TensorType f32(const Ints& sizes) { return type_of(DType::F32, sizes); }

bool avx2_available() {
  OneNode n("group_norm", {f32({1, 2})}, {{"num_groups", int64_t{1}}});
  return test::has_kernel("group_norm", "avx2") && test::unsupported_reason(*n.node, "avx2").empty();
}

std::vector<float> floats(const Tensor& t) { return test::values_of<float>(t); }

// ---------------------------------------------------------------- type inference

TEST(OpsBatchNorm, Inference) {
  Graph g;
  Dim batch = g.add_symbol("B", 1, 32), channels = g.add_symbol("C", 1, 64);
  Value* x = g.add_input("x", TensorType{DType::F32, {batch, channels, Dim(5), Dim(7)}});
  Value* p = g.add_input("p", TensorType{DType::F32, {channels}});
  EXPECT_EQ(g.add("batch_norm", {x, p, p, p, p}, {{"eps", 1e-3}})->type(), x->type());
  // A static parameter size fixes nothing in x's type but must agree with a static x.
  Value* x2 = g.add_input("x2", f32({2, 3}));
  Value* p3 = g.add_input("p3", f32({3}));
  EXPECT_EQ(g.add("batch_norm", {x2, p3, p3, p3, p3})->type(), x2->type());
  Value* x5 = g.add_input("x5", f32({1, 3, 2, 2, 2}));
  EXPECT_EQ(g.add("batch_norm", {x5, p3, p3, p3, p3})->type(), x5->type());
  EXPECT_EQ(g.add("group_norm", {x, p, p}, {{"num_groups", int64_t{1}}})->type(), x->type());

  auto fails = [&](const std::string& op, std::vector<Value*> inputs, AttrMap attrs, const std::string& reason) {
    std::string msg = test::error_message([&] { g.add(op, inputs, attrs); }, ErrorCode::ShapeInference);
    EXPECT_NE(msg.find(reason), std::string::npos) << msg;
  };
  Value* p4 = g.add_input("p4", f32({4}));
  fails("batch_norm", {x2, p3, p3, p4, p3}, {}, "x's channels (dim 1) and running_mean's size differ: 3 vs 4");
  fails("batch_norm", {x2, p3, p3, p3}, {}, "takes 5 inputs, got 4");
  Value* vector = g.add_input("v", f32({3}));
  fails("batch_norm", {vector, p3, p3, p3, p3}, {}, "x must be [N, C, ...] (rank 2 or more)");
  Value* p64 = g.add_input("p64", type_of(DType::F64, {3}));
  fails("batch_norm", {x2, p3, p64, p3, p3}, {}, "bias's dtype differs from x's");
  Value* ints = g.add_input("i", type_of(DType::I32, {2, 3}));
  fails("batch_norm", {ints, p3, p3, p3, p3}, {}, "batch_norm takes f32 or f64, not i32");
  Value* x6 = g.add_input("x6", f32({2, 6, 4}));
  fails("group_norm", {x6}, {{"num_groups", int64_t{4}}}, "num_groups=4 must divide x's channels 6");
  fails("group_norm", {x6}, {{"num_groups", int64_t{0}}}, "num_groups must be at least 1");
  fails("group_norm", {x6}, {}, "needs the attribute 'num_groups'");
  fails("group_norm", {x6, p3}, {{"num_groups", int64_t{3}}}, "x's channels (dim 1) and weight's size differ: 6 vs 3");
  Value* matrix = g.add_input("m", f32({6, 1}));
  fails("group_norm", {x6, matrix}, {{"num_groups", int64_t{3}}}, "weight must be 1-D [C]");
  fails("group_norm", {x6, p3, p3, p3}, {{"num_groups", int64_t{3}}}, "takes x and at most a weight and a bias");
}

// ---------------------------------------------------------------- reference kernels

TEST(OpsBatchNorm, ReferenceBatchNormMatchesHandComputedValues) {
  // Channel 0: mean 1, var 4, weight 2, bias 0.5; channel 1: mean 10, var 25, weight 1, bias -1.
  const std::vector<Tensor> params = {test::tensor_of({2}, {2, 1}), test::tensor_of({2}, {0.5f, -1}),
                                      test::tensor_of({2}, {1, 10}), test::tensor_of({2}, {4, 25})};
  auto run = [&](const Ints& sizes, const std::vector<float>& x) {
    OneNode node("batch_norm", {f32(sizes), f32({2}), f32({2}), f32({2}), f32({2})}, {{"eps", 0.0}});
    std::vector<Tensor> inputs{test::tensor_of(sizes, x)};
    inputs.insert(inputs.end(), params.begin(), params.end());
    return floats(test::run_kernel(*node.node, "reference", inputs)[0]);
  };
  EXPECT_EQ(run({1, 2, 2}, {1, 3, 10, 20}), (std::vector<float>{0.5f, 2.5f, -1, 1}));
  EXPECT_EQ(run({2, 2}, {1, 10, 3, 20}), (std::vector<float>{0.5f, -1, 2.5f, 1}));
  EXPECT_EQ(run({1, 2, 1, 1, 2}, {1, 3, 10, 20}), (std::vector<float>{0.5f, 2.5f, -1, 1}));
  // eps enters under the square root: var 0 and eps 0.25 scale by 1 / 0.5.
  OneNode eps("batch_norm", {f32({1, 1}), f32({1}), f32({1}), f32({1}), f32({1})}, {{"eps", 0.25}});
  EXPECT_EQ(floats(test::run_kernel(*eps.node, "reference",
                                    {test::tensor_of({1, 1}, {3}), test::tensor_of({1}, {1}),
                                     test::tensor_of({1}, {0}), test::tensor_of({1}, {1}),
                                     test::tensor_of({1}, {0})})[0]),
            (std::vector<float>{4}));
}

TEST(OpsBatchNorm, ReferenceGroupNormMatchesHandComputedValues) {
  // Groups {1, 3} (mean 2, var 1) and {10, 20} (mean 15, var 25) both normalize to [-1, 1].
  const Tensor x = test::tensor_of({1, 4, 1}, {1, 3, 10, 20});
  const AttrMap attrs = {{"num_groups", int64_t{2}}, {"eps", 0.0}};
  OneNode plain("group_norm", {f32({1, 4, 1})}, attrs);
  EXPECT_EQ(floats(test::run_kernel(*plain.node, "reference", {x})[0]), (std::vector<float>{-1, 1, -1, 1}));
  OneNode affine("group_norm", {f32({1, 4, 1}), f32({4}), f32({4})}, attrs);
  EXPECT_EQ(floats(test::run_kernel(*affine.node, "reference",
                                    {x, test::tensor_of({4}, {1, 2, 3, 4}), test::tensor_of({4}, {0, 0, 1, 1})})[0]),
            (std::vector<float>{-1, 2, -2, 5}));
  OneNode weight_only("group_norm", {f32({1, 4}), f32({4})}, attrs);
  EXPECT_EQ(floats(test::run_kernel(*weight_only.node, "reference",
                                    {test::tensor_of({1, 4}, {1, 3, 10, 20}), test::tensor_of({4}, {1, 2, 3, 4})})[0]),
            (std::vector<float>{-1, 2, -3, 4}));
  // One group over everything, two samples: each sample has its own statistics.
  OneNode one_group("group_norm", {f32({2, 2, 1})}, {{"num_groups", int64_t{1}}, {"eps", 0.0}});
  EXPECT_EQ(floats(test::run_kernel(*one_group.node, "reference", {test::tensor_of({2, 2, 1}, {5, 7, 0, -4})})[0]),
            (std::vector<float>{-1, 1, 1, -1}));
  // f64, eps 1e-5 default: a constant group is 0 / sqrt(eps) = 0.
  OneNode f64("group_norm", {type_of(DType::F64, {1, 2})}, {{"num_groups", int64_t{1}}});
  Tensor constant = test::tensor_of(DType::F64, {1, 2}, {3, 3});
  EXPECT_EQ(test::values_of<double>(test::run_kernel(*f64.node, "reference", {constant})[0]),
            (std::vector<double>{0, 0}));
}

TEST(OpsBatchNorm, ZeroSizeTensors) {
  for (const Ints& sizes : {Ints{0, 3, 4}, Ints{2, 3, 0}}) {
    OneNode bn("batch_norm", {f32(sizes), f32({3}), f32({3}), f32({3}), f32({3})});
    OneNode gn("group_norm", {f32(sizes)}, {{"num_groups", int64_t{3}}});
    Tensor x = Tensor::empty(DType::F32, sizes), p = test::tensor_of({3}, {1, 2, 3});
    for (const char* kernel : {"reference", "avx2"}) {
      if (!test::has_kernel("batch_norm", kernel)) continue;
      if (std::string(kernel) == "avx2" && !avx2_available()) continue;
      EXPECT_EQ(test::run_kernel(*bn.node, kernel, {x, p, p, p, p})[0].sizes(), sizes);
      EXPECT_EQ(test::run_kernel(*gn.node, kernel, {x})[0].sizes(), sizes);
    }
  }
}

// ---------------------------------------------------------------- AVX2 kernels

const std::vector<Ints>& shapes() {
  static const std::vector<Ints> s = {{1, 1},    {3, 1},     {1, 3},     {2, 7},      {5, 17},
                                      {2, 3, 7}, {1, 17, 3}, {2, 6, 17}, {3, 4, 1, 1}, {1, 32, 181, 181},
                                      {2, 9, 5, 2, 3}};
  return s;
}

TEST(OpsBatchNorm, Avx2BatchNormMatchesReferenceBitForBit) {
  if (!avx2_available()) GTEST_SKIP() << "no AVX2+FMA";
  std::mt19937 rng(21);
  for (const Ints& sizes : shapes()) {
    for (bool extremes : {false, true}) {
      SCOPED_TRACE(shape_string(sizes) + (extremes ? " with extremes" : ""));
      const Ints c{sizes[1]};
      OneNode node("batch_norm", {f32(sizes), f32(c), f32(c), f32(c), f32(c)}, {{"eps", 1e-5}});
      Tensor x = test::random_tensor(DType::F32, sizes, rng, -3, 5);
      Tensor mean = test::random_tensor(DType::F32, c, rng, -1, 1);
      Tensor var = test::random_tensor(DType::F32, c, rng, 0, 3);
      if (extremes) {
        test::sprinkle_extremes(x, rng);
        test::sprinkle_extremes(mean, rng);
      }
      const std::vector<Tensor> inputs = {x, test::random_tensor(DType::F32, c, rng, -2, 2),
                                          test::random_tensor(DType::F32, c, rng, -2, 2), mean, var};
      Tensor expected = test::run_kernel(*node.node, "reference", inputs)[0];
      EXPECT_TRUE(test::same_values(test::run_kernel(*node.node, "avx2", inputs, 1)[0], expected));
      EXPECT_TRUE(test::same_values(test::run_kernel(*node.node, "avx2", inputs, 2)[0], expected));
    }
  }
}

// Two kernels summing a group in different orders get means that differ by at most
// 2 * 2^-53 * sum |x| (each is that close to the exact sum), which moves y by that times
// rstd * |weight|; otherwise they agree to an ULP (the variance's own rounding is far smaller).
void expect_group_norm_close(const Tensor& got, const Tensor& expected, const Tensor& x,
                             const Tensor& weight, int64_t groups) {
  const int64_t n = x.sizes()[0], c = x.sizes()[1], group_size = x.numel() / std::max<int64_t>(n * groups, 1);
  const int64_t inner = group_size / std::max<int64_t>(c / groups, 1);
  for (int64_t g = 0; g < n * groups; ++g) {
    const float* xg = x.data<float>() + g * group_size;
    double sum = 0, magnitude = 0;
    for (int64_t i = 0; i < group_size; ++i) {
      sum += xg[i];
      magnitude += std::fabs(xg[i]);
    }
    double squares = 0;
    for (int64_t i = 0; i < group_size; ++i) squares += (xg[i] - sum / group_size) * (xg[i] - sum / group_size);
    const double rstd = 1 / std::sqrt(squares / group_size + 1e-5);
    for (int64_t i = 0; i < group_size; ++i) {
      const int64_t e = g * group_size + i;
      const double w = std::fabs(weight.data<float>()[(g % groups) * (c / groups) + i / inner]);
      const float a = got.data<float>()[e], b = expected.data<float>()[e];
      if (test::ulp_distance(a, b) <= 1) continue;
      EXPECT_LE(std::fabs(double{a} - double{b}), 4 * std::ldexp(1.0, -53) * magnitude * rstd * w)
          << "element " << e << ": " << a << " vs " << b;
    }
  }
}

TEST(OpsBatchNorm, Avx2GroupNormMatchesReference) {
  if (!avx2_available()) GTEST_SKIP() << "no AVX2+FMA";
  std::mt19937 rng(22);
  for (const Ints& sizes : shapes()) {
    for (int64_t groups : {int64_t{1}, sizes[1]}) {
      for (bool extremes : {false, true}) {
        SCOPED_TRACE(shape_string(sizes) + " in " + std::to_string(groups) + " groups" +
                     (extremes ? " with extremes" : ""));
        const Ints c{sizes[1]};
        OneNode node("group_norm", {f32(sizes), f32(c), f32(c)}, {{"num_groups", groups}});
        Tensor x = test::random_tensor(DType::F32, sizes, rng, -3, 5);
        if (extremes) test::sprinkle_extremes(x, rng);
        Tensor weight = test::random_tensor(DType::F32, c, rng, -2, 2);
        const std::vector<Tensor> inputs = {x, weight, test::random_tensor(DType::F32, c, rng, -2, 2)};
        Tensor expected = test::run_kernel(*node.node, "reference", inputs)[0];
        Tensor serial = test::run_kernel(*node.node, "avx2", inputs, 1)[0];
        expect_group_norm_close(serial, expected, x, weight, groups);
        EXPECT_TRUE(test::same_values(test::run_kernel(*node.node, "avx2", inputs, 2)[0], serial));
      }
    }
  }
}

// A group whose mean is large against its spread: the result depends on x - mean being exact.
TEST(OpsBatchNorm, Avx2GroupNormKeepsSmallSpreadAroundLargeMean) {
  if (!avx2_available()) GTEST_SKIP() << "no AVX2+FMA";
  std::mt19937 rng(23);
  Tensor x = test::random_tensor(DType::F32, {2, 8, 100}, rng, 1000, 1000.01);
  OneNode node("group_norm", {f32({2, 8, 100})}, {{"num_groups", int64_t{4}}});
  int64_t where = 0;
  EXPECT_LE(test::max_ulp(test::run_kernel(*node.node, "avx2", {x})[0],
                          test::run_kernel(*node.node, "reference", {x})[0], &where), 1)
      << "element " << where;
}

// ---------------------------------------------------------------- through the executor

TEST(OpsBatchNorm, CompiledGraphRunsBothOps) {
  std::mt19937 rng(24);
  Graph g;
  Dim batch = g.add_symbol("N", 1, 4);
  Value* x = g.add_input("x", TensorType{DType::F32, {batch, Dim(6), Dim(5), Dim(5)}});
  auto constant = [&](const char* name, double lo, double hi) {
    return g.add_constant(name, test::random_tensor(DType::F32, {6}, rng, lo, hi));
  };
  Value* bn = g.add("batch_norm", {x, constant("w", -2, 2), constant("b", -1, 1), constant("m", -1, 1),
                                   constant("v", 0.5, 2)});
  Value* gn = g.add("group_norm", {bn, constant("gw", -2, 2), constant("gb", -1, 1)}, {{"num_groups", int64_t{3}}});
  g.set_outputs({gn});
  auto best = CompiledGraph::compile(g);
  auto slow = CompiledGraph::compile(g, {.kernel_policy = "reference"});
  Tensor input = test::random_tensor(DType::F32, {2, 6, 5, 5}, rng, -3, 3);
  Tensor got = best->run({input.view()})[0];
  Tensor expected = slow->run({input.view()})[0];
  ASSERT_EQ(got.sizes(), (Ints{2, 6, 5, 5}));
  EXPECT_LE(test::max_ulp(got, expected), 1);
}

}  // namespace
}  // namespace kiln
