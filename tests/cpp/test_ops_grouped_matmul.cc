// grouped_matmul: type inference, the reference kernel on hand-computed values, the oneDNN
// kernel against the reference (empty groups, rows past the last group, both B layouts, both
// offset dtypes), and offsets that would read out of bounds refused at run time.
#include <gtest/gtest.h>

#include "kernel_harness.h"

namespace kiln {
namespace {

using test::abs_of;
using test::create_and_run;
using test::error_message;
using test::type_of;

Tensor offsets_of(DType dtype, const std::vector<int64_t>& values) {
  Tensor t = Tensor::empty(dtype, {static_cast<int64_t>(values.size())});
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == DType::I64)
      t.data<int64_t>()[i] = values[i];
    else
      t.data<int32_t>()[i] = static_cast<int32_t>(values[i]);
  }
  return t;
}

struct GroupedCase {
  int64_t s, k, n;
  std::vector<int64_t> offsets;  // one per group
  bool transpose_b = false;
  DType offsets_dtype = DType::I64;
  bool b_constant = false;  // experts' weights: the oneDNN kernel prepacks them

  std::vector<int64_t> b_sizes() const {
    const auto groups = static_cast<int64_t>(offsets.size());
    return transpose_b ? std::vector<int64_t>{groups, n, k} : std::vector<int64_t>{groups, k, n};
  }
};

// A graph of one grouped_matmul on inputs of the case's sizes; B is a constant when asked.
struct GroupedGraph {
  Graph graph;
  Node* node = nullptr;
  std::vector<Tensor> inputs;

  GroupedGraph(const GroupedCase& c, DType dtype, std::mt19937& rng) {
    inputs = {test::random_tensor(dtype, {c.s, c.k}, rng, -1, 1),
              test::random_tensor(dtype, c.b_sizes(), rng, -1, 1),
              offsets_of(c.offsets_dtype, c.offsets)};
    Value* a = graph.add_input("A", type_of(dtype, {c.s, c.k}));
    Value* b = c.b_constant ? graph.add_constant("B", inputs[1])
                            : graph.add_input("B", type_of(dtype, c.b_sizes()));
    Value* offsets = graph.add_input(
        "offsets", type_of(c.offsets_dtype, {static_cast<int64_t>(c.offsets.size())}));
    graph.set_outputs(graph.add_node("grouped_matmul", {a, b, offsets},
                                     {{"transpose_b", c.transpose_b}}));
    node = graph.nodes().at(0);
  }
  KernelSpec spec() const { return test::spec_with_constants(*node); }
};

TEST(OpsGroupedMatmul, InfersRowsByColumnsOfTheGroupsMatrices) {
  test::OneNode plain("grouped_matmul", {type_of(DType::F32, {6, 4}), type_of(DType::F32, {3, 4, 5}),
                                         type_of(DType::I32, {3})});
  EXPECT_EQ(plain.output_type(), type_of(DType::F32, {6, 5}));
  test::OneNode transposed("grouped_matmul",
                           {type_of(DType::BF16, {6, 4}), type_of(DType::BF16, {3, 5, 4}),
                            type_of(DType::I64, {3})},
                           {{"transpose_b", true}});
  EXPECT_EQ(transposed.output_type(), type_of(DType::BF16, {6, 5}));
}

TEST(OpsGroupedMatmul, RefusesMismatchedOperandsNamingThem) {
  auto infer = [](std::vector<TensorType> types) {
    return error_message([&] { test::OneNode("grouped_matmul", types); }, ErrorCode::ShapeInference);
  };
  EXPECT_NE(infer({type_of(DType::F32, {6, 4}), type_of(DType::F32, {3, 5, 5}),
                   type_of(DType::I64, {3})})
                .find("contraction dims (K)"),
            std::string::npos);
  EXPECT_NE(infer({type_of(DType::F32, {6, 4}), type_of(DType::F32, {3, 4, 5}),
                   type_of(DType::I64, {2})})
                .find("offsets length"),
            std::string::npos);
  EXPECT_NE(infer({type_of(DType::F32, {6, 4}), type_of(DType::F32, {3, 4, 5}),
                   type_of(DType::F32, {3})})
                .find("i32 or i64"),
            std::string::npos);
  EXPECT_NE(infer({type_of(DType::F32, {6, 4}), type_of(DType::F32, {4, 5}),
                   type_of(DType::I64, {3})})
                .find("B must be [G, K, N]"),
            std::string::npos);
}

// Rows 0..1 by group 0, none by group 1, row 2 by group 2; row 3 is past the last group: zeros.
TEST(OpsGroupedMatmul, ReferenceMultipliesEachRunOfRowsByItsGroupsMatrix) {
  GroupedCase c{4, 2, 2, {2, 2, 3}};
  std::mt19937 rng(1);
  GroupedGraph g(c, DType::F32, rng);
  g.inputs[0] = test::tensor_of({4, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
  g.inputs[1] = test::tensor_of({3, 2, 2}, {1, 0, 0, 1, 9, 9, 9, 9, 2, 0, 0, -1});
  const Tensor got = create_and_run("grouped_matmul", "reference", g.spec(), g.inputs);
  EXPECT_EQ(test::values_of<float>(got), (std::vector<float>{1, 2, 3, 4, 10, -6, 0, 0}));
}

void check_kernels_against_reference(const GroupedCase& c, DType dtype) {
  SCOPED_TRACE("S " + std::to_string(c.s) + " K " + std::to_string(c.k) + " N " +
               std::to_string(c.n) + (c.transpose_b ? " transpose_b" : "") +
               (c.b_constant ? " B constant" : "") + " " +
               std::string(dtype_name(dtype)) + " offsets " +
               std::string(dtype_name(c.offsets_dtype)));
  std::mt19937 rng(static_cast<uint32_t>(c.s * 131 + c.k * 7 + c.n));
  GroupedGraph g(c, dtype, rng);
  const KernelSpec spec = g.spec();
  const Tensor expected = create_and_run("grouped_matmul", "reference", spec, g.inputs);
  // The oneDNN kernel, where it takes the case (bf16 needs AVX512-BF16; K = 0 is the reference's).
  if (!test::unsupported_reason(*g.node, "onednn").empty()) return;
  const Tensor got = create_and_run("grouped_matmul", "onednn", spec, g.inputs);
  if (dtype == DType::F32) {
    const Tensor magnitude = create_and_run("grouped_matmul", "reference", spec,
                                            {abs_of(g.inputs[0]), abs_of(g.inputs[1]), g.inputs[2]});
    test::expect_within_dot_bound(got, expected, magnitude, c.k, "onednn");
    return;
  }
  // bf16: sums in f32, rounded once; the two sums differ by the f32 bound, so each result is
  // within one bf16 step of the reference's.
  const std::vector<double> want = test::values_as_double(expected), have = test::values_as_double(got);
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_LE(std::fabs(have[i] - want[i]), std::ldexp(std::fabs(want[i]), -7) + 1e-6)
        << "element " << i;
}

TEST(OpsGroupedMatmul, LibraryKernelsMatchTheReference) {
  const std::vector<GroupedCase> cases = {
      {7, 17, 3, {2, 2, 5, 6}},                        // an empty group, a tail row
      {64, 128, 96, {10, 30, 30, 64}, true},           // an expert's weights as nn.Linear stores them
      {33, 64, 48, {0, 0, 33}, false, DType::I32},     // leading empty groups
      {5, 8, 16, {0, 0}, true, DType::I32},            // no row in any group: all zeros
      {1, 256, 512, {0, 1, 1, 1, 1, 1, 1, 1}, true},   // one decoded token
      // Experts' weights prepacked: a primitive per row count, and a group of 300 rows run in
      // calls of at most 256.
      {64, 128, 96, {10, 30, 30, 64}, true, DType::I64, true},
      {7, 17, 3, {2, 2, 5, 6}, false, DType::I32, true},
      {310, 24, 40, {3, 303, 303}, true, DType::I64, true},
  };
  // Empty sums (K = 0), which oneDNN can't take: the reference writes the zeros.
  std::mt19937 rng(5);
  GroupedGraph empty_sums({3, 0, 4, {1, 3}}, DType::F32, rng);
  EXPECT_EQ(test::unsupported_reason(*empty_sums.node, "onednn"),
            "K or N is 0: nothing to multiply");
  EXPECT_EQ(test::values_of<float>(
                create_and_run("grouped_matmul", "reference", empty_sums.spec(), empty_sums.inputs)),
            std::vector<float>(12, 0.0f));
  for (const GroupedCase& c : cases) {
    check_kernels_against_reference(c, DType::F32);
    check_kernels_against_reference(c, DType::BF16);
  }
}

TEST(OpsGroupedMatmul, EveryKernelRefusesOffsetsOutOfBoundsBeforeWriting) {
  for (const std::vector<int64_t>& bad : {std::vector<int64_t>{2, 9}, std::vector<int64_t>{3, 2},
                                          std::vector<int64_t>{-1, 2}}) {
    std::mt19937 rng(3);
    GroupedGraph g({4, 3, 2, bad}, DType::F32, rng);
    for (const char* kernel : {"reference", "onednn"}) {
      const std::string message = error_message(
          [&] { create_and_run("grouped_matmul", kernel, g.spec(), g.inputs); },
          ErrorCode::ShapeInference);
      EXPECT_NE(message.find("node '"), std::string::npos) << message;
      EXPECT_NE(message.find("non-decreasing cumulative row counts within [0, 4]"),
                std::string::npos)
          << message;
    }
  }
}

}  // namespace
}  // namespace kiln
