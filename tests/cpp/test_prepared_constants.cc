// PreparedConstants: one prepared copy per (constant, preparation) while a kernel holds it,
// shared across compiled graphs by contents, and a map no larger than what is held.
#include "ops/prepared_constants.h"

#include <gtest/gtest.h>

namespace kiln {
namespace {

Tensor filled(float value) {
  Tensor t = Tensor::empty(DType::F32, {4});
  for (int64_t i = 0; i < 4; ++i) t.data<float>()[i] = value;
  return t;
}

TEST(PreparedConstants, SharesACopyWhileHeldAndForgetsItAfter) {
  PreparedConstants cache;
  const Tensor source_a = filled(0), source_b = filled(-1);
  int prepared = 0;
  auto prepare = [&](float v) {
    return [&prepared, v] {
      ++prepared;
      return filled(v);
    };
  };
  auto a = cache.get(source_a, "reorder nChw8c", prepare(1));
  auto again = cache.get(source_a, "reorder nChw8c", prepare(2));
  EXPECT_EQ(a, again);
  EXPECT_EQ(prepared, 1);
  auto other_way = cache.get(source_a, "reorder nhwc", prepare(3));
  EXPECT_NE(a, other_way);
  EXPECT_EQ(cache.held_bytes(), 32u);

  a.reset(), again.reset(), other_way.reset();
  EXPECT_EQ(cache.held_bytes(), 0u);
  // The next miss sweeps the two expired entries.
  auto b = cache.get(source_b, "reorder nChw8c", prepare(4));
  EXPECT_EQ(cache.entries(), 1u);
  EXPECT_EQ(b->data<float>()[0], 4.f);
  auto remade = cache.get(source_a, "reorder nChw8c", prepare(5));
  EXPECT_EQ(remade->data<float>()[0], 5.f);
  EXPECT_EQ(prepared, 4);  // the second get of the first key found it held
  EXPECT_EQ(cache.entries(), 2u);
}

// Two compiled graphs (two caches) preparing constants of equal contents at other addresses
// share one copy while either holds it; once the contents differ (a weight changed in place
// between the compiles) the preparation is made again.
TEST(PreparedConstants, GraphsShareCopiesOfEqualContentsOnly) {
  PreparedConstants first_graph, second_graph;
  Tensor weight = filled(7), same_weight = filled(7);
  int prepared = 0;
  auto prepare = [&] {
    ++prepared;
    return filled(float(prepared));
  };
  auto a = first_graph.get(weight, "reorder nChw16c (graphs)", prepare);
  auto b = second_graph.get(same_weight, "reorder nChw16c (graphs)", prepare);
  EXPECT_EQ(a, b);
  EXPECT_EQ(prepared, 1);
  auto other_how = second_graph.get(same_weight, "reorder nhwc (graphs)", prepare);
  EXPECT_EQ(prepared, 2);
  weight.data<float>()[2] = 8.f;
  PreparedConstants third_graph;
  auto c = third_graph.get(weight, "reorder nChw16c (graphs)", prepare);
  EXPECT_NE(c, a);
  EXPECT_EQ(prepared, 3);
  a.reset(), b.reset();
  // Nothing holds the first copy any more: equal contents are prepared anew.
  PreparedConstants fourth_graph;
  auto d = fourth_graph.get(same_weight, "reorder nChw16c (graphs)", prepare);
  EXPECT_EQ(prepared, 4);
}

}  // namespace
}  // namespace kiln
