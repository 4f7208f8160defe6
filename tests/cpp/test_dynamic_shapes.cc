// Sizes written as expressions over a graph's symbols (src/ir/sym_expr.h): parsing, evaluation,
// ranges, and the ops that take them (reshape's sym_shape, expand's sym_size, slice's sym_end)
// serving every shape in range from one compiled graph.
#include <gtest/gtest.h>

#include <random>
#include <thread>

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
  // What Swin and BEiT give under dynamic=True: squares, Python's Mod, Max and Min.
  EXPECT_EQ(eval("((s0//4))**2 + 1", {{"s0", 36}}), 82);
  EXPECT_EQ(eval("2*s0**3", {{"s0", 3}}), 54);  // ** binds tighter than *
  EXPECT_EQ(eval("Mod(4 - (Mod((s0//4), 4)), 4)", {{"s0", 36}}), 3);
  EXPECT_EQ(eval("Mod(s0 - 9, 4)", {{"s0", 7}}), 2);  // the divisor's sign, as Python's %
  EXPECT_EQ(eval("Max(1, s0) + Min(s0, 3)", {{"s0", 7}}), 10);
  EXPECT_EQ(eval("Mod(s0, s1)", {{"s0", 7}, {"s1", 0}}), std::nullopt);
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
  EXPECT_EQ(range("s0**2"), (std::pair<int64_t, int64_t>{4, 64}));
  EXPECT_EQ(range("Mod(s0, 4)"), (std::pair<int64_t, int64_t>{0, 3}));
  EXPECT_EQ(range("Mod(s1, 8)"), (std::pair<int64_t, int64_t>{0, 4}));
  EXPECT_EQ(range("Max(s0, s1)"), (std::pair<int64_t, int64_t>{2, 8}));
  EXPECT_EQ(range("Min(s0, s1)"), (std::pair<int64_t, int64_t>{1, 4}));
}

TEST(SymExpr, LinearFormsOfSumsAndConstantMultiples) {
  auto form = [](const std::string& text) { return SymExpr::parse(text).linear(); };
  using Coefficients = std::map<std::string, int64_t>;
  ASSERT_TRUE(form("3*s0 + 1"));
  EXPECT_EQ(form("3*s0 + 1")->constant, 1);
  EXPECT_EQ(form("3*s0 + 1")->coefficients, (Coefficients{{"s0", 3}}));
  EXPECT_EQ(form("s0*2+2 - (s1 - s0)")->coefficients, (Coefficients{{"s0", 3}, {"s1", -1}}));
  EXPECT_EQ(form("2*(s0 + 4) - 2*s0")->coefficients, Coefficients{});  // the s0 terms cancel
  EXPECT_EQ(form("2*(s0 + 4) - 2*s0")->constant, 8);
  for (const char* nonlinear : {"s0*s1", "s0//2", "Mod(s0, 4)", "Max(s0, 1)", "s0**2",
                                "4611686018427387904*s0*2"})
    EXPECT_FALSE(form(nonlinear)) << nonlinear;
}

TEST(SymExpr, RejectsWhatItCannotEvaluate) {
  for (const char* bad : {"Floor(s0)", "Max(1)", "s0 +", "s0 ** s1", "s0**0", "s0**64", "(s0",
                          "", "s0 / 2", "99999999999999999999"}) {
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

// GPT-2's position ids: cat([past, new], 1) is [2, s + 1] (PyTorch's name for the sum, which
// concat gives too), then sliced up to s: within the dim whatever s is, unbounded as it is.
TEST(DynamicShapes, SliceUpToASumsSummand) {
  auto g = parse_graph(R"(graph @g {
    sym s in [2, 9223372036854775807]
    input %ids : f32[2, s]
    input %last : f32[2, 1]
    %cat = concat(%ids, %last) {dim = 1}
    %head = slice(%cat) {dim = 1, sym_end = "s"}
    %tail = slice(%cat) {dim = 1, start = 1, sym_end = "s + 1"}
    output %head, %tail
  })");
  EXPECT_EQ(shape_string(g->find_value("cat")->type().shape, &g->symbols()), "[2, s + 1]");
  auto compiled = CompiledGraph::compile(*g, CompileOptions{.verify = true});
  for (int64_t s : {2, 5}) {
    Tensor ids = Tensor::zeros(DType::F32, {2, s});
    Tensor last = Tensor::zeros(DType::F32, {2, 1});
    for (int64_t i = 0; i < 2 * s; ++i) ids.data<float>()[i] = static_cast<float>(i);
    last.data<float>()[0] = -1.f;
    last.data<float>()[1] = -2.f;
    std::vector<Tensor> out = compiled->run({ids.view(), last.view()});
    ASSERT_EQ(out[0].sizes(), (std::vector<int64_t>{2, s}));
    ASSERT_EQ(out[1].sizes(), (std::vector<int64_t>{2, s}));
    for (int64_t j = 0; j < s; ++j) {
      EXPECT_EQ(out[0].data<float>()[j], j);                              // ids row 0
      EXPECT_EQ(out[1].data<float>()[j], j + 1 < s ? j + 1 : -1.f);       // shifted by one
    }
  }
}

// EnCodec's reflect padding trimmed back: x doubled by concat and padded by 1 on each side,
// then sliced up to 2*s, PyTorch's name for the doubled length: within the dim for every s, as
// the names' linear forms show, however unbounded s is.
TEST(DynamicShapes, SliceOfAPaddedDimUpToALinearEnd) {
  auto g = parse_graph(R"(graph @g {
    sym s in [2, 9223372036854775807]
    input %x : f32[1, s]
    %c = concat(%x, %x) {dim = 1}
    %p = pad(%c) {pad = [1, 1], mode = "reflect"}
    %t = slice(%p) {dim = 1, sym_end = "2*s"}
    output %t
  })");
  // Names no string comparison relates to the end's.
  EXPECT_EQ(shape_string(g->find_value("p")->type().shape, &g->symbols()), "[1, s + s+2]");
  auto compiled = CompiledGraph::compile(*g, CompileOptions{.verify = true});
  Tensor x = Tensor::zeros(DType::F32, {1, 3});
  for (int64_t i = 0; i < 3; ++i) x.data<float>()[i] = static_cast<float>(i + 1);
  std::vector<Tensor> out = compiled->run({x.view()});
  ASSERT_EQ(out[0].sizes(), (std::vector<int64_t>{1, 6}));
  // [1 2 3 1 2 3] reflect-padded: [2 1 2 3 1 2 3 2], the first 6.
  EXPECT_EQ(test::values_of<float>(out[0]), (std::vector<float>{2, 1, 2, 3, 1, 2}));
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

// A window count that takes one value over the whole range is static, as PyTorch makes it.
TEST(DynamicShapes, WindowsOfOneCountOverTheRangeAreStatic) {
  auto g = parse_graph(R"(graph @g {
    sym H in [32, 63]
    input %x : f32[1, 2, H, H]
    %p = avg_pool2d(%x) {kernel_size = [32]}
    %q = avg_pool2d(%x) {kernel_size = [16]}
    output %p, %q
  })");
  EXPECT_EQ(shape_string(g->find_value("p")->type().shape, &g->symbols()), "[1, 2, 1, 1]");
  EXPECT_FALSE(g->find_value("q")->type().shape[2].is_static());  // 2 or 3
}

TEST(DynamicShapes, ExpressionsMustReadDeclaredSymbols) {
  for (const char* sym : {"\"s7\"", "\"Floor(s0)\""}) {
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


// Gears (CompileOptions::gears, dynamic_shape.gears): plans built at compile and pinned; runs
// only at a gear, or padded up to one with pad_to_gear.

// Row-wise: each [b, s] position's outputs read that position's inputs only, so padding the
// batch and sequence dims is exact on the real positions.
constexpr const char* kRowWise = R"(graph @rows {
  sym B in [1, 16]
  sym S in [1, 32]
  input %x : f32[B, S, 4]
  const %w : f32[4, 2] = [1.0, -2.0, 0.5, 3.0, -1.5, 2.5, 4.0, -0.5]
  %m = matmul(%x, %w)
  %y = relu(%m)
  output %y, %x
})";

using Sizes = std::vector<std::vector<int64_t>>;

Tensor random_input(std::vector<int64_t> sizes, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1, 1);
  Tensor t = Tensor::empty(DType::F32, std::move(sizes));
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(gen);
  return t;
}

CompileOptions with_gears(std::vector<Sizes> gears, bool pad = false) {
  // The reference kernels compute each element alone, so a padded run (more rows in each
  // matmul) gives bitwise the result of the unpadded one.
  CompileOptions o{.kernel_policy = "reference", .verify = true};
  o.gears = std::move(gears);
  o.pad_to_gear = pad;
  return o;
}

void expect_same(const std::vector<Tensor>& got, const std::vector<Tensor>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t j = 0; j < got.size(); ++j) {
    ASSERT_EQ(got[j].sizes(), want[j].sizes()) << "output " << j;
    EXPECT_TRUE(got[j].same_contents(want[j])) << "output " << j;
  }
}

TEST(Gears, PlansAreBuiltAtCompileAndPinned) {
  auto g = parse_graph(kRowWise);
  CompileOptions options = with_gears({{{2, 8, 4}}, {{4, 16, 4}}});
  options.plan_cache_capacity = 1;  // gears don't count against it
  auto compiled = CompiledGraph::compile(*g, options);
  EXPECT_EQ(compiled->cached_plans(), (std::vector<Sizes>{{{4, 16, 4}}, {{2, 8, 4}}}));
  auto reference = CompiledGraph::compile(*g, with_gears({}));
  for (const Sizes& gear : {Sizes{{2, 8, 4}}, Sizes{{4, 16, 4}}, Sizes{{2, 8, 4}}}) {
    Tensor x = random_input(gear[0], 3);
    expect_same(compiled->run({x.view()}), reference->run({x.view()}));
  }
  EXPECT_EQ(compiled->cached_plans().size(), 2u);  // nothing built or dropped by the runs
  EXPECT_EQ(compiled->output_sizes({{4, 16, 4}}), (Sizes{{4, 16, 2}, {4, 16, 4}}));
}

TEST(Gears, ShapeOfNoGearIsE20008ListingThem) {
  auto compiled = CompiledGraph::compile(*parse_graph(kRowWise),
                                         with_gears({{{2, 8, 4}}, {{4, 16, 4}}}));
  Tensor x = random_input({3, 8, 4}, 1);
  std::string message;
  EXPECT_EQ(error_code_of([&] { compiled->run({x.view()}); }, &message),
            ErrorCode::DynamicShapeRange);
  EXPECT_NE(message.find("([3, 8, 4]) are none of them: ([2, 8, 4]), ([4, 16, 4])"),
            std::string::npos) << message;
  EXPECT_NE(message.find("pad_to_gear"), std::string::npos) << message;
  EXPECT_EQ(error_code_of([&] { compiled->output_sizes({{3, 8, 4}}); }),
            ErrorCode::DynamicShapeRange);
  // The range check comes first: outside it, the message names the range.
  Tensor far = random_input({17, 8, 4}, 1);
  EXPECT_EQ(error_code_of([&] { compiled->run({far.view()}); }, &message),
            ErrorCode::DynamicShapeRange);
  EXPECT_NE(message.find("range [1, 16]"), std::string::npos) << message;
}

TEST(Gears, PaddingToTheSmallestCoveringGearMatchesTheUnpaddedRun) {
  auto g = parse_graph(kRowWise);
  auto compiled = CompiledGraph::compile(*g, with_gears({{{16, 32, 4}}, {{4, 16, 4}}}, true));
  auto reference = CompiledGraph::compile(*g, with_gears({}));
  for (const std::vector<int64_t>& sizes :
       {std::vector<int64_t>{3, 5, 4}, {1, 16, 4}, {4, 1, 4}, {5, 16, 4}, {16, 32, 4}}) {
    Tensor x = random_input(sizes, 7);
    std::vector<Tensor> want = reference->run({x.view()});
    expect_same(compiled->run({x.view()}), want);
    EXPECT_EQ(compiled->output_sizes({sizes}), (Sizes{want[0].sizes(), want[1].sizes()}));
    // Caller buffers of the real sizes.
    Tensor y = Tensor::empty(DType::F32, want[0].sizes()), copy = Tensor::empty(DType::F32, sizes);
    compiled->run({x.view()}, {y.view(), copy.view()});
    EXPECT_TRUE(y.same_contents(want[0]));
    EXPECT_TRUE(copy.same_contents(x));
  }
  // {3, 5} fits both gears: the smaller one's plan ran, and no other plan was built.
  EXPECT_EQ(compiled->memory_stats({{3, 5, 4}}).arena_bytes,
            compiled->memory_stats({{4, 16, 4}}).arena_bytes);
  EXPECT_EQ(compiled->cached_plans().size(), 2u);
}

TEST(Gears, ShapeNoGearCoversIsE20008) {
  auto compiled = CompiledGraph::compile(*parse_graph(kRowWise),
                                         with_gears({{{8, 8, 4}}, {{4, 16, 4}}}, true));
  Tensor x = random_input({5, 9, 4}, 2);
  std::string message;
  EXPECT_EQ(error_code_of([&] { compiled->run({x.view()}); }, &message),
            ErrorCode::DynamicShapeRange);
  EXPECT_NE(message.find("exceed every gear"), std::string::npos) << message;
}

TEST(Gears, PaddedRunsFromManyThreadsAgree) {
  auto g = parse_graph(kRowWise);
  auto compiled = CompiledGraph::compile(*g, with_gears({{{8, 32, 4}}}, true));
  auto reference = CompiledGraph::compile(*g, with_gears({}));
  std::vector<std::thread> threads;
  std::vector<int> ok(8, 0);
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      Tensor x = random_input({1 + t, 3 + 3 * t, 4}, t);
      auto got = compiled->run({x.view()});
      auto want = reference->run({x.view()});
      ok[t] = got[0].same_contents(want[0]) && got[1].same_contents(want[1]);
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(ok, std::vector<int>(8, 1));
}

TEST(Gears, InvalidGearsAreE10001) {
  auto g = parse_graph(kRowWise);
  auto code = [&](std::vector<Sizes> gears, bool pad, std::string* message) {
    return error_code_of([&] { CompiledGraph::compile(*g, with_gears(std::move(gears), pad)); },
                         message);
  };
  std::string message;
  EXPECT_EQ(code({{{32, 8, 4}}}, false, &message), ErrorCode::InvalidArgument);
  EXPECT_NE(message.find("gear 0 ([32, 8, 4]) doesn't fit the graph"), std::string::npos)
      << message;
  EXPECT_NE(message.find("range [1, 16]"), std::string::npos) << message;
  EXPECT_EQ(code({{{2, 8, 3}}}, false, &message), ErrorCode::InvalidArgument);  // static dim
  EXPECT_EQ(code({{{2, 8}}}, false, &message), ErrorCode::InvalidArgument);     // rank
  EXPECT_EQ(code({{{2, 8, 4}, {2, 8, 4}}}, false, &message), ErrorCode::InvalidArgument);
  EXPECT_EQ(code({{{2, 8, 4}}, {{2, 8, 4}}}, false, &message), ErrorCode::InvalidArgument);
  EXPECT_NE(message.find("list each gear once"), std::string::npos) << message;
  EXPECT_EQ(code({}, true, &message), ErrorCode::InvalidArgument);
  EXPECT_NE(message.find("has no gears"), std::string::npos) << message;
}

TEST(Gears, PaddingNeedsOutputDimsItCanCut) {
  // The output's dim s0*s1 is no input's: after padding, its real size is not a prefix.
  auto flat = parse_graph(R"(graph @g {
    sym s0 in [1, 8]
    sym s1 in [1, 8]
    input %x : f32[s0, s1]
    %f = reshape(%x) {shape = [-1], sym_shape = ["s0*s1"]}
    %y = relu(%f)
    output %y
  })");
  std::string message;
  EXPECT_EQ(error_code_of([&] {
              CompiledGraph::compile(*flat, with_gears({{{4, 4}}}, true));
            }, &message),
            ErrorCode::InvalidArgument);
  EXPECT_NE(message.find("can't cut output 0"), std::string::npos) << message;
  // Without padding the same gears are fine: runs at a gear need no cutting.
  auto compiled = CompiledGraph::compile(*flat, with_gears({{{4, 4}}}));
  Tensor x = random_input({4, 4}, 5);
  EXPECT_EQ(compiled->run({x.view()})[0].sizes(), (std::vector<int64_t>{16}));
}

// Every plan of a dynamic graph uses one prepacked copy of each weight: a new shape doesn't
// reorder the weights again nor hold a second copy of them.
TEST(DynamicShapes, PlansShareThePrepackedWeights) {
  auto g = parse_graph(R"(graph @g {
    sym N in [1, 8]
    input %x : f32[N, 1, 5, 5]
    const %w : f32[2, 1, 2, 2] = [1.0, -2.0, 0.5, 3.0, -1.5, 2.5, 4.0, -0.5]
    %y = conv2d(%x, %w) {stride = [1, 1], padding = [0, 0, 0, 0], dilation = [1, 1], groups = 1}
    output %y
  })");
  auto compiled = CompiledGraph::compile(*g, CompileOptions{.verify = true});
  auto reference = CompiledGraph::compile(*g, CompileOptions{.kernel_policy = "reference"});
  ASSERT_NE(compiled->describe_plan({{1, 1, 5, 5}}).find("onednn"), std::string::npos);
  const size_t one_copy = compiled->memory_stats({{1, 1, 5, 5}}).prepacked_bytes;
  EXPECT_GE(one_copy, 8 * sizeof(float));
  for (int64_t n : {3, 8, 1}) {
    Tensor x = random_input({n, 1, 5, 5}, static_cast<unsigned>(n));
    const Tensor got = compiled->run({x.view()})[0], want = reference->run({x.view()})[0];
    ASSERT_EQ(got.sizes(), want.sizes());
    for (int64_t i = 0; i < got.numel(); ++i)
      EXPECT_NEAR(got.data<float>()[i], want.data<float>()[i], 1e-5) << "n " << n << " at " << i;
    EXPECT_EQ(compiled->memory_stats({{n, 1, 5, 5}}).prepacked_bytes, one_copy) << "n " << n;
  }
  EXPECT_EQ(compiled->cached_plans().size(), 3u);
}

}  // namespace
}  // namespace kiln
