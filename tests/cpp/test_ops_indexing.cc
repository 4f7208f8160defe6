// Indexing ops (slice, select, narrow, index_select, embedding, index, gather, scatter,
// index_put): type inference with symbolic dims, reference kernels against hand-computed
// values (PyTorch's results), the row kernels against the reference, run-time index checks, and
// each op through the executor.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "ops_test_util.h"

namespace kiln {
namespace {

using test::OneNode;
using test::type_of;

// Distinct values of any dtype (wrapping for the narrow ones): every element tells where it
// came from. As f32 they are bit patterns spread over the whole range, NaNs (quiet and
// signaling), infinities and subnormals among them, which copies must keep bit for bit.
Tensor iota(DType dtype, const std::vector<int64_t>& sizes) {
  Tensor t = Tensor::empty(dtype, sizes);
  auto* bytes = static_cast<uint8_t*>(t.data());
  const size_t size = dtype_size(dtype);
  for (int64_t i = 0; i < t.numel(); ++i) {
    uint64_t v = static_cast<uint64_t>(i) * 2654435761u;
    std::memcpy(bytes + static_cast<size_t>(i) * size, &v, size);
  }
  return t;
}

// An i64 or i32 tensor holding `values`.
Tensor index_tensor(DType dtype, const std::vector<int64_t>& sizes,
                    const std::vector<int64_t>& values) {
  Tensor t = Tensor::empty(dtype, sizes);
  KILN_ASSERT(static_cast<int64_t>(values.size()) == t.numel());
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == DType::I64) t.data<int64_t>()[i] = values[i];
    else t.data<int32_t>()[i] = static_cast<int32_t>(values[i]);
  }
  return t;
}

Tensor i64(const std::vector<int64_t>& sizes, const std::vector<int64_t>& values) {
  return index_tensor(DType::I64, sizes, values);
}
Tensor i32(const std::vector<int64_t>& sizes, const std::vector<int64_t>& values) {
  return index_tensor(DType::I32, sizes, values);
}

// Random indices in [lo, hi] of an index dtype.
Tensor random_indices(DType dtype, const std::vector<int64_t>& sizes, int64_t lo, int64_t hi,
                      std::mt19937& rng) {
  std::vector<int64_t> values(static_cast<size_t>(num_elements(sizes)));
  if (!values.empty()) {
    std::uniform_int_distribution<int64_t> dist(lo, hi);
    for (int64_t& v : values) v = dist(rng);
  }
  return index_tensor(dtype, sizes, values);
}

Tensor run_reference(const OneNode& n, const std::vector<Tensor>& inputs) {
  return test::run_kernel(*n.node, "reference", inputs)[0];
}

// The row kernel matches the reference bit for bit, on one thread and on two.
void expect_rows_match_reference(const OneNode& n, const std::vector<Tensor>& inputs) {
  Tensor expected = run_reference(n, inputs);
  for (int threads : {1, 2})
    EXPECT_TRUE(test::same_values(test::run_kernel(*n.node, "rows", inputs, threads)[0], expected))
        << "threads " << threads;
}

AttrMap slice_attrs(int64_t dim, int64_t start, int64_t end, int64_t step = 1) {
  return {{"dim", dim}, {"start", start}, {"end", end}, {"step", step}};
}

std::string message_of(const std::function<void()>& fn, ErrorCode expected) {
  std::string message;
  EXPECT_EQ(test::error_code_of(fn, &message), expected);
  return message;
}

#define EXPECT_MENTIONS(message, text) \
  EXPECT_NE((message).find(text), std::string::npos) << (message)

// ---------------------------------------------------------------- slice, select, narrow

TEST(OpsIndexing, SliceInferenceClampsLikePython) {
  Graph g;
  Value* x = g.add_input("x", type_of(DType::F32, {4, 10}));
  auto sliced = [&](int64_t start, int64_t end, int64_t step) {
    return static_sizes(g.add("slice", {x}, slice_attrs(1, start, end, step))->type().shape);
  };
  EXPECT_EQ(sliced(2, 7, 1), (std::vector<int64_t>{4, 5}));
  EXPECT_EQ(sliced(1, INT64_MAX, 3), (std::vector<int64_t>{4, 3}));   // 1, 4, 7
  EXPECT_EQ(sliced(-3, INT64_MAX, 1), (std::vector<int64_t>{4, 3}));
  EXPECT_EQ(sliced(0, -1, 1), (std::vector<int64_t>{4, 9}));
  EXPECT_EQ(sliced(-100, 100, 1), (std::vector<int64_t>{4, 10}));
  EXPECT_EQ(sliced(8, 3, 1), (std::vector<int64_t>{4, 0}));
  EXPECT_EQ(sliced(INT64_MIN, INT64_MAX, 4), (std::vector<int64_t>{4, 3}));
  EXPECT_EQ(g.add("slice", {x}, {{"start", int64_t{1}}})->type().shape, (Shape{Dim(3), Dim(10)}));

  EXPECT_MENTIONS(message_of([&] { sliced(0, 5, 0); }, ErrorCode::ShapeInference), "step is 0");
  EXPECT_MENTIONS(message_of([&] { sliced(0, 5, -1); }, ErrorCode::ShapeInference), "flip");
  EXPECT_MENTIONS(
      message_of([&] { g.add("slice", {x}, slice_attrs(2, 0, 1)); }, ErrorCode::ShapeInference),
      "dim 2 is out of range for rank 2");
  Value* s = g.add_input("s", type_of(DType::F32, {}));
  EXPECT_EQ(test::error_code_of([&] { g.add("slice", {s}); }), ErrorCode::ShapeInference);
}

TEST(OpsIndexing, SliceOfSymbolicDimIsDerivedSymbol) {
  Graph g;
  Dim seq = g.add_symbol("S", 4, 100);
  Value* x = g.add_input("x", TensorType{DType::F32, {Dim(2), seq}});
  auto sliced = [&](int64_t start, int64_t end, int64_t step) {
    return g.add("slice", {x}, slice_attrs(1, start, end, step))->type().shape[1];
  };
  Dim drop_last = sliced(0, -1, 1);
  ASSERT_FALSE(drop_last.is_static());
  EXPECT_EQ(g.symbols()[drop_last.symbol()], (Symbol{"S[:-1]", 3, 99}));
  EXPECT_EQ(sliced(0, -1, 1), drop_last);  // the same slice reuses its symbol
  EXPECT_EQ(g.symbols()[sliced(1, INT64_MAX, 2).symbol()], (Symbol{"S[1::2]", 2, 50}));
  EXPECT_EQ(sliced(0, INT64_MAX, 1), seq);   // the whole dim
  EXPECT_EQ(sliced(0, 3, 1), Dim(3));        // S >= 4: always 3
  EXPECT_EQ(sliced(-2, INT64_MAX, 1), Dim(2));
  g.set_outputs({g.add("slice", {x}, slice_attrs(1, 0, -1))});
  EXPECT_NO_THROW(verify(g));
  EXPECT_NO_THROW(parse_graph(print_graph(g)));
}

// The derived range is exactly the sizes the slice takes over the symbol's range, also where
// the size is not monotonic in the dim's size (x[-5:3] shrinks as the dim grows past 5).
TEST(OpsIndexing, SliceRangeOfSymbolMatchesEverySize) {
  const std::vector<int64_t> bounds = {INT64_MIN, -7, -5, -1, 0, 1, 3, 5, 8, INT64_MAX};
  for (auto [min, max] : {std::pair<int64_t, int64_t>{0, 12}, {3, 9}, {6, 7}, {1, 40}}) {
    for (int64_t start : bounds)
      for (int64_t end : bounds)
        for (int64_t step : {1, 2, 3}) {
          Graph g;
          Value* x = g.add_input("x", TensorType{DType::F32, {g.add_symbol("S", min, max)}});
          Dim d = g.add("slice", {x}, slice_attrs(0, start, end, step))->type().shape[0];
          int64_t lo = INT64_MAX, hi = 0;
          for (int64_t n = min; n <= max; ++n) {
            OneNode concrete("slice", {type_of(DType::F32, {n})}, slice_attrs(0, start, end, step));
            int64_t size = static_sizes(concrete.output_type().shape)[0];
            lo = std::min(lo, size);
            hi = std::max(hi, size);
          }
          SCOPED_TRACE(std::to_string(start) + ":" + std::to_string(end) + ":" +
                       std::to_string(step) + " of [" + std::to_string(min) + ", " +
                       std::to_string(max) + "]");
          if (d.is_static()) {
            EXPECT_EQ(lo, hi);
            EXPECT_EQ(d.size(), lo);
          } else if (d == Dim::symbolic(0)) {
            EXPECT_EQ(lo, min);
            EXPECT_EQ(hi, max);
          } else {
            EXPECT_EQ(g.symbols()[d.symbol()].min, lo);
            EXPECT_EQ(g.symbols()[d.symbol()].max, hi);
          }
        }
  }
}

TEST(OpsIndexing, ReferenceSliceSelectNarrowMatchHandComputedValues) {
  Tensor x = test::tensor_of({2, 5}, {0, 1, 2, 3, 4, 10, 11, 12, 13, 14});
  OneNode every_other("slice", {type_of(DType::F32, {2, 5})}, slice_attrs(1, 1, 5, 2));
  EXPECT_EQ(test::values_of<float>(run_reference(every_other, {x})),
            (std::vector<float>{1, 3, 11, 13}));
  OneNode last_row("slice", {type_of(DType::F32, {2, 5})}, slice_attrs(0, -1, INT64_MAX));
  EXPECT_EQ(test::values_of<float>(run_reference(last_row, {x})),
            (std::vector<float>{10, 11, 12, 13, 14}));

  OneNode column("select", {type_of(DType::F32, {2, 5})},
                 {{"dim", int64_t{1}}, {"index", int64_t{-2}}});
  EXPECT_EQ(column.output_type(), type_of(DType::F32, {2}));
  EXPECT_EQ(test::values_of<float>(run_reference(column, {x})), (std::vector<float>{3, 13}));

  OneNode middle("narrow", {type_of(DType::F32, {2, 5})},
                 {{"dim", int64_t{-1}}, {"start", int64_t{-4}}, {"length", int64_t{2}}});
  EXPECT_EQ(middle.output_type(), type_of(DType::F32, {2, 2}));
  EXPECT_EQ(test::values_of<float>(run_reference(middle, {x})),
            (std::vector<float>{1, 2, 11, 12}));
}

TEST(OpsIndexing, SelectAndNarrowRejectPositionsOutsideTheDim) {
  Graph g;
  Value* x = g.add_input("x", type_of(DType::F32, {3, 4}));
  auto select = [&](int64_t dim, int64_t index) {
    return g.add("select", {x}, {{"dim", dim}, {"index", index}});
  };
  EXPECT_EQ(select(0, -3)->type(), type_of(DType::F32, {4}));
  EXPECT_MENTIONS(message_of([&] { select(1, 4); }, ErrorCode::ShapeInference),
                  "index 4 is out of range for dim 1 of size 4; use [-4, 3]");
  EXPECT_EQ(test::error_code_of([&] { select(0, -4); }), ErrorCode::ShapeInference);
  EXPECT_EQ(test::error_code_of([&] { g.add("select", {x}, {{"dim", int64_t{0}}}); }),
            ErrorCode::ShapeInference);  // index is required

  auto narrow = [&](int64_t start, int64_t length) {
    return g.add("narrow", {x}, {{"dim", int64_t{1}}, {"start", start}, {"length", length}});
  };
  EXPECT_EQ(narrow(4, 0)->type(), type_of(DType::F32, {3, 0}));
  EXPECT_EQ(narrow(-4, 4)->type(), type_of(DType::F32, {3, 4}));
  EXPECT_MENTIONS(message_of([&] { narrow(2, 3); }, ErrorCode::ShapeInference),
                  "start 2 + length 3 exceeds dim 1 of size 4");
  EXPECT_EQ(test::error_code_of([&] { narrow(-5, 1); }), ErrorCode::ShapeInference);
  EXPECT_EQ(test::error_code_of([&] { narrow(0, -1); }), ErrorCode::ShapeInference);

  // A symbolic dim passes inference; the concrete size is checked when a plan is made.
  Graph dynamic;
  Value* y = dynamic.add_input("y", TensorType{DType::F32, {dynamic.add_symbol("N", 1, 8)}});
  Value* picked = dynamic.add("select", {y}, {{"dim", int64_t{0}}, {"index", int64_t{5}}});
  EXPECT_EQ(picked->type(), type_of(DType::F32, {}));
  dynamic.set_outputs({picked});
  auto compiled = CompiledGraph::compile(dynamic);
  Tensor eight = iota(DType::F32, {8});
  EXPECT_EQ(compiled->run({eight.view()})[0].data<float>()[0], eight.data<float>()[5]);
  Tensor three = iota(DType::F32, {3});
  EXPECT_MENTIONS(message_of([&] { compiled->run({three.view()}); }, ErrorCode::ShapeInference),
                  "index 5 is out of range for dim 0 of size 3");
}

TEST(OpsIndexing, SliceRowsMatchReference) {
  struct Case {
    std::vector<int64_t> sizes;
    AttrMap attrs;
    std::string op = "slice";
  };
  const std::vector<Case> cases = {
      {{1}, slice_attrs(0, 0, 1)},
      {{3, 7}, slice_attrs(1, 1, 6, 2)},
      {{7, 17}, slice_attrs(0, -5, INT64_MAX, 3)},
      {{17, 3, 7}, slice_attrs(1, 1, 2)},
      {{17, 3, 7}, slice_attrs(2, 0, 7, 4)},
      {{1000, 1003}, slice_attrs(1, 1, -1)},           // ~1e6 elements, contiguous rows
      {{1000, 1003}, slice_attrs(1, 0, INT64_MAX, 2)},  // single-element blocks
      {{1000, 1003}, slice_attrs(0, 3, 900, 7)},
      {{0, 5}, slice_attrs(1, 1, 3)},
      {{4, 5}, slice_attrs(1, 3, 1)},
      {{5, 4, 3}, {{"dim", int64_t{2}}, {"index", int64_t{-1}}}, "select"},
      {{1000, 1003}, {{"dim", int64_t{1}}, {"index", int64_t{500}}}, "select"},
      {{1000, 1003}, {{"dim", int64_t{0}}, {"index", int64_t{999}}}, "select"},
      {{17, 7}, {{"dim", int64_t{1}}, {"start", int64_t{2}}, {"length", int64_t{3}}}, "narrow"},
      {{1000, 1003}, {{"dim", int64_t{0}}, {"start", int64_t{1}}, {"length", int64_t{998}}},
       "narrow"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.op + " " + shape_string(c.sizes));
    for (DType dtype : {DType::F32, DType::I64, DType::U8, DType::BF16, DType::Bool}) {
      if (dtype != DType::F32 && num_elements(c.sizes) > 1000) continue;
      expect_rows_match_reference(OneNode(c.op, {type_of(dtype, c.sizes)}, c.attrs),
                                  {iota(dtype, c.sizes)});
    }
  }
}

// ---------------------------------------------------------------- index_select, embedding

TEST(OpsIndexing, IndexSelectInference) {
  Graph g;
  Dim seq = g.add_symbol("S", 1, 64);
  Value* x = g.add_input("x", type_of(DType::F32, {3, 5, 2}));
  Value* ids = g.add_input("ids", TensorType{DType::I64, {seq}});
  EXPECT_EQ(g.add("index_select", {x, ids}, {{"dim", int64_t{1}}})->type().shape,
            (Shape{Dim(3), seq, Dim(2)}));
  Value* one = g.add_input("one", type_of(DType::I32, {}));
  EXPECT_EQ(g.add("index_select", {x, one}, {{"dim", int64_t{-1}}})->type(),
            type_of(DType::F32, {3, 5, 1}));
  Value* matrix = g.add_input("m", type_of(DType::I64, {2, 2}));
  EXPECT_MENTIONS(message_of([&] { g.add("index_select", {x, matrix}, {{"dim", int64_t{0}}}); },
                             ErrorCode::ShapeInference),
                  "0-d or 1-d");
  Value* floats = g.add_input("f", type_of(DType::F32, {2}));
  EXPECT_MENTIONS(message_of([&] { g.add("index_select", {x, floats}, {{"dim", int64_t{0}}}); },
                             ErrorCode::ShapeInference),
                  "must be i64 or i32, not f32");
  Value* mask = g.add_input("mask", type_of(DType::Bool, {3}));
  EXPECT_MENTIONS(message_of([&] { g.add("index_select", {x, mask}, {{"dim", int64_t{0}}}); },
                             ErrorCode::ShapeInference),
                  "data-dependent");
}

TEST(OpsIndexing, ReferenceIndexSelectAndEmbeddingMatchHandComputedValues) {
  Tensor x = test::tensor_of({2, 3}, {0, 1, 2, 10, 11, 12});
  for (DType index_dtype : {DType::I64, DType::I32}) {
    OneNode columns("index_select", {type_of(DType::F32, {2, 3}), type_of(index_dtype, {4})},
                    {{"dim", int64_t{1}}});
    EXPECT_EQ(test::values_of<float>(
                  run_reference(columns, {x, index_tensor(index_dtype, {4}, {2, 0, 2, 1})})),
              (std::vector<float>{2, 0, 2, 1, 12, 10, 12, 11}));

    OneNode lookup("embedding", {type_of(DType::F32, {2, 3}), type_of(index_dtype, {2, 2})});
    EXPECT_EQ(lookup.output_type(), type_of(DType::F32, {2, 2, 3}));
    EXPECT_EQ(test::values_of<float>(
                  run_reference(lookup, {x, index_tensor(index_dtype, {2, 2}, {1, 0, 1, 1})})),
              (std::vector<float>{10, 11, 12, 0, 1, 2, 10, 11, 12, 10, 11, 12}));
  }
}

TEST(OpsIndexing, EmbeddingInference) {
  Graph g;
  Dim batch = g.add_symbol("B", 1, 8);
  Value* weight = g.add_input("w", type_of(DType::F32, {100, 16}));
  Value* ids = g.add_input("ids", TensorType{DType::I64, {batch, Dim(7)}});
  EXPECT_EQ(g.add("embedding", {weight, ids}, {{"padding_idx", int64_t{0}}})->type().shape,
            (Shape{batch, Dim(7), Dim(16)}));
  Value* scalar = g.add_input("id", type_of(DType::I32, {}));
  EXPECT_EQ(g.add("embedding", {weight, scalar})->type(), type_of(DType::F32, {16}));
  Value* cube = g.add_input("cube", type_of(DType::F32, {2, 3, 4}));
  EXPECT_MENTIONS(message_of([&] { g.add("embedding", {cube, ids}); }, ErrorCode::ShapeInference),
                  "2-d");
}

TEST(OpsIndexing, IndexSelectAndEmbeddingRowsMatchReference) {
  std::mt19937 rng(2);
  for (DType index_dtype : {DType::I64, DType::I32}) {
    for (auto [sizes, dim, count] : std::vector<std::tuple<std::vector<int64_t>, int64_t, int64_t>>{
             {{1}, 0, 1}, {{3, 7}, 1, 17}, {{7, 17, 3}, 1, 5}, {{17, 1000}, 0, 1000},
             {{1000, 1000}, 1, 997}, {{0, 4}, 1, 3}, {{4, 6}, 0, 0}}) {
      SCOPED_TRACE(shape_string(sizes) + " dim " + std::to_string(dim));
      OneNode n("index_select", {type_of(DType::F32, sizes), type_of(index_dtype, {count})},
                {{"dim", dim}});
      expect_rows_match_reference(
          n, {iota(DType::F32, sizes),
              random_indices(index_dtype, {count}, 0, sizes[static_cast<size_t>(dim)] - 1, rng)});
    }
    // Embedding tables of model shapes and odd ones, every element size.
    for (auto [vocab, width, ids] : std::vector<std::tuple<int64_t, int64_t, std::vector<int64_t>>>{
             {1, 1, {1}}, {7, 3, {3, 17}}, {1000, 768, {2, 640}}, {17, 1, {1000}}}) {
      for (DType dtype : {DType::F32, DType::I64, DType::BF16, DType::U8}) {
        if (dtype != DType::F32 && vocab * width > 100000) continue;
        OneNode n("embedding", {type_of(dtype, {vocab, width}), type_of(index_dtype, ids)});
        expect_rows_match_reference(
            n, {iota(dtype, {vocab, width}), random_indices(index_dtype, ids, 0, vocab - 1, rng)});
      }
    }
  }
}

// Indices are checked before anything moves: index_select and embedding take [0, n) as in
// PyTorch (no wrapping), and the message names the node, the index and the valid range.
TEST(OpsIndexing, OutOfRangeIndicesAreCodedErrors) {
  Tensor x = iota(DType::F32, {4, 5});
  for (const std::string kernel : {"rows", "reference"}) {
    OneNode select("index_select", {type_of(DType::F32, {4, 5}), type_of(DType::I64, {3})},
                   {{"dim", int64_t{1}}});
    std::string message = message_of(
        [&] { test::run_kernel(*select.node, kernel, {x, i64({3}, {0, 5, 1})}); },
        ErrorCode::ShapeInference);
    EXPECT_MENTIONS(message, "node 'index_select'");
    EXPECT_MENTIONS(message, "index 5");
    EXPECT_MENTIONS(message, "dim 1 of size 5; valid indices are [0, 4]");
    EXPECT_EQ(test::error_code_of([&] {
                test::run_kernel(*select.node, kernel, {x, i64({3}, {0, -1, 1})});
              }),
              ErrorCode::ShapeInference);

    OneNode lookup("embedding", {type_of(DType::F32, {4, 5}), type_of(DType::I32, {2})});
    EXPECT_MENTIONS(message_of([&] {
                      test::run_kernel(*lookup.node, kernel,
                                       {x, i32({2}, {3, INT32_MIN})});
                    }, ErrorCode::ShapeInference),
                    "index -2147483648 (input 1) is out of range for dim 0 of size 4");

    OneNode empty_dim("index_select", {type_of(DType::F32, {0, 5}), type_of(DType::I64, {1})},
                      {{"dim", int64_t{0}}});
    EXPECT_MENTIONS(message_of([&] {
                      test::run_kernel(*empty_dim.node, kernel,
                                       {Tensor::empty(DType::F32, {0, 5}),
                                        i64({1}, {0})});
                    }, ErrorCode::ShapeInference),
                    "no valid index");
  }
}

// ---------------------------------------------------------------- index

TEST(OpsIndexing, IndexInferenceBroadcastsTheIndices) {
  Graph g;
  Dim n = g.add_symbol("N", 1, 10);
  Value* x = g.add_input("x", type_of(DType::F32, {5, 6, 7}));
  Value* rows = g.add_input("rows", TensorType{DType::I64, {n, Dim(1)}});
  Value* cols = g.add_input("cols", type_of(DType::I32, {4}));
  EXPECT_EQ(g.add("index", {x, rows})->type().shape, (Shape{n, Dim(1), Dim(6), Dim(7)}));
  EXPECT_EQ(g.add("index", {x, rows, cols})->type().shape, (Shape{n, Dim(4), Dim(7)}));
  Value* three = g.add_input("three", type_of(DType::I64, {3}));
  EXPECT_MENTIONS(message_of([&] { g.add("index", {x, three, cols}); }, ErrorCode::ShapeInference),
                  "can't be broadcast");
  EXPECT_MENTIONS(message_of([&] { g.add("index", {x, cols, cols, cols, cols}); },
                             ErrorCode::ShapeInference),
                  "4 index tensors for a tensor of rank 3");
  EXPECT_EQ(test::error_code_of([&] { g.add("index", {x}); }), ErrorCode::ShapeInference);
}

TEST(OpsIndexing, ReferenceIndexMatchesHandComputedValues) {
  // x = [[0, 1, 2], [10, 11, 12], [20, 21, 22]]
  Tensor x = test::tensor_of({3, 3}, {0, 1, 2, 10, 11, 12, 20, 21, 22});
  OneNode rows("index", {type_of(DType::F32, {3, 3}), type_of(DType::I64, {2})});
  EXPECT_EQ(test::values_of<float>(
                run_reference(rows, {x, i64({2}, {-1, 0})})),
            (std::vector<float>{20, 21, 22, 0, 1, 2}));
  // x[[[0], [2]], [1, -1]] -> [[x[0,1], x[0,2]], [x[2,1], x[2,2]]]
  OneNode points("index", {type_of(DType::F32, {3, 3}), type_of(DType::I64, {2, 1}),
                           type_of(DType::I32, {2})});
  EXPECT_EQ(points.output_type(), type_of(DType::F32, {2, 2}));
  EXPECT_EQ(test::values_of<float>(run_reference(
                points, {x, i64({2, 1}, {0, 2}),
                         i32({2}, {1, -1})})),
            (std::vector<float>{1, 2, 21, 22}));
  EXPECT_MENTIONS(message_of([&] {
                    test::run_kernel(*points.node, "rows",
                                     {x, i64({2, 1}, {0, 2}),
                                      i32({2}, {1, -4})});
                  }, ErrorCode::ShapeInference),
                  "index -4 (input 2) is out of range for dim 1 of size 3"
                  "; valid indices are [-3, 2]");
}

TEST(OpsIndexing, IndexRowsMatchReference) {
  std::mt19937 rng(3);
  struct Case {
    std::vector<int64_t> x;
    std::vector<std::vector<int64_t>> indices;
  };
  for (const Case& c : std::vector<Case>{{{1}, {{1}}},
                                         {{7, 3}, {{17}}},
                                         {{7, 17}, {{3, 1}, {5}}},
                                         {{3, 7, 17}, {{7}, {1}, {7}}},
                                         {{1000, 1000}, {{500}}},
                                         {{1000, 1000}, {{1000}, {1000}}},
                                         {{4, 5}, {{0}}},
                                         {{0, 5}, {{0}}}}) {
    SCOPED_TRACE(shape_string(c.x));
    std::vector<TensorType> types = {type_of(DType::F32, c.x)};
    std::vector<Tensor> inputs = {iota(DType::F32, c.x)};
    for (size_t k = 0; k < c.indices.size(); ++k) {
      DType dtype = k % 2 ? DType::I32 : DType::I64;
      types.push_back(type_of(dtype, c.indices[k]));
      inputs.push_back(random_indices(dtype, c.indices[k], -c.x[k], c.x[k] - 1, rng));
    }
    expect_rows_match_reference(OneNode("index", types), inputs);
  }
}

// ---------------------------------------------------------------- gather

TEST(OpsIndexing, GatherInference) {
  Graph g;
  Dim n = g.add_symbol("N", 1, 10);
  Value* x = g.add_input("x", TensorType{DType::F32, {n, Dim(5)}});
  Value* index = g.add_input("i", TensorType{DType::I64, {n, Dim(8)}});
  EXPECT_EQ(g.add("gather", {x, index}, {{"dim", int64_t{1}}})->type().shape,
            (Shape{n, Dim(8)}));
  EXPECT_MENTIONS(message_of([&] { g.add("gather", {x, index}, {{"dim", int64_t{0}}}); },
                             ErrorCode::ShapeInference),
                  "the index is larger than x along dim 1 (8 > 5)");
  Value* flat = g.add_input("flat", type_of(DType::I64, {3}));
  EXPECT_MENTIONS(message_of([&] { g.add("gather", {x, flat}, {{"dim", int64_t{0}}}); },
                             ErrorCode::ShapeInference),
                  "equal ranks");
}

TEST(OpsIndexing, ReferenceGatherMatchesHandComputedValues) {
  // torch.gather([[1, 2], [3, 4]], 1, [[0, 0], [1, 0]]) = [[1, 1], [4, 3]]
  Tensor x = test::tensor_of({2, 2}, {1, 2, 3, 4});
  OneNode along_rows("gather", {type_of(DType::F32, {2, 2}), type_of(DType::I64, {2, 2})},
                     {{"dim", int64_t{1}}});
  EXPECT_EQ(test::values_of<float>(
                run_reference(along_rows, {x, i64({2, 2}, {0, 0, 1, 0})})),
            (std::vector<float>{1, 1, 4, 3}));
  // Along dim 0 with a smaller index: [[x[1,0], x[0,1]]] = [[3, 2]]
  OneNode along_columns("gather", {type_of(DType::F32, {2, 2}), type_of(DType::I32, {1, 2})},
                        {{"dim", int64_t{0}}});
  EXPECT_EQ(test::values_of<float>(
                run_reference(along_columns, {x, i32({1, 2}, {1, 0})})),
            (std::vector<float>{3, 2}));
  for (const std::string kernel : {"rows", "reference"})
    EXPECT_MENTIONS(message_of([&] {
                      test::run_kernel(*along_rows.node, kernel,
                                       {x, i64({2, 2}, {0, -1, 1, 0})});
                    }, ErrorCode::ShapeInference),
                    "index -1 (input 1) is out of range for dim 1 of size 2"
                    "; valid indices are [0, 1]");
}

TEST(OpsIndexing, GatherRowsMatchReference) {
  std::mt19937 rng(4);
  struct Case {
    std::vector<int64_t> x, index;
    int64_t dim;
  };
  for (const Case& c : std::vector<Case>{{{1}, {1}, 0},
                                         {{3, 7}, {3, 17}, 1},
                                         {{7, 17}, {3, 17}, 0},
                                         {{7, 17, 3}, {5, 17, 2}, 1},
                                         {{7, 17, 3}, {7, 4, 3}, -1},
                                         {{1000, 1000}, {1000, 999}, 1},
                                         {{1000, 1000}, {999, 1000}, 0},
                                         {{4, 0}, {4, 0}, 1},
                                         {{4, 5}, {0, 5}, 0}}) {
    SCOPED_TRACE(shape_string(c.x) + " index " + shape_string(c.index));
    const size_t dim = static_cast<size_t>(c.dim < 0 ? c.dim + 3 : c.dim);
    for (DType dtype : {DType::F32, DType::I64, DType::U8}) {
      if (dtype != DType::F32 && num_elements(c.x) > 1000) continue;
      for (DType index_dtype : {DType::I64, DType::I32}) {
        OneNode n("gather", {type_of(dtype, c.x), type_of(index_dtype, c.index)}, {{"dim", c.dim}});
        expect_rows_match_reference(
            n, {iota(dtype, c.x),
                random_indices(index_dtype, c.index, 0, std::max<int64_t>(c.x[dim] - 1, 0), rng)});
      }
    }
  }
}

// ---------------------------------------------------------------- scatter

TEST(OpsIndexing, ScatterInference) {
  const AttrMap dim0 = {{"dim", int64_t{0}}};
  Graph g;
  Value* x = g.add_input("x", type_of(DType::F32, {3, 5}));
  Value* index = g.add_input("i", type_of(DType::I64, {2, 5}));
  Value* src = g.add_input("s", type_of(DType::F32, {2, 6}));
  EXPECT_EQ(g.add("scatter", {x, index, src}, {{"dim", int64_t{0}}})->type(), x->type());
  EXPECT_EQ(g.add("scatter", {x, index, src}, {{"dim", int64_t{0}}, {"reduce", std::string("add")}})
                ->type(),
            x->type());
  EXPECT_MENTIONS(message_of([&] {
                    g.add("scatter", {x, index, src},
                          {{"dim", int64_t{0}}, {"reduce", std::string("max")}});
                  }, ErrorCode::ShapeInference),
                  "reduce is \"max\"; use \"\" (store), \"add\", \"multiply\", \"amax\" or \"amin\"");
  Value* small_src = g.add_input("small", type_of(DType::F32, {2, 4}));
  EXPECT_MENTIONS(message_of([&] { g.add("scatter", {x, index, small_src}, dim0); },
                             ErrorCode::ShapeInference),
                  "larger than src along dim 1 (5 > 4)");
  Value* wide = g.add_input("wide", type_of(DType::I64, {2, 6}));
  EXPECT_MENTIONS(message_of([&] { g.add("scatter", {x, wide, src}, {{"dim", int64_t{0}}}); },
                             ErrorCode::ShapeInference),
                  "larger than x along dim 1 (6 > 5)");
  Value* ints = g.add_input("ints", type_of(DType::I64, {2, 6}));
  EXPECT_MENTIONS(message_of([&] { g.add("scatter", {x, index, ints}, {{"dim", int64_t{0}}}); },
                             ErrorCode::ShapeInference),
                  "src is i64 and x is f32");
  Value* halves = g.add_input("h", type_of(DType::BF16, {3, 5}));
  Value* half_src = g.add_input("hs", type_of(DType::BF16, {2, 5}));
  EXPECT_EQ(g.add("scatter", {halves, index, half_src}, {{"dim", int64_t{1}}})->type(),
            halves->type());
  EXPECT_MENTIONS(message_of([&] {
                    g.add("scatter", {halves, index, half_src},
                          {{"dim", int64_t{1}}, {"reduce", std::string("add")}});
                  }, ErrorCode::ShapeInference),
                  "not bf16");
}

// The lines kernel against the reference, bit for bit on one thread and two: every dim, an index
// smaller than x and src on the other dims, duplicates (the last store wins, sums in order),
// every reduce, f32 and i64, i64 and i32 indices.
TEST(OpsIndexing, ScatterLinesMatchReference) {
  std::mt19937 rng(23);
  const std::vector<int64_t> x_sizes{5, 7, 6};
  for (const std::string reduce : {"", "add", "multiply", "amax", "amin"}) {
    for (DType dtype : {DType::F32, DType::I64}) {
      for (int64_t dim = 0; dim < 3; ++dim) {
        for (DType index_dtype : {DType::I64, DType::I32}) {
          std::vector<int64_t> index_sizes{4, 6, 5}, src_sizes{5, 7, 6};
          index_sizes[static_cast<size_t>(dim)] = 9;  // more positions than x has: duplicates
          src_sizes[static_cast<size_t>(dim)] = 9;
          SCOPED_TRACE("reduce \"" + reduce + "\" dim " + std::to_string(dim) + " " +
                       std::string(dtype_name(dtype)) + " " + std::string(dtype_name(index_dtype)));
          OneNode n("scatter", {type_of(dtype, x_sizes), type_of(index_dtype, index_sizes),
                                type_of(dtype, src_sizes)},
                    {{"dim", dim}, {"reduce", reduce}});
          const std::vector<Tensor> inputs{
              test::random_tensor(dtype, x_sizes, rng, -4, 4),
              random_indices(index_dtype, index_sizes, 0, x_sizes[static_cast<size_t>(dim)] - 1, rng),
              test::random_tensor(dtype, src_sizes, rng, -4, 4)};
          const Tensor expected = run_reference(n, inputs);
          for (int threads : {1, 2})
            EXPECT_TRUE(test::same_values(test::run_kernel(*n.node, "lines", inputs, threads)[0],
                                          expected))
                << "threads " << threads;
        }
      }
    }
  }
}

TEST(OpsIndexing, ReferenceScatterMatchesHandComputedValues) {
  // torch.zeros(3, 5).scatter(0, [[0, 1, 2, 0]], [[1, 2, 3, 4, 5], [6, 7, 8, 9, 10]])
  //   = [[1, 0, 0, 4, 0], [0, 2, 0, 0, 0], [0, 0, 3, 0, 0]]
  Tensor zeros = Tensor::zeros(DType::F32, {3, 5});
  Tensor src = test::tensor_of({2, 5}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
  OneNode store("scatter", {type_of(DType::F32, {3, 5}), type_of(DType::I64, {1, 4}),
                           type_of(DType::F32, {2, 5})},
                {{"dim", int64_t{0}}});
  EXPECT_EQ(test::values_of<float>(run_reference(
                store, {zeros, i64({1, 4}, {0, 1, 2, 0}), src})),
            (std::vector<float>{1, 0, 0, 4, 0, 0, 2, 0, 0, 0, 0, 0, 3, 0, 0}));

  // Duplicates add up: ones(2, 4).scatter(1, [[2], [3]] x2 cols, ..., reduce="add")
  Tensor ones = test::tensor_of({2, 4}, {1, 1, 1, 1, 1, 1, 1, 1});
  Tensor twos = test::tensor_of({2, 2}, {2, 3, 4, 5});
  for (auto [reduce, expected] : std::vector<std::pair<std::string, std::vector<float>>>{
           {"add", {1, 1, 6, 1, 1, 1, 1, 10}}, {"multiply", {1, 1, 6, 1, 1, 1, 1, 20}},
           {"amax", {1, 1, 3, 1, 1, 1, 1, 5}}, {"amin", {1, 1, 1, 1, 1, 1, 1, 1}}}) {
    OneNode n("scatter", {type_of(DType::F32, {2, 4}), type_of(DType::I32, {2, 2}),
                          type_of(DType::F32, {2, 2})},
              {{"dim", int64_t{1}}, {"reduce", reduce}});
    EXPECT_EQ(test::values_of<float>(run_reference(
                  n, {ones, i32({2, 2}, {2, 2, 3, 3}), twos})),
              expected)
        << reduce;
  }
  // amax and amin keep a NaN from either side (PyTorch's scatter_reduce), and take integers.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  OneNode max_of("scatter", {type_of(DType::F32, {3}), type_of(DType::I64, {3}),
                             type_of(DType::F32, {3})},
                 {{"dim", int64_t{0}}, {"reduce", std::string("amax")}});
  const std::vector<float> got = test::values_of<float>(run_reference(
      max_of, {test::tensor_of({3}, {nan, 1, 2}), i64({3}, {0, 1, 1}),
               test::tensor_of({3}, {5, nan, 7})}));
  EXPECT_TRUE(std::isnan(got[0]) && std::isnan(got[1]) && got[2] == 2);
  OneNode min_of("scatter", {type_of(DType::I32, {2}), type_of(DType::I64, {2}),
                             type_of(DType::I32, {2})},
                 {{"dim", int64_t{0}}, {"reduce", std::string("amin")}});
  EXPECT_EQ(test::values_of<int32_t>(run_reference(
                min_of, {i32({2}, {4, 4}), i64({2}, {1, 1}), i32({2}, {-3, 9})})),
            (std::vector<int32_t>{4, -3}));
  // Integers wrap around as in PyTorch.
  OneNode wrap("scatter", {type_of(DType::I32, {1}), type_of(DType::I64, {2}),
                          type_of(DType::I32, {2})},
               {{"dim", int64_t{0}}, {"reduce", std::string("add")}});
  Tensor big = i32({1}, {INT32_MAX});
  EXPECT_EQ(test::values_of<int32_t>(run_reference(
                wrap, {big, i64({2}, {0, 0}),
                       i32({2}, {1, 1})})),
            (std::vector<int32_t>{INT32_MIN + 1}));

  EXPECT_MENTIONS(message_of([&] {
                    run_reference(store, {zeros, i64({1, 4}, {0, 1, 3, 0}), src});
                  }, ErrorCode::ShapeInference),
                  "index 3 (input 1) is out of range for dim 0 of size 3"
                  "; valid indices are [0, 2]");
}

// ---------------------------------------------------------------- index_put

TEST(OpsIndexing, IndexPutInference) {
  Graph g;
  Value* x = g.add_input("x", type_of(DType::F32, {5, 4}));
  Value* rows = g.add_input("rows", type_of(DType::I64, {3}));
  Value* row_values = g.add_input("v", type_of(DType::F32, {3, 4}));
  Value* scalar = g.add_input("s", type_of(DType::F32, {}));
  Value* column = g.add_input("c", type_of(DType::F32, {3, 1}));
  for (Value* v : {row_values, scalar, column})
    EXPECT_EQ(g.add("index_put", {x, v, rows})->type(), x->type());
  Value* wrong = g.add_input("w", type_of(DType::F32, {2, 4}));
  EXPECT_MENTIONS(message_of([&] { g.add("index_put", {x, wrong, rows}); },
                             ErrorCode::ShapeInference),
                  "values [2, 4] can't be broadcast to the indexed shape [3, 4]");
  Value* ints = g.add_input("ints", type_of(DType::I64, {3, 4}));
  EXPECT_MENTIONS(message_of([&] { g.add("index_put", {x, ints, rows}); },
                             ErrorCode::ShapeInference),
                  "values is i64 and x is f32");
  Value* flags = g.add_input("flags", type_of(DType::Bool, {5, 4}));
  Value* flag = g.add_input("flag", type_of(DType::Bool, {}));
  EXPECT_EQ(g.add("index_put", {flags, flag, rows})->type(), flags->type());
  EXPECT_EQ(test::error_code_of(
                [&] { g.add("index_put", {flags, flag, rows}, {{"accumulate", true}}); }),
            ErrorCode::ShapeInference);
}

TEST(OpsIndexing, ReferenceIndexPutMatchesHandComputedValues) {
  Tensor x = test::tensor_of({3, 2}, {0, 1, 2, 3, 4, 5});
  // x[[-1, 0]] = [[7, 8]] (broadcast over the two rows)
  OneNode store("index_put", {type_of(DType::F32, {3, 2}), type_of(DType::F32, {1, 2}),
                              type_of(DType::I64, {2})});
  EXPECT_EQ(test::values_of<float>(run_reference(
                store, {x, test::tensor_of({1, 2}, {7, 8}), i64({2}, {-1, 0})})),
            (std::vector<float>{7, 8, 2, 3, 7, 8}));
  // x.index_put_(([0, 0, 2], [1, 1, 0]), [10, 20, 30], accumulate=True)
  OneNode add("index_put", {type_of(DType::F32, {3, 2}), type_of(DType::F32, {3}),
                            type_of(DType::I64, {3}), type_of(DType::I32, {3})},
              {{"accumulate", true}});
  EXPECT_EQ(test::values_of<float>(run_reference(
                add, {x, test::tensor_of({3}, {10, 20, 30}), i64({3}, {0, 0, 2}),
                      i32({3}, {1, 1, 0})})),
            (std::vector<float>{0, 31, 2, 3, 34, 5}));
  EXPECT_MENTIONS(message_of([&] {
                    run_reference(add, {x, test::tensor_of({3}, {10, 20, 30}),
                                        i64({3}, {0, 3, 2}),
                                        i32({3}, {1, 1, 0})});
                  }, ErrorCode::ShapeInference),
                  "index 3 (input 2) is out of range for dim 0 of size 3"
                  "; valid indices are [-3, 2]");
}

// ---------------------------------------------------------------- through the executor

// A token lookup, a slice, a select, a narrow, index_select, index, gather, scatter and
// index_put in one graph with a symbolic batch, run on two batch sizes against the reference
// policy (every row kernel against every reference kernel).
TEST(OpsIndexing, EveryOpRunsThroughTheExecutor) {
  Graph g;
  Dim batch = g.add_symbol("B", 1, 16);
  Value* ids = g.add_input("ids", TensorType{DType::I64, {batch, Dim(6)}});
  Value* table = g.add_constant("table", iota(DType::F32, {50, 8}));
  Value* embedded = g.add("embedding", {table, ids});                      // [B, 6, 8]
  Value* tail = g.add("slice", {embedded}, slice_attrs(1, 1, INT64_MAX));  // [B, 5, 8]
  Value* first = g.add("select", {tail}, {{"dim", int64_t{1}}, {"index", int64_t{0}}});  // [B, 8]
  Value* part = g.add("narrow", {first}, {{"dim", int64_t{1}}, {"start", int64_t{2}},
                                          {"length", int64_t{4}}});  // [B, 4]
  Value* cols = g.add_constant("cols", i32({3}, {3, 0, 3}));
  Value* picked = g.add("index_select", {part, cols}, {{"dim", int64_t{1}}});  // [B, 3]
  Value* rows = g.add_constant("rows", i64({2}, {0, -1}));
  Value* ends = g.add("index", {picked, rows});                                // [2, 3]
  Value* order = g.add_constant("order", i64({2, 3}, {2, 1, 0, 0, 1, 2}));
  Value* gathered = g.add("gather", {ends, order}, {{"dim", int64_t{1}}});     // [2, 3]
  Value* scattered = g.add("scatter", {ends, order, gathered},
                           {{"dim", int64_t{1}}, {"reduce", std::string("add")}});
  Value* minus_one = g.add_constant("v", test::tensor_of({}, {-1}));
  Value* put = g.add("index_put", {scattered, minus_one, rows});
  g.set_outputs({put, tail});
  verify(g);

  auto best = CompiledGraph::compile(g);
  CompileOptions reference_policy;
  reference_policy.kernel_policy = "reference";
  auto reference = CompiledGraph::compile(g, reference_policy);
  std::mt19937 rng(5);
  for (int64_t b : {1, 5}) {
    Tensor input = random_indices(DType::I64, {b, 6}, 0, 49, rng);
    std::vector<Tensor> got = best->run({input.view()});
    std::vector<Tensor> expected = reference->run({input.view()});
    ASSERT_EQ(got.size(), 2u);
    EXPECT_EQ(got[0].sizes(), (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(got[1].sizes(), (std::vector<int64_t>{b, 5, 8}));
    for (size_t i = 0; i < 2; ++i) EXPECT_TRUE(test::same_values(got[i], expected[i]));
    EXPECT_EQ(test::values_of<float>(got[0]), (std::vector<float>(6, -1)));
  }
  // Through the executor too, a bad index is an E40002 naming the node.
  Tensor bad = i64({1, 6}, {0, 1, 2, 50, 4, 5});
  EXPECT_MENTIONS(message_of([&] { best->run({bad.view()}); }, ErrorCode::ShapeInference),
                  "node 'embedding' (embedding): index 50 (input 1) is out of range for dim 0 of "
                  "size 50");
}

}  // namespace
}  // namespace kiln
