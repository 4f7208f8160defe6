// The builder API and graph rewriting primitives.
#include <gtest/gtest.h>

#include <functional>

#include "kiln/kiln.h"

namespace kiln {
namespace {

TensorType f32(std::vector<int64_t> sizes) { return TensorType{DType::F32, make_shape(sizes)}; }

TEST(Graph, BuilderInfersTypesAndNamesUniquely) {
  Graph g("block");
  Value* x = g.add_input("x", f32({2, 3}));
  Value* y = g.add_input("x", f32({2, 3}));  // duplicate name hint gets a suffix
  EXPECT_EQ(y->name(), "x_1");
  Value* s = g.add("add", {x, y});
  Value* r = g.add("relu", {s}, {}, "act");
  g.set_outputs({r});
  EXPECT_EQ(s->type(), f32({2, 3}));
  EXPECT_EQ(r->name(), "act");
  EXPECT_EQ(r->producer()->op(), "relu");
  ASSERT_EQ(x->users().size(), 1u);
  EXPECT_EQ(x->users()[0], s->producer());
  EXPECT_NO_THROW(verify(g));
}

TEST(Graph, UnknownOpIsE50001) {
  Graph g;
  Value* x = g.add_input("x", f32({2}));
  try {
    g.add("no_such_op", {x});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::UnsupportedOperator);
    EXPECT_NE(std::string(e.what()).find("no_such_op"), std::string::npos);
  }
}

TEST(Graph, SchemaViolationsAreE40002) {
  Graph g;
  Value* x = g.add_input("x", f32({2}));
  auto code_of = [](auto fn) {
    try {
      fn();
    } catch (const Error& e) {
      return e.code();
    }
    return ErrorCode::InvalidArgument;
  };
  EXPECT_EQ(code_of([&] { g.add("add", {x}); }), ErrorCode::ShapeInference);  // arity
  EXPECT_EQ(code_of([&] { g.add("relu", {x}, {{"bogus", int64_t{1}}}); }),
            ErrorCode::ShapeInference);  // unknown attribute
  Value* y = g.add_input("y", f32({3}));
  EXPECT_EQ(code_of([&] { g.add("add", {x, y}); }), ErrorCode::ShapeInference);  // broadcast
}

TEST(Graph, ValuesFromAnotherGraphAreRejected) {
  Graph g, other;
  Value* x = g.add_input("x", f32({2}));
  Value* stranger = other.add_input("s", f32({2}));
  for (auto fn : std::vector<std::function<void()>>{[&] { g.add("add", {x, stranger}); },
                                                    [&] { g.set_outputs({stranger}); },
                                                    [&] { g.add("relu", {nullptr}); }}) {
    try {
      fn();
      ADD_FAILURE() << "accepted a foreign or null value";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    }
  }
  EXPECT_EQ(g.num_nodes(), 0u);
}

TEST(Graph, SymbolicDimsPropagate) {
  Graph g;
  Dim batch = g.add_symbol("B", 1, 32);
  Value* x = g.add_input("x", TensorType{DType::F32, {batch, Dim(8)}});
  Value* b = g.add_input("b", f32({8}));
  Value* s = g.add("add", {x, b});
  EXPECT_EQ(s->type().shape[0], batch);
  EXPECT_EQ(s->type().shape[1], Dim(8));
  EXPECT_THROW(g.add_symbol("B", 1, 2), Error);      // declared twice
  EXPECT_THROW(g.add_symbol("C", 5, 2), Error);      // empty range
}

TEST(Graph, ReplaceAllUsesAndRemoveNode) {
  Graph g;
  Value* x = g.add_input("x", f32({4}));
  Value* a = g.add("relu", {x});
  Value* b = g.add("add", {a, a});
  g.set_outputs({b, a});
  g.replace_all_uses(a, x);
  EXPECT_EQ(b->producer()->input(0), x);
  EXPECT_EQ(b->producer()->input(1), x);
  EXPECT_EQ(g.outputs()[1], x);
  EXPECT_TRUE(a->users().empty());
  g.remove_node(a->producer());
  EXPECT_EQ(g.num_nodes(), 1u);
  EXPECT_EQ(x->users().size(), 2u);
  EXPECT_NO_THROW(verify(g));
}

TEST(Graph, CloneIsDeepAndEquivalent) {
  Graph g("orig");
  Dim n = g.add_symbol("N", 1, 4);
  Value* x = g.add_input("x", TensorType{DType::F32, {n, Dim(2)}});
  Tensor w = Tensor::zeros(DType::F32, {2});
  w.data<float>()[1] = 3.5f;
  Value* c = g.add_constant("w", w);
  g.set_outputs({g.add("mul", {x, c})});
  auto copy = g.clone();
  EXPECT_EQ(print_graph(*copy), print_graph(g));
  EXPECT_NE(copy->outputs()[0], g.outputs()[0]);
  EXPECT_NO_THROW(verify(*copy));
}

TEST(Graph, TopologicalSortRestoresOrder) {
  Graph g;
  Value* x = g.add_input("x", f32({4}));
  Value* late = g.add("relu", {x}, {}, "late");
  Value* early = g.add("relu", {x}, {}, "early");
  Value* sum = g.add("add", {late, x});
  g.set_outputs({sum});
  // Make `sum` read `early`'s consumer chain out of order: feed it a value defined after it.
  Value* after = g.add("relu", {early}, {}, "after");
  g.replace_all_uses(late, after);
  g.remove_node(late->producer());
  EXPECT_THROW(verify(g), Error);  // sum now precedes its operand
  g.topological_sort();
  EXPECT_NO_THROW(verify(g));
}

}  // namespace
}  // namespace kiln
