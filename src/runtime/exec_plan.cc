#include "runtime/exec_plan.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <iomanip>
#include <sstream>
#include <unordered_map>

#include "runtime/kernel_selection.h"
#include "runtime/memory_schedule.h"

namespace kiln {

namespace {

constexpr size_t kNone = SIZE_MAX;

// Bytes of a tensor of static type `t`; E60003 when no allocation could hold them.
size_t tensor_bytes(const TensorType& t, const std::string& name) {
  const std::vector<int64_t> sizes = static_sizes(t.shape);
  if (std::find(sizes.begin(), sizes.end(), 0) != sizes.end()) return 0;
  size_t bytes = dtype_size(t.dtype);
  long double exact = static_cast<long double>(bytes);
  bool overflow = false;
  for (int64_t d : sizes) {
    overflow |= __builtin_mul_overflow(bytes, static_cast<size_t>(d), &bytes);
    exact *= static_cast<long double>(d);
  }
  if (overflow || bytes > static_cast<size_t>(PTRDIFF_MAX)) {
    std::ostringstream size;
    size << std::fixed << std::setprecision(0) << exact;
    throw_error(ErrorCode::OutOfMemory, "tensor '", name, "' (", type_string(t), ") needs ",
                size.str(), " bytes, more than any allocation can hold (", PTRDIFF_MAX,
                "); reduce the batch or sequence size");
  }
  return bytes;
}

Tensor allocate_arena(size_t bytes) {
  try {
    return Tensor::empty(DType::U8, {static_cast<int64_t>(bytes)});
  } catch (const Error& e) {
    if (e.code() != ErrorCode::OutOfMemory) throw;
    throw_error(ErrorCode::OutOfMemory, "could not allocate the plan's arena of ", bytes,
                " bytes; reduce the batch or sequence size, or free memory");
  }
}

// What lay_out reads of a plan: its steps (in graph order) and, per slot, the bytes (arena
// slots only), dtype and name of its value.
struct LayoutInput {
  const std::vector<PlanStep>& steps;
  const std::vector<Slot>& slots;
  const std::vector<size_t>& slot_bytes;
  const std::vector<DType>& slot_dtypes;
  const std::vector<std::string>& slot_names;
  size_t reuse_threshold;
};

// One candidate memory layout: an execution order, the arena buffers it implies (an output
// written in place shares its input's buffer) and their placement.
struct MemoryLayout {
  std::string schedule;
  std::vector<size_t> order;  // step indices in execution order
  std::vector<BufferLifetime> buffers;
  std::vector<std::vector<size_t>> buffer_slots;  // the arena slots each buffer holds
  std::vector<size_t> scratch_buffer;             // per step, its scratch buffer or kNone
  size_t in_place = 0;
  MemoryPlan plan;
};

// The buffer of an input of `step` that output `o` may overwrite, or kNone. The input must be
// declared by the kernel, live in the arena, die at this step (time `now`) and match the
// output's dtype and bytes; inputs the kernel reads at undeclared positions must not share it.
size_t in_place_buffer(const LayoutInput& in, const MemoryLayout& layout, const PlanStep& step,
                       size_t o, int now, const std::vector<int>& last,
                       const std::vector<size_t>& buffer_of) {
  if (in.slot_bytes[o] < in.reuse_threshold) return kNone;
  if (step.output_aliases_input) {
    // A view shares its input's buffer however long either lives: nothing writes a buffer in
    // place before its last reader, and the buffer's life now covers the view's readers.
    const size_t x = step.inputs[0];
    const size_t b = buffer_of[x];
    const bool same =
        in.slot_bytes[x] == in.slot_bytes[o] && in.slot_dtypes[x] == in.slot_dtypes[o];
    return b != kNone && same ? b : kNone;
  }
  for (size_t i : step.in_place_inputs) {
    if (i >= step.inputs.size()) continue;  // a declared variadic position this node lacks
    const size_t x = step.inputs[i];
    const size_t b = buffer_of[x];
    if (b == kNone || last[x] != now || layout.buffers[b].last_step != now ||
        in.slot_bytes[x] != in.slot_bytes[o] || in.slot_dtypes[x] != in.slot_dtypes[o])
      continue;
    bool declared = true;
    for (size_t j = 0; j < step.inputs.size(); ++j)
      declared &= buffer_of[step.inputs[j]] != b ||
                  std::find(step.in_place_inputs.begin(), step.in_place_inputs.end(), j) !=
                      step.in_place_inputs.end();
    if (declared) return b;
  }
  return kNone;
}

MemoryLayout lay_out(const LayoutInput& in, std::vector<size_t> order, std::string schedule) {
  MemoryLayout layout;
  layout.schedule = std::move(schedule);
  layout.order = std::move(order);
  std::vector<int> last(in.slots.size(), -1);  // time of each slot's last reader
  for (size_t t = 0; t < layout.order.size(); ++t)
    for (size_t slot : in.steps[layout.order[t]].inputs) last[slot] = static_cast<int>(t);
  std::vector<size_t> buffer_of(in.slots.size(), kNone);
  layout.scratch_buffer.assign(in.steps.size(), kNone);
  for (size_t t = 0; t < layout.order.size(); ++t) {
    const PlanStep& step = in.steps[layout.order[t]];
    const int now = static_cast<int>(t);
    for (size_t k = 0; k < step.outputs.size(); ++k) {
      const size_t o = step.outputs[k];
      if (in.slots[o].kind != Slot::Kind::Arena) continue;
      const int dies = std::max(last[o], now);
      size_t b = k == 0 ? in_place_buffer(in, layout, step, o, now, last, buffer_of) : kNone;
      if (b == kNone) {
        b = layout.buffers.size();
        layout.buffers.push_back(
            BufferLifetime{in.slot_names[o], in.slot_bytes[o], now, dies, step.node->name()});
        layout.buffer_slots.emplace_back();
      } else {
        BufferLifetime& buffer = layout.buffers[b];
        buffer.name +=
            ", " + in.slot_names[o] + (step.output_aliases_input ? " (view)" : " (in place)");
        buffer.last_step = std::max(buffer.last_step, dies);
        ++layout.in_place;
      }
      buffer_of[o] = b;
      layout.buffer_slots[b].push_back(o);
    }
    if (size_t scratch = step.kernel->scratch_bytes()) {
      layout.scratch_buffer[layout.order[t]] = layout.buffers.size();
      layout.buffers.push_back(BufferLifetime{"scratch of " + step.node->name(), scratch, now,
                                              now, step.node->name()});
      layout.buffer_slots.emplace_back();
    }
  }
  layout.plan = plan_memory(layout.buffers, kAlignment, in.reuse_threshold);
  return layout;
}

}  // namespace

ExecPlan::ExecPlan(const Graph& graph, const std::vector<std::vector<int64_t>>& input_sizes,
                   const CompileOptions& options, int threads, PreparedConstants* prepared,
                   KernelCache* kernels, ConstantRelease* release)
    : graph_(&graph) {
  std::unordered_map<const Value*, TensorType> types;
  std::unordered_map<const Value*, size_t> slot_of;
  auto new_slot = [&](const Value* v, Slot slot) {
    slot_of[v] = slots_.size();
    slots_.push_back(slot);
  };
  for (size_t i = 0; i < graph.inputs().size(); ++i) {
    const Value* v = graph.inputs()[i];
    types[v] = TensorType{v->type().dtype, make_shape(input_sizes[i]), v->type().layout};
    new_slot(v, Slot{Slot::Kind::Input, i});
  }
  for (const Value* v : graph.constants()) {
    types[v] = v->type();
    new_slot(v, Slot{Slot::Kind::Constant, 0, &v->constant()});
  }

  // The first listing of a node's output among the graph outputs is written in place.
  std::unordered_map<const Value*, size_t> direct_output;
  for (size_t j = 0; j < graph.outputs().size(); ++j) {
    const Value* v = graph.outputs()[j];
    if (v->kind() == Value::Kind::NodeOutput && !direct_output.count(v)) direct_output[v] = j;
  }
  // An output that is a view (a reshape: the same bytes) of a value read by nothing else: that
  // value is written into the output's memory too, so the view copies nothing (a language
  // model's logits, [S, V] viewed as [1, S, V], were copied whole after every run).
  for (size_t j = 0; j < graph.outputs().size(); ++j) {
    const Value* v = graph.outputs()[j];
    for (;;) {
      if (v->kind() != Value::Kind::NodeOutput || direct_output.at(v) != j) break;
      const Node* view = v->producer();
      const OpDef* def = OpRegistry::instance().find(view->op());
      if (!def || def->kernels.empty() || !def->kernels.front().output_aliases_input) break;
      const Value* u = view->input(0);
      if (u->kind() != Value::Kind::NodeOutput || u->users().size() != 1 ||
          direct_output.count(u) || u->type().dtype != v->type().dtype)
        break;
      direct_output[u] = j;
      v = u;
    }
  }

  // The input sizes bind the graph's symbols, so sizes written over them (reshape's sym_shape,
  // ...) evaluate for this plan.
  SymbolTable symbols = graph.symbols();
  for (size_t i = 0; i < graph.inputs().size(); ++i)
    for (size_t axis = 0; axis < input_sizes[i].size(); ++axis)
      if (const Dim& d = graph.inputs()[i]->type().shape[axis]; !d.is_static())
        symbols.bind(d.symbol(), input_sizes[i][axis]);
  std::vector<Node*> nodes = graph.nodes();
  for (size_t s = 0; s < nodes.size(); ++s) {
    const Node* node = nodes[s];
    const OpDef* def = OpRegistry::instance().find(node->op());
    if (!def)
      throw_error(ErrorCode::UnsupportedOperator, "node '", node->name(), "' has unknown op '",
                  node->op(), "'");
    KernelSpec spec{*node, {}, {}, {}, threads, prepared, options.gemm_weights_in_place};
    for (const Value* in : node->inputs()) {
      spec.inputs.push_back(types.at(in));
      spec.constant_inputs.push_back(in->kind() == Value::Kind::Constant ? &in->constant()
                                                                         : nullptr);
    }
    AttrMap attrs = node->attrs();
    spec.outputs = infer_node_types(*def, node->name(), spec.inputs, attrs, symbols);
    for (const TensorType& t : spec.outputs)
      KILN_ASSERT(is_static(t.shape), "node " << node->name() << " inferred a symbolic shape "
                                              << type_string(t) << " from static inputs");
    SharedKernel choice;
    if (kernels) {
      choice = kernels->select(*def, spec, options.kernel_policy);
    } else {
      KernelChoice made = select_kernel(*def, spec, options.kernel_policy);
      choice = {made.kernel, std::move(made.instance)};
    }
    if (release)
      for (size_t i = 0; i < node->inputs().size(); ++i)
        if (node->input(i)->kind() == Value::Kind::Constant)
          release->planned(node->input(i), choice.instance->reads_input_at_run_time(i));
    PlanStep step{node, choice.kernel->name, std::move(choice.instance), {}, {}, 0};
    step.in_place_inputs = choice.kernel->in_place_inputs;
    step.output_aliases_input = choice.kernel->output_aliases_input;
    step.engine = choice.kernel->engine;
    for (const TensorType& t : spec.inputs)
      step.input_views.push_back(TensorView{nullptr, t.dtype, static_sizes(t.shape), {}});
    for (const TensorType& t : spec.outputs)
      step.output_views.push_back(TensorView{nullptr, t.dtype, static_sizes(t.shape), {}});
    for (const Value* in : node->inputs()) step.inputs.push_back(slot_of.at(in));
    for (size_t i = 0; i < node->outputs().size(); ++i) {
      const Value* out = node->output(i);
      types[out] = spec.outputs[i];
      auto direct = direct_output.find(out);
      const Slot& first_input = slots_[step.inputs.empty() ? 0 : step.inputs[0]];
      if (direct != direct_output.end()) {
        new_slot(out, Slot{Slot::Kind::Output, direct->second});
      } else if (step.output_aliases_input && first_input.kind == Slot::Kind::Input) {
        // A view of a graph input reads the caller's memory (never written: only arena
        // buffers are written in place), where it copied the input before.
        new_slot(out, first_input);
      } else {
        new_slot(out, Slot{Slot::Kind::Arena});
      }
      step.outputs.push_back(slot_of[out]);
    }
    max_arity_in_ = std::max(max_arity_in_, step.inputs.size());
    max_arity_out_ = std::max(max_arity_out_, step.outputs.size());
    steps_.push_back(std::move(step));
  }

  // Stages schedule and memory: candidate execution orders, each laid out (lifetimes from the
  // order, in-place merges, the best placement); the smallest arena wins, ties to the first.
  std::vector<size_t> slot_bytes(slots_.size(), 0);
  std::vector<DType> slot_dtypes(slots_.size(), DType::U8);
  std::vector<std::string> slot_names(slots_.size());
  StepGraph step_graph;
  long double total = 0;  // every arena buffer aligned: no offset of any placement exceeds it
  for (const PlanStep& step : steps_) {
    for (size_t k = 0; k < step.outputs.size(); ++k) {
      const Value* out = step.node->output(k);
      const size_t o = step.outputs[k];
      slot_dtypes[o] = types[out].dtype;
      slot_names[o] = out->name();
      if (slots_[o].kind == Slot::Kind::Arena) slot_bytes[o] = tensor_bytes(types[out], out->name());
      total += static_cast<long double>(slot_bytes[o]) + kAlignment;
    }
    total += static_cast<long double>(step.kernel->scratch_bytes()) + kAlignment;
    memory_stats_.intermediate_bytes += step.kernel->scratch_bytes();
    step_graph.reads.push_back(step.inputs);
    step_graph.writes.push_back(step.outputs);
  }
  for (size_t bytes : slot_bytes) memory_stats_.intermediate_bytes += bytes;
  if (total > static_cast<long double>(PTRDIFF_MAX)) {
    std::ostringstream size;
    size << std::fixed << std::setprecision(0) << total;
    throw_error(ErrorCode::OutOfMemory, "the intermediate tensors of graph '", graph.name(),
                "' need up to ", size.str(), " bytes, more than any arena can hold (",
                PTRDIFF_MAX, "); reduce the batch or sequence size");
  }
  step_graph.value_bytes = slot_bytes;
  const LayoutInput layout_input{steps_,      slots_,    slot_bytes,
                                 slot_dtypes, slot_names, options.memory_reuse_threshold};
  // The schedule stage runs at optimization level 3 (docs/passes.md), like the pass stage of
  // that name.
  std::vector<ScheduleHeuristic> schedules = {ScheduleHeuristic::GraphOrder};
  if (options.optimization_level >= 3)
    schedules = {ScheduleHeuristic::GraphOrder, ScheduleHeuristic::FreesMost,
                 ScheduleHeuristic::SmallestWrites};
  std::vector<MemoryLayout> layouts;
  if (options.memory_optimization_level == "aggressive") {
    for (ScheduleHeuristic h : schedules)
      layouts.push_back(lay_out(layout_input, schedule_steps(step_graph, h), schedule_name(h)));
  } else {
    // One order: the greedy one when it lowers the bytes live at once, else the graph's.
    ScheduleHeuristic pick = ScheduleHeuristic::GraphOrder;
    std::vector<size_t> order = schedule_steps(step_graph, pick);
    if (schedules.size() > 1) {
      std::vector<size_t> greedy = schedule_steps(step_graph, ScheduleHeuristic::FreesMost);
      if (peak_bytes(step_graph, greedy) < peak_bytes(step_graph, order)) {
        order = std::move(greedy);
        pick = ScheduleHeuristic::FreesMost;
      }
    }
    layouts.push_back(lay_out(layout_input, std::move(order), schedule_name(pick)));
  }
  size_t best = 0;
  for (size_t i = 1; i < layouts.size(); ++i)
    if (layouts[i].plan.arena_size < layouts[best].plan.arena_size) best = i;
  MemoryLayout& layout = layouts[best];
  for (size_t b = 0; b < layout.buffers.size(); ++b)
    for (size_t slot : layout.buffer_slots[b]) slots_[slot].index = layout.plan.offsets[b];
  for (size_t s = 0; s < steps_.size(); ++s)
    if (layout.scratch_buffer[s] != kNone)
      steps_[s].scratch_offset = layout.plan.offsets[layout.scratch_buffer[s]];
  std::vector<PlanStep> ordered;
  for (size_t s : layout.order) ordered.push_back(std::move(steps_[s]));
  steps_ = std::move(ordered);
  memory_stats_.arena_bytes = layout.plan.arena_size;
  memory_stats_.peak_live_bytes = peak_live_bytes(layout.buffers, kAlignment);
  memory_stats_.buffers = layout.buffers.size();
  memory_stats_.in_place = layout.in_place;
  memory_stats_.placement = layout.plan.strategy;
  memory_stats_.schedule = layout.schedule;
  buffers_ = std::move(layout.buffers);
  memory_plan_ = std::move(layout.plan);
  shared_pool_ = options.memory_pool;
  if (shared_pool_) shared_pool_->reserve(memory_plan_.arena_size);

  for (size_t j = 0; j < graph.outputs().size(); ++j) {
    const Value* v = graph.outputs()[j];
    const TensorType& t = types.at(v);
    output_sizes_.push_back(static_sizes(t.shape));
    output_dtypes_.push_back(t.dtype);
    auto direct = direct_output.find(v);
    if (direct == direct_output.end() || direct->second != j)
      output_copies_.push_back(OutputCopy{
          slot_of.at(v), j,
          static_cast<size_t>(num_elements(output_sizes_.back())) * dtype_size(t.dtype)});
  }
}

std::unique_ptr<RunContext> ExecPlan::acquire() const {
  {
    std::lock_guard<std::mutex> lock(pool_mutex_);
    if (!idle_contexts_.empty()) {
      auto context = std::move(idle_contexts_.back());
      idle_contexts_.pop_back();
      return context;
    }
  }
  auto context = std::make_unique<RunContext>();
  if (!shared_pool_) context->arena = allocate_arena(memory_plan_.arena_size);
  context->slot_pointers.resize(slots_.size());
  context->step_inputs.resize(max_arity_in_);
  context->step_outputs.resize(max_arity_out_);
  return context;
}

void ExecPlan::release(std::unique_ptr<RunContext> context) const {
  std::lock_guard<std::mutex> lock(pool_mutex_);
  idle_contexts_.push_back(std::move(context));
}

void ExecPlan::run_observed(size_t s, const RunContext& context, std::byte* arena,
                            RunObserver& observer) const {
  const PlanStep& step = steps_[s];
  std::vector<TensorView> ins = step.input_views, outs = step.output_views;
  for (size_t i = 0; i < ins.size(); ++i) ins[i].data = context.slot_pointers[step.inputs[i]];
  for (size_t i = 0; i < outs.size(); ++i) outs[i].data = context.slot_pointers[step.outputs[i]];
  const auto start = std::chrono::steady_clock::now();
  step.kernel->run(std::span<const void* const>(context.step_inputs.data(), step.inputs.size()),
                   std::span<void* const>(context.step_outputs.data(), step.outputs.size()),
                   arena + step.scratch_offset);
  const auto end = std::chrono::steady_clock::now();
  observer.on_node(NodeRun{*graph_, *step.node, step.kernel_name, step.engine, s, steps_.size(),
                           ins, outs, start, end});
}

void ExecPlan::run(const std::vector<TensorView>& inputs, const std::vector<void*>& outputs,
                   RunObserver* observer) const {
  std::unique_ptr<RunContext> context = acquire();
  struct Release {
    const ExecPlan* plan;
    std::unique_ptr<RunContext>& context;
    ~Release() { plan->release(std::move(context)); }
  } release{this, context};
  // A shared pool lends the arena for this run only.
  struct Borrow {
    MemoryPool* pool;
    Tensor arena;
    ~Borrow() {
      if (pool) pool->release(std::move(arena));
    }
  } borrowed{shared_pool_.get(),
             shared_pool_ ? shared_pool_->acquire(memory_plan_.arena_size) : Tensor()};

  auto* arena =
      static_cast<std::byte*>(shared_pool_ ? borrowed.arena.data() : context->arena.data());
  for (size_t i = 0; i < slots_.size(); ++i) {
    const Slot& slot = slots_[i];
    switch (slot.kind) {
      case Slot::Kind::Input: context->slot_pointers[i] = inputs[slot.index].data; break;
      case Slot::Kind::Constant: context->slot_pointers[i] = slot.constant->data(); break;
      case Slot::Kind::Arena: context->slot_pointers[i] = arena + slot.index; break;
      case Slot::Kind::Output: context->slot_pointers[i] = outputs[slot.index]; break;
    }
  }
  for (size_t s = 0; s < steps_.size(); ++s) {
    const PlanStep& step = steps_[s];
    for (size_t i = 0; i < step.inputs.size(); ++i)
      context->step_inputs[i] = context->slot_pointers[step.inputs[i]];
    for (size_t i = 0; i < step.outputs.size(); ++i)
      context->step_outputs[i] = context->slot_pointers[step.outputs[i]];
    if (observer) [[unlikely]] {
      run_observed(s, *context, arena, *observer);
      continue;
    }
    step.kernel->run(std::span<const void* const>(context->step_inputs.data(), step.inputs.size()),
                     std::span<void* const>(context->step_outputs.data(), step.outputs.size()),
                     arena + step.scratch_offset);
  }
  for (const OutputCopy& copy : output_copies_)
    if (copy.bytes) std::memcpy(outputs[copy.output], context->slot_pointers[copy.slot], copy.bytes);
}

std::string ExecPlan::describe() const {
  std::ostringstream out;
  out << "steps:\n";
  for (size_t s = 0; s < steps_.size(); ++s) {
    const PlanStep& step = steps_[s];
    out << "  " << s << ": " << step.node->name() << " = " << step.node->op() << " [kernel "
        << step.kernel_name << "]\n";
  }
  out << memory_plan_.to_string(buffers_);
  return out.str();
}

std::string ExecPlan::memory_plan(const std::string& format, const std::string& title) const {
  if (format == "table") {
    std::ostringstream out;
    out << "schedule " << memory_stats_.schedule << ", " << memory_stats_.in_place
        << " output(s) in place, " << memory_stats_.peak_live_bytes
        << " bytes live at the peak step, " << memory_stats_.intermediate_bytes
        << " bytes of intermediates\n"
        << memory_plan_.to_string(buffers_);
    return out.str();
  }
  if (format == "svg") return memory_plan_.to_svg(buffers_, title);
  throw_error(ErrorCode::InvalidArgument, "memory plan format '", format,
              "' is unknown; use 'table' or 'svg'");
}

size_t MemoryPool::arena_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return reserved_;
}

size_t MemoryPool::arenas() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return allocated_;
}

void MemoryPool::reserve(size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  reserved_ = std::max(reserved_, bytes);
}

Tensor MemoryPool::acquire(size_t bytes) {
  Tensor arena;
  size_t size;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    size = std::max(reserved_, bytes);
    if (!idle_.empty()) {
      arena = std::move(idle_.back());
      idle_.pop_back();
    }
  }
  // An arena from before a larger plan reserved its size is replaced (outside the lock).
  if (arena.defined() && arena.nbytes() >= bytes) return arena;
  arena = allocate_arena(size);
  std::lock_guard<std::mutex> lock(mutex_);
  ++allocated_;
  return arena;
}

void MemoryPool::release(Tensor arena) {
  std::lock_guard<std::mutex> lock(mutex_);
  idle_.push_back(std::move(arena));
}

}  // namespace kiln
