// concat, stack, split and chunk: type inference (symbolic dims add up to derived symbols), the
// reference kernels against hand-computed values, the row kernels against the reference, and
// each op through the executor.
#include "ops_test_util.h"

namespace kiln {
namespace {

using test::OneNode;
using test::type_of;

// Distinct values of any dtype (wrapping for the narrow ones), different for each `seed`.
Tensor iota(DType dtype, const std::vector<int64_t>& sizes, uint64_t seed = 0) {
  Tensor t = Tensor::empty(dtype, sizes);
  auto* bytes = static_cast<uint8_t*>(t.data());
  const size_t size = dtype_size(dtype);
  for (int64_t i = 0; i < t.numel(); ++i) {
    uint64_t v = (static_cast<uint64_t>(i) + seed * 1000003u) * 2654435761u;
    std::memcpy(bytes + static_cast<size_t>(i) * size, &v, size);
  }
  return t;
}

AttrMap dim_attr(int64_t dim) { return {{"dim", dim}}; }

std::string message_of(const std::function<void()>& fn) {
  std::string message;
  EXPECT_EQ(test::error_code_of(fn, &message), ErrorCode::ShapeInference);
  return message;
}

#define EXPECT_MENTIONS(message, text) \
  EXPECT_NE((message).find(text), std::string::npos) << (message)

// Every output of both kernels, bit for bit, on one thread and on two.
void expect_rows_match_reference(const OneNode& n, const std::vector<Tensor>& inputs) {
  std::vector<Tensor> expected = test::run_kernel(*n.node, "reference", inputs);
  for (int threads : {1, 2}) {
    std::vector<Tensor> got = test::run_kernel(*n.node, "rows", inputs, threads);
    ASSERT_EQ(got.size(), expected.size());
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_TRUE(test::same_values(got[i], expected[i]))
          << "output " << i << ", threads " << threads;
  }
}

std::vector<std::vector<int64_t>> sizes_of(const OneNode& n) {
  std::vector<std::vector<int64_t>> out;
  for (const Value* v : n.node->outputs()) out.push_back(static_sizes(v->type().shape));
  return out;
}

// ---------------------------------------------------------------- concat, stack

TEST(OpsConcatSplit, ConcatInference) {
  Graph g;
  Value* a = g.add_input("a", type_of(DType::F32, {2, 3}));
  Value* b = g.add_input("b", type_of(DType::F32, {2, 5}));
  Value* c = g.add_input("c", type_of(DType::F32, {4, 3}));
  EXPECT_EQ(g.add("concat", {a, b}, dim_attr(1))->type(), type_of(DType::F32, {2, 8}));
  EXPECT_EQ(g.add("concat", {a, c, a}, dim_attr(-2))->type(), type_of(DType::F32, {8, 3}));
  EXPECT_EQ(g.add("concat", {a})->type(), a->type());
  // PyTorch skips 1-D empty tensors next to tensors of another rank.
  Value* legacy = g.add_input("legacy", type_of(DType::F32, {0}));
  EXPECT_EQ(g.add("concat", {legacy, a, legacy, c})->type(), type_of(DType::F32, {6, 3}));
  EXPECT_EQ(g.add("concat", {legacy, legacy})->type(), type_of(DType::F32, {0}));

  EXPECT_MENTIONS(message_of([&] { g.add("concat", {a, b}, dim_attr(0)); }),
                  "dim 1 of input 1 and of input 0 differ: 3 vs 5");
  EXPECT_MENTIONS(message_of([&] { g.add("concat", {a, b}, dim_attr(2)); }),
                  "dim 2 is out of range for rank 2");
  Value* ints = g.add_input("ints", type_of(DType::I64, {2, 3}));
  EXPECT_MENTIONS(message_of([&] { g.add("concat", {a, ints}); }), "insert casts");
  Value* row = g.add_input("row", type_of(DType::F32, {3}));
  EXPECT_MENTIONS(message_of([&] { g.add("concat", {a, row}); }), "concat needs equal ranks");
  EXPECT_MENTIONS(message_of([&] { g.add("concat", {}); }), "at least one");
  Value* scalar = g.add_input("s", type_of(DType::F32, {}));
  EXPECT_EQ(test::error_code_of([&] { g.add("concat", {scalar, scalar}); }),
            ErrorCode::ShapeInference);
}

TEST(OpsConcatSplit, ConcatAddsSymbolicDims) {
  Graph g;
  Dim past = g.add_symbol("P", 0, 100);
  Dim fresh = g.add_symbol("T", 1, 8);
  Value* cache = g.add_input("cache", TensorType{DType::F32, {Dim(2), past, Dim(4)}});
  Value* step = g.add_input("step", TensorType{DType::F32, {Dim(2), fresh, Dim(4)}});
  Value* one = g.add_input("one", type_of(DType::F32, {2, 1, 4}));
  Value* empty = g.add_input("empty", type_of(DType::F32, {2, 0, 4}));

  Value* grown = g.add("concat", {cache, step}, dim_attr(1));
  ASSERT_FALSE(grown->type().shape[1].is_static());
  EXPECT_EQ(g.symbols()[grown->type().shape[1].symbol()], (Symbol{"P + T", 1, 108}));
  EXPECT_EQ(g.add("concat", {cache, step}, dim_attr(1))->type(), grown->type());  // reused
  Dim plus = g.add("concat", {one, cache, one}, dim_attr(1))->type().shape[1];
  EXPECT_EQ(g.symbols()[plus.symbol()], (Symbol{"P + 2", 2, 102}));
  EXPECT_EQ(g.add("concat", {empty, step}, dim_attr(1))->type().shape[1], fresh);
  // A symbolic dim off the concat dim unifies with the others.
  Dim batch = g.add_symbol("B", 1, 4);
  Value* rows = g.add_input("rows", TensorType{DType::F32, {batch, Dim(3)}});
  Value* fixed = g.add_input("fixed", type_of(DType::F32, {2, 5}));
  EXPECT_EQ(g.add("concat", {rows, fixed}, dim_attr(1))->type().shape, (Shape{Dim(2), Dim(8)}));
  g.set_outputs({grown});
  EXPECT_NO_THROW(verify(g));
  EXPECT_NO_THROW(parse_graph(print_graph(g)));
}

TEST(OpsConcatSplit, StackInference) {
  Graph g;
  Dim batch = g.add_symbol("B", 1, 4);
  Value* a = g.add_input("a", TensorType{DType::F32, {batch, Dim(3)}});
  Value* b = g.add_input("b", type_of(DType::F32, {2, 3}));
  EXPECT_EQ(g.add("stack", {a, a, a})->type().shape, (Shape{Dim(3), batch, Dim(3)}));
  EXPECT_EQ(g.add("stack", {a, b}, dim_attr(-1))->type().shape, (Shape{Dim(2), Dim(3), Dim(2)}));
  EXPECT_EQ(g.add("stack", {a, a}, dim_attr(2))->type().shape, (Shape{batch, Dim(3), Dim(2)}));
  EXPECT_MENTIONS(message_of([&] { g.add("stack", {a, a}, dim_attr(3)); }),
                  "dim 3 is out of range for rank 3");
  Value* c = g.add_input("c", type_of(DType::F32, {2, 4}));
  EXPECT_MENTIONS(message_of([&] { g.add("stack", {b, c}); }), "3 vs 4");
  Value* s = g.add_input("s", type_of(DType::F32, {}));
  EXPECT_EQ(g.add("stack", {s, s})->type(), type_of(DType::F32, {2}));
}

TEST(OpsConcatSplit, ReferenceConcatAndStackMatchHandComputedValues) {
  Tensor a = test::tensor_of({2, 2}, {1, 2, 3, 4});
  Tensor b = test::tensor_of({2, 1}, {5, 6});
  OneNode columns("concat", {type_of(DType::F32, {2, 2}), type_of(DType::F32, {2, 1})},
                  dim_attr(1));
  EXPECT_EQ(test::values_of<float>(test::run_kernel(*columns.node, "reference", {a, b})[0]),
            (std::vector<float>{1, 2, 5, 3, 4, 6}));
  OneNode pairs("stack", {type_of(DType::F32, {2, 2}), type_of(DType::F32, {2, 2})}, dim_attr(2));
  Tensor y = test::run_kernel(*pairs.node, "reference", {a, a})[0];
  EXPECT_EQ(y.sizes(), (std::vector<int64_t>{2, 2, 2}));
  EXPECT_EQ(test::values_of<float>(y), (std::vector<float>{1, 1, 2, 2, 3, 3, 4, 4}));
  OneNode skipping("concat", {type_of(DType::F32, {0}), type_of(DType::F32, {2, 1})});
  Tensor nothing = Tensor::empty(DType::F32, {0});
  EXPECT_EQ(test::values_of<float>(test::run_kernel(*skipping.node, "reference", {nothing, b})[0]),
            (std::vector<float>{5, 6}));
}

TEST(OpsConcatSplit, ConcatAndStackRowsMatchReference) {
  struct Case {
    std::string op;
    std::vector<std::vector<int64_t>> inputs;
    int64_t dim;
  };
  const std::vector<Case> cases = {
      {"concat", {{1}}, 0},
      {"concat", {{3, 7}, {3, 1}, {3, 17}}, 1},
      {"concat", {{7, 3}, {17, 3}, {0, 3}}, 0},
      {"concat", {{2, 3, 7}, {2, 5, 7}}, -2},
      {"concat", {{0}, {3, 7, 1}, {0}, {3, 7, 2}}, 2},
      {"concat", {{500, 1000}, {500, 1003}}, 1},  // ~1e6 elements, the K/V cache pattern
      {"concat", {{500, 1000}, {517, 1000}}, 0},
      {"concat", {{4, 0}, {4, 0}}, 0},
      {"stack", {{1}, {1}, {1}}, 0},
      {"stack", {{3, 7}, {3, 7}}, -1},
      {"stack", {{17, 3}, {17, 3}, {17, 3}}, 1},
      {"stack", {{1000, 500}, {1000, 500}}, 1},
      {"stack", {{0, 2}, {0, 2}}, 0},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.op + " of " + std::to_string(c.inputs.size()) + ", first " +
                 shape_string(c.inputs[0]));
    for (DType dtype : {DType::F32, DType::I64, DType::U8, DType::BF16}) {
      std::vector<TensorType> types;
      std::vector<Tensor> inputs;
      int64_t elements = 0;
      for (size_t i = 0; i < c.inputs.size(); ++i) {
        types.push_back(type_of(dtype, c.inputs[i]));
        inputs.push_back(iota(dtype, c.inputs[i], i));
        elements += inputs.back().numel();
      }
      if (dtype != DType::F32 && elements > 100000) continue;
      expect_rows_match_reference(OneNode(c.op, types, dim_attr(c.dim)), inputs);
    }
  }
}

// ---------------------------------------------------------------- split, chunk

TEST(OpsConcatSplit, SplitAndChunkInference) {
  auto split = [](std::vector<int64_t> sizes, std::vector<int64_t> split_sizes, int64_t dim) {
    return sizes_of(OneNode("split", {type_of(DType::F32, sizes)},
                            {{"split_sizes", split_sizes}, {"dim", dim}}));
  };
  EXPECT_EQ(split({4, 6}, {1, 0, 5}, 1),
            (std::vector<std::vector<int64_t>>{{4, 1}, {4, 0}, {4, 5}}));
  EXPECT_EQ(split({4, 6}, {4}, -2), (std::vector<std::vector<int64_t>>{{4, 6}}));
  auto chunk = [](int64_t n, int64_t chunks) {
    std::vector<int64_t> lengths;
    for (const auto& s : sizes_of(OneNode("chunk", {type_of(DType::F32, {2, n})},
                                          {{"chunks", chunks}, {"dim", int64_t{-1}}})))
      lengths.push_back(s[1]);
    return lengths;
  };
  // PyTorch's chunk: pieces of ceil(n / chunks), maybe fewer of them than asked.
  EXPECT_EQ(chunk(6, 3), (std::vector<int64_t>{2, 2, 2}));
  EXPECT_EQ(chunk(7, 3), (std::vector<int64_t>{3, 3, 1}));
  EXPECT_EQ(chunk(6, 4), (std::vector<int64_t>{2, 2, 2}));
  EXPECT_EQ(chunk(2, 5), (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(chunk(0, 3), (std::vector<int64_t>{0, 0, 0}));

  Graph g;
  Value* x = g.add_input("x", type_of(DType::F32, {4, 6}));
  auto add_split = [&](std::vector<int64_t> split_sizes, int64_t dim) {
    g.add_node("split", {x}, {{"split_sizes", split_sizes}, {"dim", dim}});
  };
  EXPECT_MENTIONS(message_of([&] { add_split({2, 3}, 1); }),
                  "split_sizes add up to 5, but dim 1 has size 6");
  EXPECT_MENTIONS(message_of([&] { add_split({7, -1}, 1); }), "negative size -1");
  EXPECT_MENTIONS(message_of([&] { add_split({}, 1); }), "split_sizes is empty");
  EXPECT_MENTIONS(message_of([&] { add_split({6}, 2); }), "out of range");
  EXPECT_MENTIONS(message_of([&] { g.add_node("chunk", {x}, {{"chunks", int64_t{0}}}); }),
                  "chunks is 0");
  Dim seq = g.add_symbol("S", 1, 10);
  Value* dynamic = g.add_input("d", TensorType{DType::F32, {seq, Dim(6)}});
  EXPECT_MENTIONS(message_of([&] {
                    g.add_node("chunk", {dynamic}, {{"chunks", int64_t{2}}, {"dim", int64_t{0}}});
                  }),
                  "dim 0 is dynamic");
  // Splitting along a static dim keeps the symbolic ones.
  std::vector<Value*> halves =
      g.add_node("chunk", {dynamic}, {{"chunks", int64_t{2}}, {"dim", int64_t{1}}});
  ASSERT_EQ(halves.size(), 2u);
  EXPECT_EQ(halves[1]->type().shape, (Shape{seq, Dim(3)}));
  g.set_outputs(halves);
  EXPECT_NO_THROW(verify(g));
  EXPECT_NO_THROW(parse_graph(print_graph(g)));
}

TEST(OpsConcatSplit, ReferenceSplitMatchesHandComputedValues) {
  OneNode n("split", {type_of(DType::F32, {2, 3})},
            {{"split_sizes", std::vector<int64_t>{2, 1}}, {"dim", int64_t{1}}});
  std::vector<Tensor> parts =
      test::run_kernel(*n.node, "reference", {test::tensor_of({2, 3}, {1, 2, 3, 4, 5, 6})});
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(test::values_of<float>(parts[0]), (std::vector<float>{1, 2, 4, 5}));
  EXPECT_EQ(test::values_of<float>(parts[1]), (std::vector<float>{3, 6}));
}

TEST(OpsConcatSplit, SplitAndChunkRowsMatchReference) {
  struct Case {
    std::vector<int64_t> sizes;
    AttrMap attrs;
    std::string op = "split";
  };
  using Sizes = std::vector<int64_t>;
  const std::vector<Case> cases = {
      {{1}, {{"split_sizes", Sizes{1}}}},
      {{3, 7}, {{"split_sizes", Sizes{3, 0, 4}}, {"dim", int64_t{1}}}},
      {{17, 3}, {{"split_sizes", Sizes{1, 16}}}},
      {{7, 17, 3}, {{"split_sizes", Sizes{5, 5, 7}}, {"dim", int64_t{-2}}}},
      {{1000, 1001}, {{"split_sizes", Sizes{1, 999, 1}}, {"dim", int64_t{1}}}},
      {{1000, 1001}, {{"split_sizes", Sizes{500, 500}}}},
      {{0, 4}, {{"split_sizes", Sizes{2, 2}}, {"dim", int64_t{1}}}},
      {{1000, 2304}, {{"chunks", int64_t{3}}, {"dim", int64_t{-1}}}, "chunk"},  // fused QKV
      {{7, 17}, {{"chunks", int64_t{4}}, {"dim", int64_t{1}}}, "chunk"},
      {{3, 0}, {{"chunks", int64_t{2}}, {"dim", int64_t{1}}}, "chunk"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.op + " " + shape_string(c.sizes));
    for (DType dtype : {DType::F32, DType::I64, DType::U8, DType::BF16}) {
      if (dtype != DType::F32 && num_elements(c.sizes) > 100000) continue;
      expect_rows_match_reference(OneNode(c.op, {type_of(dtype, c.sizes)}, c.attrs),
                                  {iota(dtype, c.sizes)});
    }
  }
}

// ---------------------------------------------------------------- through the executor

// A fused QKV projection chunked into three, a K/V cache of dynamic length grown by concat,
// stack and split: both kernel policies on two cache lengths.
TEST(OpsConcatSplit, EveryOpRunsThroughTheExecutor) {
  Graph g;
  Dim past = g.add_symbol("P", 0, 64);
  Value* qkv = g.add_input("qkv", type_of(DType::F32, {2, 12}));
  Value* cache = g.add_input("cache", TensorType{DType::F32, {past, Dim(4)}});
  std::vector<Value*> parts =
      g.add_node("chunk", {qkv}, {{"chunks", int64_t{3}}, {"dim", int64_t{1}}});
  ASSERT_EQ(parts.size(), 3u);
  Value* grown = g.add("concat", {cache, parts[1]});                           // [P+2, 4]
  Value* stacked = g.add("stack", {parts[0], parts[2]}, dim_attr(1));          // [2, 2, 4]
  std::vector<Value*> pieces = g.add_node(
      "split", {stacked}, {{"split_sizes", std::vector<int64_t>{1, 1}}, {"dim", int64_t{0}}});
  g.set_outputs({grown, pieces[1], parts[1]});
  verify(g);

  auto best = CompiledGraph::compile(g);
  CompileOptions reference_policy;
  reference_policy.kernel_policy = "reference";
  auto reference = CompiledGraph::compile(g, reference_policy);
  Tensor x = iota(DType::F32, {2, 12});
  for (int64_t p : {0, 5}) {
    Tensor c = iota(DType::F32, {p, 4}, 7);
    std::vector<Tensor> got = best->run({x.view(), c.view()});
    std::vector<Tensor> expected = reference->run({x.view(), c.view()});
    ASSERT_EQ(got.size(), 3u);
    EXPECT_EQ(got[0].sizes(), (std::vector<int64_t>{p + 2, 4}));
    EXPECT_EQ(got[1].sizes(), (std::vector<int64_t>{1, 2, 4}));
    for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(test::same_values(got[i], expected[i]));
    // The cache's rows, then K = qkv[:, 4:8].
    EXPECT_EQ(std::memcmp(got[0].data(), c.data(), c.nbytes()), 0);
    EXPECT_EQ(std::memcmp(static_cast<std::byte*>(got[0].data()) + c.nbytes(), got[2].data(),
                          got[2].nbytes()),
              0);
    for (int64_t r = 0; r < 2; ++r)
      EXPECT_EQ(std::memcmp(got[2].data<float>() + r * 4, x.data<float>() + r * 12 + 4, 16), 0);
  }
}

}  // namespace
}  // namespace kiln
