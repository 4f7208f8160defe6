// One test per verifier rule: each corrupts a valid graph in one way and expects E40001 naming
// that rule.
#include <gtest/gtest.h>

#include "kiln/kiln.h"

namespace kiln {

struct GraphTestAccess {
  static std::vector<Value*>& inputs(Graph& g) { return g.inputs_; }
  static std::vector<Value*>& outputs(Graph& g) { return g.outputs_; }
  static std::vector<Node*>& users(Value* v) { return v->users_; }
  static std::vector<Value*>& operands(Node* n) { return n->inputs_; }
  static std::string& name(Value* v) { return v->name_; }
  static std::string& op(Node* n) { return n->op_; }
  static AttrMap& attrs(Node* n) { return n->attrs_; }
};

namespace {

using A = GraphTestAccess;
TensorType f32(std::vector<int64_t> sizes) { return TensorType{DType::F32, make_shape(sizes)}; }

// x -> relu -> a -> relu -> b (output)
struct Chain {
  Graph g{"chain"};
  Value* x = g.add_input("x", f32({2, 3}));
  Value* a = g.add("relu", {x}, {}, "a");
  Value* b = g.add("relu", {a}, {}, "b");
  Chain() { g.set_outputs({b}); }
};

void expect_rule(const Graph& g, const std::string& rule) {
  try {
    verify(g);
    FAIL() << "verify accepted a graph that breaks '" << rule << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidGraph);
    EXPECT_NE(std::string(e.what()).find("'" + rule + "'"), std::string::npos) << e.what();
  }
}

TEST(Verifier, AcceptsValidGraph) {
  Chain c;
  EXPECT_NO_THROW(verify(c.g));
}

TEST(Verifier, SingleDefinition) {
  Chain c;
  A::inputs(c.g).push_back(c.x);
  expect_rule(c.g, "single definition");
}

TEST(Verifier, ConstantsMatchTheirType) {
  Graph g;
  Value* w = g.add_constant("w", Tensor::zeros(DType::F32, {4}));
  g.set_outputs({g.add("relu", {w})});
  w->set_type(f32({5}));
  expect_rule(g, "constants match their type");
}

TEST(Verifier, UniqueNames) {
  Chain c;
  A::name(c.b) = "a";
  expect_rule(c.g, "unique names");
}

TEST(Verifier, OperandsAreDefined) {
  Chain c;
  Graph other;
  Value* stranger = other.add_input("s", f32({2, 3}));
  A::operands(c.b->producer())[0] = stranger;
  expect_rule(c.g, "operands are defined");
}

TEST(Verifier, OutputsExist) {
  Chain c;
  A::outputs(c.g).clear();
  expect_rule(c.g, "outputs exist");
}

TEST(Verifier, UseListsAreConsistent) {
  Chain c;
  A::users(c.a).clear();
  expect_rule(c.g, "use lists are consistent");
}

TEST(Verifier, Acyclic) {
  Chain c;
  c.g.replace_all_uses(c.x, c.b);  // a = relu(b), b = relu(a)
  expect_rule(c.g, "acyclic");
}

TEST(Verifier, TopologicalOrder) {
  Chain c;
  Value* late = c.g.add("relu", {c.x}, {}, "late");
  c.g.replace_all_uses(c.a, late);  // b now reads a value defined after it
  expect_rule(c.g, "topological order");
}

TEST(Verifier, SymbolsAreDeclared) {
  Chain c;
  c.a->set_type(TensorType{DType::F32, {Dim::symbolic(7), Dim(3)}});
  expect_rule(c.g, "symbols are declared");
}

TEST(Verifier, DimsAreNonNegative) {
  Chain c;
  c.a->set_type(f32({-2, 3}));
  expect_rule(c.g, "dims are non-negative");
}

TEST(Verifier, OpsAreRegistered) {
  Chain c;
  A::op(c.a->producer()) = "vanished_op";
  expect_rule(c.g, "ops are registered");
}

TEST(Verifier, TypesAgreeWithInference) {
  Chain c;
  c.b->set_type(f32({3, 2}));
  expect_rule(c.g, "types agree with inference");
}

TEST(Verifier, AttributesAreComplete) {
  Graph g;
  Value* x = g.add_input("x", f32({2, 3}));
  Value* y = g.add_input("y", f32({3, 4}));
  Value* m = g.add("matmul", {x, y});
  g.set_outputs({m});
  ASSERT_FALSE(m->producer()->attrs().empty());
  A::attrs(m->producer()).clear();
  expect_rule(g, "attributes are complete");
}

}  // namespace
}  // namespace kiln
