#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <list>
#include <mutex>

#include "kiln/runtime.h"
#include "ir/graph_dump.h"
#include "passes/pass.h"
#include "ir/sym_expr.h"
#include "runtime/exec_plan.h"
#include "runtime/kernel_selection.h"
#include "runtime/profiler.h"

namespace kiln {

struct CompiledGraph::Impl {
  CompileOptions options;
  int threads = 1;
  std::unique_ptr<Graph> graph;
  PipelineReport pipeline_report;
  std::shared_ptr<const ExecPlan> static_plan;  // when every input dim is static
  std::shared_ptr<Profiler> profiler;  // profile_path or KILN_PROFILE; null when not profiling
  // Weights prepacked once for every plan: a new shape costs primitive creation, not a reorder of
  // every weight, and holds no second copy of them.
  PreparedConstants prepared;
  KernelCache kernels;  // kernels shared by the plans of several shapes
  // release_prepacked_constants on a graph whose plans are all made at compile; else null.
  std::unique_ptr<ConstantRelease> release;

  // One plan cache for every shape: LRU over the unpinned entries; gears are pinned entries.
  struct CacheEntry {
    std::vector<std::vector<int64_t>> sizes;
    std::shared_ptr<const ExecPlan> plan;
    bool pinned = false;
  };
  std::mutex cache_mutex;
  std::list<CacheEntry> cache;
  // With pad_to_gear: per output and axis, the input (index, axis) whose size the output's dim
  // has, so that a padded run's outputs are cut back to it; {-1, -1} for a static dim.
  std::vector<std::vector<std::pair<int, int>>> output_dim_source;

  std::vector<std::vector<int64_t>> check_input_sizes(
      const std::vector<std::vector<int64_t>>& sizes) const;
  void check_buffers(const std::vector<TensorView>& inputs) const;
  // The sizes a run with `sizes` executes at: themselves, or with gears the gear they match or
  // (pad_to_gear) the smallest gear covering them; E20008 listing the gears when none does.
  const std::vector<std::vector<int64_t>>& route(
      const std::vector<std::vector<int64_t>>& sizes) const;
  // The outputs' sizes for a run of `sizes` padded to a gear whose plan made `full`.
  std::vector<std::vector<int64_t>> cut_output_sizes(
      const std::vector<std::vector<int64_t>>& sizes,
      const std::vector<std::vector<int64_t>>& full) const;
  void check_gears();
  std::shared_ptr<const ExecPlan> plan_for(const std::vector<std::vector<int64_t>>& sizes,
                                           bool pin = false);
  // Builds a plan; with dumps on, writes the graph annotated with its kernels and engines.
  std::shared_ptr<const ExecPlan> make_plan(const std::vector<std::vector<int64_t>>& sizes);

  int dumps_written = 0;  // the next dump's stage index
  std::mutex dump_mutex;
};

namespace {

void check_options(const CompileOptions& o) {
  if (o.threads < 0)
    throw_error(ErrorCode::InvalidArgument, "threads = ", o.threads,
                " is negative; use 0 for every core or a positive count");
  if (!o.kernel_policy.empty() && o.kernel_policy != "best" && o.kernel_policy != "reference" &&
      o.kernel_policy != "autotune")
    throw_error(ErrorCode::InvalidArgument, "kernel_policy = '", o.kernel_policy,
                "' is unknown; use 'best', 'reference', 'autotune' or '' (by optimization_level)");
  check_dump_type(o.dump_type);
  if (o.plan_cache_capacity == 0)
    throw_error(ErrorCode::InvalidArgument, "plan_cache_capacity must be at least 1");
  if (o.memory_optimization_level != "default" && o.memory_optimization_level != "aggressive")
    throw_error(ErrorCode::InvalidArgument, "memory_optimization_level = '",
                o.memory_optimization_level, "' is unknown; use 'default' or 'aggressive'");
}

void check_buffer(const TensorView& t, const std::string& what) {
  if (t.numel() > 0 && t.data == nullptr)
    throw_error(ErrorCode::InputBuffer, what, " has a null data pointer; pass allocated memory");
  if (reinterpret_cast<uintptr_t>(t.data) % dtype_size(t.dtype) != 0)
    throw_error(ErrorCode::InputBuffer, what, " data pointer is not aligned to its ",
                dtype_size(t.dtype), "-byte elements; pass aligned memory");
  if (!t.is_contiguous())
    throw_error(ErrorCode::InputBuffer, what,
                " is not contiguous; make it contiguous (tensor.contiguous()) before the call");
}

std::string sizes_string(const std::vector<std::vector<int64_t>>& sizes) {
  std::string text = "(";
  for (size_t i = 0; i < sizes.size(); ++i) text += (i ? ", " : "") + shape_string(sizes[i]);
  return text + ")";
}

std::string gears_string(const std::vector<std::vector<std::vector<int64_t>>>& gears) {
  std::string text;
  for (size_t g = 0; g < gears.size(); ++g) text += (g ? ", " : "") + sizes_string(gears[g]);
  return text;
}

// A symbol an input dim names directly (s0), as opposed to a derived one (s0*s1): only those
// can be padded, since zeros appended to a flattened dim land between real positions.
bool is_plain_symbol(const std::string& name) {
  try {
    return SymExpr::parse(name).single_symbol() == name;
  } catch (const Error&) {
    return false;
  }
}

// Copies the leading block of `extent` from `src` to `dst` (both contiguous, of `extent`'s rank
// and at least its size on every axis): padding copies an input into a larger zeroed one,
// cutting copies an output's real positions out of a gear's.
void copy_block(const TensorView& src, const TensorView& dst, const std::vector<int64_t>& extent) {
  const size_t element = dtype_size(src.dtype);
  if (num_elements(extent) == 0) return;
  if (extent.empty()) {
    std::memcpy(dst.data, src.data, element);
    return;
  }
  const size_t rank = extent.size();
  const size_t row = static_cast<size_t>(extent.back()) * element;
  std::vector<int64_t> src_stride(rank, 1), dst_stride(rank, 1);
  for (size_t a = rank - 1; a > 0; --a) {
    src_stride[a - 1] = src_stride[a] * src.sizes[a];
    dst_stride[a - 1] = dst_stride[a] * dst.sizes[a];
  }
  std::vector<int64_t> index(rank, 0);  // over every axis but the last
  const auto* from = static_cast<const std::byte*>(src.data);
  auto* to = static_cast<std::byte*>(dst.data);
  while (true) {
    int64_t s = 0, d = 0;
    for (size_t a = 0; a + 1 < rank; ++a) {
      s += index[a] * src_stride[a];
      d += index[a] * dst_stride[a];
    }
    std::memcpy(to + d * element, from + s * element, row);
    size_t a = rank - 1;
    while (a > 0 && ++index[a - 1] == extent[a - 1]) index[--a] = 0;
    if (a == 0) return;
  }
}

bool overlaps(const TensorView& a, const TensorView& b) {
  if (a.nbytes() == 0 || b.nbytes() == 0) return false;
  auto a0 = reinterpret_cast<uintptr_t>(a.data), b0 = reinterpret_cast<uintptr_t>(b.data);
  return a0 < b0 + b.nbytes() && b0 < a0 + a.nbytes();
}

}  // namespace

std::vector<std::vector<int64_t>> CompiledGraph::Impl::check_input_sizes(
    const std::vector<std::vector<int64_t>>& sizes) const {
  const auto& ins = graph->inputs();
  if (sizes.size() != ins.size())
    throw_error(ErrorCode::InputCount, "the graph '", graph->name(), "' takes ", ins.size(),
                " inputs, got ", sizes.size());
  const SymbolTable& symbols = graph->symbols();
  std::vector<int64_t> bound(symbols.size(), -1);
  std::vector<std::string> bound_by(symbols.size());
  for (size_t i = 0; i < ins.size(); ++i) {
    const TensorType& t = ins[i]->type();
    const std::string name = "input " + std::to_string(i) + " ('" + ins[i]->name() + "')";
    if (sizes[i].size() != t.rank())
      throw_error(ErrorCode::InputShape, name, " has rank ", sizes[i].size(), " (",
                  shape_string(sizes[i]), "), expected rank ", t.rank(), " (",
                  shape_string(t.shape, &symbols), ")");
    for (size_t axis = 0; axis < t.rank(); ++axis) {
      const Dim& d = t.shape[axis];
      int64_t got = sizes[i][axis];
      if (got < 0)
        throw_error(ErrorCode::InputShape, name, " has a negative size on axis ", axis);
      if (d.is_static()) {
        if (got != d.size())
          throw_error(ErrorCode::InputShape, name, " has shape ", shape_string(sizes[i]),
                      ", expected ", shape_string(t.shape, &symbols), " (axis ", axis, " is ",
                      got, ", expected ", d.size(), ")");
        continue;
      }
      const Symbol& s = symbols[d.symbol()];
      if (got < s.min || got > s.max)
        throw_error(ErrorCode::DynamicShapeRange, name, " axis ", axis, " is ", got,
                    ", outside the range [", s.min, ", ", s.max, "] of dynamic dim '", s.name,
                    "'; compile with a range that covers it");
      int64_t& b = bound[d.symbol()];
      if (b >= 0 && b != got)
        throw_error(ErrorCode::InputShape, name, " axis ", axis, " is ", got, " but dim '",
                    s.name, "' is ", b, " in ", bound_by[d.symbol()],
                    "; dims sharing a name must be equal");
      b = got;
      bound_by[d.symbol()] = name + " axis " + std::to_string(axis);
    }
  }
  return sizes;
}

void CompiledGraph::Impl::check_buffers(const std::vector<TensorView>& inputs) const {
  const auto& ins = graph->inputs();
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::string name = "input " + std::to_string(i) + " ('" + ins[i]->name() + "')";
    if (inputs[i].dtype != ins[i]->type().dtype)
      throw_error(ErrorCode::InputDType, name, " has dtype ", dtype_name(inputs[i].dtype),
                  ", expected ", dtype_name(ins[i]->type().dtype), "; cast it before the call");
    if (!inputs[i].strides.empty() && inputs[i].strides.size() != inputs[i].sizes.size())
      throw_error(ErrorCode::InputBuffer, name, " has ", inputs[i].strides.size(),
                  " strides for ", inputs[i].sizes.size(), " dims");
    check_buffer(inputs[i], name);
  }
}

std::shared_ptr<const ExecPlan> CompiledGraph::Impl::plan_for(
    const std::vector<std::vector<int64_t>>& sizes, bool pin) {
  if (static_plan) return static_plan;
  {
    std::lock_guard<std::mutex> lock(cache_mutex);
    for (auto it = cache.begin(); it != cache.end(); ++it)
      if (it->sizes == sizes) {
        it->pinned |= pin;
        cache.splice(cache.begin(), cache, it);  // most recently used first
        return it->plan;
      }
  }
  auto plan = make_plan(sizes);
  std::lock_guard<std::mutex> lock(cache_mutex);
  for (auto& entry : cache)
    if (entry.sizes == sizes) {  // another thread built it meanwhile
      entry.pinned |= pin;
      return entry.plan;
    }
  cache.push_front(CacheEntry{sizes, plan, pin});
  size_t unpinned = 0;
  for (const CacheEntry& entry : cache) unpinned += !entry.pinned;
  if (unpinned > options.plan_cache_capacity)
    for (auto it = cache.end(); it != cache.begin();)
      if (!(--it)->pinned) {
        cache.erase(it);  // the least recently used unpinned plan
        break;
      }
  return plan;
}

const std::vector<std::vector<int64_t>>& CompiledGraph::Impl::route(
    const std::vector<std::vector<int64_t>>& sizes) const {
  const auto& gears = options.gears;
  if (gears.empty()) return sizes;
  for (const auto& gear : gears)
    if (gear == sizes) return gear;
  if (!options.pad_to_gear)
    throw_error(ErrorCode::DynamicShapeRange, "the graph '", graph->name(),
                "' runs only at its gears, and the input sizes ", sizes_string(sizes),
                " are none of them: ", gears_string(gears),
                "; run at a gear, compile with a gear for these sizes, or allow padding up to "
                "a gear (dynamic_shape.pad_to_gear)");
  const std::vector<std::vector<int64_t>>* best = nullptr;
  int64_t best_elements = 0;
  for (const auto& gear : gears) {
    bool covers = true;
    int64_t elements = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      for (size_t a = 0; a < sizes[i].size(); ++a) covers &= sizes[i][a] <= gear[i][a];
      elements += num_elements(gear[i]);
    }
    if (covers && (!best || elements < best_elements)) {
      best = &gear;
      best_elements = elements;
    }
  }
  if (!best)
    throw_error(ErrorCode::DynamicShapeRange, "the input sizes ", sizes_string(sizes),
                " of graph '", graph->name(), "' exceed every gear on some axis, so none can "
                "be padded to: ", gears_string(gears), "; add a gear that covers them");
  return *best;
}

std::vector<std::vector<int64_t>> CompiledGraph::Impl::cut_output_sizes(
    const std::vector<std::vector<int64_t>>& sizes,
    const std::vector<std::vector<int64_t>>& full) const {
  std::vector<std::vector<int64_t>> cut = full;
  for (size_t j = 0; j < cut.size(); ++j)
    for (size_t a = 0; a < cut[j].size(); ++a)
      if (auto [input, axis] = output_dim_source[j][a]; input >= 0) cut[j][a] = sizes[input][axis];
  return cut;
}

void CompiledGraph::Impl::check_gears() {
  const auto& ins = graph->inputs();
  const SymbolTable& symbols = graph->symbols();
  if (options.pad_to_gear && options.gears.empty())
    throw_error(ErrorCode::InvalidArgument, "pad_to_gear pads inputs up to a gear, but graph '",
                graph->name(), "' has no gears; give gears or leave pad_to_gear off");
  for (size_t g = 0; g < options.gears.size(); ++g) {
    try {
      check_input_sizes(options.gears[g]);
    } catch (const Error& e) {
      throw_error(ErrorCode::InvalidArgument, "gear ", g, " ", sizes_string(options.gears[g]),
                  " doesn't fit the graph: ", e.detail());
    }
    for (size_t h = 0; h < g; ++h)
      if (options.gears[h] == options.gears[g])
        throw_error(ErrorCode::InvalidArgument, "gears ", h, " and ", g, " are both ",
                    sizes_string(options.gears[g]), "; list each gear once");
  }
  if (!options.pad_to_gear) return;
  std::vector<std::pair<int, int>> where(symbols.size(), {-1, -1});
  for (size_t i = 0; i < ins.size(); ++i)
    for (size_t a = 0; a < ins[i]->type().rank(); ++a) {
      const Dim& d = ins[i]->type().shape[a];
      if (d.is_static()) continue;
      if (!is_plain_symbol(symbols[d.symbol()].name))
        throw_error(ErrorCode::InvalidArgument, "pad_to_gear can't pad input ", i, " ('",
                    ins[i]->name(), "') axis ", a, ": its dim '", symbols[d.symbol()].name,
                    "' is an expression of other dims, and zeros appended to it would land "
                    "between real positions; leave pad_to_gear off for this graph");
      if (where[d.symbol()].first < 0) where[d.symbol()] = {int(i), int(a)};
    }
  for (size_t j = 0; j < graph->outputs().size(); ++j) {
    const Shape& shape = graph->outputs()[j]->type().shape;
    auto& source = output_dim_source.emplace_back(shape.size(), std::pair<int, int>{-1, -1});
    for (size_t a = 0; a < shape.size(); ++a) {
      if (shape[a].is_static()) continue;
      source[a] = where[shape[a].symbol()];
      if (source[a].first < 0)
        throw_error(ErrorCode::InvalidArgument, "pad_to_gear can't cut output ", j,
                    " of graph '", graph->name(), "' back after padding: its axis ", a,
                    " is the dim '", symbols[shape[a].symbol()].name,
                    "', which is no input's dim; leave pad_to_gear off for this graph");
    }
  }
}

std::shared_ptr<const ExecPlan> CompiledGraph::Impl::make_plan(
    const std::vector<std::vector<int64_t>>& sizes) {
  KILN_ASSERT(!release || release->plans_left() > 0,
              "graph '" << graph->name() << "' released constants and can't make a new plan");
  auto plan = std::make_shared<const ExecPlan>(*graph, sizes, options, threads, &prepared,
                                               &kernels, release.get());
  if (release) release->plan_made();
  if (options.dump_type.empty()) return plan;
  // Partition and select run per plan (they need shapes): the dump is the graph with each
  // node's kernel, engine and engine subgraph; a symbolic graph's plans are told apart by shape.
  auto annotated = graph->clone();
  std::vector<std::pair<std::string, std::string>> node_kernels;
  for (const PlanStep& step : plan->steps())
    node_kernels.emplace_back(step.node->name(), step.kernel_name);
  annotate_selection(*annotated, node_kernels);
  std::string stage = "plan";
  bool all_static = true;
  for (const Value* in : graph->inputs()) all_static &= is_static(in->type().shape);
  if (!all_static)
    for (const auto& s : sizes) {
      stage += '_';  // plan_2x8_2x8: one group per input
      for (size_t d = 0; d < s.size(); ++d) stage.append(d ? "x" : "").append(std::to_string(s[d]));
    }
  std::lock_guard<std::mutex> lock(dump_mutex);
  write_graph_dump(*annotated, options.dump_path, dumps_written, stage, options.dump_type);
  return plan;
}

CompiledGraph::CompiledGraph(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CompiledGraph::~CompiledGraph() = default;

std::shared_ptr<const CompiledGraph> CompiledGraph::compile(const Graph& graph,
                                                            const CompileOptions& options) {
  check_options(options);
  verify(graph);
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  if (options.kernel_policy.empty())
    impl->options.kernel_policy = options.optimization_level == 0 ? "reference" : "best";
  impl->threads = options.threads > 0 ? options.threads : omp_get_max_threads();
  impl->graph = graph.clone();
  // The runtime reads KILN_PROFILE itself, so offline models and the CLI profile too.
  const char* env_profile = std::getenv("KILN_PROFILE");
  const std::string profile_path =
      !options.profile_path.empty() ? options.profile_path : env_profile ? env_profile : "";
  if (!profile_path.empty()) impl->profiler = Profiler::for_path(profile_path);
  Impl* state = impl.get();
  auto dump = [state](const std::string& stage, const Graph& g) {
    const CompileOptions& o = state->options;
    write_graph_dump(g, o.dump_path, state->dumps_written++, stage, o.dump_type);
  };
  if (!options.dump_type.empty()) dump("input", *impl->graph);
  PipelineOptions pipeline_options{options.verify, options.disabled_passes,
                                   options.optimization_level};
  if (!options.dump_type.empty()) pipeline_options.after_stage = dump;
  impl->pipeline_report = default_pipeline().run(*impl->graph, pipeline_options);
  bool all_static = true;
  for (const Value* in : impl->graph->inputs()) all_static &= is_static(in->type().shape);
  if (options.release_prepacked_constants && (all_static || !options.gears.empty()))
    impl->release = std::make_unique<ConstantRelease>(*impl->graph, graph,
                                                      all_static ? 1 : options.gears.size());
  if (all_static) {
    std::vector<std::vector<int64_t>> sizes;
    for (const Value* in : impl->graph->inputs()) sizes.push_back(static_sizes(in->type().shape));
    impl->static_plan = impl->make_plan(sizes);
  }
  impl->check_gears();
  for (const auto& gear : options.gears) impl->plan_for(gear, /*pin=*/true);
  return std::shared_ptr<const CompiledGraph>(new CompiledGraph(std::move(impl)));
}

const Graph& CompiledGraph::graph() const { return *impl_->graph; }
const std::shared_ptr<Profiler>& CompiledGraph::profiler() const { return impl_->profiler; }
const CompileOptions& CompiledGraph::options() const { return impl_->options; }
const std::vector<PassRecord>& CompiledGraph::pass_records() const {
  return impl_->pipeline_report.records;
}
const std::vector<std::string>& CompiledGraph::pipeline_warnings() const {
  return impl_->pipeline_report.warnings;
}

std::vector<std::vector<int64_t>> CompiledGraph::output_sizes(
    const std::vector<std::vector<int64_t>>& input_sizes) const {
  impl_->check_input_sizes(input_sizes);
  const auto& at = impl_->route(input_sizes);
  const auto& full = impl_->plan_for(at)->output_sizes();
  return at == input_sizes ? full : impl_->cut_output_sizes(input_sizes, full);
}

// The plan queries below describe the plan a run of these sizes executes: a gear's when padded.
std::string CompiledGraph::describe_plan(
    const std::vector<std::vector<int64_t>>& input_sizes) const {
  impl_->check_input_sizes(input_sizes);
  return impl_->plan_for(impl_->route(input_sizes))->describe();
}

MemoryStats CompiledGraph::memory_stats(
    const std::vector<std::vector<int64_t>>& input_sizes) const {
  impl_->check_input_sizes(input_sizes);
  MemoryStats stats = impl_->plan_for(impl_->route(input_sizes))->memory_stats();
  stats.prepacked_bytes = impl_->prepared.held_bytes();
  stats.released_constant_bytes = impl_->release ? impl_->release->released_bytes() : 0;
  return stats;
}

std::string CompiledGraph::memory_plan(const std::vector<std::vector<int64_t>>& input_sizes,
                                       const std::string& format) const {
  impl_->check_input_sizes(input_sizes);
  return impl_->plan_for(impl_->route(input_sizes))->memory_plan(format, impl_->graph->name());
}

std::vector<std::vector<std::vector<int64_t>>> CompiledGraph::cached_plans() const {
  std::lock_guard<std::mutex> lock(impl_->cache_mutex);
  std::vector<std::vector<std::vector<int64_t>>> sizes;
  for (const auto& entry : impl_->cache) sizes.push_back(entry.sizes);
  return sizes;
}

namespace {
std::vector<std::vector<int64_t>> sizes_of(const std::vector<TensorView>& views) {
  std::vector<std::vector<int64_t>> sizes;
  sizes.reserve(views.size());
  for (const TensorView& v : views) sizes.push_back(v.sizes);
  return sizes;
}

// What a run reports to: the caller's observer, the graph's profiler, both, or nothing (null).
class RunObservers : public RunObserver {
 public:
  RunObservers(RunObserver* caller, RunObserver* profiler) : a_(caller), b_(profiler) {}
  RunObserver* get() { return a_ && b_ ? this : a_ ? a_ : b_; }
  void on_node(const NodeRun& run) override {
    a_->on_node(run);
    b_->on_node(run);
  }

 private:
  RunObserver *a_, *b_;
};

// A run padded up to a gear: inputs copied into zeroed tensors of the gear's sizes, the gear's
// plan run into temporaries, and each output's real positions copied out to `outputs`.
void run_padded(const ExecPlan& plan, const std::vector<TensorView>& inputs,
                const std::vector<std::vector<int64_t>>& gear,
                const std::vector<TensorView>& outputs, RunObserver* observer) {
  std::vector<Tensor> padded;
  std::vector<TensorView> views;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].sizes == gear[i]) {
      views.push_back(inputs[i]);
      continue;
    }
    padded.push_back(Tensor::zeros(inputs[i].dtype, gear[i]));
    copy_block(inputs[i], padded.back().view(), inputs[i].sizes);
    views.push_back(padded.back().view());
  }
  std::vector<Tensor> full;
  std::vector<void*> pointers;
  for (size_t j = 0; j < plan.output_sizes().size(); ++j) {
    full.push_back(Tensor::empty(plan.output_dtypes()[j], plan.output_sizes()[j]));
    pointers.push_back(full.back().data());
  }
  plan.run(views, pointers, observer);
  for (size_t j = 0; j < outputs.size(); ++j) copy_block(full[j].view(), outputs[j], outputs[j].sizes);
}
}  // namespace

std::vector<Tensor> CompiledGraph::run(const std::vector<TensorView>& inputs) const {
  return run_allocating(inputs, nullptr);
}

std::vector<Tensor> CompiledGraph::run(const std::vector<TensorView>& inputs,
                                       RunObserver& observer) const {
  return run_allocating(inputs, &observer);
}

std::vector<Tensor> CompiledGraph::run_allocating(const std::vector<TensorView>& inputs,
                                                  RunObserver* observer) const {
  RunObservers observers(observer, impl_->profiler.get());
  const auto sizes = sizes_of(inputs);
  impl_->check_input_sizes(sizes);
  impl_->check_buffers(inputs);
  const auto& at = impl_->route(sizes);
  auto plan = impl_->plan_for(at);
  const auto& output_sizes = at == sizes ? plan->output_sizes()
                                         : impl_->cut_output_sizes(sizes, plan->output_sizes());
  std::vector<Tensor> outputs;
  std::vector<void*> pointers;
  std::vector<TensorView> views;
  for (size_t j = 0; j < output_sizes.size(); ++j) {
    outputs.push_back(Tensor::empty(plan->output_dtypes()[j], output_sizes[j]));
    pointers.push_back(outputs.back().data());
    views.push_back(outputs.back().view());
  }
  if (at == sizes)
    plan->run(inputs, pointers, observers.get());
  else
    run_padded(*plan, inputs, at, views, observers.get());
  return outputs;
}

void CompiledGraph::run(const std::vector<TensorView>& inputs,
                        const std::vector<TensorView>& outputs, RunObserver* observer) const {
  RunObservers observers(observer, impl_->profiler.get());
  const auto sizes = sizes_of(inputs);
  impl_->check_input_sizes(sizes);
  impl_->check_buffers(inputs);
  const auto& at = impl_->route(sizes);
  auto plan = impl_->plan_for(at);
  const auto& output_sizes = at == sizes ? plan->output_sizes()
                                         : impl_->cut_output_sizes(sizes, plan->output_sizes());
  if (outputs.size() != output_sizes.size())
    throw_error(ErrorCode::InputCount, "the graph '", impl_->graph->name(), "' has ",
                output_sizes.size(), " outputs, got ", outputs.size(), " output buffers");
  std::vector<void*> pointers;
  for (size_t j = 0; j < outputs.size(); ++j) {
    std::string name = "output buffer " + std::to_string(j);
    if (outputs[j].dtype != plan->output_dtypes()[j])
      throw_error(ErrorCode::InputDType, name, " has dtype ", dtype_name(outputs[j].dtype),
                  ", expected ", dtype_name(plan->output_dtypes()[j]));
    if (outputs[j].sizes != output_sizes[j])
      throw_error(ErrorCode::InputShape, name, " has shape ", shape_string(outputs[j].sizes),
                  ", expected ", shape_string(output_sizes[j]));
    check_buffer(outputs[j], name);
    // The graph reads inputs while writing outputs: shared memory would give wrong results.
    for (size_t i = 0; i < inputs.size(); ++i)
      if (overlaps(outputs[j], inputs[i]))
        throw_error(ErrorCode::InputBuffer, name, " overlaps input ", i,
                    "; pass separate memory for outputs");
    for (size_t k = 0; k < j; ++k)
      if (overlaps(outputs[j], outputs[k]))
        throw_error(ErrorCode::InputBuffer, name, " overlaps output buffer ", k);
    pointers.push_back(outputs[j].data);
  }
  if (at == sizes)
    plan->run(inputs, pointers, observers.get());
  else
    run_padded(*plan, inputs, at, outputs, observers.get());
}

}  // namespace kiln
