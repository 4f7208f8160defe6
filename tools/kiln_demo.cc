// `make demo`: builds a small CNN block and a transformer block with the C++ builder API,
// compiles them, checks the optimized kernels against the reference kernels, runs them from
// several threads at once, and prints timings.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <thread>

#include "kiln/kiln.h"

namespace {

using kiln::AttrMap;
using kiln::DType;
using kiln::Graph;
using kiln::Tensor;
using kiln::Value;

Tensor random_tensor(std::vector<int64_t> sizes, uint32_t seed, float scale = 1.f) {
  Tensor t = Tensor::empty(DType::F32, std::move(sizes));
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.f, scale);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(rng);
  return t;
}

kiln::TensorType f32(std::vector<int64_t> sizes) {
  return kiln::TensorType{DType::F32, kiln::make_shape(sizes)};
}

// conv3x3 -> relu -> conv3x3 -> (+ x) -> relu: a ResNet basic block, batch 1, 64x56x56.
std::unique_ptr<Graph> cnn_block() {
  auto g = std::make_unique<Graph>("resnet_basic_block");
  const int64_t c = 64, hw = 56;
  Value* x = g->add_input("x", f32({1, c, hw, hw}));
  AttrMap conv = {{"padding", std::vector<int64_t>{1, 1, 1, 1}}};
  float scale = std::sqrt(2.f / (c * 9));
  Value* w1 = g->add_constant("conv1.weight", random_tensor({c, c, 3, 3}, 1, scale));
  Value* b1 = g->add_constant("conv1.bias", random_tensor({c}, 2, 0.1f));
  Value* w2 = g->add_constant("conv2.weight", random_tensor({c, c, 3, 3}, 3, scale));
  Value* b2 = g->add_constant("conv2.bias", random_tensor({c}, 4, 0.1f));
  Value* h = g->add("relu", {g->add("conv2d", {x, w1, b1}, conv, "conv1")});
  Value* y = g->add("conv2d", {h, w2, b2}, conv, "conv2");
  g->set_outputs({g->add("relu", {g->add("add", {y, x})})});
  return g;
}

// A BERT-style encoder layer (hidden 256, 4 heads, MLP 1024), batch 1, sequence 128:
// attention with softmax, residuals, layer norms and a GELU MLP.
std::unique_ptr<Graph> transformer_block() {
  auto g = std::make_unique<Graph>("transformer_encoder_layer");
  const int64_t s = 128, d = 256, heads = 4, dh = d / heads, ff = 1024;
  uint32_t seed = 10;
  auto weight = [&](const std::string& name, std::vector<int64_t> sizes) {
    float scale = 1.f / std::sqrt(static_cast<float>(sizes[0]));
    return g->add_constant(name, random_tensor(std::move(sizes), seed++, scale));
  };
  auto ones = [&](const std::string& name, int64_t n) {
    Tensor t = Tensor::empty(DType::F32, {n});
    std::fill_n(t.data<float>(), n, 1.f);
    return g->add_constant(name, t);
  };
  auto zeros = [&](const std::string& name, int64_t n) {
    return g->add_constant(name, Tensor::zeros(DType::F32, {n}));
  };
  auto linear = [&](Value* in, const std::string& name, int64_t k, int64_t n) {
    return g->add("add", {g->add("matmul", {in, weight(name + ".weight", {k, n})}, {}, name),
                          weight(name + ".bias", {n})});
  };
  auto layer_norm = [&](Value* in, const std::string& name) {
    return g->add("layer_norm", {in, ones(name + ".weight", d), zeros(name + ".bias", d)},
                  {{"eps", 1e-12}}, name);
  };
  auto heads_first = [&](Value* in) {  // [s, d] -> [heads, s, dh]
    Value* r = g->add("reshape", {in}, {{"shape", std::vector<int64_t>{s, heads, dh}}});
    return g->add("permute", {r}, {{"dims", std::vector<int64_t>{1, 0, 2}}});
  };

  Value* x = g->add_input("hidden", f32({s, d}));
  Value* q = heads_first(linear(x, "query", d, d));
  Value* k = heads_first(linear(x, "key", d, d));
  Value* v = heads_first(linear(x, "value", d, d));
  Value* kt = g->add("permute", {k}, {{"dims", std::vector<int64_t>{0, 2, 1}}});
  Tensor scale = Tensor::empty(DType::F32, {1});
  scale.data<float>()[0] = 1.f / std::sqrt(static_cast<float>(dh));
  Value* scores = g->add("mul", {g->add("matmul", {q, kt}), g->add_constant("scale", scale)});
  Value* probs = g->add("softmax", {scores}, {{"axis", int64_t{-1}}});
  Value* context = g->add("permute", {g->add("matmul", {probs, v})},
                          {{"dims", std::vector<int64_t>{1, 0, 2}}});
  context = g->add("reshape", {context}, {{"shape", std::vector<int64_t>{s, d}}});
  Value* attn = layer_norm(g->add("add", {linear(context, "attn_out", d, d), x}), "ln1");
  Value* mlp = g->add("gelu", {linear(attn, "mlp_in", d, ff)});
  Value* out = layer_norm(g->add("add", {linear(mlp, "mlp_out", ff, d), attn}), "ln2");
  g->set_outputs({out});
  return g;
}

double median_ms(const kiln::CompiledGraph& cg, const std::vector<kiln::TensorView>& inputs,
                 int iterations) {
  std::vector<double> times;
  for (int i = 0; i < iterations; ++i) {
    auto start = std::chrono::steady_clock::now();
    cg.run(inputs);
    times.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

float max_abs_diff(const Tensor& a, const Tensor& b) {
  float m = 0;
  for (int64_t i = 0; i < a.numel(); ++i)
    m = std::max(m, std::fabs(a.data<float>()[i] - b.data<float>()[i]));
  return m;
}

// Returns false when a check fails.
bool demo(const Graph& graph, const Tensor& input, int iterations) {
  auto start = std::chrono::steady_clock::now();
  auto best = kiln::CompiledGraph::compile(graph);
  double compile_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  auto reference = kiln::CompiledGraph::compile(graph, {.kernel_policy = "reference"});
  std::vector<kiln::TensorView> inputs = {input.view()};
  Tensor expected = reference->run(inputs)[0];
  Tensor got = best->run(inputs)[0];
  float diff = max_abs_diff(got, expected);
  float magnitude = 0;
  for (int64_t i = 0; i < expected.numel(); ++i)
    magnitude = std::max(magnitude, std::fabs(expected.data<float>()[i]));

  // Several threads at once must give exactly the serial result.
  int concurrent_mismatches = 0;
  std::vector<std::thread> threads;
  std::vector<int> bad(4, 0);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 3; ++i) bad[t] += !best->run(inputs)[0].same_contents(got);
    });
  for (auto& th : threads) th.join();
  for (int b : bad) concurrent_mismatches += b;

  double ms_best = median_ms(*best, inputs, iterations);
  double ms_ref = median_ms(*reference, inputs, std::max(1, iterations / 5));
  // fp32 kernels that sum in a different order agree to ~1e-6 relative; 1e-4 leaves room for
  // the depth of these blocks while still catching any real bug.
  bool ok = diff <= 1e-4f * std::max(1.f, magnitude) && concurrent_mismatches == 0;
  std::printf("%-28s %7zu nodes  compile %7.1f ms  optimized %8.3f ms  reference %9.3f ms  "
              "(%5.1fx)  max|diff| %.2e  4-thread runs %s  %s\n",
              graph.name().c_str(), graph.num_nodes(), compile_ms, ms_best, ms_ref,
              ms_ref / ms_best, diff, concurrent_mismatches ? "DIFFER" : "identical",
              ok ? "OK" : "FAILED");
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  int iterations = 20;
  bool show_plan = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--iterations" && i + 1 < argc) {
      iterations = std::max(1, std::atoi(argv[++i]));
    } else if (arg == "--plan") {
      show_plan = true;
    } else {
      std::fprintf(stderr, "usage: kiln_demo [--iterations N] [--plan]\n");
      return 2;
    }
  }
  try {
    auto cnn = cnn_block();
    auto transformer = transformer_block();
    std::printf("Kiln demo: graphs built with the C++ builder, optimized kernels vs reference\n");
    bool ok = demo(*cnn, random_tensor({1, 64, 56, 56}, 99), iterations);
    ok &= demo(*transformer, random_tensor({128, 256}, 98), iterations);
    if (show_plan) {
      auto cg = kiln::CompiledGraph::compile(*transformer);
      std::printf("\n%s", cg->describe_plan({{128, 256}}).c_str());
    }
    return ok ? 0 : 1;
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "kiln_demo: %s\n", e.what());
    return 1;
  }
}
