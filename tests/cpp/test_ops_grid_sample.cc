// grid_sample: type inference, the reference kernel on hand-computed values for every mode and
// padding, and the AVX2 kernel against the reference bit for bit (NaN, infinite and far-away
// coordinates included). tests/python/test_converters_upsample.py checks both against eager.
#include <cmath>
#include <cstring>
#include <limits>

#include "kernel_harness.h"
#include "kernels/cpu/cpu_features.h"

namespace kiln {
namespace {

using test::type_of;
using Ints = std::vector<int64_t>;

TensorType f32(const Ints& sizes) { return type_of(DType::F32, sizes); }

// grid_sample of x [1, 1, h, w] at the (u, v) pairs of `points` by the reference kernel.
std::vector<float> sample(const Ints& x_sizes, const std::vector<float>& x,
                          const std::vector<float>& points, AttrMap attrs) {
  const Ints g_sizes{1, 1, static_cast<int64_t>(points.size() / 2), 2};
  test::OneNode node("grid_sample", {f32(x_sizes), f32(g_sizes)}, std::move(attrs));
  return test::values_of<float>(test::run_kernel(
      *node.node, "reference", {test::tensor_of(x_sizes, x), test::tensor_of(g_sizes, points)})[0]);
}

AttrMap modes(const std::string& mode, const std::string& padding, bool align_corners) {
  return {{"mode", mode}, {"padding_mode", padding}, {"align_corners", align_corners}};
}

TEST(OpsGridSample, ReferenceMatchesHandComputedValues) {
  // x = [[0, 1, 2], [10, 11, 12]]: H = 2, W = 3.
  const Ints xs{1, 1, 2, 3};
  const std::vector<float> x = {0, 1, 2, 10, 11, 12};
  // align_corners: u = -1, 0, 1 are columns 0, 1, 2; v = -1, 1 rows 0, 1.
  EXPECT_EQ(sample(xs, x, {-1, -1, 0, -1, 1, 1, -0.5, 0}, modes("bilinear", "zeros", true)),
            (std::vector<float>{0, 1, 12, 5.5}));  // the last: column 0.5, row 0.5
  // Without align_corners u = -1 is the left edge, column -0.5: half of column 0, half padding.
  EXPECT_EQ(sample(xs, x, {-1, -0.5, 1, 0.5}, modes("bilinear", "zeros", false)),
            (std::vector<float>{0, 6}));  // (row 0: 0·0.5) and (column 2.5, row 1: 12·0.5)
  // border clamps to the edge pixels instead.
  EXPECT_EQ(sample(xs, x, {-1, -0.5, 1, 0.5, -3, 5}, modes("bilinear", "border", false)),
            (std::vector<float>{0, 12, 10}));
  // reflection about the edges, column -0.5 here: u = -1.5 is column -1.25, reflected to 0.25
  // (v = -0.5 is row 0), so a quarter of column 1.
  EXPECT_EQ(sample(xs, x, {-1.5f, -0.5f}, modes("bilinear", "reflection", false)),
            (std::vector<float>{0.25f}));
  // nearest rounds half to even: column 0.5 → 0, column 1.5 → 2.
  EXPECT_EQ(sample(xs, x, {-0.5, -1, 0.5, -1, 0, 1, 3, 0}, modes("nearest", "zeros", true)),
            (std::vector<float>{0, 2, 11, 0}));
  // A NaN coordinate: bilinear gives NaN with zeros padding, border clamps it to pixel 0.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(sample(xs, x, {nan, 0}, modes("bilinear", "zeros", false))[0]));
  EXPECT_EQ(sample(xs, x, {nan, nan}, modes("bilinear", "border", false))[0], 0);
  EXPECT_EQ(sample(xs, x, {nan, 1}, modes("nearest", "zeros", true))[0], 0);
}

// Every float's bits, so that NaNs compare equal.
std::vector<uint32_t> bits(const Tensor& t) {
  std::vector<uint32_t> out(static_cast<size_t>(t.numel()));
  std::memcpy(out.data(), t.data(), t.nbytes());
  return out;
}

TEST(OpsGridSample, Avx2MatchesReferenceBitForBit) {
  if (!cpu::has_avx2_fma()) GTEST_SKIP() << "no AVX2";
  std::mt19937 rng(45);
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (const Ints& xs : {Ints{2, 3, 5, 7}, Ints{1, 4, 1, 1}, Ints{1, 2, 9, 1}}) {
    // 70 points a batch item: a block of 64 (8 vectors) and one of 6 (the scalar tail).
    const Ints gs{xs[0], 7, 10, 2};
    Tensor x = test::random_tensor(DType::F32, xs, rng, -1, 1);
    Tensor grid = test::random_tensor(DType::F32, gs, rng, -1.4f, 1.4f);
    float* g = grid.data<float>();
    const float specials[] = {nan, inf, -inf, 1e10f, -1e10f, 3e9f, -1, 1, 0, -0.f, 0.5f, 1.25f};
    for (size_t i = 0; i < std::size(specials); ++i) g[3 * i + 1] = specials[i];
    for (const char* mode : {"bilinear", "nearest"})
      for (const char* padding : {"zeros", "border", "reflection"})
        for (bool align : {false, true}) {
          SCOPED_TRACE(shape_string(xs) + " " + mode + " " + padding + (align ? " aligned" : ""));
          Graph graph;
          graph.add("grid_sample", {graph.add_input("x", f32(xs)), graph.add_input("g", f32(gs))},
                    modes(mode, padding, align));
          const KernelSpec spec = test::spec_with_constants(*graph.nodes().at(0));
          ASSERT_EQ(test::kernel_of("grid_sample", "avx2").unsupported_reason(spec), "");
          EXPECT_EQ(bits(test::create_and_run("grid_sample", "avx2", spec, {x, grid})),
                    bits(test::create_and_run("grid_sample", "reference", spec, {x, grid})));
        }
  }
}

TEST(OpsGridSample, InfersShapes) {
  Graph g;
  Value* x = g.add_input("x", f32({2, 3, 8, 9}));
  EXPECT_EQ(g.add("grid_sample", {x, g.add_input("g", f32({2, 5, 6, 2}))})->type().shape,
            make_shape({2, 3, 5, 6}));
  auto fails = [&](TensorType grid, AttrMap attrs, const std::string& reason) {
    std::string msg = test::error_message([&] { g.add("grid_sample", {x, g.add_input("h", grid)}, attrs); },
                                          ErrorCode::ShapeInference);
    EXPECT_NE(msg.find(reason), std::string::npos) << msg;
  };
  fails(f32({2, 5, 6, 3}), {}, "grid must be 4-D [N, OH, OW, 2]");
  fails(f32({3, 5, 6, 2}), {}, "x's and grid's batch");
  fails(type_of(DType::F64, {2, 5, 6, 2}), {}, "grid must have x's dtype");
  fails(f32({2, 5, 6, 2}), {{"mode", std::string("bicubics")}},
        "mode must be \"bilinear\", \"nearest\" or \"bicubic\"");
  fails(f32({2, 5, 6, 2}), {{"padding_mode", std::string("circular")}}, "padding_mode must be");
}

}  // namespace
}  // namespace kiln
