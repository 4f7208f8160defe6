// assert: nonzero conditions of every kind pass (NaN too, -0 and 0 don't), a zero one raises
// E40002 with the model's message, and a compiled graph keeps the check though nothing reads it.
#include <gtest/gtest.h>

#include <limits>

#include "kernel_harness.h"

namespace kiln {
namespace {

using test::error_message;
using test::type_of;

void check(const Tensor& condition) {
  test::OneNode one("assert", {type_of(condition.dtype(), condition.sizes())},
                    {{"message", std::string("values must be non-negative")}});
  test::run_kernel(*one.node, "reference", {condition});
}

TEST(OpsAssertion, PassesNonzeroAndRaisesOnZero) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (float v : {1.0f, -2.5f, nan, std::numeric_limits<float>::denorm_min()})
    EXPECT_NO_THROW(check(test::tensor_of({}, {v}))) << v;
  for (float v : {0.0f, -0.0f}) {
    const std::string message =
        error_message([&] { check(test::tensor_of({1}, {v})); }, ErrorCode::ShapeInference);
    EXPECT_NE(message.find("(assert): the model's own check failed at run time: values must be "
                           "non-negative"),
              std::string::npos)
        << message;
  }
  Tensor flag = Tensor::empty(DType::Bool, {});
  *flag.data<bool>() = true;
  EXPECT_NO_THROW(check(flag));
  *flag.data<bool>() = false;
  EXPECT_THROW(check(flag), Error);
  Tensor count = Tensor::zeros(DType::I64, {1, 1});
  EXPECT_THROW(check(count), Error);
  count.data<int64_t>()[0] = int64_t{1} << 40;  // a bit only in the high bytes
  EXPECT_NO_THROW(check(count));
}

TEST(OpsAssertion, RefusesConditionsOfSeveralElements) {
  const std::string message = error_message(
      [] { test::OneNode("assert", {type_of(DType::Bool, {2})}); }, ErrorCode::ShapeInference);
  EXPECT_NE(message.find("the condition [2] must hold one element"), std::string::npos) << message;
}

// Nothing reads the check's output: dead-code elimination keeps it for its side effect.
TEST(OpsAssertion, CompiledGraphKeepsTheCheck) {
  Graph g;
  Value* x = g.add_input("x", type_of(DType::F32, {3}));
  g.add("assert", {g.add("all", {g.add("ge", {x, g.add_constant("zero", test::tensor_of({}, {0}))})})},
        {{"message", std::string("x must be non-negative")}});
  g.set_outputs({g.add("exp", {x})});
  auto compiled = CompiledGraph::compile(g);
  EXPECT_NE(compiled->describe_plan({{3}}).find("assert"), std::string::npos);
  EXPECT_NO_THROW(compiled->run({test::tensor_of({3}, {0, 1, 2}).view()}));
  const std::string message = error_message(
      [&] { compiled->run({test::tensor_of({3}, {0, -1, 2}).view()}); }, ErrorCode::ShapeInference);
  EXPECT_NE(message.find("x must be non-negative"), std::string::npos) << message;
}

}  // namespace
}  // namespace kiln
