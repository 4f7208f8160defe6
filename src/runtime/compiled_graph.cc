#include <omp.h>

#include <algorithm>
#include <list>
#include <mutex>

#include "kiln/runtime.h"
#include "ir/graph_dump.h"
#include "passes/pass.h"
#include "runtime/exec_plan.h"
#include "runtime/kernel_selection.h"

namespace kiln {

struct CompiledGraph::Impl {
  CompileOptions options;
  int threads = 1;
  std::unique_ptr<Graph> graph;
  PipelineReport pipeline_report;
  std::shared_ptr<const ExecPlan> static_plan;  // when every input dim is static

  std::mutex cache_mutex;
  std::list<std::pair<std::vector<std::vector<int64_t>>, std::shared_ptr<const ExecPlan>>> cache;

  std::vector<std::vector<int64_t>> check_input_sizes(
      const std::vector<std::vector<int64_t>>& sizes) const;
  void check_buffers(const std::vector<TensorView>& inputs) const;
  std::shared_ptr<const ExecPlan> plan_for(const std::vector<std::vector<int64_t>>& sizes);
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
    const std::vector<std::vector<int64_t>>& sizes) {
  if (static_plan) return static_plan;
  {
    std::lock_guard<std::mutex> lock(cache_mutex);
    for (auto it = cache.begin(); it != cache.end(); ++it)
      if (it->first == sizes) {
        cache.splice(cache.begin(), cache, it);  // most recently used first
        return it->second;
      }
  }
  auto plan = make_plan(sizes);
  std::lock_guard<std::mutex> lock(cache_mutex);
  for (const auto& [key, existing] : cache)
    if (key == sizes) return existing;  // another thread built it meanwhile
  cache.emplace_front(sizes, plan);
  if (cache.size() > options.plan_cache_capacity) cache.pop_back();
  return plan;
}

std::shared_ptr<const ExecPlan> CompiledGraph::Impl::make_plan(
    const std::vector<std::vector<int64_t>>& sizes) {
  auto plan = std::make_shared<const ExecPlan>(*graph, sizes, options, threads);
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
  if (all_static) {
    std::vector<std::vector<int64_t>> sizes;
    for (const Value* in : impl->graph->inputs()) sizes.push_back(static_sizes(in->type().shape));
    impl->static_plan = impl->make_plan(sizes);
  }
  return std::shared_ptr<const CompiledGraph>(new CompiledGraph(std::move(impl)));
}

const Graph& CompiledGraph::graph() const { return *impl_->graph; }
const CompileOptions& CompiledGraph::options() const { return impl_->options; }
const std::vector<PassRecord>& CompiledGraph::pass_records() const {
  return impl_->pipeline_report.records;
}
const std::vector<std::string>& CompiledGraph::pipeline_warnings() const {
  return impl_->pipeline_report.warnings;
}

std::vector<std::vector<int64_t>> CompiledGraph::output_sizes(
    const std::vector<std::vector<int64_t>>& input_sizes) const {
  return impl_->plan_for(impl_->check_input_sizes(input_sizes))->output_sizes();
}

std::string CompiledGraph::describe_plan(
    const std::vector<std::vector<int64_t>>& input_sizes) const {
  return impl_->plan_for(impl_->check_input_sizes(input_sizes))->describe();
}

MemoryStats CompiledGraph::memory_stats(
    const std::vector<std::vector<int64_t>>& input_sizes) const {
  return impl_->plan_for(impl_->check_input_sizes(input_sizes))->memory_stats();
}

std::string CompiledGraph::memory_plan(const std::vector<std::vector<int64_t>>& input_sizes,
                                       const std::string& format) const {
  return impl_->plan_for(impl_->check_input_sizes(input_sizes))
      ->memory_plan(format, impl_->graph->name());
}

namespace {
std::vector<std::vector<int64_t>> sizes_of(const std::vector<TensorView>& views) {
  std::vector<std::vector<int64_t>> sizes;
  sizes.reserve(views.size());
  for (const TensorView& v : views) sizes.push_back(v.sizes);
  return sizes;
}
}  // namespace

std::vector<Tensor> CompiledGraph::run(const std::vector<TensorView>& inputs) const {
  impl_->check_input_sizes(sizes_of(inputs));
  impl_->check_buffers(inputs);
  auto plan = impl_->plan_for(sizes_of(inputs));
  std::vector<Tensor> outputs;
  std::vector<void*> pointers;
  for (size_t j = 0; j < plan->output_sizes().size(); ++j) {
    outputs.push_back(Tensor::empty(plan->output_dtypes()[j], plan->output_sizes()[j]));
    pointers.push_back(outputs.back().data());
  }
  plan->run(inputs, pointers);
  return outputs;
}

void CompiledGraph::run(const std::vector<TensorView>& inputs,
                        const std::vector<TensorView>& outputs) const {
  impl_->check_input_sizes(sizes_of(inputs));
  impl_->check_buffers(inputs);
  auto plan = impl_->plan_for(sizes_of(inputs));
  if (outputs.size() != plan->output_sizes().size())
    throw_error(ErrorCode::InputCount, "the graph '", impl_->graph->name(), "' has ",
                plan->output_sizes().size(), " outputs, got ", outputs.size(), " output buffers");
  std::vector<void*> pointers;
  for (size_t j = 0; j < outputs.size(); ++j) {
    std::string name = "output buffer " + std::to_string(j);
    if (outputs[j].dtype != plan->output_dtypes()[j])
      throw_error(ErrorCode::InputDType, name, " has dtype ", dtype_name(outputs[j].dtype),
                  ", expected ", dtype_name(plan->output_dtypes()[j]));
    if (outputs[j].sizes != plan->output_sizes()[j])
      throw_error(ErrorCode::InputShape, name, " has shape ", shape_string(outputs[j].sizes),
                  ", expected ", shape_string(plan->output_sizes()[j]));
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
  plan->run(inputs, pointers);
}

}  // namespace kiln
