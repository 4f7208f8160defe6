// Sizes written as expressions over a graph's symbols (src/ir/sym_expr.h): parsing, evaluation,
// ranges, and the ops that take them (reshape's sym_shape, expand's sym_size, slice's sym_end)
// serving every shape in range from one compiled graph.
#include <gtest/gtest.h>

#include <random>

#include "ir/sym_expr.h"
#include "kiln/kiln.h"
#include "ops_test_util.h"

namespace kiln {
namespace {

using test::error_code_of;

std::optional<int64_t> eval(const std::string& text, std::map<std::string, int64_t> values) {
  return SymExpr::parse(text).evaluate([&](const std::string& n) -> std::optional<int64_t> {
    auto it = values.find(n);
    return it == values.end() ? std::nullopt : std::optional<int64_t>(it->second);
  });
}

Tensor counting(std::vector<int64_t> sizes, float start = 0) {
  Tensor t = Tensor::empty(DType::F32, std::move(sizes));
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = start + static_cast<float>(i);
  return t;
}

TEST(SymExpr, EvaluatesPyTorchSizeExpressions) {
  EXPECT_EQ(eval("s0*s1", {{"s0", 3}, {"s1", 7}}), 21);
  EXPECT_EQ(eval("128*s0", {{"s0", 3}}), 384);
  EXPECT_EQ(eval("s1 + 1", {{"s1", 7}}), 8);
  EXPECT_EQ(eval("s1 - 2*s0", {{"s0", 3}, {"s1", 7}}), 1);
  EXPECT_EQ(eval("(s0//2)", {{"s0", 7}}), 3);
  EXPECT_EQ(eval("((s0 - 9)//4)", {{"s0", 7}}), -1);  // floor, as Python's //
  EXPECT_EQ(eval("s0*s1", {{"s0", 3}}), std::nullopt);  // s1 unbound
  EXPECT_EQ(eval("s0*s0", {{"s0", int64_t{1} << 40}}), std::nullopt);  // overflow
  EXPECT_EQ(eval("s0//s1", {{"s0", 1}, {"s1", 0}}), std::nullopt);
  EXPECT_EQ(SymExpr::parse("s2 * s0 + s2").symbol_names(),
            (std::vector<std::string>{"s2", "s0"}));
  EXPECT_EQ(SymExpr::parse("s0").single_symbol(), "s0");
  EXPECT_EQ(SymExpr::parse("2*s0").single_symbol(), "");
}

TEST(SymExpr, RangesFollowIntervalArithmetic) {
  auto range = [](const std::string& text) {
    return SymExpr::parse(text).range([](const std::string& n) {
      return n == "s0" ? std::pair<int64_t, int64_t>{2, 8} : std::pair<int64_t, int64_t>{1, 4};
    });
  };
  EXPECT_EQ(range("s0*s1"), (std::pair<int64_t, int64_t>{2, 32}));
  EXPECT_EQ(range("s0 - s1"), (std::pair<int64_t, int64_t>{0, 7}));  // clamped at 0
  EXPECT_EQ(range("s0//s1"), (std::pair<int64_t, int64_t>{0, 8}));
  EXPECT_EQ(range("3*s0 + 1"), (std::pair<int64_t, int64_t>{7, 25}));
}

TEST(SymExpr, RejectsWhatItCannotEvaluate) {
  for (const char* bad : {"Max(1, s0)", "s0 +", "s0 ** 2", "(s0", "", "s0 / 2",
                          "99999999999999999999"}) {
    std::string message;
    EXPECT_EQ(error_code_of([&] { SymExpr::parse(bad); }, &message), ErrorCode::ParseError)
        << bad;
    EXPECT_NE(message.find("symbolic size"), std::string::npos) << message;
  }
}

// [s0, s1, 4] → [s0*s1, 4] → [s0, s1, 2, 2]: two dynamic dims, which a single -1 can't express.
TEST(DynamicShapes, ReshapeWithSeveralDynamicDims) {
  auto g = parse_graph(R"(graph @g {
    sym s0 in [1, 8]
    sym s1 in [1, 64]
    input %x : f32[s0, s1, 4]
    %flat = reshape(%x) {shape = [-1, 4], sym_shape = ["s0*s1", ""]}
    %y = reshape(%flat) {shape = [-1, -1, 2, 2], sym_shape = ["s0", "s1", "", ""]}
    output %y
  })");
  const TensorType& flat = g->find_value("flat")->type();
  EXPECT_EQ(shape_string(flat.shape, &g->symbols()), "[s0*s1, 4]");
  const TensorType& y = g->find_value("y")->type();
  EXPECT_EQ(shape_string(y.shape, &g->symbols()), "[s0, s1, 2, 2]");
  EXPECT_EQ(g->symbols()[g->symbols().find("s0*s1")].max, 8 * 64);

  auto compiled = CompiledGraph::compile(*g, CompileOptions{.verify = true});
  for (auto [b, s] : {std::pair<int64_t, int64_t>{2, 3}, {5, 7}, {1, 64}}) {
    Tensor x = counting({b, s, 4});
    std::vector<Tensor> out = compiled->run({x.view()});
    ASSERT_EQ(out[0].sizes(), (std::vector<int64_t>{b, s, 2, 2}));
    for (int64_t i = 0; i < x.numel(); ++i)
      ASSERT_EQ(out[0].data<float>()[i], x.data<float>()[i]);
  }
}

TEST(DynamicShapes, ReshapeChecksElementCountsEachRun) {
  auto g = parse_graph(R"(graph @g {
    sym s0 in [1, 8]
    sym s1 in [1, 8]
    input %x : f32[s0, 4]
    input %z : f32[s1]
    %y = reshape(%x) {shape = [-1, 4], sym_shape = ["s1", ""]}
    output %y, %z
  })");
  auto compiled = CompiledGraph::compile(*g);
  Tensor x = counting({3, 4}), ok = counting({3}), bad = counting({5});
  EXPECT_EQ(compiled->run({x.view(), ok.view()})[0].sizes(), (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(error_code_of([&] { compiled->run({x.view(), bad.view()}); }),
            ErrorCode::ShapeInference);
}

// An attention-mask style expand: a [1, s1] row broadcast to [s0, s1], then added.
TEST(DynamicShapes, ExpandToDynamicSizes) {
  auto g = parse_graph(R"(graph @g {
    sym s0 in [1, 8]
    sym s1 in [1, 16]
    input %x : f32[s0, s1]
    input %row : f32[1, s1]
    %e = expand(%row) {size = [-1, -1], sym_size = ["s0", "s1"]}
    %y = add(%x, %e)
    output %y
  })");
  EXPECT_EQ(shape_string(g->find_value("e")->type().shape, &g->symbols()), "[s0, s1]");
  auto compiled = CompiledGraph::compile(*g, CompileOptions{.verify = true});
  for (auto [b, s] : {std::pair<int64_t, int64_t>{3, 5}, {8, 16}}) {
    Tensor x = counting({b, s}), row = counting({1, s}, 100);
    Tensor out = compiled->run({x.view(), row.view()})[0];
    for (int64_t i = 0; i < b; ++i)
      for (int64_t j = 0; j < s; ++j)
        ASSERT_EQ(out.data<float>()[i * s + j], static_cast<float>(i * s + j + 100 + j));
  }
}

TEST(DynamicShapes, ExpandOfAStaticDimToADynamicSizeFails) {
  std::string message;
  EXPECT_EQ(error_code_of([&] {
              parse_graph(R"(graph @g {
                sym s0 in [1, 8]
                input %x : f32[s0]
                input %row : f32[3]
                %e = expand(%row) {size = [-1], sym_size = ["s0"]}
                output %e, %x
              })");
            }, &message),
            ErrorCode::ShapeInference);
  EXPECT_NE(message.find("can't expand to the dynamic size s0"), std::string::npos) << message;
}

// BERT's token_type_ids[:, :S]: a slice of a constant whose end is the sequence length.
TEST(DynamicShapes, SliceWithADynamicEnd) {
  auto g = parse_graph(R"(graph @g {
    sym s1 in [1, 16]
    input %ids : f32[2, s1]
    const %table : f32[1, 16] = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0, 13.0, 14.0, 15.0]
    %t = slice(%table) {dim = 1, sym_end = "s1"}
    %u = slice(%table) {dim = 1, start = 1, step = 2, sym_end = "s1"}
    %y = add(%ids, %t)
    output %y, %u
  })");
  EXPECT_EQ(shape_string(g->find_value("t")->type().shape, &g->symbols()), "[1, s1]");
  auto compiled = CompiledGraph::compile(*g, CompileOptions{.verify = true});
  for (int64_t s : {1, 6, 16}) {
    Tensor ids = Tensor::zeros(DType::F32, {2, s});
    std::vector<Tensor> out = compiled->run({ids.view()});
    ASSERT_EQ(out[0].sizes(), (std::vector<int64_t>{2, s}));
    for (int64_t j = 0; j < s; ++j) ASSERT_EQ(out[0].data<float>()[s + j], j);
    const int64_t odd = s / 2;  // 1, 3, 5, ... below s
    ASSERT_EQ(out[1].sizes(), (std::vector<int64_t>{1, odd}));
    for (int64_t j = 0; j < odd; ++j) ASSERT_EQ(out[1].data<float>()[j], 1 + 2 * j);
  }
}

TEST(DynamicShapes, SliceEndThatMayLeaveTheDimFails) {
  std::string message;
  EXPECT_EQ(error_code_of([&] {
              parse_graph(R"(graph @g {
                sym s1 in [1, 32]
                input %ids : f32[s1]
                const %table : f32[16] = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0, 13.0, 14.0, 15.0]
                %t = slice(%table) {dim = 0, sym_end = "s1"}
                output %t, %ids
              })");
            }, &message),
            ErrorCode::ShapeInference);
  EXPECT_NE(message.find("dims_range"), std::string::npos) << message;
}

TEST(DynamicShapes, ExpressionsMustReadDeclaredSymbols) {
  for (const char* sym : {"\"s7\"", "\"Max(1, s0)\""}) {
    std::string message;
    EXPECT_EQ(error_code_of([&] {
                parse_graph(std::string(R"(graph @g {
                  sym s0 in [1, 8]
                  input %x : f32[s0, 4]
                  %y = reshape(%x) {shape = [-1, 4], sym_shape = [)") +
                            sym + R"(, ""]}
                  output %y
                })");
              }, &message),
              ErrorCode::ShapeInference)
        << sym;
  }
}

}  // namespace
}  // namespace kiln
