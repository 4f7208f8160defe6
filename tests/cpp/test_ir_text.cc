// The textual IR: exact printing, exact round trips (names, symbols, types, every attribute
// kind, constant bytes of every dtype), hand-written text, and one test per parse error.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "kiln/kiln.h"

namespace kiln {
namespace {

TensorType f32(std::vector<int64_t> sizes) { return TensorType{DType::F32, make_shape(sizes)}; }

// Floats compared by bits: NaN payloads and -0.0 must survive too.
bool same_attr(const Attr& a, const Attr& b) {
  if (a.index() != b.index()) return false;
  if (const Tensor* t = std::get_if<Tensor>(&a)) {
    const Tensor& u = std::get<Tensor>(b);
    return t->defined() == u.defined() && (!t->defined() || t->same_contents(u));
  }
  if (const double* x = std::get_if<double>(&a))
    return std::memcmp(x, &std::get<double>(b), sizeof(double)) == 0 ||
           (std::isnan(*x) && std::isnan(std::get<double>(b)));
  if (const auto* xs = std::get_if<std::vector<double>>(&a)) {
    const auto& ys = std::get<std::vector<double>>(b);
    if (xs->size() != ys.size()) return false;
    for (size_t i = 0; i < xs->size(); ++i)
      if (!same_attr((*xs)[i], ys[i])) return false;
    return true;
  }
  return a == b;
}

// Everything a graph holds, compared field by field.
void expect_same_graph(const Graph& a, const Graph& b) {
  EXPECT_EQ(a.name(), b.name());
  EXPECT_EQ(a.symbols(), b.symbols());
  auto expect_same_values = [](const std::vector<Value*>& xs, const std::vector<Value*>& ys) {
    ASSERT_EQ(xs.size(), ys.size());
    for (size_t i = 0; i < xs.size(); ++i) {
      EXPECT_EQ(xs[i]->name(), ys[i]->name());
      EXPECT_EQ(xs[i]->type(), ys[i]->type()) << xs[i]->name();
      EXPECT_EQ(xs[i]->kind(), ys[i]->kind()) << xs[i]->name();
      if (xs[i]->kind() == Value::Kind::Constant) {
        EXPECT_TRUE(xs[i]->constant().same_contents(ys[i]->constant())) << xs[i]->name();
      }
    }
  };
  expect_same_values(a.inputs(), b.inputs());
  expect_same_values(a.constants(), b.constants());
  expect_same_values(a.outputs(), b.outputs());
  std::vector<Node*> na = a.nodes(), nb = b.nodes();
  ASSERT_EQ(na.size(), nb.size());
  for (size_t i = 0; i < na.size(); ++i) {
    EXPECT_EQ(na[i]->op(), nb[i]->op());
    EXPECT_EQ(na[i]->name(), nb[i]->name());
    expect_same_values(na[i]->inputs(), nb[i]->inputs());
    expect_same_values(na[i]->outputs(), nb[i]->outputs());
    ASSERT_EQ(na[i]->attrs().size(), nb[i]->attrs().size()) << na[i]->name();
    for (const auto& [key, value] : na[i]->attrs()) {
      ASSERT_TRUE(nb[i]->has_attr(key)) << key;
      EXPECT_TRUE(same_attr(value, nb[i]->attrs().at(key))) << na[i]->name() << "." << key;
    }
  }
}

// parse(print(g)) reproduces g, and printing it again gives the same text.
std::unique_ptr<Graph> expect_round_trip(const Graph& g) {
  std::string text = print_graph(g);
  std::unique_ptr<Graph> parsed = parse_graph(text);
  EXPECT_EQ(print_graph(*parsed), text);
  expect_same_graph(g, *parsed);
  return parsed;
}

template <typename T>
const T* elements_of(const Graph& g, const std::string& constant) {
  return static_cast<const T*>(g.find_value(constant)->constant().data());
}

Tensor random_tensor(DType dtype, std::vector<int64_t> sizes, std::mt19937& rng) {
  Tensor t = Tensor::empty(dtype, std::move(sizes));
  auto* bytes = static_cast<unsigned char*>(t.data());
  for (size_t i = 0; i < t.nbytes(); ++i) bytes[i] = static_cast<unsigned char>(rng());
  return t;
}

TEST(IrText, PrintsTheDocumentedSyntax) {
  Graph g("block");
  Dim batch = g.add_symbol("B", 1, 32);
  Value* x = g.add_input("x", TensorType{DType::F32, {batch, Dim(2)}});
  Tensor w = Tensor::empty(DType::F32, {2});
  static_cast<float*>(w.data())[0] = 1.0f;
  static_cast<float*>(w.data())[1] = -2.0f;
  g.add_constant("w", w);  // printed though unused
  Value* y = g.add("relu", {x}, {}, "y");
  Node* r = g.add_node_with_types("relu", {y}, {{"alpha", 0.5}, {"mode", std::string("fast")}},
                                  {y->type()}, "relu_3", {"z"});
  g.set_outputs({r->output(), y});
  EXPECT_EQ(print_graph(g),
            "graph @block {\n"
            "  sym B in [1, 32]\n"
            "  input %x : f32[B, 2]\n"
            "  const %w : f32[2] = hex\"0000803f000000c0\"\n"
            "  %y : f32[B, 2] = relu(%x)\n"
            "  %z : f32[B, 2] = relu(%y) {alpha = 0.5, mode = \"fast\"} @relu_3\n"
            "  output %z, %y\n"
            "}\n");
}

TEST(IrText, RoundTripsEveryAttrKind) {
  Graph g("attrs");
  Value* x = g.add_input("x", f32({2}));
  std::mt19937 rng(7);
  const double inf = std::numeric_limits<double>::infinity();
  // Written types keep attributes the op doesn't declare, so every kind can ride on one node.
  AttrMap attrs = {
      {"i", int64_t{-3}},
      {"i_min", std::numeric_limits<int64_t>::min()},
      {"f_integral", 2.0},
      {"f_third", 1.0 / 3.0},
      {"f_neg_zero", -0.0},
      {"f_huge", 1e300},
      {"f_denormal", 5e-324},
      {"f_inf", inf},
      {"f_neg_inf", -inf},
      {"f_nan", std::numeric_limits<double>::quiet_NaN()},
      {"b", true},
      {"s", std::string("tab\tquote\"back\\slash\nnl\x01\x7f utf8 \xc3\xa9")},
      {"s_empty", std::string()},
      {"ints", std::vector<int64_t>{1, -2, 3}},
      {"ints_empty", std::vector<int64_t>{}},
      {"floats", std::vector<double>{1.5, 2.0, -inf, 1e-7}},
      {"bools", std::vector<bool>{true, false, true}},
      {"strings", std::vector<std::string>{"a", "", "c d"}},
      {"tensor", random_tensor(DType::F16, {2, 3}, rng)},
      {"tensor_scalar", random_tensor(DType::I64, {}, rng)},
      {"tensor_undefined", Tensor()},
  };
  Node* n = g.add_node_with_types("relu", {x}, attrs, {f32({2})}, "", {"y"});
  g.set_outputs({n->output()});
  std::string text = print_graph(g);
  for (const char* expected :
       {"f_integral = 2.0", "f_third = 0.3333333333333333", "f_neg_zero = -0.0",
        "f_denormal = 5e-324", "f_inf = inf", "f_neg_inf = -inf", "f_nan = nan", "i = -3",
        "b = true", R"(s = "tab\tquote\"back\\slash\nnl\x01\x7f utf8 )", "ints_empty = []",
        "floats = [1.5, 2.0, -inf, 1e-07]", "bools = [true, false, true]",
        R"(strings = ["a", "", "c d"])", "tensor = tensor<f16[2, 3], hex\"",
        "tensor_undefined = tensor<>"})
    EXPECT_NE(text.find(expected), std::string::npos) << expected << "\n" << text;
  expect_round_trip(g);
}

TEST(IrText, RoundTripsConstantsOfEveryDtype) {
  Graph g("consts");
  std::mt19937 rng(11);
  std::vector<Value*> outputs;
  for (DType dtype : kAllDTypes) {
    std::string name(dtype_name(dtype));
    // Random bytes include NaN payloads, denormals and non-0/1 bools: all must survive.
    outputs.push_back(g.add_constant(name, random_tensor(dtype, {3, 5}, rng)));
    outputs.push_back(g.add_constant(name + "_scalar", random_tensor(dtype, {}, rng)));
    outputs.push_back(g.add_constant(name + "_empty", random_tensor(dtype, {0, 4}, rng)));
  }
  g.set_outputs(outputs);
  EXPECT_NE(print_graph(g).find("const %u8_empty : u8[0, 4] = hex\"\"\n"), std::string::npos);
  expect_round_trip(g);
}

TEST(IrText, RoundTripsSymbolicDimsAndVerifies) {
  Graph g("dynamic");
  Dim batch = g.add_symbol("B", 1, 64);
  Dim seq = g.add_symbol("S", 0, std::numeric_limits<int64_t>::max());
  Value* x = g.add_input("x", TensorType{DType::F32, {batch, seq, Dim(8)}});
  Value* w = g.add_constant("w", Tensor::zeros(DType::F32, {8, 4}));
  Value* m = g.add("matmul", {x, w});
  Value* r = g.add("relu", {m});
  // A strided convolution derives symbols whose names ("(H-3)/2+1") need quotes.
  Dim h = g.add_symbol("H", 4, 64);
  Value* image = g.add_input("image", TensorType{DType::F32, {batch, Dim(3), h, h}});
  Value* k = g.add_constant("k", Tensor::zeros(DType::F32, {2, 3, 3, 3}));
  Value* conv = g.add("conv2d", {image, k}, {{"stride", std::vector<int64_t>{2, 2}}});
  g.set_outputs({r, conv});
  verify(g);
  EXPECT_GT(g.symbols().size(), 3u);
  EXPECT_NE(print_graph(g).find("  sym \"(H"), std::string::npos) << print_graph(g);
  std::unique_ptr<Graph> parsed = expect_round_trip(g);
  EXPECT_NO_THROW(verify(*parsed));
  EXPECT_EQ(parsed->find_value(r->name())->type().shape[0], Dim::symbolic(0));
}

TEST(IrText, RoundTripsMultiResultNodes) {
  // Two results written for a one-result op: the text keeps them; the verifier objects.
  Graph g("multi");
  Value* x = g.add_input("x", f32({2}));
  Node* n = g.add_node_with_types("relu", {x}, {}, {f32({2}), f32({3})}, "both", {"a", "b"});
  g.set_outputs({n->output(1), n->output(0)});
  std::string text = print_graph(g);
  EXPECT_NE(text.find("  %a : f32[2], %b : f32[3] = relu(%x) @both\n"), std::string::npos) << text;
  std::unique_ptr<Graph> parsed = expect_round_trip(g);
  try {
    verify(*parsed);
    FAIL() << "verify accepted two results for relu";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidGraph);
  }
}

TEST(IrText, GraphOutputsMayBeInputsOrConstants) {
  Graph g("passthrough");
  Value* x = g.add_input("x", f32({2}));
  Value* c = g.add_constant("c", Tensor::zeros(DType::I32, {}));
  g.set_outputs({x, c, x});
  EXPECT_NE(print_graph(g).find("  output %x, %c, %x\n"), std::string::npos);
  expect_round_trip(g);
}

TEST(IrText, QuotesNamesThatNeedIt) {
  Graph g("my graph");
  Dim len = g.add_symbol("seq-len", 1, 9);
  Dim digit = g.add_symbol("3d", 1, 2);
  Value* x = g.add_input("in put", TensorType{DType::F32, {len, digit}});
  Value* dotted = g.add_input("x.1", TensorType{DType::F32, {len, digit}});
  Value* q = g.add_input("q\"\\\n", TensorType{DType::F32, {len, digit}});
  Value* s = g.add("add", {x, dotted}, {}, "sum#1");
  Node* n = g.add_node_with_types("relu", {s}, {{"odd key", int64_t{1}}, {"9", int64_t{2}}},
                                  {s->type()}, "relu 3", {"out"});
  g.set_outputs({n->output(), q});
  std::string text = print_graph(g);
  for (const char* expected :
       {"graph @\"my graph\" {", "sym \"seq-len\" in [1, 9]", "sym \"3d\" in [1, 2]",
        "input %\"in put\" : f32[\"seq-len\", \"3d\"]", "input %x.1 :",
        R"(input %"q\"\\\n" :)", "%\"sum#1\" : f32", "{\"9\" = 2, \"odd key\" = 1} @\"relu 3\""})
    EXPECT_NE(text.find(expected), std::string::npos) << expected << "\n" << text;
  expect_round_trip(g);
}

TEST(IrText, NodeNamePrintedOnlyWhenItDiffersFromTheResult) {
  Graph g;
  Value* x = g.add_input("x", f32({2}));
  Value* a = g.add("relu", {x}, {}, "a");
  Node* b = g.add_node_with_types("relu", {a}, {}, {f32({2})}, "act", {"b"});
  g.set_outputs({b->output()});
  std::string text = print_graph(g);
  EXPECT_NE(text.find("  %a : f32[2] = relu(%x)\n"), std::string::npos) << text;
  EXPECT_NE(text.find("  %b : f32[2] = relu(%a) @act\n"), std::string::npos) << text;
  std::unique_ptr<Graph> parsed = expect_round_trip(g);
  EXPECT_EQ(parsed->nodes()[1]->name(), "act");
}

TEST(IrText, ParsesHandWrittenText) {
  std::unique_ptr<Graph> g = parse_graph(R"(
    # A comment on its own line.
    graph @hand {
      sym B in [1, 8]
      input %x : f32[B, 2]   # trailing comment
      const %w : f32[2, 2] = [1.0, 2, 3.5, -4]
      const %h : f16[4] = [1, 65504, 5.960464477539063e-8, -inf]
      const %bf : bf16[2] = [1.0, nan]
      const %i : i8[3] = [-128, 0, 127]
      const %u : u8[1] = [255]
      const %d : f64[1] = [0.1]
      const %flags : bool[4] = [true, false, 1, 0]
      %m = matmul(%x, %w)
      %r = relu(%m)
      output %r
    }
  )");
  EXPECT_NO_THROW(verify(*g));
  EXPECT_EQ(g->find_value("m")->type(), (TensorType{DType::F32, {Dim::symbolic(0), Dim(2)}}));
  const float* w = elements_of<float>(*g, "w");
  EXPECT_EQ(std::vector<float>(w, w + 4), (std::vector<float>{1.0f, 2.0f, 3.5f, -4.0f}));
  const auto* h = elements_of<uint16_t>(*g, "h");
  EXPECT_EQ(std::vector<uint16_t>(h, h + 4), (std::vector<uint16_t>{0x3c00, 0x7bff, 0x0001, 0xfc00}));
  const auto* bf = elements_of<uint16_t>(*g, "bf");
  EXPECT_EQ(bf[0], 0x3f80);
  EXPECT_EQ(bf[1] & 0x7f80, 0x7f80);
  EXPECT_NE(bf[1] & 0x007f, 0);
  const auto* i = elements_of<int8_t>(*g, "i");
  EXPECT_EQ(std::vector<int>(i, i + 3), (std::vector<int>{-128, 0, 127}));
  EXPECT_EQ(elements_of<uint8_t>(*g, "u")[0], 255);
  EXPECT_EQ(elements_of<double>(*g, "d")[0], 0.1);
  const auto* flags = elements_of<uint8_t>(*g, "flags");
  EXPECT_EQ(std::vector<int>(flags, flags + 4), (std::vector<int>{1, 0, 1, 0}));
}

TEST(IrText, ReadableListsRoundToNearestEven) {
  // f16 ties: 2049 lies halfway between 2048 and 2050 (even mantissa wins), 2051 between 2050
  // and 2052 (2052 wins). bf16: 1 + 2^-8 halfway between 1 and 1 + 2^-7 rounds down to 1.
  std::unique_ptr<Graph> g = parse_graph(R"(graph @g {
    const %h : f16[2] = [2049, 2051]
    const %b : bf16[1] = [1.00390625]
    const %f : f32[1] = [16777217]
    output %h, %b, %f
  })");
  const auto* h = elements_of<uint16_t>(*g, "h");
  EXPECT_EQ(h[0], 0x6800);  // 2048
  EXPECT_EQ(h[1], 0x6802);  // 2052
  EXPECT_EQ(elements_of<uint16_t>(*g, "b")[0], 0x3f80);
  EXPECT_EQ(elements_of<float>(*g, "f")[0], 16777216.0f);
}

TEST(IrText, OmittedAttributesGetDefaultsAndWrittenTypesAreVerified) {
  // A result type is written and the op's attributes are left to their defaults: the parser fills
  // them in, so the verifier finds the node complete.
  std::unique_ptr<Graph> g = parse_graph(R"(graph @g {
    input %x : f32[2, 3]
    input %y : f32[3, 4]
    %m : f32[2, 4] = matmul(%x, %y)
    output %m
  })");
  EXPECT_FALSE(g->nodes()[0]->attrs().empty());
  EXPECT_NO_THROW(verify(*g));
  // A wrong written type is kept as written, for the verifier to reject.
  std::unique_ptr<Graph> wrong = parse_graph(R"(graph @g {
    input %x : f32[2, 3]
    %r : f32[3, 2] = relu(%x)
    output %r
  })");
  EXPECT_EQ(wrong->find_value("r")->type(), f32({3, 2}));
  EXPECT_THROW(verify(*wrong), Error);
}

// ---------------------------------------------------------------- errors

void expect_error(const std::string& text, const std::string& where, const std::string& what,
                  ErrorCode code = ErrorCode::ParseError) {
  try {
    parse_graph(text);
    FAIL() << "parsed without error:\n" << text;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_EQ(e.detail().rfind(where + ": ", 0), 0u) << e.what();
    EXPECT_NE(e.detail().find(what), std::string::npos) << e.what();
  }
}

TEST(IrText, ErrorUndefinedValue) {
  expect_error("graph @g {\n  input %x : f32[2]\n  %y = relu(%z)\n}", "line 3, column 13",
               "undefined value %z");
}

TEST(IrText, ErrorRedefinedValue) {
  expect_error("graph @g {\n  input %x : f32[2]\n  %x = relu(%x)\n}", "line 3, column 3",
               "value %x is defined twice");
}

TEST(IrText, ErrorUnknownDtype) {
  expect_error("graph @g {\n  input %x : f31[2]\n}", "line 2, column 14",
               "unknown dtype 'f31'; expected one of f32, f16");
}

TEST(IrText, ErrorUndeclaredSymbol) {
  expect_error("graph @g {\n  input %x : f32[N, 2]\n}", "line 2, column 18",
               "undeclared symbol 'N'");
}

TEST(IrText, ErrorWrongConstantElementCount) {
  expect_error("graph @g {\n  const %w : f32[2, 2] = [1, 2, 3]\n}", "line 2, column 26",
               "f32[2, 2] needs 4 elements, found 3");
}

TEST(IrText, ErrorTrailingGarbage) {
  expect_error("graph @g {\n  input %x : f32[2]\n  output %x\n} extra", "line 4, column 3",
               "expected end of input after the graph's closing '}', found 'extra'");
}

TEST(IrText, ErrorUnterminatedString) {
  expect_error("graph @g {\n  input %x : f32[2]\n  %y = relu(%x) {mode = \"fast}\n}",
               "line 3, column 25", "unterminated string");
}

TEST(IrText, ErrorBadHexLength) {
  expect_error("graph @g {\n  const %w : f32[2] = hex\"0000803f\"\n}", "line 2, column 23",
               "exactly 16 hex digits (8 bytes), found 8");
}

TEST(IrText, ErrorBadHexDigit) {
  expect_error("graph @g {\n  const %w : u8[1] = hex\"0g\"\n}", "line 2, column 27",
               "'g' is not a hex digit");
}

TEST(IrText, ErrorUnknownEscape) {
  expect_error("graph @g {\n  input %\"a\\qb\" : f32[2]\n}", "line 2, column 12",
               "unknown escape '\\q'");
}

TEST(IrText, ErrorMalformedNumber) {
  expect_error("graph @g {\n  input %x : f32[3x]\n}", "line 2, column 18",
               "malformed number '3x'");
}

TEST(IrText, ErrorNumberOutOfRange) {
  expect_error("graph @g {\n  input %x : f32[99999999999999999999]\n}", "line 2, column 18",
               "out of range for a 64-bit integer");
  expect_error("graph @g {\n  const %w : u8[2] = [1, 256]\n}", "line 2, column 26",
               "256 is out of range for u8");
  expect_error("graph @g {\n  const %w : f16[1] = [70000]\n}", "line 2, column 24",
               "70000 is out of range for f16");
}

TEST(IrText, ErrorWrongElementKind) {
  expect_error("graph @g {\n  const %w : i32[2] = [1, 2.5]\n}", "line 2, column 27",
               "expected an integer for a i32 element, found number 2.5");
  expect_error("graph @g {\n  const %w : bool[1] = [2]\n}", "line 2, column 25",
               "expected true, false, 0 or 1");
}

TEST(IrText, ErrorUnexpectedCharacter) {
  expect_error("graph @g {\n  input %x : f32[2];\n}", "line 2, column 20",
               "unexpected character ';'");
}

TEST(IrText, ErrorUnexpectedToken) {
  expect_error("graph @g {\n  input %x f32[2]\n}", "line 2, column 12",
               "expected ':' and the input's type, found 'f32'");
  expect_error("graph g {}", "line 1, column 7", "expected the graph's name, like @main");
  expect_error("graph @g {\n  input %x : f32[2]\n", "line 3, column 1",
               "or '}', found end of input");
}

TEST(IrText, ErrorMixedList) {
  expect_error("graph @g {\n  input %x : f32[2]\n  %y = relu(%x) {k = [1, \"a\"]}\n}",
               "line 3, column 26", "found a string after a number");
}

TEST(IrText, ErrorDuplicateAttribute) {
  expect_error("graph @g {\n  input %x : f32[2]\n  %y = relu(%x) {k = 1, k = 2}\n}",
               "line 3, column 25", "attribute 'k' is given twice");
}

TEST(IrText, ErrorSomeResultsTyped) {
  expect_error("graph @g {\n  input %x : f32[2]\n  %a : f32[2], %b = relu(%x)\n}",
               "line 3, column 16", "give a type to every result of a node or to none");
}

TEST(IrText, ErrorResultCount) {
  expect_error("graph @g {\n  input %x : f32[2]\n  %a, %b = relu(%x)\n}", "line 3, column 12",
               "'relu' gives 1 result here, but 2 are written");
}

TEST(IrText, ErrorSymbolDeclaredTwiceOrEmpty) {
  expect_error("graph @g {\n  sym B in [1, 2]\n  sym B in [1, 2]\n}", "line 3, column 7",
               "symbol 'B' is declared twice");
  expect_error("graph @g {\n  sym B in [3, 2]\n}", "line 2, column 12", "empty range [3, 2]");
}

TEST(IrText, ErrorSymbolicConstant) {
  expect_error("graph @g {\n  sym B in [1, 2]\n  const %w : f32[B] = hex\"\"\n}",
               "line 3, column 14", "the shape of a constant must be static, found f32[B]");
}

TEST(IrText, ErrorNegativeDim) {
  expect_error("graph @g {\n  input %x : f32[-1]\n}", "line 2, column 18",
               "a dim can't be negative");
}

TEST(IrText, ErrorSecondOutputStatement) {
  expect_error("graph @g {\n  input %x : f32[2]\n  output %x\n  output %x\n}", "line 4, column 3",
               "a second output statement");
}

TEST(IrText, ErrorNodeNameUsedTwice) {
  expect_error("graph @g {\n  input %x : f32[2]\n  %a = relu(%x)\n  %b = relu(%a) @a\n}",
               "line 4, column 17", "node name @a is used twice");
}

TEST(IrText, UnknownOperatorIsE50001WithPosition) {
  expect_error("graph @g {\n  input %x : f32[2]\n  %y = frobnicate(%x)\n}", "line 3, column 8",
               "unknown operator 'frobnicate'", ErrorCode::UnsupportedOperator);
}

TEST(IrText, ShapeInferenceErrorKeepsItsCodeWithPosition) {
  expect_error("graph @g {\n  input %x : f32[2]\n  input %y : f32[3]\n  %z = add(%x, %y)\n}",
               "line 4, column 8", "can't be broadcast", ErrorCode::ShapeInference);
}

TEST(IrText, NeverCrashesOnMangledText) {
  Graph g("fuzz");
  Dim batch = g.add_symbol("B", 1, 4);
  Value* x = g.add_input("x", TensorType{DType::F32, {batch, Dim(2)}});
  Value* w = g.add_constant("w", Tensor::zeros(DType::F32, {2, 2}));
  Value* m = g.add("matmul", {x, w});
  Node* n = g.add_node_with_types(
      "relu", {m}, {{"s", std::string("a\"b")}, {"l", std::vector<double>{1.5}}}, {m->type()});
  g.set_outputs({n->output()});
  const std::string text = print_graph(g);
  // Every prefix, and random byte edits; each must parse or throw kiln::Error, nothing else.
  auto parse_or_error = [](const std::string& t) {
    try {
      parse_graph(t);
    } catch (const Error&) {
    }
  };
  for (size_t len = 0; len < text.size(); ++len) parse_or_error(text.substr(0, len));
  std::mt19937 rng(3);
  const std::string alphabet = "%@\"\\[]{}(),:=<>#-.0123456789aefxhin \n\x01\xff";
  for (int trial = 0; trial < 3000; ++trial) {
    std::string mangled = text;
    for (int edits = 1 + static_cast<int>(rng() % 3); edits > 0; --edits) {
      size_t at = rng() % mangled.size();
      char c = alphabet[rng() % alphabet.size()];
      switch (rng() % 3) {
        case 0: mangled[at] = c; break;
        case 1: mangled.insert(mangled.begin() + static_cast<std::ptrdiff_t>(at), c); break;
        default: mangled.erase(at, 1); break;
      }
    }
    parse_or_error(mangled);
  }
}

}  // namespace
}  // namespace kiln
