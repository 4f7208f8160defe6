// scaled_dot_product_attention: type inference, the reference kernel against hand-computed
// values and an independent naive implementation, and the flash kernel against the reference
// within a derived error bound.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <optional>
#include <tuple>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/float16.h"
#include "ops_test_util.h"

namespace kiln {
namespace {

using test::OneNode;
using test::type_of;

constexpr const char* kOp = "scaled_dot_product_attention";
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

bool available(const char* kernel) {
  if (!test::has_kernel(kOp, kernel)) return false;
  OneNode n(kOp, {type_of(DType::F32, {2, 4}), type_of(DType::F32, {3, 4}),
                  type_of(DType::F32, {3, 4})});
  return test::unsupported_reason(*n.node, kernel).empty();
}
bool flash_available() { return available("flash"); }

// flash_avx512 computes what flash does in other tiles, summing in the same order: where the
// CPU has AVX-512, the checks of flash below also check that its bits equal flash's.
void expect_avx512_tiles_give_the_same_bits(const Node& node, const std::vector<Tensor>& in,
                                            const Tensor& flash) {
  if (!available("flash_avx512")) return;
  EXPECT_TRUE(test::same_values(test::run_kernel(node, "flash_avx512", in)[0], flash))
      << "flash_avx512 against flash";
}

// ---------------------------------------------------------------- problems and inputs

// An attention problem on operands of rank <= 4, read as [B, H, rows, cols].
struct Problem {
  std::vector<int64_t> q, k, v;
  std::optional<std::vector<int64_t>> mask;
  DType mask_dtype = DType::Bool;
  bool causal = false;
  double scale = 0;  // 0: 1/sqrt(E)

  Problem(std::vector<int64_t> q_sizes, std::vector<int64_t> k_sizes, std::vector<int64_t> v_sizes)
      : q(std::move(q_sizes)), k(std::move(k_sizes)), v(std::move(v_sizes)) {}
  Problem& with_mask(std::vector<int64_t> sizes, DType dtype) {
    mask = std::move(sizes);
    mask_dtype = dtype;
    return *this;
  }
  Problem& with_causal(bool c = true) {
    causal = c;
    return *this;
  }
  Problem& with_scale(double s) {
    scale = s;
    return *this;
  }

  std::vector<TensorType> types() const {
    std::vector<TensorType> t = {type_of(DType::F32, q), type_of(DType::F32, k),
                                 type_of(DType::F32, v)};
    if (mask) t.push_back(type_of(mask_dtype, *mask));
    return t;
  }
  AttrMap attrs() const { return {{"is_causal", causal}, {"scale", scale}}; }
  std::string name() const {
    std::string s = "q " + shape_string(q) + " k " + shape_string(k) + " v " + shape_string(v);
    if (mask) s += " mask " + std::string(dtype_name(mask_dtype)) + shape_string(*mask);
    return s + (causal ? " causal" : "") + " scale " + std::to_string(scale);
  }
};

// Sizes padded to [B, H, rows, cols]; offsets broadcast the dims of size 1.
struct Indexer {
  std::array<int64_t, 4> sizes{1, 1, 1, 1}, strides{0, 0, 0, 0};
  explicit Indexer(const std::vector<int64_t>& s) {
    std::copy(s.begin(), s.end(), sizes.end() - static_cast<int64_t>(s.size()));
    int64_t stride = 1;
    for (int d = 3; d >= 0; --d) {
      strides[d] = sizes[d] == 1 ? 0 : stride;
      stride *= sizes[d];
    }
  }
  int64_t operator()(int64_t b, int64_t h, int64_t r, int64_t c) const {
    return b * strides[0] + h * strides[1] + r * strides[2] + c * strides[3];
  }
};

// Random q, k, v in [-2, 2]; a bool mask true 4 times in 5, or an additive one in [-4, 4] with
// -inf one time in 10.
std::vector<Tensor> random_inputs(const Problem& p, std::mt19937& rng) {
  std::vector<Tensor> in = {test::random_tensor(DType::F32, p.q, rng, -2, 2),
                            test::random_tensor(DType::F32, p.k, rng, -2, 2),
                            test::random_tensor(DType::F32, p.v, rng, -2, 2)};
  if (p.mask) {
    Tensor m = Tensor::empty(p.mask_dtype, *p.mask);
    for (int64_t i = 0; i < m.numel(); ++i) {
      if (p.mask_dtype == DType::Bool) m.data<uint8_t>()[i] = rng() % 5 != 0;
      else m.data<float>()[i] = rng() % 10 == 0 ? -kInf : std::ldexp(float(rng() % 8192), -10) - 4;
    }
    in.push_back(m);
  }
  return in;
}

struct Dims {
  int64_t batch, heads, l, s, e, ev;
};

Dims dims_of(const Problem& p) {
  auto dim = [&](size_t d) {
    int64_t n = 1;
    for (const auto* sizes : {&p.q, &p.k, &p.v})
      if (Indexer(*sizes).sizes[d] != 1) n = Indexer(*sizes).sizes[d];
    return n;
  };
  return {dim(0), dim(1), p.q[p.q.size() - 2], p.k[p.k.size() - 2], p.q.back(), p.v.back()};
}

// The scaled, masked score of key j for query i: -inf when not attended, rounded to f32 as
// PyTorch's score tensor is.
double score(const Problem& p, const Dims& d, const std::vector<Tensor>& in, int64_t b, int64_t h,
             int64_t i, int64_t j) {
  if (p.causal && j > i) return -kInf;
  const Indexer qi(p.q), ki(p.k);
  double dot = 0;
  for (int64_t e = 0; e < d.e; ++e)
    dot += double(in[0].data<float>()[qi(b, h, i, e)]) * in[1].data<float>()[ki(b, h, j, e)];
  const double scale = p.scale != 0 ? p.scale : d.e ? 1 / std::sqrt(double(d.e)) : 1;
  double x = dot * scale;
  if (p.mask) {
    const int64_t m = Indexer(*p.mask)(b, h, i, j);
    if (p.mask_dtype == DType::Bool && !in[3].data<uint8_t>()[m]) return -kInf;
    if (p.mask_dtype == DType::F32) x += in[3].data<float>()[m];
  }
  return float(x);
}

// The attention written out naively in double, for [B, H, L, Ev] outputs.
std::vector<double> naive_attention(const Problem& p, const std::vector<Tensor>& in) {
  const Dims d = dims_of(p);
  const Indexer vi(p.v);
  std::vector<double> out;
  for (int64_t b = 0; b < d.batch; ++b)
    for (int64_t h = 0; h < d.heads; ++h)
      for (int64_t i = 0; i < d.l; ++i) {
        std::vector<double> x(d.s);
        double max = -kInf;
        for (int64_t j = 0; j < d.s; ++j) {
          x[j] = score(p, d, in, b, h, i, j);
          max = std::isnan(x[j]) || std::isnan(max) ? NAN : std::max(max, x[j]);
        }
        for (int64_t c = 0; c < d.ev; ++c) {
          double num = 0, den = 0;
          for (int64_t j = 0; j < d.s && max != -kInf; ++j) {
            if (x[j] == -kInf) continue;
            const double w = std::exp(x[j] - max);
            num += w * in[2].data<float>()[vi(b, h, j, c)];
            den += w;
          }
          out.push_back(den == 0 ? 0 : num / den);
        }
      }
  return out;
}

// How far the flash kernel may be from the reference, per output element. With u = 2^-24,
// D_i = scale |q_i| max_j |k_j| + max_j |mask_ij| (bounding every |score| of row i, by
// Cauchy-Schwarz) and M_c = max_j |v_jc|:
//   * each score is an E-term f32 dot product, scaled and masked in one more rounding: within
//     (E + 4) u D_i of the reference's score (itself rounded to f32);
//   * the softmax weights then carry a relative error of twice that (the row max moves too),
//     plus exp's 2 u, the rounding of x - max (d u for a weight exp(-d), at most S u M_c / e
//     in the sum), and that of each block's rescale factor (2 u per key block, and the max's
//     drift across blocks, <= 2 D_i u);
//   * the weighted sum and the sum of weights are S-term f32 sums (S u each, plus a rounding
//     per block), and a perturbation eta of the weights moves their ratio by <= 2 |eta| M_c.
// Altogether |flash - reference| <= (4 (E + 5) D_i + 4 S + 32) u M_c. A dropped or duplicated
// key moves a row by about M_c / S, far more for the short rows a masking bug would hit.
std::vector<double> error_bound(const Problem& p, const std::vector<Tensor>& in) {
  const Dims d = dims_of(p);
  const Indexer qi(p.q), ki(p.k), vi(p.v);
  const double u = std::ldexp(1.0, -24);
  const double scale = p.scale != 0 ? std::fabs(p.scale) : d.e ? 1 / std::sqrt(double(d.e)) : 1;
  auto norm = [&](const Tensor& t, const Indexer& at, int64_t b, int64_t h, int64_t r) {
    double sum = 0;
    for (int64_t e = 0; e < d.e; ++e) sum += std::pow(double(t.data<float>()[at(b, h, r, e)]), 2);
    return std::sqrt(sum);
  };
  std::vector<double> bound;
  for (int64_t b = 0; b < d.batch; ++b)
    for (int64_t h = 0; h < d.heads; ++h) {
      double k_max = 0;
      for (int64_t j = 0; j < d.s; ++j) k_max = std::max(k_max, norm(in[1], ki, b, h, j));
      std::vector<double> v_max(d.ev, 0.0);
      for (int64_t j = 0; j < d.s; ++j)
        for (int64_t c = 0; c < d.ev; ++c)
          v_max[c] = std::max(v_max[c], std::fabs(double(in[2].data<float>()[vi(b, h, j, c)])));
      for (int64_t i = 0; i < d.l; ++i) {
        double mask_max = 0;
        if (p.mask && p.mask_dtype == DType::F32)
          for (int64_t j = 0; j < d.s; ++j) {
            const float m = in[3].data<float>()[Indexer(*p.mask)(b, h, i, j)];
            if (std::isfinite(m)) mask_max = std::max(mask_max, double(std::fabs(m)));
          }
        const double score_max = scale * norm(in[0], qi, b, h, i) * k_max + mask_max;
        for (int64_t c = 0; c < d.ev; ++c)
          bound.push_back((4 * double(d.e + 5) * score_max + 4 * double(d.s) + 32) * u * v_max[c]);
      }
    }
  return bound;
}

// Whether `kernel` takes the node (registered for this build and CPU, and not declining it).
bool takes(const Node& node, const char* kernel) {
  return test::has_kernel(kOp, kernel) && test::unsupported_reason(node, kernel).empty();
}

// got against the reference's result within the bound, element by element (NaN where it is
// NaN). Returns the largest error as a share of the bound.
double expect_within_bound(const Tensor& got, const Tensor& expected,
                           const std::vector<double>& bound, const char* kernel) {
  SCOPED_TRACE(kernel);
  EXPECT_EQ(static_cast<size_t>(got.numel()), bound.size());
  double worst = 0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    const float g = got.data<float>()[i], r = expected.data<float>()[i];
    if (std::isnan(r) || std::isnan(g)) {
      EXPECT_TRUE(std::isnan(r) && std::isnan(g)) << "element " << i << ": " << g << " vs " << r;
      continue;
    }
    const double err = std::fabs(double(g) - r);
    EXPECT_LE(err, bound[i]) << "element " << i << ": " << g << " vs " << r;
    if (err > bound[i]) return err / bound[i];
    worst = std::max(worst, bound[i] > 0 ? err / bound[i] : 0.0);
  }
  return worst;
}

// Checks the flash kernel against the reference kernel; with two_threads, also that it gives
// the same bits on 2 threads as on 1 (each row's arithmetic doesn't depend on the split; only
// some problems check it, as an OpenMP team keeps spinning on a loaded machine after each run).
// onednn (oneDNN's f32 GEMMs over whole score matrices), where it takes the problem, is held to
// the same bound. Returns the largest error as a share of the bound.
double expect_flash_matches_reference(const Problem& p, const std::vector<Tensor>& in,
                                      bool two_threads = false) {
  SCOPED_TRACE(p.name());
  OneNode node(kOp, p.types(), p.attrs());
  const Tensor expected = test::run_kernel(*node.node, "reference", in)[0];
  const Tensor got = test::run_kernel(*node.node, "flash", in)[0];
  expect_avx512_tiles_give_the_same_bits(*node.node, in, got);
  if (two_threads) {
    EXPECT_TRUE(test::same_values(test::run_kernel(*node.node, "flash", in, 2)[0], got));
  }
  const std::vector<double> bound = error_bound(p, in);
  double worst = expect_within_bound(got, expected, bound, "flash");
  if (takes(*node.node, "onednn"))
    worst = std::max(worst, expect_within_bound(test::run_kernel(*node.node, "onednn", in, 2)[0],
                                                expected, bound, "onednn"));
  return worst;
}

void expect_floats(const Tensor& got, const std::vector<float>& expected, int64_t max_ulp = 1) {
  ASSERT_EQ(got.numel(), static_cast<int64_t>(expected.size()));
  for (size_t i = 0; i < expected.size(); ++i)
    EXPECT_LE(test::ulp_distance(got.data<float>()[i], expected[i]), max_ulp)
        << "element " << i << ": " << got.data<float>()[i] << " vs " << expected[i];
}

// ---------------------------------------------------------------- type inference

TEST(OpsAttention, InfersShapesWithSymbolicSequences) {
  Graph g;
  Dim batch = g.add_symbol("B", 1, 8);
  Dim l = g.add_symbol("L", 1, 4096);
  Dim s = g.add_symbol("S", 1, 4096);
  Value* q = g.add_input("q", TensorType{DType::F32, {batch, Dim(12), l, Dim(64)}});
  Value* k = g.add_input("k", TensorType{DType::F32, {batch, Dim(12), s, Dim(64)}});
  Value* v = g.add_input("v", TensorType{DType::F32, {batch, Dim(12), s, Dim(32)}});
  Value* y = g.add(kOp, {q, k, v}, {{"is_causal", true}});
  EXPECT_EQ(y->type(), (TensorType{DType::F32, {batch, Dim(12), l, Dim(32)}}));
  EXPECT_EQ(y->producer()->attr_float("scale"), 0.0);

  // A mask [L, S] broadcast over batch and heads; k and v shared by the heads.
  Value* mask = g.add_input("mask", TensorType{DType::Bool, {l, s}});
  Value* k1 = g.add_input("k1", TensorType{DType::F32, {batch, Dim(1), s, Dim(64)}});
  Value* v1 = g.add_input("v1", TensorType{DType::F32, {batch, Dim(1), s, Dim(64)}});
  Value* z = g.add(kOp, {q, k1, v1, mask}, {{"scale", 0.125}});
  EXPECT_EQ(z->type(), (TensorType{DType::F32, {batch, Dim(12), l, Dim(64)}}));
  // An additive mask of q's dtype with a static L: the static size wins.
  Value* bias = g.add_input("bias", TensorType{DType::F32, {Dim(1), Dim(12), Dim(7), s}});
  EXPECT_EQ(g.add(kOp, {q, k, v, bias})->type(),
            (TensorType{DType::F32, {batch, Dim(12), Dim(7), Dim(32)}}));
  // Rank-2 operands and f64.
  Value* q2 = g.add_input("q2", type_of(DType::F64, {5, 3}));
  Value* kv2 = g.add_input("kv2", type_of(DType::F64, {9, 3}));
  EXPECT_EQ(g.add(kOp, {q2, kv2, kv2})->type(), type_of(DType::F64, {5, 3}));
  g.set_outputs({y, z});
  EXPECT_NO_THROW(verify(g));
}

TEST(OpsAttention, ShapeInferenceFailuresNameTheShapes) {
  Graph g;
  auto input = [&](DType dtype, std::vector<int64_t> sizes) {
    return g.add_input("x", type_of(dtype, sizes));
  };
  Value* q = input(DType::F32, {2, 5, 8});
  Value* k = input(DType::F32, {2, 7, 8});
  Value* v = input(DType::F32, {2, 7, 4});
  auto fails_with = [&](const std::vector<Value*>& in, const std::string& text,
                        AttrMap attrs = {}) {
    std::string message;
    EXPECT_EQ(test::error_code_of([&] { g.add(kOp, in, attrs); }, &message),
              ErrorCode::ShapeInference);
    EXPECT_NE(message.find(text), std::string::npos) << message;
  };
  fails_with({q, input(DType::F32, {2, 7, 6}), v}, "q's and k's last dims (E) differ: 8 vs 6");
  fails_with({q, k, input(DType::F32, {2, 6, 4})}, "(S, the number of keys) differ: 7 vs 6");
  fails_with({q, k, input(DType::F32, {3, 7, 4})}, "can't be broadcast together");
  fails_with({input(DType::I64, {2, 5, 8}), k, v}, "must be f32, f64 or bf16, not i64");
  fails_with({q, k, input(DType::F64, {2, 7, 4})}, "same dtype");
  fails_with({input(DType::F32, {8}), k, v}, "at least two dims");
  fails_with({q, k, v, input(DType::I64, {5, 7})}, "attn_mask must be bool (true = attend) or f32");
  fails_with({q, k, v, input(DType::F64, {5, 7})}, "not f64");
  fails_with({q, k, v, input(DType::Bool, {5, 6})}, "must broadcast to the scores [2, 5, 7]");
  fails_with({q, k, v, input(DType::Bool, {4, 2, 5, 7})}, "has more dims than the scores");
  // A mask may not enlarge the output's batch (PyTorch adds it to the scores in place).
  fails_with({q, k, v, input(DType::Bool, {3, 5, 7})}, "dims differ: 2 vs 3");
  fails_with({q, k, v, input(DType::Bool, {5, 7}), input(DType::Bool, {5, 7})},
             "at most one attn_mask");
  fails_with({q, k, v}, "scale must be finite", {{"scale", double(kInf)}});
}

// ---------------------------------------------------------------- reference kernel

TEST(OpsAttention, ReferenceMatchesHandComputedValues) {
  // q = [[1, 0], [0, 1]], k = [[1, 0], [0, 1], [1, 1]], v = [[1, 2], [3, 4], [5, 6]], scale 1:
  // row 0's scores are [1, 0, 1], row 1's [0, 1, 1]. Expected values: exact results rounded to
  // f32 (computed in double).
  const Tensor q = test::tensor_of({2, 2}, {1, 0, 0, 1});
  const Tensor k = test::tensor_of({3, 2}, {1, 0, 0, 1, 1, 1});
  const Tensor v = test::tensor_of({3, 2}, {1, 2, 3, 4, 5, 6});
  const std::vector<TensorType> types = {type_of(DType::F32, {2, 2}), type_of(DType::F32, {3, 2}),
                                         type_of(DType::F32, {3, 2})};
  const double e = std::exp(1.0);
  auto f = [](double x) { return static_cast<float>(x); };
  OneNode plain(kOp, types, {{"scale", 1.0}});
  expect_floats(test::run_kernel(*plain.node, "reference", {q, k, v})[0],
                {f((e + 3 + 5 * e) / (2 * e + 1)), f((2 * e + 4 + 6 * e) / (2 * e + 1)),
                 f((1 + 3 * e + 5 * e) / (2 * e + 1)), f((2 + 4 * e + 6 * e) / (2 * e + 1))});
  // Causal: row 0 sees key 0 alone, row 1 keys 0 and 1 (scores 0 and 1).
  OneNode causal(kOp, types, {{"scale", 1.0}, {"is_causal", true}});
  expect_floats(test::run_kernel(*causal.node, "reference", {q, k, v})[0],
                {1, 2, f((1 + 3 * e) / (1 + e)), f((2 + 4 * e) / (1 + e))});
  // Default scale 1/sqrt(2), and a bool mask that leaves row 0 keys 0 and 2 (equal scores) and
  // row 1 none: PyTorch gives zeros for a row that attends nothing.
  std::vector<TensorType> masked = types;
  masked.push_back(type_of(DType::Bool, {2, 3}));
  Tensor mask = Tensor::empty(DType::Bool, {2, 3});
  const uint8_t mask_values[] = {1, 0, 1, 0, 0, 0};
  std::memcpy(mask.data(), mask_values, sizeof mask_values);
  OneNode bool_mask(kOp, masked);
  expect_floats(test::run_kernel(*bool_mask.node, "reference", {q, k, v, mask})[0], {3, 4, 0, 0});
  // An additive mask: -inf everywhere on row 0 (zeros again), ln 2 on row 1's key 0.
  masked.back() = type_of(DType::F32, {2, 3});
  const Tensor bias = test::tensor_of({2, 3}, {-kInf, -kInf, -kInf, float(std::log(2.0)), 0, 0});
  OneNode additive(kOp, masked, {{"scale", 1.0}});
  const double w0 = std::exp(double(float(std::log(2.0))));  // about 2
  expect_floats(test::run_kernel(*additive.node, "reference", {q, k, v, bias})[0],
                {0, 0, f((w0 + 3 * e + 5 * e) / (w0 + 2 * e)),
                 f((2 * w0 + 4 * e + 6 * e) / (w0 + 2 * e))});
  // E = 0: every score is 0 (an empty dot product, whatever the scale): the mean of v.
  OneNode empty_e(kOp, {type_of(DType::F32, {2, 0}), type_of(DType::F32, {3, 0}),
                        type_of(DType::F32, {3, 2})});
  const Tensor no_q = Tensor::empty(DType::F32, {2, 0}), no_k = Tensor::empty(DType::F32, {3, 0});
  expect_floats(test::run_kernel(*empty_e.node, "reference", {no_q, no_k, v})[0],
                {3, 4, 3, 4});
}

TEST(OpsAttention, ReferenceMatchesNaiveAttentionOnBroadcasts) {
  std::mt19937 rng(3);
  const std::vector<Problem> problems = {
      Problem({2, 3, 5, 4}, {2, 3, 6, 4}, {2, 3, 6, 3}).with_mask({5, 6}, DType::Bool),
      Problem({2, 3, 5, 4}, {2, 1, 6, 4}, {2, 1, 6, 3})
          .with_mask({2, 1, 5, 6}, DType::F32)
          .with_causal()
          .with_scale(0.7),
      Problem({1, 3, 5, 4}, {2, 1, 6, 4}, {1, 3, 6, 2}).with_mask({5, 1}, DType::Bool),
      Problem({3, 5, 4}, {6, 4}, {6, 3}).with_mask({3, 1, 6}, DType::F32).with_scale(-0.5),
      Problem({7, 4}, {3, 4}, {3, 5}).with_mask({}, DType::Bool).with_causal(),
      Problem({7, 4}, {3, 4}, {3, 5}).with_causal(),
  };
  for (const Problem& p : problems) {
    SCOPED_TRACE(p.name());
    std::vector<Tensor> in = random_inputs(p, rng);
    if (p.mask && p.mask->empty()) in[3].data<uint8_t>()[0] = 1;  // a scalar true
    OneNode node(kOp, p.types(), p.attrs());
    const Tensor got = test::run_kernel(*node.node, "reference", in)[0];
    const std::vector<double> expected = naive_attention(p, in);
    ASSERT_EQ(static_cast<size_t>(got.numel()), expected.size());
    for (size_t i = 0; i < expected.size(); ++i)
      EXPECT_LE(test::ulp_distance(got.data<float>()[i], float(expected[i])), 1)
          << "element " << i << ": " << got.data<float>()[i] << " vs " << expected[i];
  }
}

TEST(OpsAttention, ReferenceRunsF64) {
  OneNode node(kOp, {type_of(DType::F64, {1, 1}), type_of(DType::F64, {2, 1}),
                     type_of(DType::F64, {2, 1})}, {{"scale", 1.0}});
  Tensor q = Tensor::empty(DType::F64, {1, 1}), k = Tensor::empty(DType::F64, {2, 1}),
         v = Tensor::empty(DType::F64, {2, 1});
  q.data<double>()[0] = 1;
  k.data<double>()[0] = 0;
  k.data<double>()[1] = std::log(3.0);  // weights 1/4 and 3/4
  v.data<double>()[0] = 1;
  v.data<double>()[1] = 5;
  const Tensor y = test::run_kernel(*node.node, "reference", {q, k, v})[0];
  EXPECT_NEAR(y.data<double>()[0], 4.0, 1e-15);
}

// ---------------------------------------------------------------- flash kernel

TEST(OpsAttention, FlashDeclinesF64) {
  if (!test::has_kernel(kOp, "flash")) GTEST_SKIP() << "not an x86 build";
  OneNode node(kOp, {type_of(DType::F64, {2, 4}), type_of(DType::F64, {3, 4}),
                     type_of(DType::F64, {3, 4})});
  EXPECT_NE(test::unsupported_reason(*node.node, "flash"), "");
}

// L and S over {1, 7, 64, 129}, E in {8, 64}, causal or not, no mask, a bool or an additive one
// broadcast over batch, heads, queries or keys; scale set and unset; batch dims [2, 3]; Ev from
// E, 20, 13, 1 (the value tiles' tails).
TEST(OpsAttention, FlashMatchesReferenceOnBatchesAndMasks) {
  if (!flash_available()) GTEST_SKIP() << "no AVX2+FMA";
  std::mt19937 rng(11);
  const int64_t sizes[] = {1, 7, 64, 129};
  int index = 0;
  double worst = 0;
  for (int64_t l : sizes)
    for (int64_t s : sizes)
      for (int64_t e : {8, 64})
        for (bool causal : {false, true})
          for (int mask_kind = 0; mask_kind < 3; ++mask_kind, ++index) {
            const int64_t ev = std::array<int64_t, 4>{e, 20, 13, 1}[index % 4];
            // k and v shared by the heads every third problem.
            const int64_t kv_heads = index % 3 == 0 ? 1 : 3;
            Problem p({2, 3, l, e}, {2, kv_heads, s, e}, {2, kv_heads, s, ev});
            p.with_causal(causal).with_scale(index % 2 ? 0.3 : 0.0);
            if (mask_kind > 0) {
              const std::vector<int64_t> mask_shapes[] = {{l, s}, {2, 1, l, s}, {3, l, s},
                                                          {2, 3, l, s}, {l, 1}, {1, s}};
              p.with_mask(mask_shapes[index % 6], mask_kind == 1 ? DType::Bool : DType::F32);
            }
            worst = std::max(worst, expect_flash_matches_reference(p, random_inputs(p, rng),
                                                                   index % 16 == 0));
          }
  RecordProperty("worst_error_share_of_bound", std::to_string(worst));
}

TEST(OpsAttention, FlashMatchesReferenceOnLongSequences) {
  if (!flash_available()) GTEST_SKIP() << "no AVX2+FMA";
  std::mt19937 rng(17);
  const std::vector<std::array<int64_t, 2>> lengths = {{1000, 1000}, {1000, 7}, {1, 1000},
                                                       {129, 1000}, {1000, 129}, {64, 1000}};
  int index = 0;
  double worst = 0;
  for (auto [l, s] : lengths)
    for (int64_t e : {8, 64})
      for (bool causal : {false, true}) {
        ++index;
        // The 1000 x 1000 problems keep to one matrix: the reference takes L S (E + Ev) steps.
        const int64_t heads = l * s >= 1000000 ? 1 : 2;
        Problem p({1, heads, l, e}, {1, heads, s, e}, {1, heads, s, e});
        p.with_causal(causal).with_scale(index % 2 ? 0.0 : 0.25);
        if (index % 3)
          p.with_mask(index % 3 == 1 ? std::vector<int64_t>{l, s}
                                     : std::vector<int64_t>{1, heads, 1, s},
                      index % 4 < 2 ? DType::Bool : DType::F32);
        worst = std::max(worst, expect_flash_matches_reference(p, random_inputs(p, rng),
                                                               index % 4 == 1));
      }
  RecordProperty("worst_error_share_of_bound", std::to_string(worst));
}

// Odd E and Ev (transposes and tiles with edges), one-element and empty dims.
TEST(OpsAttention, FlashMatchesReferenceOnOddAndEmptyShapes) {
  if (!flash_available()) GTEST_SKIP() << "no AVX2+FMA";
  std::mt19937 rng(23);
  const std::vector<Problem> problems = {
      Problem({5, 5}, {9, 5}, {9, 3}),
      Problem({2, 67}, {9, 67}, {9, 5}).with_mask({2, 9}, DType::Bool),  // dot products, E tail
      Problem({13, 67}, {70, 67}, {70, 20}).with_mask({13, 70}, DType::F32).with_causal(),
      Problem({3, 1}, {17, 1}, {17, 1}).with_mask({3, 17}, DType::Bool).with_scale(2.0),
      Problem({49, 9}, {65, 9}, {65, 24}).with_causal(),
      Problem({2, 0}, {3, 0}, {3, 4}),           // E = 0: the mean of v
      Problem({2, 4}, {0, 4}, {0, 3}),           // S = 0: zeros, as PyTorch
      Problem({0, 4}, {3, 4}, {3, 3}),           // L = 0
      Problem({2, 4}, {3, 4}, {3, 0}),           // Ev = 0
      Problem({0, 2, 4}, {0, 3, 4}, {0, 3, 3}),  // no batch
  };
  for (const Problem& p : problems) expect_flash_matches_reference(p, random_inputs(p, rng));
}

// Every key masked for a row gives zeros in both kernels (PyTorch's CPU result); NaN and inf in
// q or k turn the rows whose scores they reach into NaN (an inf score minus the row max is NaN),
// except where the mask hides them.
TEST(OpsAttention, FlashMatchesReferenceOnFullyMaskedRowsAndNonFiniteInputs) {
  if (!flash_available()) GTEST_SKIP() << "no AVX2+FMA";
  std::mt19937 rng(29);
  for (DType mask_dtype : {DType::Bool, DType::F32}) {
    Problem p({1, 2, 70, 16}, {1, 2, 90, 16}, {1, 2, 90, 16});
    p.with_mask({70, 90}, mask_dtype);
    std::vector<Tensor> in = random_inputs(p, rng);
    for (int64_t i : {0, 3, 69})
      for (int64_t j = 0; j < 90; ++j) {
        if (mask_dtype == DType::Bool) in[3].data<uint8_t>()[i * 90 + j] = 0;
        else in[3].data<float>()[i * 90 + j] = -kInf;
      }
    OneNode node(kOp, p.types(), p.attrs());
    const Tensor got = test::run_kernel(*node.node, "flash", in)[0];
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t i : {0, 3, 69})
        for (int64_t c = 0; c < 16; ++c)
          EXPECT_EQ(got.data<float>()[(h * 70 + i) * 16 + c], 0.0f) << "row " << i;
    expect_flash_matches_reference(p, in);
  }
  const float extremes[] = {kNaN, kInf, -kInf};
  for (bool causal : {false, true}) {
    Problem p({1, 1, 40, 8}, {1, 1, 100, 8}, {1, 1, 100, 8});
    p.with_mask({40, 100}, DType::Bool).with_causal(causal);
    std::vector<Tensor> in = random_inputs(p, rng);
    for (int t = 0; t < 2; ++t)
      for (int n = 0; n < 6; ++n)
        in[t].data<float>()[rng() % in[t].numel()] = extremes[rng() % 3];
    expect_flash_matches_reference(p, in);
  }
}

// Long sequences: the scratch stays a few blocks per thread, far below the L x S scores.
TEST(OpsAttention, FlashScratchStaysFarBelowTheScoreMatrix) {
  if (!flash_available()) GTEST_SKIP() << "no AVX2+FMA";
  constexpr int64_t kLength = 4096, kE = 64;
  Problem p({1, 1, kLength, kE}, {1, 1, kLength, kE}, {1, 1, kLength, kE});
  p.with_causal();
  OneNode node(kOp, p.types(), p.attrs());
  const KernelSpec spec = test::spec_of(*node.node, 2);
  const std::unique_ptr<KernelInstance> kernel = test::kernel_of(kOp, "flash").create(spec);
  const size_t score_bytes = kLength * kLength * sizeof(float);
  EXPECT_LT(kernel->scratch_bytes() * 100, score_bytes) << kernel->scratch_bytes() << " bytes";

  std::mt19937 rng(31);
  const std::vector<Tensor> in = random_inputs(p, rng);
  const Tensor got = test::run_kernel(*node.node, "flash", in, 2)[0];
  // A few rows against the naive formula (the reference would take seconds here).
  const Dims d = dims_of(p);
  const std::vector<double> bound = error_bound(p, in);
  for (int64_t i : {int64_t{0}, int64_t{1}, int64_t{2047}, kLength - 1}) {
    std::vector<double> x(kLength);
    double max = -kInf;
    for (int64_t j = 0; j < kLength; ++j) max = std::max(max, x[j] = score(p, d, in, 0, 0, i, j));
    for (int64_t c = 0; c < kE; ++c) {
      double num = 0, den = 0;
      for (int64_t j = 0; j <= i; ++j) {
        num += std::exp(x[j] - max) * in[2].data<float>()[j * kE + c];
        den += std::exp(x[j] - max);
      }
      EXPECT_NEAR(got.data<float>()[i * kE + c], num / den, bound[i * kE + c]) << "row " << i;
    }
  }
}

// ---------------------------------------------------------------- heads second last

constexpr const char* kHeadsSecondLast[4] = {"q_heads_second_last", "k_heads_second_last",
                                             "v_heads_second_last", "out_heads_second_last"};

// t with dims n-3 and n-2 swapped ([..., H, S, E] <-> [..., S, H, E]), copied dense.
Tensor swap_heads(const Tensor& t) {
  std::vector<int64_t> sizes = t.sizes();
  const size_t n = sizes.size();
  int64_t outer = 1;
  for (size_t d = 0; d + 3 < n; ++d) outer *= sizes[d];
  const int64_t a = sizes[n - 3], b = sizes[n - 2];
  const size_t row = static_cast<size_t>(sizes[n - 1]) * dtype_size(t.dtype());
  std::swap(sizes[n - 3], sizes[n - 2]);
  Tensor out = Tensor::empty(t.dtype(), sizes);
  const auto* from = static_cast<const char*>(t.data());
  auto* to = static_cast<char*>(out.data());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < a; ++i)
      for (int64_t j = 0; j < b; ++j)
        std::memcpy(to + ((o * b + j) * a + i) * row, from + ((o * a + i) * b + j) * row, row);
  return out;
}

// Runs p with the operands whose bit is set in `flags` (q, k, v, out: bits 0-3) given heads
// second last, through the flash and the reference kernels: each must give bit for bit what it
// gives on the dense [..., H, S, E] operands (only addressing changes), and flash (and onednn
// where it takes the problem) must stay within the reference's error bound.
void expect_heads_second_last_matches(const Problem& p, int flags, std::mt19937& rng) {
  SCOPED_TRACE(p.name() + " flags " + std::to_string(flags));
  const std::vector<Tensor> dense = random_inputs(p, rng);
  std::vector<Tensor> in = dense;
  std::vector<TensorType> types = p.types();
  AttrMap attrs = p.attrs();
  for (int i = 0; i < 4; ++i) {
    if (!((flags >> i) & 1)) continue;
    attrs[kHeadsSecondLast[i]] = true;
    if (i == 3) continue;
    in[i] = swap_heads(dense[i]);
    types[i] = type_of(DType::F32, in[i].sizes());
  }
  OneNode dense_node(kOp, p.types(), p.attrs()), node(kOp, types, attrs);
  auto dense_result = [&](const Tensor& out) {
    return (flags >> 3) & 1 ? swap_heads(out) : out;
  };
  const Tensor reference = test::run_kernel(*dense_node.node, "reference", dense)[0];
  const Tensor got_reference = dense_result(test::run_kernel(*node.node, "reference", in)[0]);
  EXPECT_TRUE(test::same_values(got_reference, reference)) << "reference kernel";
  if (!flash_available()) return;
  const Tensor flash = test::run_kernel(*dense_node.node, "flash", dense)[0];
  const Tensor strided = test::run_kernel(*node.node, "flash", in)[0];
  expect_avx512_tiles_give_the_same_bits(*node.node, in, strided);
  const Tensor got = dense_result(strided);
  EXPECT_TRUE(test::same_values(got, flash)) << "flash kernel";
  const std::vector<double> bound = error_bound(p, dense);
  expect_within_bound(got, reference, bound, "flash");
  if (takes(*node.node, "onednn"))
    expect_within_bound(dense_result(test::run_kernel(*node.node, "onednn", in, 2)[0]), reference,
                        bound, "onednn");
}

TEST(OpsAttention, InfersShapesWithHeadsSecondLast) {
  Graph g;
  Dim batch = g.add_symbol("B", 1, 8);
  Dim l = g.add_symbol("L", 1, 4096);
  Dim s = g.add_symbol("S", 1, 4096);
  Value* q = g.add_input("q", TensorType{DType::F32, {batch, l, Dim(12), Dim(64)}});
  Value* k = g.add_input("k", TensorType{DType::F32, {batch, s, Dim(12), Dim(64)}});
  Value* v = g.add_input("v", TensorType{DType::F32, {batch, Dim(12), s, Dim(32)}});
  AttrMap attrs = {{kHeadsSecondLast[0], true}, {kHeadsSecondLast[1], true}};
  Value* y = g.add(kOp, {q, k, v}, attrs);
  EXPECT_EQ(y->type(), (TensorType{DType::F32, {batch, Dim(12), l, Dim(32)}}));
  attrs[kHeadsSecondLast[3]] = true;
  Value* z = g.add(kOp, {q, k, v}, attrs);
  EXPECT_EQ(z->type(), (TensorType{DType::F32, {batch, l, Dim(12), Dim(32)}}));
  // Rank 3: [L, H, E] is a batch of H matrices; k and v of one head serve them all.
  Value* q3 = g.add_input("q3", type_of(DType::F32, {5, 3, 4}));
  Value* kv = g.add_input("kv", type_of(DType::F32, {1, 7, 4}));
  EXPECT_EQ(g.add(kOp, {q3, kv, kv}, {{kHeadsSecondLast[0], true}, {kHeadsSecondLast[3], true}})
                ->type(),
            type_of(DType::F32, {5, 3, 4}));
  g.set_outputs({y, z});
  EXPECT_NO_THROW(verify(g));

  Value* q2 = g.add_input("q2", type_of(DType::F32, {5, 4}));
  Value* kv2 = g.add_input("kv2", type_of(DType::F32, {7, 4}));
  for (int i : {0, 1, 2, 3}) {
    std::string message;
    auto add = [&] { g.add(kOp, {q2, kv2, kv2}, {{kHeadsSecondLast[i], true}}); };
    EXPECT_EQ(test::error_code_of(add, &message), ErrorCode::ShapeInference);
    EXPECT_NE(message.find(std::string(kHeadsSecondLast[i]) + " needs an"), std::string::npos)
        << message;
  }
}

// L in {1, 17, 130}, S in {1, 3, 17, 130}, E 64 or 13 (Ev 64, 13 or 20), every combination of
// the four flags, causal or not, no mask or a bool or additive one (broadcast or full), k and v
// shared by the heads every third problem, and rank-3 operands.
TEST(OpsAttention, HeadsSecondLastMatchesDenseOperands) {
  std::mt19937 rng(41);
  int index = 0;
  for (int64_t l : {1, 17, 130})
    for (int64_t s : {1, 3, 17, 130})
      for (int64_t e : {64, 13})
        for (bool causal : {false, true}) {
          const int64_t ev = std::array<int64_t, 3>{e, 20, 13}[index % 3];
          const int64_t kv_heads = index % 3 == 0 ? 1 : 3;
          Problem p({2, 3, l, e}, {2, kv_heads, s, e}, {2, kv_heads, s, ev});
          p.with_causal(causal).with_scale(index % 2 ? 0.3 : 0.0);
          if (index % 3 != 2) {
            const std::vector<int64_t> mask_shapes[] = {{l, s}, {2, 3, l, s}, {2, 1, 1, s}};
            p.with_mask(mask_shapes[index % 3], index % 4 < 2 ? DType::Bool : DType::F32);
          }
          expect_heads_second_last_matches(p, index % 16, rng);
          ++index;
        }
  for (int flags : {1, 2, 4, 8, 15}) {
    Problem p({4, 17, 13}, {1, 3, 13}, {4, 3, 20});
    p.with_mask({17, 3}, DType::Bool).with_causal(flags % 2 == 1);
    expect_heads_second_last_matches(p, flags, rng);
  }
}

// ---------------------------------------------------------------- grouped-query attention

// t [..., H, S, E] with each head repeated `group` times in place: torch.repeat_interleave on
// dim -3, what enable_gqa reads k and v as.
Tensor repeat_heads(const Tensor& t, int64_t group) {
  std::vector<int64_t> sizes = t.sizes();
  const size_t n = sizes.size();
  const size_t matrix = static_cast<size_t>(sizes[n - 2] * sizes[n - 1]) * dtype_size(t.dtype());
  const int64_t matrices = t.numel() / (sizes[n - 2] * sizes[n - 1]);
  sizes[n - 3] *= group;
  Tensor out = Tensor::empty(t.dtype(), sizes);
  for (int64_t m = 0; m < matrices; ++m)
    for (int64_t r = 0; r < group; ++r)
      std::memcpy(static_cast<char*>(out.data()) + (m * group + r) * matrix,
                  static_cast<const char*>(t.data()) + m * matrix, matrix);
  return out;
}

TEST(OpsAttention, InfersShapesWithGroupedQueryAttention) {
  Graph g;
  Dim batch = g.add_symbol("B", 1, 8);
  Dim l = g.add_symbol("L", 1, 4096);
  Value* q = g.add_input("q", TensorType{DType::F32, {batch, Dim(8), l, Dim(64)}});
  Value* k = g.add_input("k", TensorType{DType::F32, {batch, Dim(2), l, Dim(64)}});
  Value* v = g.add_input("v", TensorType{DType::F32, {batch, Dim(2), l, Dim(32)}});
  Value* y = g.add(kOp, {q, k, v}, {{"enable_gqa", true}, {"is_causal", true}});
  EXPECT_EQ(y->type(), (TensorType{DType::F32, {batch, Dim(8), l, Dim(32)}}));
  // Heads second last: [B, L, H, E].
  Value* kt = g.add_input("kt", TensorType{DType::F32, {batch, l, Dim(2), Dim(64)}});
  EXPECT_EQ(g.add(kOp, {q, kt, v}, {{"enable_gqa", true}, {kHeadsSecondLast[1], true}})->type(),
            (TensorType{DType::F32, {batch, Dim(8), l, Dim(32)}}));
  g.set_outputs({y});
  EXPECT_NO_THROW(verify(g));

  auto fails_with = [&](const std::vector<Value*>& in, const std::string& text) {
    std::string message;
    EXPECT_EQ(test::error_code_of([&] { g.add(kOp, in, {{"enable_gqa", true}}); }, &message),
              ErrorCode::ShapeInference);
    EXPECT_NE(message.find(text), std::string::npos) << message;
  };
  Value* k3 = g.add_input("k3", TensorType{DType::F32, {batch, Dim(3), l, Dim(64)}});
  Value* v3 = g.add_input("v3", TensorType{DType::F32, {batch, Dim(3), l, Dim(32)}});
  fails_with({q, k3, v3}, "q's ([8]) a multiple of k's and v's ([3])");
  fails_with({q, k, v3}, "k's and v's head dims (-3) differ: 2 vs 3");
  Dim h = g.add_symbol("H", 1, 16);
  Value* kh = g.add_input("kh", TensorType{DType::F32, {batch, h, l, Dim(64)}});
  Value* vh = g.add_input("vh", TensorType{DType::F32, {batch, h, l, Dim(32)}});
  fails_with({q, kh, vh}, "enable_gqa needs static head counts");
  Value* q2 = g.add_input("q2", type_of(DType::F32, {5, 4}));
  Value* kv2 = g.add_input("kv2", type_of(DType::F32, {7, 4}));
  fails_with({q2, kv2, kv2}, "enable_gqa needs q, k and v of rank >= 3");
}

// Every kernel gives, bit for bit, what it gives on k and v with their heads repeated: only
// addressing changes. Groups of 1 to 8 query heads, several batches (k and v broadcast over
// one of them), causal, masks, heads second last, decoding rows and several key blocks.
TEST(OpsAttention, GroupedQueryAttentionReadsEachGroupsHead) {
  std::vector<std::string> kernels = {"reference"};
  for (const char* kernel : {"flash", "flash_avx512"})
    if (available(kernel)) kernels.push_back(kernel);
  std::mt19937 rng(47);
  int index = 0;
  for (auto [hq, hkv] : {std::pair<int64_t, int64_t>{8, 2}, {6, 3}, {4, 1}, {5, 5}, {8, 1}})
    for (int64_t l : {1, 17, 130})
      for (bool causal : {false, true}) {
        const int64_t s = l == 1 ? 70 : l, kv_batch = index % 3 == 0 ? 1 : 2;
        Problem p({2, hq, l, 16}, {kv_batch, hkv, s, 16}, {kv_batch, hkv, s, 24});
        p.with_causal(causal).with_scale(index % 2 ? 0.3 : 0.0);
        if (index % 3 == 1) p.with_mask({2, 1, l, s}, index % 2 ? DType::Bool : DType::F32);
        SCOPED_TRACE(p.name());
        std::vector<Tensor> grouped = random_inputs(p, rng);
        std::vector<Tensor> repeated = grouped;
        std::vector<TensorType> repeated_types = p.types();
        for (int i : {1, 2}) {
          repeated[i] = repeat_heads(grouped[i], hq / hkv);
          repeated_types[i] = type_of(DType::F32, repeated[i].sizes());
        }
        AttrMap attrs = p.attrs();
        std::vector<TensorType> grouped_types = p.types();
        // k heads second last every other problem, the output every third.
        if (index % 2) {
          attrs[kHeadsSecondLast[1]] = true;
          grouped[1] = swap_heads(grouped[1]);
          grouped_types[1] = type_of(DType::F32, grouped[1].sizes());
          repeated[1] = swap_heads(repeated[1]);
          repeated_types[1] = type_of(DType::F32, repeated[1].sizes());
        }
        if (index % 3 == 2) attrs[kHeadsSecondLast[3]] = true;
        OneNode repeated_node(kOp, repeated_types, attrs);
        attrs["enable_gqa"] = true;
        OneNode grouped_node(kOp, grouped_types, attrs);
        for (const std::string& kernel : kernels) {
          SCOPED_TRACE(kernel);
          const Tensor got = test::run_kernel(*grouped_node.node, kernel, grouped, 2)[0];
          EXPECT_TRUE(test::same_values(
              got, test::run_kernel(*repeated_node.node, kernel, repeated)[0]));
        }
        ++index;
      }
}

// ---------------------------------------------------------------- bf16

// A bf16 attention node (uncast, as fold_bf16_casts_into_widening_kernels makes it) on q, k and v
// rounded to bf16, and the f32 node on the same values widened back.
struct Bf16Problem {
  std::vector<Tensor> wide, narrow;
  Graph graph;
  const Node* node = nullptr;
  OneNode f32_node;

  static std::vector<TensorType> types_of(const std::vector<Tensor>& tensors) {
    std::vector<TensorType> types;
    for (const Tensor& t : tensors) types.push_back(type_of(t.dtype(), t.sizes()));
    return types;
  }
  static std::vector<Tensor> rounded(std::vector<Tensor> wide) {
    for (size_t i = 0; i < 3; ++i)
      for (int64_t j = 0; j < wide[i].numel(); ++j)
        wide[i].data<float>()[j] = cpu::to_float(cpu::to_bfloat16(wide[i].data<float>()[j]));
    return wide;
  }
  Bf16Problem(std::vector<Tensor> f32_inputs, const AttrMap& attrs)
      : wide(rounded(std::move(f32_inputs))),
        narrow(wide),
        f32_node(kOp, types_of(wide), attrs) {
    for (size_t i = 0; i < 3; ++i) {
      narrow[i] = Tensor::empty(DType::BF16, wide[i].sizes());
      for (int64_t j = 0; j < wide[i].numel(); ++j)
        narrow[i].data<cpu::BFloat16>()[j] = cpu::to_bfloat16(wide[i].data<float>()[j]);
    }
    std::vector<Value*> inputs;
    const std::vector<TensorType> types = types_of(narrow);
    for (size_t i = 0; i < types.size(); ++i)
      inputs.push_back(graph.add_input("in" + std::to_string(i), types[i]));
    // Uncast, as the pass adds it (the builder would put the casts around it).
    node = graph.add_uncast(kOp, inputs, attrs)->producer();
  }
};

// bf16 attention (what fold_bf16_casts_into_widening_kernels makes) is each kernel's f32 result
// on the widened q, k and v rounded to bf16: the bits of the casts it replaces, NaNs included;
// its additive mask is f32. Decoding rows, several key blocks, odd E and Ev, causal, bool and
// additive masks, heads second last.
TEST(OpsAttention, Bf16IsTheF32OneBetweenCasts) {
  std::mt19937 rng(43);
  std::vector<std::string> kernels = {"reference"};
  for (const char* kernel : {"flash", "flash_avx512"})
    if (available(kernel)) kernels.push_back(kernel);
  int index = 0;
  for (int64_t l : {1, 2, 17, 197})
    for (int64_t s : {1, 70, 197})
      for (int64_t e : {64, 13})
        for (bool causal : {false, true}) {
          const int64_t ev = std::array<int64_t, 3>{e, 20, 13}[index % 3];
          Problem p({2, 3, l, e}, {2, 3, s, e}, {2, 3, s, ev});
          p.with_causal(causal).with_scale(index % 2 ? 0.3 : 0.0);
          if (index % 3 != 2) {
            const std::vector<int64_t> mask_shapes[] = {{l, s}, {2, 1, 1, s}};
            p.with_mask(mask_shapes[index % 3], index % 4 < 2 ? DType::Bool : DType::F32);
          }
          // Heads second last for q and the output every other problem, as in a transformer.
          const bool heads_second_last = index % 2 == 1;
          SCOPED_TRACE(p.name() + (heads_second_last ? " heads second last" : ""));
          std::vector<Tensor> wide = random_inputs(p, rng);
          for (int i = 0; i < 3; ++i) {
            if (index % 5 == 0) test::sprinkle_extremes(wide[i], rng);
            if (heads_second_last && i == 0) wide[i] = swap_heads(wide[i]);
          }
          AttrMap attrs = p.attrs();
          if (heads_second_last) attrs[kHeadsSecondLast[0]] = attrs[kHeadsSecondLast[3]] = true;
          const Bf16Problem b(std::move(wide), attrs);
          for (const std::string& kernel : kernels) {
            SCOPED_TRACE(kernel);
            const Tensor got = test::run_kernel(*b.node, kernel, b.narrow, 2)[0];
            const Tensor f32 = test::run_kernel(*b.f32_node.node, kernel, b.wide)[0];
            ASSERT_EQ(got.sizes(), f32.sizes());
            ASSERT_TRUE(test::is_rounded_to_bf16(got, f32));
          }
          ++index;
        }
  // The additive mask of bf16 attention is f32 (the widened mask), not bf16.
  Graph g;
  Value* q = g.add_input("q", type_of(DType::BF16, {2, 4}));
  Value* m = g.add_input("m", type_of(DType::BF16, {2, 3}));
  std::string message;
  auto add = [&] { g.add_uncast(kOp, {q, g.add_input("k", type_of(DType::BF16, {3, 4})),
                                      g.add_input("v", type_of(DType::BF16, {3, 4})), m}, {}); };
  EXPECT_EQ(test::error_code_of(add, &message), ErrorCode::ShapeInference);
  EXPECT_NE(message.find("attn_mask must be bool (true = attend) or f32"), std::string::npos)
      << message;
}

bool bf16_kernel_available(const char* kernel) {
  Graph g;
  std::vector<Value*> inputs;
  for (const char* name : {"q", "k", "v"})  // 16 query rows: flash_amx's least
    inputs.push_back(g.add_input(name, type_of(DType::BF16, {inputs.empty() ? 16 : 3, 4})));
  return takes(*g.add_uncast(kOp, inputs, {})->producer(), kernel);
}
bool onednn_bf16_available() { return bf16_kernel_available("onednn"); }

// The kernels that multiply in bf16 and round P to bf16 before P v, where this CPU runs them:
// flash_amx (AMX tiles, online softmax) and onednn (oneDNN's bf16 matmul).
std::vector<const char*> bf16_product_kernels() {
  std::vector<const char*> kernels;
  for (const char* kernel : {"flash_amx", "onednn"})
    if (bf16_kernel_available(kernel)) kernels.push_back(kernel);
  return kernels;
}

// `kernel`'s bf16 result on b against the f32 result on the same widened values, within the
// bound of P's rounding (below): 2^-8 (max |v| + |out|) per element; NaN where it is NaN.
void expect_within_p_rounding(const Bf16Problem& b, const char* kernel, const Tensor& f32) {
  SCOPED_TRACE(kernel);
  ASSERT_TRUE(takes(*b.node, kernel));
  const Tensor got = test::run_kernel(*b.node, kernel, b.narrow, 2)[0];
  ASSERT_EQ(got.sizes(), f32.sizes());
  float max_v = 0;
  for (int64_t j = 0; j < b.wide[2].numel(); ++j)
    max_v = std::max(max_v, std::fabs(b.wide[2].data<float>()[j]));
  int failures = 0;
  for (int64_t j = 0; j < got.numel() && failures < 10; ++j) {
    const float g = cpu::to_float(got.data<cpu::BFloat16>()[j]);
    const float want = f32.data<float>()[j];
    const bool ok = std::isnan(want)
                        ? std::isnan(g)
                        : std::fabs(g - want) <= std::ldexp(max_v + std::fabs(want), -8);
    if (!ok) ++failures;
    EXPECT_TRUE(ok) << "element " << j << ": " << g << " vs " << want;
  }
}

// flash_amx and onednn on bf16 (bf16 products, P rounded to bf16 before P v) against the f32
// kernel on the same widened values: within 2^-8 (max |v| + |out|) per output element, the bound
// docs/ops.md gives (P's rounding moves an output by at most 2^-8 max |v - out|, the result's own
// rounding by a bf16 half ULP); NaN where it is NaN; zeros for rows attending no key. Decoding
// rows, L != S, odd E and Ev, causal (onednn in blocks of 128 query rows; flash_amx's tasks of
// 32 rows across several key blocks), bool and additive masks (broadcast, -inf, rows all masked),
// scales, heads second last, rank 3, a NaN in q or k, chunks of heads.
TEST(OpsAttention, Bf16ProductKernelsMatchTheF32KernelWithinPsRounding) {
  const std::vector<const char*> kernels = bf16_product_kernels();
  if (kernels.empty()) GTEST_SKIP() << "no bf16 products here (AMX or oneDNN's bf16 matmul)";
  std::mt19937 rng(47);
  int index = 0;
  for (int64_t l : {1, 17, 197})
    for (int64_t s : {1, 70, 197, 600})
      for (int64_t e : {64, 13})
        for (bool causal : {false, true}) {
          const int64_t ev = std::array<int64_t, 3>{e, 20, 13}[index % 3];
          const int64_t heads = index % 4 == 3 ? 0 : 3;  // 0: rank 3
          auto sizes = [&](int64_t rows, int64_t cols) {
            return heads ? std::vector<int64_t>{2, heads, rows, cols}
                         : std::vector<int64_t>{5, rows, cols};
          };
          Problem p(sizes(l, e), sizes(s, e), sizes(s, ev));
          p.with_causal(causal).with_scale(index % 2 ? 0.3 : 0.0);
          if (index % 3 != 2) {
            const std::vector<int64_t> mask_shapes[] = {
                {l, s}, heads ? std::vector<int64_t>{2, 1, 1, s} : std::vector<int64_t>{5, 1, s}};
            p.with_mask(mask_shapes[index % 3], index % 4 < 2 ? DType::Bool : DType::F32);
          }
          const bool heads_second_last = heads && index % 2 == 1;
          SCOPED_TRACE(p.name() + (heads_second_last ? " heads second last" : ""));
          std::vector<Tensor> wide = random_inputs(p, rng);
          if (p.mask && index % 5 == 0) {  // a query row attending no key
            Tensor& m = wide[3];
            const int64_t cols = m.sizes().back();
            for (int64_t j = 0; j < cols; ++j) {
              if (m.dtype() == DType::Bool) m.data<uint8_t>()[j] = 0;
              else m.data<float>()[j] = -kInf;
            }
          }
          if (index % 7 == 0) wide[0].data<float>()[wide[0].numel() / 2] = kNaN;
          if (index % 7 == 3) wide[1].data<float>()[wide[1].numel() - 1] = kNaN;  // one key's
          AttrMap attrs = p.attrs();
          if (heads_second_last) {
            for (int i = 0; i < 3; ++i) wide[i] = swap_heads(wide[i]);
            for (const char* attr : kHeadsSecondLast) attrs[attr] = true;
          }
          const Bf16Problem b(std::move(wide), attrs);
          const Tensor f32 = test::run_kernel(*b.f32_node.node, "reference", b.wide)[0];
          for (const char* kernel : kernels)
            if (takes(*b.node, kernel)) expect_within_p_rounding(b, kernel, f32);
          ++index;
        }
  // Chunks of heads: 12 heads of 1024 x 1024 scores hold more than one chunk's 16 MiB; causal,
  // 8 blocks of rows, L < S and L > S; and one head's 1800 x 1700 scores, 18 MiB in bf16, in two
  // blocks of 900 rows.
  for (const auto& [heads, l, s, causal] :
       {std::tuple{12, 1024, 1024, false}, {12, 1024, 1024, true}, {12, 300, 500, true},
        {12, 500, 300, true}, {2, 1800, 1700, false}}) {
    Problem p({1, heads, l, 64}, {1, heads, s, 64}, {1, heads, s, 64});
    p.with_causal(causal);
    SCOPED_TRACE(p.name());
    const Bf16Problem b(random_inputs(p, rng), p.attrs());
    const Tensor f32 = test::run_kernel(*b.f32_node.node, "reference", b.wide)[0];
    for (const char* kernel : kernels) expect_within_p_rounding(b, kernel, f32);
  }
}

// flash_amx's tiles and blocks at their edges, against the f32 kernel within P's rounding: E and
// Ev within and across tiles (1, 13, 40, 80, 96, 128, 256), query tasks of 32 rows with tails
// (16, 33, 100), keys in blocks of 256 with tails (31, 257, 600), causal with L < S and L > S
// (its tasks alternate from both ends of the rows), a bool mask on several key blocks, scores
// large enough that a later key block raises a row's maximum many times over (the rescaling of
// the rows accumulated so far), grouped heads sharing one packed k and v. And what it declines.
TEST(OpsAttention, FlashAmxMatchesTheF32KernelAcrossTilesAndKeyBlocks) {
  if (!bf16_kernel_available("flash_amx")) {
    // Where it can't run, it says why (and the op falls to onednn or flash).
    const std::string why = cpu::amx_bf16_unavailable_reason();
    EXPECT_FALSE(why.empty());
    GTEST_SKIP() << "flash_amx declines here: " << why;
  }
  std::mt19937 rng(61);
  struct Case {
    int64_t heads, kv_heads, l, s, e, ev;
    bool causal, mask;
    float q_scale;  // q's range: wide ranges move the row maximum from block to block
  };
  const Case cases[] = {
      {3, 3, 16, 31, 40, 1, false, false, 1},    {2, 2, 33, 257, 96, 80, false, true, 1},
      {2, 2, 100, 600, 128, 128, true, false, 8}, {2, 2, 600, 100, 13, 17, true, true, 1},
      {4, 2, 64, 600, 256, 40, false, false, 8},  {4, 1, 47, 520, 80, 96, true, false, 4},
  };
  for (const Case& c : cases) {
    Problem p({1, c.heads, c.l, c.e}, {1, c.kv_heads, c.s, c.e}, {1, c.kv_heads, c.s, c.ev});
    p.with_causal(c.causal);
    if (c.mask) p.with_mask({c.l, c.s}, DType::Bool);
    SCOPED_TRACE(p.name());
    std::vector<Tensor> in = random_inputs(p, rng);
    for (int64_t j = 0; j < in[0].numel(); ++j) in[0].data<float>()[j] *= c.q_scale;
    AttrMap attrs = p.attrs();
    if (c.heads != c.kv_heads) {
      attrs["enable_gqa"] = true;
      for (int i : {1, 2}) in[i] = repeat_heads(in[i], c.heads / c.kv_heads);
      p.k[1] = p.v[1] = c.heads;
      const Bf16Problem repeated(in, p.attrs());
      const Tensor f32 = test::run_kernel(*repeated.f32_node.node, "reference", repeated.wide)[0];
      for (int i : {1, 2}) {  // back to the grouped heads: every group's first head
        std::vector<int64_t> sizes = in[i].sizes();
        sizes[1] = c.kv_heads;
        Tensor grouped = Tensor::empty(DType::F32, sizes);
        const int64_t matrix = sizes[2] * sizes[3], group = c.heads / c.kv_heads;
        for (int64_t h = 0; h < c.kv_heads; ++h)
          std::copy_n(in[i].data<float>() + h * group * matrix, matrix,
                      grouped.data<float>() + h * matrix);
        in[i] = grouped;
      }
      expect_within_p_rounding(Bf16Problem(in, attrs), "flash_amx", f32);
    } else {
      const Bf16Problem b(in, attrs);
      expect_within_p_rounding(b, "flash_amx",
                               test::run_kernel(*b.f32_node.node, "reference", b.wide)[0]);
    }
  }
  auto reason = [](const Problem& p, DType dtype) {
    Graph g;
    std::vector<Value*> inputs;
    for (TensorType t : p.types()) {
      t.dtype = dtype;
      inputs.push_back(g.add_input("in" + std::to_string(inputs.size()), t));
    }
    return test::unsupported_reason(*g.add_uncast(kOp, inputs, p.attrs())->producer(),
                                    "flash_amx");
  };
  const Problem rows16({1, 2, 16, 64}, {1, 2, 100, 64}, {1, 2, 100, 64});
  EXPECT_EQ(reason(rows16, DType::BF16), "");
  EXPECT_EQ(reason(rows16, DType::F32), "takes bf16 q, k and v");
  EXPECT_EQ(reason(Problem({1, 2, 15, 64}, {1, 2, 100, 64}, {1, 2, 100, 64}), DType::BF16),
            "fewer than 16 query rows: packing each head's k and v for AMX costs more than "
            "onednn's products");
  EXPECT_EQ(reason(Problem({1, 2, 16, 64}, {1, 2, 0, 64}, {1, 2, 0, 64}), DType::BF16),
            "an empty attention (a zero dim)");
}

// What onednn declines, and why: f64, f32 where flash is faster, and a head whose scores alone
// exceed the chunk (the flash kernel takes those). Grouped-query attention it takes.
TEST(OpsAttention, OnednnDeclinesWithReasons) {
  if (!onednn_bf16_available()) GTEST_SKIP() << "no oneDNN bf16 matmul here";
  auto reason = [](const Problem& p, AttrMap attrs, DType dtype) {
    Graph g;
    std::vector<Value*> inputs;
    for (TensorType t : p.types()) {
      if (inputs.size() < 3) t.dtype = dtype;
      inputs.push_back(g.add_input("in" + std::to_string(inputs.size()), t));
    }
    return test::unsupported_reason(*g.add_uncast(kOp, inputs, attrs)->producer(), "onednn");
  };
  Problem gqa({1, 8, 16, 64}, {1, 2, 16, 64}, {1, 2, 16, 64});
  AttrMap gqa_attrs = gqa.attrs();
  gqa_attrs["enable_gqa"] = true;
  EXPECT_EQ(reason(gqa, gqa_attrs, DType::BF16), "");
  Problem small({1, 2, 16, 64}, {1, 2, 16, 64}, {1, 2, 16, 64});
  EXPECT_EQ(reason(small, small.attrs(), DType::BF16), "");
  EXPECT_EQ(reason(small, small.attrs(), DType::F32),
            "f32 with L or S below 512: the flash kernel's tiles are faster there");
  EXPECT_EQ(reason(small, small.attrs(), DType::F64), "takes f32 or bf16 q, k and v");
  // Long heads go in blocks of query rows; only a row whose scores alone exceed 16 MiB (6 bytes
  // a score in bf16, S and P; 4 in f32, P overwriting S) is declined.
  Problem long_rows({1, 1, 4096, 64}, {1, 1, 4096, 64}, {1, 1, 4096, 64});
  EXPECT_EQ(reason(long_rows, long_rows.attrs(), DType::BF16), "");
  EXPECT_EQ(reason(long_rows, long_rows.attrs(), DType::F32), "");
  long_rows.with_causal();
  EXPECT_EQ(reason(long_rows, long_rows.attrs(), DType::BF16), "");
  EXPECT_EQ(reason(long_rows, long_rows.attrs(), DType::F32),
            "f32 causal attention: the flash kernel, which skips the masked blocks, is faster");
  Problem row_too_long({1, 1, 1, 8}, {1, 1, 2796203, 8}, {1, 1, 2796203, 8});
  EXPECT_EQ(reason(row_too_long, row_too_long.attrs(), DType::BF16),
            "one query row's 2796203 scores exceed 16 MiB: the flash kernel keeps memory bounded");
  EXPECT_EQ(reason(row_too_long, row_too_long.attrs(), DType::F32), "f32 with L or S below 512: "
            "the flash kernel's tiles are faster there");
}

// onednn on f32 (which it takes from L = S = 512 on, non-causal) against the reference within
// the op's bound: bool and additive masks (a row attending no key), NaN in q or in one key,
// odd E and Ev, L != S, rank 3, a set scale, blocks of query rows, and heads second last (which
// must also match the reference on dense operands within the bound).
TEST(OpsAttention, OnednnF32MatchesReferenceOnLongRows) {
  std::mt19937 rng(53);
  {
    Problem probe({1, 1, 512, 8}, {1, 1, 512, 8}, {1, 1, 512, 8});
    if (!takes(*OneNode(kOp, probe.types(), probe.attrs()).node, "onednn"))
      GTEST_SKIP() << "no onednn attention here";
  }
  const std::vector<Problem> problems = {
      Problem({1, 2, 520, 64}, {1, 2, 600, 64}, {1, 2, 600, 64}),
      Problem({2, 530, 13}, {2, 512, 13}, {2, 512, 20}).with_scale(0.3),
      Problem({1, 3, 512, 17}, {1, 3, 700, 17}, {1, 3, 700, 1})
          .with_mask({512, 700}, DType::Bool),
      Problem({1, 2, 600, 32}, {1, 2, 520, 32}, {1, 2, 520, 32})
          .with_mask({1, 2, 600, 520}, DType::F32),
      Problem({1, 2, 512, 64}, {1, 2, 512, 64}, {1, 2, 512, 64}).with_mask({1, 512}, DType::F32),
      // One head's 2100 x 2100 scores exceed 16 MiB: two blocks of 1050 query rows.
      Problem({1, 1, 2100, 8}, {1, 1, 2100, 8}, {1, 1, 2100, 8})
          .with_mask({2100, 2100}, DType::Bool),
  };
  int index = 0;
  for (const Problem& p : problems) {
    std::vector<Tensor> in = random_inputs(p, rng);
    if (p.mask) {  // row 3 attends no key
      Tensor& m = in[3];
      const int64_t cols = m.sizes().back(), rows = m.numel() / cols;
      for (int64_t j = 0; j < cols && rows > 3; ++j) {
        if (m.dtype() == DType::Bool) m.data<uint8_t>()[3 * cols + j] = 0;
        else m.data<float>()[3 * cols + j] = -kInf;
      }
    }
    if (index == 0) in[0].data<float>()[in[0].numel() / 3] = kNaN;
    if (index == 1) in[1].data<float>()[in[1].numel() - 5] = kNaN;  // one key's
    expect_flash_matches_reference(p, in);
    ++index;
  }
  for (int flags : {7, 15}) {
    Problem p({1, 3, 512, 16}, {1, 3, 530, 16}, {1, 3, 530, 24});
    expect_heads_second_last_matches(p, flags, rng);
  }
}

// onednn on grouped-query attention, k and v read per group of query heads, against the
// reference on k and v with their heads repeated: f32 (long rows) within the op's bound, bf16
// (and flash_amx where it takes the node) within P's rounding (as
// Bf16ProductKernelsMatchTheF32KernelWithinPsRounding). Groups of 2 to 4 and
// all heads sharing one (4 / 1), k broadcast over the batch, k heads second last (and q, v and
// the output too: each copied dense for oneDNN), causal, masks, decoding rows, and bf16 chunks of
// heads inside a group (one head's scores a chunk).
TEST(OpsAttention, OnednnGroupedQueryAttentionMatchesRepeatedHeads) {
  // bf16 needs oneDNN's native bf16 products, f32 only the kernel (AVX-512): each runs its cases.
  const bool bf16_here = onednn_bf16_available();
  Problem probe({1, 1, 512, 8}, {1, 1, 512, 8}, {1, 1, 512, 8});
  const bool f32_here = takes(*OneNode(kOp, probe.types(), probe.attrs()).node, "onednn");
  if (!bf16_here && !f32_here) GTEST_SKIP() << "no onednn attention here";
  std::mt19937 rng(59);
  enum HeadsSecondLast { kNone, kK, kAll };
  struct Case {
    int64_t hq, hkv, l, s, e;
    bool causal;
    HeadsSecondLast heads_second_last;
    bool bf16;
  };
  const Case cases[] = {
      {8, 2, 520, 512, 16, false, kNone, false}, {6, 3, 512, 530, 8, false, kK, false},
      {4, 1, 512, 512, 8, false, kNone, false},  {8, 2, 512, 600, 8, false, kAll, false},
      {8, 2, 17, 70, 16, false, kNone, true},    {6, 3, 197, 197, 13, true, kK, true},
      {4, 1, 1, 130, 16, false, kNone, true},    {8, 4, 130, 130, 16, true, kAll, true},
      {6, 2, 1, 70, 16, false, kAll, true},      {4, 2, 1200, 1200, 8, false, kK, true},
  };
  int index = 0;
  for (const Case& c : cases) {
    if (!(c.bf16 ? bf16_here : f32_here)) {
      ++index;
      continue;
    }
    const int64_t kv_batch = index % 3 == 0 ? 1 : 2, group = c.hq / c.hkv;
    Problem p({2, c.hq, c.l, c.e}, {kv_batch, c.hkv, c.s, c.e}, {kv_batch, c.hkv, c.s, 24});
    p.with_causal(c.causal).with_scale(index % 2 ? 0.3 : 0.0);
    if (index % 2 == 1) p.with_mask({2, 1, c.l, c.s}, index % 4 == 1 ? DType::Bool : DType::F32);
    const char* const layouts[] = {"", " k heads second last", " heads second last"};
    SCOPED_TRACE(p.name() + (c.bf16 ? " bf16" : " f32") + layouts[c.heads_second_last]);
    std::vector<Tensor> grouped = random_inputs(p, rng);
    if (c.bf16) grouped = Bf16Problem::rounded(std::move(grouped));
    std::vector<Tensor> repeated = grouped;
    Problem repeated_problem = p;
    repeated_problem.k[1] = repeated_problem.v[1] = c.hq;
    for (int i : {1, 2}) repeated[i] = repeat_heads(grouped[i], group);
    AttrMap attrs = p.attrs();
    std::vector<double> bound = error_bound(repeated_problem, repeated);  // [B, H, L, Ev]
    if (c.heads_second_last == kAll) {  // q and the output, the same for the reference
      grouped[0] = repeated[0] = swap_heads(grouped[0]);
      attrs[kHeadsSecondLast[0]] = attrs[kHeadsSecondLast[3]] = true;
      const int64_t ev = p.v.back();
      std::vector<double> swapped(bound.size());
      for (size_t j = 0; j < bound.size(); ++j) {  // [B, L, H, Ev] from [B, H, L, Ev]
        const int64_t col = j % ev, h = j / ev % c.hq, row = j / ev / c.hq % c.l,
                      b = j / ev / c.hq / c.l;
        swapped[j] = bound[static_cast<size_t>(((b * c.hq + h) * c.l + row) * ev + col)];
      }
      bound = std::move(swapped);
    }
    std::vector<TensorType> repeated_types;
    for (const Tensor& t : repeated) repeated_types.push_back(type_of(t.dtype(), t.sizes()));
    repeated_types.back() = repeated_problem.types().back();  // the mask's dtype
    const Tensor expected =
        test::run_kernel(*OneNode(kOp, repeated_types, attrs).node, "reference", repeated)[0];
    for (int i : {1, 2})
      if (c.heads_second_last == kAll || (c.heads_second_last == kK && i == 1)) {
        attrs[kHeadsSecondLast[i]] = true;
        grouped[i] = swap_heads(grouped[i]);
      }
    attrs["enable_gqa"] = true;
    Tensor got;
    if (c.bf16) {
      const Bf16Problem b(grouped, attrs);
      ASSERT_TRUE(takes(*b.node, "onednn"));
      for (const char* kernel : bf16_product_kernels())
        if (takes(*b.node, kernel)) expect_within_p_rounding(b, kernel, expected);
    } else {
      std::vector<TensorType> grouped_types;
      for (const Tensor& t : grouped) grouped_types.push_back(type_of(t.dtype(), t.sizes()));
      const OneNode node(kOp, grouped_types, attrs);
      ASSERT_TRUE(takes(*node.node, "onednn"));
      expect_within_bound(test::run_kernel(*node.node, "onednn", grouped, 2)[0], expected, bound,
                          "onednn");
    }
    ++index;
  }
}

// ---------------------------------------------------------------- through the executor

TEST(OpsAttention, RunsThroughTheExecutor) {
  Graph g;
  Dim l = g.add_symbol("L", 1, 256);
  Value* q = g.add_input("q", TensorType{DType::F32, {Dim(2), Dim(4), l, Dim(32)}});
  Value* k = g.add_input("k", TensorType{DType::F32, {Dim(2), Dim(4), l, Dim(32)}});
  Value* v = g.add_input("v", TensorType{DType::F32, {Dim(2), Dim(4), l, Dim(32)}});
  Value* mask = g.add_input("mask", TensorType{DType::F32, {Dim(2), Dim(1), Dim(1), l}});
  g.set_outputs({g.add(kOp, {q, k, v, mask}, {{"is_causal", true}})});
  auto best = CompiledGraph::compile(g);
  CompileOptions reference_policy;
  reference_policy.kernel_policy = "reference";
  auto reference = CompiledGraph::compile(g, reference_policy);
  std::mt19937 rng(37);
  for (int64_t length : {100, 3}) {
    Problem p({2, 4, length, 32}, {2, 4, length, 32}, {2, 4, length, 32});
    p.with_mask({2, 1, 1, length}, DType::F32).with_causal();
    const std::vector<Tensor> in = random_inputs(p, rng);
    std::vector<TensorView> views;
    for (const Tensor& t : in) views.push_back(t.view());
    const Tensor got = best->run(views)[0], expected = reference->run(views)[0];
    ASSERT_EQ(got.sizes(), (std::vector<int64_t>{2, 4, length, 32}));
    const std::vector<double> bound = error_bound(p, in);
    for (int64_t i = 0; i < got.numel(); ++i)
      ASSERT_NEAR(got.data<float>()[i], expected.data<float>()[i], bound[i]) << "element " << i;
  }
}

}  // namespace
}  // namespace kiln
