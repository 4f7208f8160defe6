// Helpers for the pass tests (test_pattern.cc, test_passes_*.cc): a pass run on textual IR,
// compared before → after, plus a numeric check of the rewritten graph against the original
// (bit for bit, or within a derived bound for recognizers that change the rounding).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>

#include "kernel_harness.h"
#include "kiln/kiln.h"
#include "ops_test_util.h"
#include "passes/pass.h"

namespace kiln::test {

// Runs `g` at optimization level 0 (no passes) with the kernels of `policy` on `inputs`.
inline std::vector<Tensor> run_with(const Graph& g, const std::string& policy,
                                    const std::vector<Tensor>& inputs) {
  std::vector<TensorView> views;
  for (const Tensor& t : inputs) views.push_back(t.view());
  CompileOptions options{.optimization_level = 0, .kernel_policy = policy, .verify = true};
  return CompiledGraph::compile(g, options)->run(views);
}

// Uniform values in [-1, 1) for every input of `g` (static shapes only).
inline std::vector<Tensor> random_inputs(const Graph& g, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<Tensor> inputs;
  for (const Value* in : g.inputs())
    inputs.push_back(random_tensor(in->type().dtype, static_sizes(in->type().shape), rng, -1, 1));
  return inputs;
}

// Runs both graphs at optimization level 0 with reference kernels on the same random inputs
// (static shapes only) and expects bit-identical outputs (any two NaNs match).
inline void expect_same_results(const Graph& a, const Graph& b, uint32_t seed = 7) {
  ASSERT_EQ(a.inputs().size(), b.inputs().size());
  std::mt19937 rng(seed);
  std::vector<Tensor> inputs;
  std::vector<TensorView> views;
  for (const Value* in : a.inputs()) {
    DType dt = in->type().dtype;
    std::vector<int64_t> sizes = static_sizes(in->type().shape);
    if (dt == DType::Bool) {
      Tensor t = Tensor::empty(dt, sizes);
      for (int64_t i = 0; i < t.numel(); ++i) t.data<bool>()[i] = rng() % 2;
      inputs.push_back(t);
    } else {
      inputs.push_back(random_tensor(dt, sizes, rng));
    }
    views.push_back(inputs.back().view());
  }
  CompileOptions options{.optimization_level = 0, .kernel_policy = "reference", .verify = true};
  auto ra = CompiledGraph::compile(a, options)->run(views);
  auto rb = CompiledGraph::compile(b, options)->run(views);
  ASSERT_EQ(ra.size(), rb.size());
  for (size_t i = 0; i < ra.size(); ++i) EXPECT_TRUE(same_values(ra[i], rb[i])) << "output " << i;
}

// Parses `before`, runs `pass` on it and expects it to report a change, to print like `after`
// (parsed and printed, so `after` may leave result types out) and to compute what `before` does.
// Expects `pass` to change `original` (a copy of it, returned) into the graph `after` prints as,
// leaving a graph the verifier accepts. For graphs that can't run (symbolic dims), alone.
inline std::unique_ptr<Graph> expect_rewritten(Pass& pass, const Graph& original,
                                               const std::string& after) {
  auto g = original.clone();
  EXPECT_TRUE(pass.run(*g)) << pass.name() << " reported no change";
  verify(*g);
  EXPECT_EQ(print_graph(*g), print_graph(*parse_graph(after)));
  return g;
}

inline void expect_rewrite(Pass& pass, const std::string& before, const std::string& after) {
  auto original = parse_graph(before);
  expect_same_results(*original, *expect_rewritten(pass, *original, after));
}

// Expects `pass` to leave the graph parsed from `text` exactly as it was, and to say so.
inline void expect_unchanged(Pass& pass, const std::string& text) {
  auto g = parse_graph(text);
  std::string printed = print_graph(*g);
  EXPECT_FALSE(pass.run(*g)) << pass.name() << " reported a change";
  EXPECT_EQ(print_graph(*g), printed);
}

// Expects `pass` to rewrite `before` into `after`, and the result to stay within
// 2^bound_log2 * max(1, |y|) of the decomposed graph under both kernel policies. The fused ops
// evaluate the function with one rounding where the decomposed graph rounds after each of its
// ops, so the two differ by the chain's accumulated rounding; each test derives its bound.
inline void expect_recognized(Pass& pass, const std::string& before, const std::string& after,
                              int bound_log2, double lo = -4, double hi = 4) {
  auto original = parse_graph(before);
  auto g = expect_rewritten(pass, *original, after);
  std::mt19937 rng(23);
  std::vector<Tensor> inputs;
  for (const Value* in : original->inputs())
    inputs.push_back(
        random_tensor(in->type().dtype, static_sizes(in->type().shape), rng, lo, hi));
  for (const char* policy : {"reference", "best"}) {
    SCOPED_TRACE(policy);
    std::vector<Tensor> want = run_with(*original, policy, inputs);
    std::vector<Tensor> got = run_with(*g, policy, inputs);
    ASSERT_EQ(want.size(), got.size());
    for (size_t i = 0; i < want.size(); ++i) {
      const std::vector<double> w_values = values_as_double(want[i]);
      const std::vector<double> v_values = values_as_double(got[i]);
      for (size_t j = 0; j < w_values.size(); ++j) {
        const double w = w_values[j], v = v_values[j];
        ASSERT_LE(std::fabs(v - w), std::ldexp(std::max(1.0, std::fabs(w)), bound_log2))
            << "output " << i << " element " << j;
      }
    }
  }
}

}  // namespace kiln::test
