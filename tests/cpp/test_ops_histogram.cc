// histc: torch.histc's bins on hand-computed values (edges, the last bin's closed right end,
// elements outside the range and NaN uncounted), the data's own range when min == max, and the
// ranges PyTorch refuses, at compile time when given and at run time when taken from the data.
#include <gtest/gtest.h>

#include <limits>

#include "kernel_harness.h"

namespace kiln {
namespace {

using test::error_message;
using test::type_of;

std::vector<double> histc(const std::vector<double>& x, int64_t bins, double lo, double hi,
                          DType dtype = DType::F32) {
  test::OneNode one("histc", {type_of(dtype, {static_cast<int64_t>(x.size())})},
                    {{"bins", bins}, {"min", lo}, {"max", hi}});
  const KernelSpec spec = test::spec_with_constants(*one.node);
  return test::values_as_double(
      test::create_and_run("histc", "reference", spec, {test::tensor_of(dtype, {static_cast<int64_t>(x.size())}, x)}));
}

TEST(OpsHistogram, CountsEachBinClosedOnTheLeftAndTheLastOnBothEnds) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  // Bins [0, 1), [1, 2), [2, 3], and -1, 3.5 and NaN outside.
  for (DType dtype : {DType::F32, DType::F64})
    EXPECT_EQ(histc({0, 0.5, 1, 2.999, 3, -1, 3.5, nan, 2}, 3, 0, 3, dtype),
              (std::vector<double>{2, 1, 3}));
  // Expert ids 0..3 into 4 bins over [0, 3], as mixture-of-experts layers count their rows.
  EXPECT_EQ(histc({0, 0, 1, 3, 3, 3}, 4, 0, 3), (std::vector<double>{2, 1, 0, 3}));
}

TEST(OpsHistogram, EqualBoundsTakeTheDataRange) {
  EXPECT_EQ(histc({2, 4, 6, 8}, 2, 0, 0), (std::vector<double>{2, 2}));
  EXPECT_EQ(histc({5, 5}, 2, 0, 0), (std::vector<double>{0, 2}));  // [4, 6]: 5 is the edge
  EXPECT_EQ(histc({}, 2, 1, 1), (std::vector<double>{0, 0}));
}

TEST(OpsHistogram, RefusesBadRangesAtCompileOrRunTime) {
  auto at_compile = [](int64_t bins, double lo, double hi) {
    return error_message(
        [&] { test::OneNode("histc", {type_of(DType::F32, {3})}, {{"bins", bins}, {"min", lo}, {"max", hi}}); },
        ErrorCode::ShapeInference);
  };
  EXPECT_NE(at_compile(0, 0, 1).find("bins must be > 0"), std::string::npos);
  EXPECT_NE(at_compile(3, 2, 1).find("max must be larger than min"), std::string::npos);
  EXPECT_NE(at_compile(3, 0, std::numeric_limits<double>::infinity()).find("not finite"),
            std::string::npos);
  EXPECT_NE(error_message([] { test::OneNode("histc", {type_of(DType::BF16, {3})}); },
                          ErrorCode::ShapeInference)
                .find("f32 and f64"),
            std::string::npos);
  const std::string run_time = error_message(
      [] { histc({1, std::numeric_limits<double>::quiet_NaN()}, 2, 0, 0); },
      ErrorCode::ShapeInference);
  EXPECT_NE(run_time.find("not finite"), std::string::npos) << run_time;
  EXPECT_NE(run_time.find("(histc)"), std::string::npos) << run_time;
}

}  // namespace
}  // namespace kiln
