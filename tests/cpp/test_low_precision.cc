// f16 and bf16 through f32 (OpDef::computes_low_precision_in_f32, src/ops/low_precision.h): a
// node of such an op on 2-byte floats builds as casts to f32, the op in f32 and a cast back, and
// its result is the f32 op's result on the widened inputs rounded once.
#include <cstring>

#include "frontend/converter.h"
#include "kernels/cpu/float16.h"
#include "ops_test_util.h"

namespace kiln {
namespace {

using test::type_of;

// The text of a graph with `T` replaced by the dtype's name.
std::string with_dtype(std::string text, DType dtype) {
  for (size_t at = text.find("$T"); at != std::string::npos; at = text.find("$T", at))
    text.replace(at, 2, dtype_name(dtype));
  return text;
}

float widen(DType dtype, uint16_t bits) {
  return dtype == DType::BF16 ? cpu::to_float(cpu::BFloat16{bits}) : cpu::to_float(cpu::Float16{bits});
}

uint16_t round_to(DType dtype, float f) {
  return dtype == DType::BF16 ? cpu::to_bfloat16(f).bits : cpu::to_float16(f).bits;
}

// Random values of a 2-byte dtype (as its bits) and the same values in f32.
struct Input {
  Tensor low, wide;
};
Input random_input(DType dtype, const std::vector<int64_t>& sizes, std::mt19937& rng) {
  Input in{Tensor::empty(dtype, sizes), Tensor::empty(DType::F32, sizes)};
  std::uniform_real_distribution<float> dist(-3, 3);
  for (int64_t i = 0; i < in.low.numel(); ++i) {
    in.low.data<uint16_t>()[i] = round_to(dtype, dist(rng));
    in.wide.data<float>()[i] = widen(dtype, in.low.data<uint16_t>()[i]);
  }
  return in;
}

std::vector<std::string> ops_of(const Graph& g) {
  std::vector<std::string> ops;
  for (const Node* n : g.nodes()) ops.push_back(n->op());
  return ops;
}

using Ops = std::vector<std::string>;

TEST(LowPrecision, Bf16MatmulBuildsInF32BetweenCasts) {
  auto g = parse_graph(R"(graph @g {
    input %a : bf16[4, 8]
    input %b : bf16[8, 3]
    %y = matmul(%a, %b)
    output %y
  })");
  EXPECT_EQ(ops_of(*g), (Ops{"to", "to", "matmul", "to"}));
  const Node* matmul = g->nodes()[2];
  EXPECT_EQ(matmul->input(0)->type(), type_of(DType::F32, {4, 8}));
  EXPECT_EQ(matmul->input(1)->type(), type_of(DType::F32, {8, 3}));
  EXPECT_EQ(matmul->output()->type(), type_of(DType::F32, {4, 3}));
  EXPECT_EQ(g->outputs()[0]->type(), type_of(DType::BF16, {4, 3}));
  EXPECT_EQ(g->outputs()[0]->producer()->attr_string("dtype"), "bf16");
  // The built graph is ordinary IR: it prints and parses back to itself.
  const std::string text = print_graph(*g);
  EXPECT_EQ(print_graph(*parse_graph(text)), text);
}

TEST(LowPrecision, IntegerResultsAreNotCast) {
  Graph g;
  Value* x = g.add_input("x", type_of(DType::F16, {3, 5}));
  std::vector<Value*> top = g.add_node("topk", {x}, {{"k", int64_t{2}}});
  EXPECT_EQ(top[0]->type(), type_of(DType::F16, {3, 2}));
  EXPECT_EQ(top[0]->producer()->op(), "to");
  EXPECT_EQ(top[1]->type(), type_of(DType::I64, {3, 2}));
  EXPECT_EQ(top[1]->producer()->op(), "topk");
  EXPECT_EQ(g.add("argmax", {x}, {{"dim", std::vector<int64_t>{1}}})->type(),
            type_of(DType::I64, {3}));
}

TEST(LowPrecision, MixedDTypesFollowTypePromotion) {
  Graph g;
  Value* a = g.add_input("a", type_of(DType::F16, {2, 4}));
  Value* b = g.add_input("b", type_of(DType::BF16, {4, 3}));
  Value* c = g.add_input("c", type_of(DType::F32, {4, 3}));
  // f16 with bf16 promotes to f32: computed in f32 and kept.
  Value* ab = g.add("matmul", {a, b});
  EXPECT_EQ(ab->type(), type_of(DType::F32, {2, 3}));
  EXPECT_EQ(ab->producer()->op(), "matmul");
  EXPECT_EQ(g.add("matmul", {a, c})->type(), type_of(DType::F32, {2, 3}));
  // A node the op refuses adds nothing, not even its casts.
  const size_t nodes = g.num_nodes();
  EXPECT_EQ(test::error_code_of([&] { g.add("matmul", {a, a}); }), ErrorCode::ShapeInference);
  EXPECT_EQ(g.num_nodes(), nodes);
  // Ops that don't declare the flag still refuse 2-byte floats.
  std::string message;
  EXPECT_EQ(test::error_code_of([&] { g.add("prod", {a}); }, &message), ErrorCode::ShapeInference);
  EXPECT_NE(message.find("not f16; insert a cast"), std::string::npos) << message;
}

TEST(LowPrecision, NormsKeepTheInputDType) {
  // PyTorch's norms give x's dtype whatever their weights' (a bf16 input, f32 weights: bf16).
  Graph g;
  Value* x = g.add_input("x", type_of(DType::BF16, {2, 4, 8}));
  Value* w = g.add_input("w", type_of(DType::F32, {8}));
  Value* y = g.add("layer_norm", {x, w, w});
  EXPECT_EQ(y->type(), type_of(DType::BF16, {2, 4, 8}));
  EXPECT_EQ(y->producer()->op(), "to");
  EXPECT_EQ(y->producer()->input(0)->producer()->op(), "layer_norm");
  EXPECT_EQ(g.add("rms_norm", {x, w})->type(), type_of(DType::BF16, {2, 4, 8}));
  // An f32 input with 2-byte weights stays f32.
  Value* xf = g.add_input("xf", type_of(DType::F32, {2, 4, 8}));
  Value* wb = g.add_input("wb", type_of(DType::BF16, {8}));
  EXPECT_EQ(g.add("layer_norm", {xf, wb, wb})->type(), type_of(DType::F32, {2, 4, 8}));
  // Other ops promote: a bf16 input with an f32 one gives f32.
  Value* m = g.add_input("m", type_of(DType::F32, {8, 3}));
  EXPECT_EQ(g.add("matmul", {x, m})->type(), type_of(DType::F32, {2, 4, 3}));
}

// One op's graph, in each 2-byte dtype: the result must be the f32 graph's result on the
// widened inputs (the same kernels, compiled at O3) rounded once, bit for bit, and within one
// ULP of the low dtype of the f32 reference kernels' result.
struct Case {
  std::string name;
  std::string text;  // inputs in order, $T their dtype
  std::vector<std::vector<int64_t>> input_sizes;
  Ops ops;  // the nodes the bf16 graph builds
};

void check(const Case& c, DType dtype) {
  SCOPED_TRACE(c.name + " " + std::string(dtype_name(dtype)));
  auto low_graph = parse_graph(with_dtype(c.text, dtype));
  auto f32_graph = parse_graph(with_dtype(c.text, DType::F32));
  EXPECT_EQ(ops_of(*low_graph), c.ops);
  std::mt19937 rng(7);
  std::vector<Input> inputs;
  std::vector<TensorView> low_views, wide_views;
  for (const auto& sizes : c.input_sizes) {
    inputs.push_back(random_input(dtype, sizes, rng));
    low_views.push_back(inputs.back().low.view());
    wide_views.push_back(inputs.back().wide.view());
  }
  const Tensor got = CompiledGraph::compile(*low_graph)->run(low_views)[0];
  const Tensor f32 = CompiledGraph::compile(*f32_graph)->run(wide_views)[0];
  const Tensor reference =
      CompiledGraph::compile(*f32_graph, {.kernel_policy = "reference"})->run(wide_views)[0];
  ASSERT_EQ(got.dtype(), dtype);
  ASSERT_EQ(got.sizes(), f32.sizes());
  for (int64_t i = 0; i < got.numel(); ++i) {
    const uint16_t bits = got.data<uint16_t>()[i];
    ASSERT_EQ(bits, round_to(dtype, f32.data<float>()[i])) << "element " << i;
    const float r = reference.data<float>()[i];
    const float down = widen(dtype, round_to(dtype, r));
    // The low dtype's ULP at r: the distance from its rounding to the next value outward.
    const uint16_t next = static_cast<uint16_t>(round_to(dtype, r) + 1);
    const float ulp = std::abs(widen(dtype, next) - down);
    EXPECT_LE(std::abs(widen(dtype, bits) - r), ulp) << "element " << i << " vs " << r;
  }
}

const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      {"matmul", R"(graph @g {
         input %a : $T[5, 40]
         input %b : $T[40, 7]
         %y = matmul(%a, %b)
         output %y
       })", {{5, 40}, {40, 7}}, {"to", "to", "matmul", "to"}},
      {"layer_norm", R"(graph @g {
         input %x : $T[6, 48]
         input %w : $T[48]
         input %b : $T[48]
         %y = layer_norm(%x, %w, %b)
         output %y
       })", {{6, 48}, {48}, {48}}, {"to", "to", "to", "layer_norm", "to"}},
      {"softmax", R"(graph @g {
         input %x : $T[4, 33]
         %y = softmax(%x)
         output %y
       })", {{4, 33}}, {"to", "softmax", "to"}},
      {"sum", R"(graph @g {
         input %x : $T[3, 50, 4]
         %y = sum(%x) {dim = [1]}
         output %y
       })", {{3, 50, 4}}, {"to", "sum", "to"}},
      {"conv2d", R"(graph @g {
         input %x : $T[2, 3, 9, 9]
         input %w : $T[4, 3, 3, 3]
         input %b : $T[4]
         %y = conv2d(%x, %w, %b) {padding = [1, 1]}
         output %y
       })", {{2, 3, 9, 9}, {4, 3, 3, 3}, {4}}, {"to", "to", "to", "conv2d", "to"}},
      {"upsample_bilinear2d", R"(graph @g {
         input %x : $T[2, 3, 5, 7]
         %y = upsample_bilinear2d(%x) {output_size = [9, 4]}
         output %y
       })", {{2, 3, 5, 7}}, {"to", "upsample_bilinear2d", "to"}},
      {"upsample_bilinear2d align_corners", R"(graph @g {
         input %x : $T[2, 3, 5, 7]
         %y = upsample_bilinear2d(%x) {align_corners = true, scale_factors = [2.5, 1.5]}
         output %y
       })", {{2, 3, 5, 7}}, {"to", "upsample_bilinear2d", "to"}},
  };
  return all;
}

TEST(LowPrecision, ResultIsTheF32ResultRoundedOnce) {
  for (const Case& c : cases())
    for (DType dtype : {DType::BF16, DType::F16}) check(c, dtype);
}

TEST(LowPrecision, NearestUpsampleCopiesTwoByteFloatsAsTheyAre) {
  // A copy is exact in any dtype: one node and no casts, and every bit pattern comes through,
  // a signalling NaN's too (a round trip through f32 would quiet it).
  for (DType dtype : {DType::BF16, DType::F16}) {
    SCOPED_TRACE(dtype_name(dtype));
    auto g = parse_graph(with_dtype(R"(graph @g {
      input %x : $T[2, 3, 4, 5]
      %y = upsample_nearest2d(%x) {output_size = [8, 10]}
      output %y
    })", dtype));
    EXPECT_EQ(ops_of(*g), (Ops{"upsample_nearest2d"}));
    Tensor x = Tensor::empty(dtype, {2, 3, 4, 5});
    std::mt19937 rng(3);
    for (int64_t i = 0; i < x.numel(); ++i) x.data<uint16_t>()[i] = static_cast<uint16_t>(rng());
    x.data<uint16_t>()[0] = dtype == DType::BF16 ? 0x7F81 : 0x7C01;  // signalling NaNs
    for (const char* policy : {"best", "reference"}) {
      const Tensor y = CompiledGraph::compile(*g, {.kernel_policy = policy})->run({x.view()})[0];
      ASSERT_EQ(y.dtype(), dtype);
      for (int64_t p = 0; p < 6; ++p)  // output size 2x: source (oy / 2, ox / 2)
        for (int64_t oy = 0; oy < 8; ++oy)
          for (int64_t ox = 0; ox < 10; ++ox)
            ASSERT_EQ(y.data<uint16_t>()[(p * 8 + oy) * 10 + ox],
                      x.data<uint16_t>()[(p * 4 + oy / 2) * 5 + ox / 2])
                << policy << " " << p << " " << oy << " " << ox;
    }
  }
}

// addmm(b, x, w) with alpha 0.5, as PyTorch serializes a bf16 one.
const char* kBf16Addmm = R"({
  "name": "addmm_bf16",
  "placeholders": [
    {"name": "w", "kind": "constant", "dtype": "bf16", "shape": [4, 3]},
    {"name": "b", "kind": "constant", "dtype": "bf16", "shape": [3]},
    {"name": "x", "kind": "input", "dtype": "bf16", "shape": [2, 4]}],
  "nodes": [
    {"name": "addmm", "target": "aten.addmm.default",
     "args": {"self": {"ref": "b"}, "mat1": {"ref": "x"}, "mat2": {"ref": "w"}, "beta": 1, "alpha": 0.5},
     "outputs": [{"dtype": "bf16", "shape": [2, 3]}]}],
  "outputs": [{"ref": "addmm"}]
})";

TEST(LowPrecision, OneAtenOpRoundsOnce) {
  // addmm converts to matmul, mul and add: all three in f32, and one cast to bf16 at the end,
  // as PyTorch's addmm rounds its f32 result once.
  EXPECT_EQ(fx_node_support(kBf16Addmm).at("addmm"), "");
  auto g = import_fx_graph(kBf16Addmm, {{"w", Tensor::zeros(DType::BF16, {4, 3})},
                                        {"b", Tensor::zeros(DType::BF16, {3})}});
  EXPECT_NO_THROW(verify(*g));
  std::vector<std::string> ops;
  for (const Node* n : g->nodes())
    ops.push_back(n->op() == "to" ? "to " + n->attr_string("dtype") : n->op());
  EXPECT_EQ(ops, (Ops{"to f32", "to f32", "matmul", "mul", "to f32", "add", "to bf16"}));
  EXPECT_EQ(g->outputs()[0]->type(), type_of(DType::BF16, {2, 3}));
}

}  // namespace
}  // namespace kiln
