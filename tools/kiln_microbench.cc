// `kiln_microbench`: Kiln's kernels against the machine's limits, as JSON (docs/benchmarks.md,
// "Micro-benchmarks"; `python -m kiln.bench.micro` runs it and adds the Python-side figures).
//
//   peak         fp32 FMA peak: independent register-only FMA chains (AVX2, and AVX-512 where the
//                CPU has it), on 1 thread and on --threads threads
//   gemm         every matmul kernel on BERT-base's GEMMs (M = 128 and M = 1), GFLOP/s and share
//                of peak, the kernel the selection rule picks and the fastest one
//   conv         conv2d's kernels on each distinct convolution of ResNet-50 at batch 1, and the
//                network's total weighted by occurrences
//   elementwise  relu, exp, gelu (erf and tanh), sigmoid, silu, tanh, erf, add, broadcast add on
//                tensors larger than the last-level cache (inputs uniform in [-1, 1], and gelu
//                and erf also in [-6, 6]), GB/s against memcpy of the same bytes on the same
//                threads
//   overhead     CompiledGraph::run of a one-node graph on a tiny tensor against its kernel alone
//
// Kernels are created through the op registry from a one-node graph, exactly as ExecPlan creates
// them (src/runtime/exec_plan.cc): the numbers are those of the kernels the runtime runs.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/fma_loops.h"
#include "kernels/cpu/layout.h"
#include "kiln/kiln.h"
#include "ops/op_registry.h"
#include "runtime/kernel_selection.h"

namespace kiln {
namespace {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

const char* kUsage =
    "usage: kiln_microbench [--sections peak,gemm,conv,elementwise,overhead] [--threads N]\n"
    "                       [--min-seconds S] [--elementwise-mib N] [--conv-reference]\n"
    "                       [--cold] [--smoke] [--json PATH]\n"
    "Measures Kiln's kernels against the machine's fp32 FMA peak and memcpy bandwidth and\n"
    "writes the figures as JSON (to stdout without --json). --threads: threads per kernel\n"
    "(default: OpenMP's, every core). --min-seconds: timed seconds per measurement (default\n"
    "0.3). --elementwise-mib: tensor size of the elementwise section (default: twice the\n"
    "last-level cache, at least 64). --conv-reference: also time conv2d's reference kernel\n"
    "(double-precision loops: minutes). --cold: gemm and conv evict the caches before each\n"
    "timed call, so that weights and inputs come from memory as inside a network. --smoke:\n"
    "tiny shapes and short runs, to check that everything runs; exits 1 if a kernel's\n"
    "result differs from the reference kernel's.\n";

const std::vector<std::string> kSections = {"peak", "gemm", "conv", "elementwise", "overhead"};

struct Options {
  std::set<std::string> sections{kSections.begin(), kSections.end()};
  int threads = 0;
  double min_seconds = 0.3;
  int64_t elementwise_mib = 0;
  bool conv_reference = false;
  bool cold = false;
  bool smoke = false;
  std::string json_path;
};

[[noreturn]] void usage_error(const std::string& message) {
  throw_error(ErrorCode::InvalidArgument, message, "; see kiln_microbench --help");
}

Options parse_options(int argc, char** argv) {
  Options o;
  auto value = [&](int& i) -> std::string {
    if (i + 1 >= argc) usage_error(std::string(argv[i]) + " needs a value");
    return argv[++i];
  };
  auto number = [&](int& i) {
    std::string flag = argv[i], text = value(i);
    try {
      size_t used = 0;
      double v = std::stod(text, &used);
      if (used == text.size() && v > 0) return v;
    } catch (const std::exception&) {
    }
    usage_error(flag + " takes a positive number, got '" + text + "'");
  };
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::cout << kUsage;
      std::exit(0);
    } else if (arg == "--sections") {
      o.sections.clear();
      std::stringstream list(value(i));
      for (std::string s; std::getline(list, s, ',');) {
        if (std::find(kSections.begin(), kSections.end(), s) == kSections.end())
          usage_error("unknown section '" + s + "'");
        o.sections.insert(s);
      }
    } else if (arg == "--threads") {
      o.threads = static_cast<int>(number(i));
    } else if (arg == "--min-seconds") {
      o.min_seconds = number(i);
    } else if (arg == "--elementwise-mib") {
      o.elementwise_mib = static_cast<int64_t>(number(i));
    } else if (arg == "--conv-reference") {
      o.conv_reference = true;
    } else if (arg == "--cold") {
      o.cold = true;
    } else if (arg == "--smoke") {
      o.smoke = true;
    } else if (arg == "--json") {
      o.json_path = value(i);
    } else {
      usage_error("unknown argument '" + arg + "'");
    }
  }
  if (o.threads == 0) o.threads = omp_get_max_threads();
  if (o.smoke) o.min_seconds = std::min(o.min_seconds, 0.002);
  return o;
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// One untimed call, then timed calls until at least `min_runs` runs and `min_seconds` in total,
// or 4 * min_seconds whatever the count (one run of a slow reference kernel is enough), each
// after an untimed `before` (when given), which counts towards that cap. Rates are computed
// from min_s.
struct Timing {
  double median_s = 0, min_s = 0;
  int runs = 0;
};
template <typename Fn>
Timing time_calls(const Fn& fn, double min_seconds, int min_runs = 3,
                  const std::function<void()>& before = {}) {
  fn();
  std::vector<double> seconds;
  double total = 0, untimed = 0;
  while ((static_cast<int>(seconds.size()) < min_runs || total < min_seconds) &&
         (seconds.empty() || total + untimed < 4 * min_seconds)) {
    if (before) {
      auto start = Clock::now();
      before();
      untimed += seconds_since(start);
    }
    auto start = Clock::now();
    fn();
    seconds.push_back(seconds_since(start));
    total += seconds.back();
  }
  std::sort(seconds.begin(), seconds.end());
  return {seconds[seconds.size() / 2], seconds.front(), static_cast<int>(seconds.size())};
}

// Writes a buffer of twice the last-level cache (at least 64 MiB) on every thread, so that
// what a kernel reads next comes from memory: inside a network, a layer's weights were last
// read a whole forward pass ago.
void evict_caches() {
  static std::vector<char> buffer(
      static_cast<size_t>(std::max<int64_t>(64 << 20, 2 * cpu::last_level_cache_bytes())));
  static char generation = 0;
  ++generation;
  const int64_t lines = static_cast<int64_t>(buffer.size() / 64);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < lines; ++i) buffer[static_cast<size_t>(i) * 64] = generation;
}

void progress(const std::string& line) { std::cerr << "kiln_microbench: " << line << std::endl; }

// ------------------------------------------------------------------------------ FMA peak

struct FmaVariant {
  std::string isa;
  int chains, lanes;
  float (*loop)(int64_t);
};

// The best of a few runs on `threads` threads at once, each running the whole loop.
Json measure_peak(const FmaVariant& v, int threads, const Options& o) {
  volatile float sink = 0;
  auto run = [&](int64_t iterations) {
    auto start = Clock::now();
#pragma omp parallel num_threads(threads)
    {
      float r = v.loop(iterations);
      if (r == 12345.f) sink = r;  // keeps the loop's result alive
    }
    return seconds_since(start);
  };
  int64_t iterations = 1 << 16;
  // Many short runs: on a shared machine the best of them is the likeliest to have had the
  // cores to itself.
  const double target = o.smoke ? 0.001 : std::max(0.02, o.min_seconds / 10);
  while (run(iterations) < target) iterations *= 2;
  const double flop = 2.0 * v.chains * v.lanes * static_cast<double>(iterations) * threads;
  std::vector<double> gflops;
  for (int r = 0; r < (o.smoke ? 2 : 25); ++r) gflops.push_back(flop / run(iterations) / 1e9);
  std::sort(gflops.begin(), gflops.end());
  return {{"isa", v.isa},
          {"chains", v.chains},
          {"threads", threads},
          {"gflops_best", gflops.back()},
          {"gflops_median", gflops[gflops.size() / 2]}};
}

// Per thread count, the best variant's best run: the physical limit kernels are judged against.
struct Peak {
  std::map<int, double> gflops;  // threads -> GFLOP/s
  double at(int threads) const {
    auto it = gflops.find(threads);
    return it == gflops.end() ? 0 : it->second;
  }
};

Json bench_peak(const Options& o, Peak& peak) {
  std::vector<FmaVariant> variants;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    variants.push_back({"avx2", 12, 8, cpu::fma_loop_avx2<12>});
  if (__builtin_cpu_supports("avx512f"))
    variants.push_back({"avx512", 16, 16, cpu::fma_loop_avx512<16>});
  Json out = {{"variants", Json::array()}};
  if (variants.empty()) {
    out["note"] = "the CPU has neither AVX2+FMA nor AVX-512: no peak, no shares of it";
    return out;
  }
  std::vector<int> thread_counts = {1};
  if (o.threads != 1) thread_counts.push_back(o.threads);
  for (int t : thread_counts) {
    for (const FmaVariant& v : variants) {
      Json r = measure_peak(v, t, o);
      peak.gflops[t] = std::max(peak.at(t), r["gflops_best"].get<double>());
      progress("peak " + v.isa + " " + std::to_string(t) + " thread(s): " +
               std::to_string(r["gflops_best"].get<double>()) + " GFLOP/s");
      out["variants"].push_back(r);
    }
  }
  Json by_threads = Json::object();
  for (auto [t, g] : peak.gflops) by_threads[std::to_string(t)] = g;
  out["gflops"] = by_threads;
  return out;
}

// ------------------------------------------------------------------------------ one node

Tensor random_tensor(DType dtype, const std::vector<int64_t>& sizes, uint32_t seed,
                     float low = -1.f, float high = 1.f) {
  Tensor t = Tensor::empty(dtype, sizes);
  KILN_ASSERT(dtype == DType::F32, "the micro-benchmarks fill f32 tensors only");
  // A per-thread LCG: filling a quarter-GiB tensor with mt19937 alone would take a second.
  float* p = t.data<float>();
  const int64_t n = t.numel();
#pragma omp parallel
  {
    const int nt = omp_get_num_threads(), id = omp_get_thread_num();
    uint64_t state = (static_cast<uint64_t>(seed) << 32) + id * 0x9E3779B97F4A7C15ull + 1;
    for (int64_t i = n * id / nt; i < n * (id + 1) / nt; ++i) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      p[i] = low + (high - low) * static_cast<float>(state >> 40) / static_cast<float>(1 << 24);
    }
  }
  return t;
}

// A graph of one node, its KernelSpec built as ExecPlan builds it, and data for its inputs
// (uniform in [-spread, spread]).
class OneNode {
 public:
  OneNode(std::unique_ptr<Graph> graph, int threads, uint32_t seed, float spread = 1.f)
      : graph_(std::move(graph)),
        node_(*graph_->nodes().at(0)),
        def_(*OpRegistry::instance().find(node_.op())),
        spec_{node_, {}, {}, {}, threads} {
    KILN_ASSERT(graph_->num_nodes() == 1, "a micro-benchmark graph has one node");
    for (const Value* in : node_.inputs()) {
      spec_.inputs.push_back(in->type());
      const bool constant = in->kind() == Value::Kind::Constant;
      spec_.constant_inputs.push_back(constant ? &in->constant() : nullptr);
      Tensor data = constant ? in->constant()
                             : random_tensor(in->type().dtype, spec_.input_sizes(
                                                                   spec_.inputs.size() - 1),
                                             seed++, -spread, spread);
      inputs_.push_back(data.data());
      owned_.push_back(std::move(data));
    }
    for (const Value* out : node_.outputs()) spec_.outputs.push_back(out->type());
  }

  const OpDef& def() const { return def_; }
  const KernelSpec& spec() const { return spec_; }
  // The kernel the runtime's rule (policy "best") picks.
  std::string selected() const { return select_kernel(def_, spec_, "best").kernel->name; }

  struct Result {
    Timing timing;
    Tensor output;  // output 0 after the timed runs
  };
  // With `cold`, each timed call starts with the caches evicted (evict_caches).
  Result run(const KernelDef& k, double min_seconds, bool cold) const {
    std::unique_ptr<KernelInstance> instance = k.create(spec_);
    std::vector<Tensor> outputs;
    std::vector<void*> output_ptrs;
    for (size_t i = 0; i < spec_.outputs.size(); ++i) {
      outputs.push_back(Tensor::empty(spec_.outputs[i].dtype, spec_.output_sizes(i)));
      output_ptrs.push_back(outputs.back().data());
    }
    Tensor scratch = Tensor::empty(DType::U8, {static_cast<int64_t>(instance->scratch_bytes())});
    Timing t = time_calls([&] { instance->run(inputs_, output_ptrs, scratch.data()); },
                          min_seconds, 3, cold ? evict_caches : std::function<void()>());
    return {t, outputs.at(0)};
  }

 private:
  std::unique_ptr<Graph> graph_;
  const Node& node_;
  const OpDef& def_;
  KernelSpec spec_;
  std::vector<Tensor> owned_;
  std::vector<const void*> inputs_;
};

// max |a - b| / max |b|: a sanity check that a kernel computed what the reference did (the
// precise per-op bounds are checked by the differential tests, not here).
double relative_difference(const Tensor& a, const Tensor& b) {
  double diff = 0, scale = 0;
  const float* x = a.data<float>();
  const float* y = b.data<float>();
  for (int64_t i = 0; i < a.numel(); ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(x[i]) - y[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(y[i])));
  }
  return scale > 0 ? diff / scale : diff;
}

constexpr double kSmokeTolerance = 1e-4;

// Every kernel of the node's op (the reference one only when `with_reference`), each on the same
// inputs: its timing, GFLOP/s and share of `peak_gflops` when `flop` > 0, bytes per second when
// `bytes` > 0, and its difference from the reference kernel when that ran. Also the kernel the
// rule selects and the fastest non-reference kernel.
Json bench_kernels(const OneNode& node, double flop, double bytes, double peak_gflops,
                   bool with_reference, const Options& o, bool& mismatch) {
  const std::vector<KernelDef>& kernels = node.def().kernels;
  Json out = {{"selected", node.selected()}, {"kernels", Json::array()}};
  Tensor reference_output;
  std::string fastest;
  double fastest_s = 0;
  // The reference first, so that the others can be compared with it.
  std::vector<size_t> order;
  if (with_reference) order.push_back(kernels.size() - 1);
  for (size_t i = 0; i + 1 < kernels.size(); ++i) order.push_back(i);
  for (size_t i : order) {
    const KernelDef& k = kernels[i];
    const bool is_reference = i + 1 == kernels.size();
    Json r = {{"name", k.name}, {"engine", k.engine}};
    // Why the rule passes this kernel over for the spec (a library preferred elsewhere, or
    // something it can't take); it is still timed when it can be created, else "not_run".
    std::string why = k.unsupported_reason ? k.unsupported_reason(node.spec()) : "";
    if (!why.empty()) r["not_selected_because"] = why;
    try {
      OneNode::Result result =
          node.run(k, is_reference ? o.min_seconds / 3 : o.min_seconds, o.cold);
      // Rates from the fastest run: on a shared machine the slower ones measure the other jobs.
      const double s = result.timing.min_s;
      r["ms_median"] = result.timing.median_s * 1e3;
      r["ms_min"] = s * 1e3;
      r["runs"] = result.timing.runs;
      if (flop > 0) {
        r["gflops"] = flop / s / 1e9;
        if (peak_gflops > 0) r["share_of_peak"] = flop / s / 1e9 / peak_gflops;
      }
      if (bytes > 0) r["gbs"] = bytes / s / 1e9;
      if (is_reference) {
        reference_output = result.output;
      } else {
        if (reference_output.defined() && reference_output.numel() > 0) {
          double d = relative_difference(result.output, reference_output);
          r["max_rel_diff_vs_reference"] = d;
          if (d > kSmokeTolerance) mismatch = true;
        }
        if (fastest.empty() || s < fastest_s) {
          fastest = k.name;
          fastest_s = s;
        }
      }
    } catch (const Error& e) {
      // A kernel that can't take this shape at all (Winograd on a 1x1 convolution) is not run;
      // one the rule only passes over must run, else it is an error.
      r[e.code() == ErrorCode::UnsupportedOperator && !why.empty() ? "not_run" : "error"] =
          e.what();
    }
    out["kernels"].push_back(r);
  }
  out["fastest"] = fastest;
  return out;
}

TensorType f32(const std::vector<int64_t>& sizes, Layout layout = Layout::Plain) {
  return TensorType{DType::F32, make_shape(sizes), layout};
}

// ------------------------------------------------------------------------------ GEMM

struct GemmCase {
  std::string name;
  std::vector<int64_t> a, b;  // A's and B's sizes as the matmul node takes them
  bool transpose_b;           // B stored [N, K]: a linear layer's weights
  bool b_constant;            // B a graph constant: kernels may prepack it
};

std::vector<GemmCase> gemm_cases(bool smoke) {
  std::vector<GemmCase> cases;
  // BERT-base: hidden 768, MLP 3072, 12 heads of 64, 128 tokens (M = 128) or one (M = 1).
  const std::vector<int64_t> ms = smoke ? std::vector<int64_t>{1, 16} : std::vector<int64_t>{128, 1};
  const int64_t d = smoke ? 32 : 768, ff = smoke ? 64 : 3072, heads = smoke ? 2 : 12,
                dh = smoke ? 16 : 64, seq = smoke ? 16 : 128;
  for (int64_t m : ms) {
    auto linear = [&](const std::string& what, int64_t k, int64_t n) {
      const std::string name = what + " " + std::to_string(k) + "x" + std::to_string(n);
      cases.push_back({name, {m, k}, {n, k}, true, true});
      // The same weights read in their own layout: what prepacking them buys, against the
      // memory a packed copy costs.
      cases.push_back({name + ", weights not prepacked", {m, k}, {n, k}, true, false});
      // Stored [K, N] (GPT-2's Conv1D) and read in place (memory.gemm_weights_in_place).
      cases.push_back({name + ", weights [K, N] not prepacked", {m, k}, {k, n}, false, false});
    };
    linear("linear (QKV, attention output)", d, d);
    linear("linear (MLP up)", d, ff);
    linear("linear (MLP down)", ff, d);
    // Attention's products per head, both operands activations: Q·Kᵀ and P·V.
    cases.push_back({"bmm Q·K^T (" + std::to_string(heads) + " heads)", {heads, m, dh},
                     {heads, dh, seq}, false, false});
    cases.push_back({"bmm P·V (" + std::to_string(heads) + " heads)", {heads, m, seq},
                     {heads, seq, dh}, false, false});
  }
  return cases;
}

Json bench_gemm(const Options& o, const Peak& peak, bool& mismatch) {
  Json out = Json::array();
  uint32_t seed = 100;
  for (const GemmCase& c : gemm_cases(o.smoke)) {
    auto g = std::make_unique<Graph>("gemm");
    Value* a = g->add_input("a", f32(c.a));
    Value* b = c.b_constant ? g->add_constant("b", random_tensor(DType::F32, c.b, seed++))
                            : g->add_input("b", f32(c.b));
    g->set_outputs({g->add("matmul", {a, b}, {{"transpose_b", c.transpose_b}})});
    OneNode node(std::move(g), o.threads, seed++);
    const int64_t batch = c.a.size() == 3 ? c.a[0] : 1;
    const int64_t m = c.a[c.a.size() - 2], k = c.a.back();
    const int64_t n = c.transpose_b ? c.b[c.b.size() - 2] : c.b.back();
    const double flop = 2.0 * batch * m * n * k;
    Json r = bench_kernels(node, flop, 0, peak.at(o.threads), true, o, mismatch);
    r["name"] = c.name;
    r["batch"] = batch;
    r["m"] = m;
    r["n"] = n;
    r["k"] = k;
    r["b_constant"] = c.b_constant;
    r["gflop"] = flop / 1e9;
    progress("gemm " + c.name + " M=" + std::to_string(m) + ": selected " +
             r["selected"].get<std::string>() + ", fastest " + r["fastest"].get<std::string>());
    out.push_back(r);
  }
  return out;
}

// ------------------------------------------------------------------------------ convolution

struct ConvCase {
  int64_t c, o, hw, k, stride, count;  // in/out channels, input size, kernel, stride, uses
};

// Every convolution of ResNet-50 (v1.5: the stride in the 3x3, as torchvision and transformers
// have it) at 224x224, distinct shapes with how often each occurs: 53 convolutions in all.
std::vector<ConvCase> resnet50_convs(bool smoke) {
  if (smoke) return {{3, 16, 32, 7, 2, 1}, {16, 16, 16, 3, 1, 2}, {16, 32, 16, 1, 2, 1}};
  return {
      {3, 64, 224, 7, 2, 1},
      // stage 1 at 56x56: 3 bottlenecks 64 -> 256
      {64, 64, 56, 1, 1, 1}, {64, 64, 56, 3, 1, 3}, {64, 256, 56, 1, 1, 4}, {256, 64, 56, 1, 1, 2},
      // stage 2 to 28x28: 4 bottlenecks 128 -> 512
      {256, 128, 56, 1, 1, 1}, {128, 128, 56, 3, 2, 1}, {256, 512, 56, 1, 2, 1},
      {128, 512, 28, 1, 1, 4}, {512, 128, 28, 1, 1, 3}, {128, 128, 28, 3, 1, 3},
      // stage 3 to 14x14: 6 bottlenecks 256 -> 1024
      {512, 256, 28, 1, 1, 1}, {256, 256, 28, 3, 2, 1}, {512, 1024, 28, 1, 2, 1},
      {256, 1024, 14, 1, 1, 6}, {1024, 256, 14, 1, 1, 5}, {256, 256, 14, 3, 1, 5},
      // stage 4 to 7x7: 3 bottlenecks 512 -> 2048
      {1024, 512, 14, 1, 1, 1}, {512, 512, 14, 3, 2, 1}, {1024, 2048, 14, 1, 2, 1},
      {512, 2048, 7, 1, 1, 3}, {2048, 512, 7, 1, 1, 2}, {512, 512, 7, 3, 1, 2},
  };
}

Json bench_conv(const Options& o, const Peak& peak, bool& mismatch) {
  // The layout the format stage gives ResNet-50's chain on this CPU (its first candidate for a
  // chain with 3x3 stride-1 convolutions: every channel count is a multiple of 16), where the
  // tensor can take it (the stem's 3 channels are read plain).
  Graph chain("chain");
  const Node* conv3x3 =
      chain
          .add("conv2d",
               {chain.add_input("x", f32({1, 64, 56, 56})),
                chain.add_input("w", f32({64, 64, 3, 3}))},
               {{"padding", std::vector<int64_t>{1, 1}}})
          ->producer();
  const Layout preferred = cpu::conv_layout_candidates(DType::F32, {conv3x3}).front();
  auto layout_for = [&](const std::vector<int64_t>& sizes) {
    return layout_problem(make_shape(sizes), preferred).empty() ? preferred : Layout::Plain;
  };
  Json shapes = Json::array();
  double total_flop = 0, total_s = 0;
  int64_t total_count = 0;
  uint32_t seed = 200;
  for (const ConvCase& c : resnet50_convs(o.smoke)) {
    const int64_t pad = c.k / 2, out_hw = (c.hw + 2 * pad - c.k) / c.stride + 1;
    const std::vector<int64_t> x_sizes{1, c.c, c.hw, c.hw}, y_sizes{1, c.o, out_hw, out_hw};
    auto g = std::make_unique<Graph>("conv");
    Value* x = g->add_input("x", f32(x_sizes, layout_for(x_sizes)));
    const float scale = std::sqrt(2.f / static_cast<float>(c.c * c.k * c.k));
    Value* w = g->add_constant("w", random_tensor(DType::F32, {c.o, c.c, c.k, c.k}, seed++,
                                                  -scale, scale));
    Value* bias = g->add_constant("bias", random_tensor(DType::F32, {c.o}, seed++, -0.1f, 0.1f));
    // As the fuse stage leaves ResNet's convolutions: BatchNorm folded into weights and bias,
    // the ReLU in the epilogue.
    g->set_outputs({g->add("conv2d", {x, w, bias},
                           {{"stride", std::vector<int64_t>{c.stride, c.stride}},
                            {"padding", std::vector<int64_t>{pad, pad}},
                            {"fused_activation", std::string("relu")},
                            {"layout", std::string(layout_name(layout_for(y_sizes)))}})});
    OneNode node(std::move(g), o.threads, seed++);
    const double flop = 2.0 * c.o * out_hw * out_hw * c.c * c.k * c.k;
    Json r = bench_kernels(node, flop, 0, peak.at(o.threads), o.smoke || o.conv_reference, o,
                           mismatch);
    const std::string name = std::to_string(c.k) + "x" + std::to_string(c.k) + " " +
                             std::to_string(c.c) + "->" + std::to_string(c.o) + " @" +
                             std::to_string(c.hw) + (c.stride > 1 ? " /2" : "");
    r["name"] = name;
    r["in_channels"] = c.c;
    r["out_channels"] = c.o;
    r["input_hw"] = c.hw;
    r["kernel"] = c.k;
    r["stride"] = c.stride;
    r["count"] = c.count;
    r["gflop"] = flop / 1e9;
    for (const Json& k : r["kernels"])
      if (k["name"] == r["selected"] && k.contains("ms_median")) {
        total_s += c.count * k["ms_min"].get<double>() / 1e3;
        total_flop += c.count * flop;
      }
    total_count += c.count;
    progress("conv " + name + ": " + r["selected"].get<std::string>());
    shapes.push_back(r);
  }
  Json network = {{"convolutions", total_count},
                  {"gflop", total_flop / 1e9},
                  {"ms", total_s * 1e3},
                  {"gflops", total_s > 0 ? total_flop / total_s / 1e9 : 0}};
  if (peak.at(o.threads) > 0 && total_s > 0)
    network["share_of_peak"] = total_flop / total_s / 1e9 / peak.at(o.threads);
  return {{"layout", layout_name(preferred)}, {"shapes", shapes}, {"network", network}};
}

// ------------------------------------------------------------------------------ elementwise

Json bench_elementwise(const Options& o, bool& mismatch) {
  const int64_t llc = cpu::last_level_cache_bytes();
  const int64_t mib = o.smoke ? 1
                      : o.elementwise_mib > 0
                          ? o.elementwise_mib
                          : std::max<int64_t>(64, 2 * ((llc + (1 << 20) - 1) >> 20));
  const int64_t cols = 1024, rows = mib * (1 << 20) / 4 / cols, n = rows * cols;
  const double tensor_bytes = 4.0 * static_cast<double>(n);

  // memcpy of one tensor, split over the same threads as the kernels: the bandwidth yardstick.
  Tensor src = random_tensor(DType::F32, {n}, 300), dst = Tensor::empty(DType::F32, {n});
  const int threads = o.threads;
  Timing copy = time_calls(
      [&] {
#pragma omp parallel for num_threads(threads) schedule(static)
        for (int t = 0; t < threads; ++t) {
          const int64_t begin = n * t / threads, end = n * (t + 1) / threads;
          std::memcpy(dst.data<float>() + begin, src.data<float>() + begin, 4 * (end - begin));
        }
      },
      o.min_seconds);
  const double memcpy_gbs = 2 * tensor_bytes / copy.min_s / 1e9;
  progress("memcpy " + std::to_string(memcpy_gbs) + " GB/s");

  struct Case {
    std::string name, op;
    AttrMap attrs;
    bool binary, broadcast;
    float spread = 1.f;  // inputs uniform in [-spread, spread]
  };
  const std::vector<Case> cases = {
      {"relu", "relu", {}, false, false},
      {"exp", "exp", {}, false, false},
      {"gelu (erf)", "gelu", {{"approximate", std::string("none")}}, false, false},
      {"gelu (tanh)", "gelu", {{"approximate", std::string("tanh")}}, false, false},
      {"sigmoid", "sigmoid", {}, false, false},
      {"silu", "silu", {}, false, false},
      {"tanh", "tanh", {}, false, false},
      {"erf", "erf", {}, false, false},
      // Wide inputs: most vectors of 8 mix values within and beyond GELU's polynomial ranges.
      {"gelu (erf), [-6, 6]", "gelu", {{"approximate", std::string("none")}}, false, false, 6.f},
      {"gelu (tanh), [-6, 6]", "gelu", {{"approximate", std::string("tanh")}}, false, false, 6.f},
      {"erf, [-6, 6]", "erf", {}, false, false, 6.f},
      {"add", "add", {}, true, false},
      {"add, broadcast row [1024]", "add", {}, true, true},
  };
  Json ops = Json::array();
  // Tensors beyond every cache stream from memory anyway: --cold would only add its writes.
  Options streamed = o;
  streamed.cold = false;
  for (const Case& c : cases) {
    auto g = std::make_unique<Graph>("elementwise");
    std::vector<Value*> in{g->add_input("a", f32({rows, cols}))};
    if (c.binary) in.push_back(g->add_input("b", f32(c.broadcast ? std::vector<int64_t>{cols}
                                                                  : std::vector<int64_t>{rows, cols})));
    g->set_outputs({g->add(c.op, in, c.attrs)});
    OneNode node(std::move(g), o.threads, 400, c.spread);
    // Bytes that must cross the memory bus: every input read once, the output written once.
    const double bytes = tensor_bytes * (c.binary && !c.broadcast ? 3 : 2);
    Json r = bench_kernels(node, 0, bytes, 0, true, streamed, mismatch);
    r["name"] = c.name;
    r["bytes"] = bytes;
    r["input_spread"] = c.spread;
    for (Json& k : r["kernels"])
      if (k.contains("gbs")) k["vs_memcpy"] = k["gbs"].get<double>() / memcpy_gbs;
    progress("elementwise " + c.name + ": " + r["selected"].get<std::string>());
    ops.push_back(r);
  }
  return {{"elements", n},
          {"tensor_mib", tensor_bytes / (1 << 20)},
          {"last_level_cache_bytes", llc},
          {"memcpy_gbs", memcpy_gbs},
          {"ops", ops}};
}

// ------------------------------------------------------------------------------ overhead

// Mean microseconds per call over `calls` back-to-back calls, the best of 7 such loops.
template <typename Fn>
double microseconds_per_call(const Fn& fn, int calls) {
  for (int i = 0; i < calls / 10 + 1; ++i) fn();
  std::vector<double> means;
  for (int r = 0; r < 7; ++r) {
    auto start = Clock::now();
    for (int i = 0; i < calls; ++i) fn();
    means.push_back(seconds_since(start) / calls * 1e6);
  }
  return *std::min_element(means.begin(), means.end());
}

Json bench_overhead(const Options& o) {
  const int64_t n = 16;
  const int calls = o.smoke ? 100 : 20000;
  auto graph = [&] {
    auto g = std::make_unique<Graph>("one_node");
    g->set_outputs({g->add("relu", {g->add_input("x", f32({n}))})});
    return g;
  };
  CompileOptions options;
  options.threads = o.threads;
  std::shared_ptr<const CompiledGraph> compiled = CompiledGraph::compile(*graph(), options);
  Tensor x = random_tensor(DType::F32, {n}, 500), y = Tensor::empty(DType::F32, {n});
  const std::vector<TensorView> inputs{x.view()}, outputs{y.view()};
  const double run_us = microseconds_per_call([&] { compiled->run(inputs, outputs); }, calls);
  const double run_alloc_us = microseconds_per_call([&] { compiled->run(inputs); }, calls);

  OneNode node(graph(), o.threads, 500);
  const KernelDef& chosen = *select_kernel(node.def(), node.spec(), "best").kernel;
  std::unique_ptr<KernelInstance> kernel = chosen.create(node.spec());
  const std::vector<const void*> in_ptrs{x.data()};
  const std::vector<void*> out_ptrs{y.data()};
  Tensor scratch = Tensor::empty(DType::U8, {static_cast<int64_t>(kernel->scratch_bytes())});
  const double kernel_us =
      microseconds_per_call([&] { kernel->run(in_ptrs, out_ptrs, scratch.data()); }, calls);
  progress("overhead: run " + std::to_string(run_us) + " us, kernel " +
           std::to_string(kernel_us) + " us");
  return {{"op", "relu"},
          {"elements", n},
          {"kernel", chosen.name},
          {"calls", calls},
          {"kernel_us", kernel_us},
          {"run_us", run_us},
          {"run_allocating_outputs_us", run_alloc_us},
          {"overhead_us", run_us - kernel_us}};
}

int run_main(int argc, char** argv) {
  const Options o = parse_options(argc, argv);
  Json out = {{"threads", o.threads},
              {"smoke", o.smoke},
              {"cold", o.cold},
              {"min_seconds", o.min_seconds},
              {"cpu",
               {{"avx2_fma", __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")},
                {"avx512f", __builtin_cpu_supports("avx512f") != 0},
                {"omp_max_threads", omp_get_max_threads()}}}};
  bool mismatch = false;
  Peak peak;
  if (o.sections.count("peak")) out["peak"] = bench_peak(o, peak);
  if (o.sections.count("gemm")) out["gemm"] = bench_gemm(o, peak, mismatch);
  if (o.sections.count("conv")) out["conv"] = bench_conv(o, peak, mismatch);
  if (o.sections.count("elementwise")) out["elementwise"] = bench_elementwise(o, mismatch);
  if (o.sections.count("overhead")) out["overhead"] = bench_overhead(o);
  out["mismatch_vs_reference"] = mismatch;
  const std::string text = out.dump(2) + "\n";
  if (o.json_path.empty()) {
    std::cout << text;
  } else {
    std::ofstream file(o.json_path);
    file << text;
    if (!file) throw_error(ErrorCode::InvalidArgument, "can't write ", o.json_path);
  }
  if (mismatch)
    std::cerr << "kiln_microbench: a kernel's result differs from its reference kernel's by more "
                 "than "
              << kSmokeTolerance << " of its largest value (max_rel_diff_vs_reference)\n";
  return o.smoke && mismatch ? 1 : 0;
}

}  // namespace
}  // namespace kiln

int main(int argc, char** argv) {
  try {
    return kiln::run_main(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "kiln_microbench: " << e.what() << "\n";
    return 1;
  }
}
