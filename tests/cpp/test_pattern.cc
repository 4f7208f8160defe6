// The declarative pattern matcher (src/passes/pattern.h): matching, captures, constraints, the
// reasons it gives for a failed match, and PatternRewritePass on textual IR.
#include <gtest/gtest.h>

#include "pass_test_util.h"
#include "passes/pattern.h"

namespace kiln {
namespace {

using namespace pat;

// The node that defines %name.
Node* node_of(const Graph& g, const std::string& name) {
  Value* v = g.find_value(name);
  EXPECT_TRUE(v && v->producer()) << name;
  return v->producer();
}

constexpr const char* kMulOne = R"(
graph @g {
  input %x : f32[2, 3]
  const %one : f32[] = [1.0]
  const %two : f32[3] = [2.0, 2.0, 2.0]
  %a = mul(%x, %one)
  %b = mul(%one, %x)
  %c = mul(%x, %two)
  %d = relu(%x)
  %e = mul(%d, %one)
  output %a, %b, %c, %e
}
)";

TEST(Pattern, CapturesAndSplatConstants) {
  auto g = parse_graph(kMulOne);
  Pattern p = op("mul", {any("x"), splat(1.0, "one")});
  MatchResult r = match(p, node_of(*g, "a"));
  ASSERT_TRUE(r) << r.failure;
  EXPECT_EQ(r.match["x"], g->find_value("x"));
  EXPECT_EQ(r.match["one"], g->find_value("one"));
  EXPECT_EQ(r.match.root, node_of(*g, "a"));
  ASSERT_EQ(r.match.nodes.size(), 1u);

  MatchResult c = match(p, node_of(*g, "c"));
  EXPECT_FALSE(c);
  EXPECT_EQ(c.failure, "mul.in1:const (%two): constraint failed: every element equals 1");
}

TEST(Pattern, CommutativeTriesBothOrders) {
  auto g = parse_graph(kMulOne);
  Pattern ordered = op("mul", {any("x"), splat(1.0)});
  MatchResult r = match(ordered, node_of(*g, "b"));
  EXPECT_FALSE(r);
  EXPECT_EQ(r.failure, "mul.in1:const (%x): expected a constant, found an input");
  MatchResult s = match(ordered.commutative(), node_of(*g, "b"));
  ASSERT_TRUE(s) << s.failure;
  EXPECT_EQ(s.match["x"], g->find_value("x"));
}

TEST(Pattern, NestedOpsAlternativesAndReasons) {
  auto g = parse_graph(kMulOne);
  Pattern p = op("mul", {any_op({"gelu", "sigmoid"}, {any("x")}), constant()});
  MatchResult r = match(p, node_of(*g, "e"));
  EXPECT_FALSE(r);
  EXPECT_EQ(r.failure, "mul.in0:gelu|sigmoid (%d): expected op gelu|sigmoid, found relu");
  Pattern q = op("mul", {any_op({"gelu", "relu"}, {any("x")}).as("act"), constant()});
  MatchResult s = match(q, node_of(*g, "e"));
  ASSERT_TRUE(s) << s.failure;
  EXPECT_EQ(s.match.node("act"), node_of(*g, "d"));
  EXPECT_EQ(s.match.nodes.size(), 2u);
  EXPECT_FALSE(match(op("relu"), node_of(*g, "e")));
  EXPECT_TRUE(match(op("relu"), node_of(*g, "d")));  // inputs left free
}

TEST(Pattern, RepeatedCaptureMustBindOneValue) {
  auto g = parse_graph(R"(
graph @g {
  input %x : f32[4]
  input %y : f32[4]
  %same = sub(%x, %x)
  %diff = sub(%x, %y)
  output %same, %diff
})");
  Pattern p = op("sub", {any("v"), any("v")});
  EXPECT_TRUE(match(p, node_of(*g, "same")));
  MatchResult r = match(p, node_of(*g, "diff"));
  EXPECT_FALSE(r);
  EXPECT_EQ(r.failure, "sub.in1:v (%y): capture 'v' is already bound to %x");
}

TEST(Pattern, CommutativeFailureDoesNotLeakCaptures) {
  // The first order binds v to %x, then fails; the swapped order must start from scratch.
  auto g = parse_graph(R"(
graph @g {
  input %x : f32[4]
  %r = relu(%x)
  %s = add(%r, %x)
  output %s
})");
  Pattern p = op("add", {any("v"), op("relu", {any("v")})}).commutative();
  MatchResult r = match(p, node_of(*g, "s"));
  ASSERT_TRUE(r) << r.failure;
  EXPECT_EQ(r.match["v"], g->find_value("x"));
}

TEST(Pattern, SingleUse) {
  auto g = parse_graph(R"(
graph @g {
  input %x : f32[4]
  %r = relu(%x)
  %a = neg(%r)
  %b = abs(%r)
  %t = relu(%x) @t
  %c = neg(%t)
  %u = relu(%x) @u
  %d = neg(%u)
  output %a, %b, %c, %d, %u
})");
  Pattern p = op("neg", {op("relu", {any()}).single_use()});
  MatchResult shared = match(p, node_of(*g, "a"));
  EXPECT_FALSE(shared);
  EXPECT_EQ(shared.failure, "neg.in0:relu (%r): expected a single use, found 2 uses");
  EXPECT_TRUE(match(p, node_of(*g, "c")));
  MatchResult output = match(p, node_of(*g, "d"));
  EXPECT_FALSE(output);
  EXPECT_EQ(output.failure, "neg.in0:relu (%u): expected a single use, found 1 uses and a graph output");
}

TEST(Pattern, AttributeDTypeAndPredicates) {
  auto g = parse_graph(R"(
graph @g {
  input %x : f32[4]
  input %i : i64[4]
  %a = gelu(%x) {approximate = "tanh"}
  %b = gelu(%x)
  %c = neg(%i)
  output %a, %b, %c
})");
  Pattern exact = op("gelu", {any()}).attr("approximate", std::string("none"));
  EXPECT_FALSE(match(exact, node_of(*g, "a")));
  EXPECT_EQ(match(exact, node_of(*g, "a")).failure, "gelu (%a): constraint failed: attribute approximate");
  EXPECT_TRUE(match(exact, node_of(*g, "b")));
  Pattern floats = op("neg", {any().dtype(DType::F32)});
  EXPECT_EQ(match(floats, node_of(*g, "c")).failure, "neg.in0:any (%i): constraint failed: dtype f32");
  Pattern rank1 = op("neg").where([](const Value& v) { return v.type().rank() == 1; }, "rank 1");
  EXPECT_TRUE(match(rank1, node_of(*g, "c")));
}

TEST(Pattern, OutputIndexOfMultiOutputOps) {
  auto g = parse_graph(R"(
graph @g {
  input %x : f32[4]
  %p, %q = split(%x) {split_sizes = [2, 2]}
  %a = relu(%q)
  output %a, %p
})");
  Node* a = node_of(*g, "a");
  EXPECT_EQ(match(op("relu", {op("split")}), a).failure,
            "relu.in0:split (%q): expected output 0 of split, found output 1");
  EXPECT_TRUE(match(op("relu", {op("split").output(1)}), a));
}

// relu(relu(x)) → relu(x) and neg(neg(x)) → x, one rule each.
PatternRewritePass idempotence_pass() {
  return PatternRewritePass(
      "idempotence",
      {RewriteRule{"relu_relu", op("relu", {op("relu", {any()}).as("inner")}),
                   [](Graph&, const Match& m) -> std::vector<Value*> { return {m["inner"]}; }},
       RewriteRule{"neg_neg", op("neg", {op("neg", {any("x")})}),
                   [](Graph&, const Match& m) -> std::vector<Value*> { return {m["x"]}; }}});
}

TEST(PatternRewritePass, RewritesChainsAndRemovesDeadNodes) {
  PatternRewritePass pass = idempotence_pass();
  test::expect_rewrite(pass, R"(
graph @g {
  input %x : f32[2, 3]
  %a = relu(%x)
  %b = relu(%a)
  %c = relu(%b)
  %n1 = neg(%c)
  %n2 = neg(%n1)
  %y = add(%n2, %x)
  output %y
})",
                       R"(
graph @g {
  input %x : f32[2, 3]
  %a = relu(%x)
  %y = add(%a, %x)
  output %y
})");
  EXPECT_EQ(pass.fired().at("relu_relu"), 2);
  EXPECT_EQ(pass.fired().at("neg_neg"), 1);
}

TEST(PatternRewritePass, KeepsNodesStillUsedElsewhere) {
  PatternRewritePass pass = idempotence_pass();
  test::expect_rewrite(pass, R"(
graph @g {
  input %x : f32[4]
  %n1 = neg(%x)
  %n2 = neg(%n1)
  output %n2, %n1
})",
                       R"(
graph @g {
  input %x : f32[4]
  %n1 = neg(%x)
  output %x, %n1
})");
}

TEST(PatternRewritePass, NewNodesAreSortedAndTyped) {
  // sub(x, neg(y)) → add(x, y): the new add is appended, then sorted before its users.
  PatternRewritePass pass(
      "sub_neg", {RewriteRule{"sub_neg", op("sub", {any("x"), op("neg", {any("y")}).single_use()}),
                              [](Graph& g, const Match& m) -> std::vector<Value*> {
                                return {g.add("add", {m["x"], m["y"]}, {}, "sum")};
                              }}});
  test::expect_rewrite(pass, R"(
graph @g {
  input %x : f32[4]
  input %y : f32[4]
  %n = neg(%y)
  %s = sub(%x, %n)
  %r = relu(%s)
  output %r
})",
                       R"(
graph @g {
  input %x : f32[4]
  input %y : f32[4]
  %sum = add(%x, %y)
  %r = relu(%sum)
  output %r
})");
}

TEST(PatternRewritePass, RemovesProducersReachedTwice) {
  // The root reads %a directly and through %b: %a is queued twice for removal.
  PatternRewritePass pass(
      "diamond", {RewriteRule{"diamond",
                              op("add", {op("neg", {any("x")}).as("a"), op("relu", {any("a")})}),
                              [](Graph& g, const Match& m) -> std::vector<Value*> {
                                // The same computation from fresh nodes: the old ones all die.
                                Value* n = g.add("neg", {m["x"]}, {}, "n2");
                                return {g.add("add", {n, g.add("relu", {n}, {}, "r2")}, {}, "y")};
                              }}});
  test::expect_rewrite(pass, R"(
graph @g {
  input %x : f32[4]
  %a = neg(%x)
  %b = relu(%a)
  %r = add(%a, %b)
  %o = mul(%r, %x)
  output %o
})",
                       R"(
graph @g {
  input %x : f32[4]
  %n2 = neg(%x)
  %r2 = relu(%n2)
  %y = add(%n2, %r2)
  %o = mul(%y, %x)
  output %o
})");
}

TEST(PatternRewritePass, DecliningRewriteLeavesGraphAlone) {
  PatternRewritePass pass(
      "never", {RewriteRule{"never", op("relu", {any()}),
                            [](Graph&, const Match&) -> std::vector<Value*> { return {}; }}});
  test::expect_unchanged(pass, R"(
graph @g {
  input %x : f32[4]
  %a = relu(%x)
  output %a
})");
  EXPECT_TRUE(pass.fired().empty());
}

}  // namespace
}  // namespace kiln
