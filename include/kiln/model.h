// Kiln's offline model (.kiln, docs/file-format.md) and the standalone runtime: save a compiled
// graph to one file, load it later without Python or PyTorch, inspect it and run it.
//
//   auto model = kiln::Model::load("resnet50.kiln");        // constants memory-mapped in place
//   kiln::Session session = model->session();
//   session.run(inputs, outputs);                            // caller buffers, zero copy
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kiln/error.h"
#include "kiln/runtime.h"

namespace kiln {

// What a model file says about its producer, beyond the graph itself.
struct ModelMetadata {
  std::string producer;       // "kiln 0.1.0"; filled in by save_model
  std::string torch_version;  // the PyTorch that captured the model; empty when not from torch
  // Free-form key/value pairs (export fills in "source", ...).
  std::map<std::string, std::string> properties;
};

// One graph input or output as a caller sees it.
struct ModelIO {
  std::string name;
  DType dtype = DType::F32;
  // Per dim: the static size, or -1 for a symbolic dim (see dim_names and the symbol's range).
  std::vector<int64_t> sizes;
  // Per dim: the symbol's name for a symbolic dim, empty for a static one.
  std::vector<std::string> dim_names;
};

// The plan the producer computed for the model's static input sizes, as recorded in the file.
struct ModelPlanRecord {
  bool present = false;                  // false for graphs with symbolic dims
  std::vector<std::string> node_kernels;  // "node = op [kernel name]" per step, in order
  int64_t arena_bytes = -1;               // -1 when the record doesn't say
  std::string description;                // CompiledGraph::describe_plan's text
};

struct LoadOptions {
  // Threads each kernel may use; -1 keeps the producer's compile option, 0 means every core.
  int threads = -1;
  // What to do when this build plans the static shapes differently from the recorded plan (a
  // different Kiln build or CPU): "warn" re-plans and reports it in Model::plan_warning(),
  // printing it to stderr; "strict" throws E10022; "ignore" re-plans silently.
  std::string plan_check = "warn";
};

class Session;

class Model : public std::enable_shared_from_this<Model> {
 public:
  // Memory-maps the file; constants are used in place. Throws E10020 for a malformed, truncated
  // or corrupted file, E10021 for a newer format version, E10022 for a plan mismatch when
  // options.plan_check is "strict", E50001 for an op this build doesn't know.
  static std::shared_ptr<const Model> load(const std::string& path, const LoadOptions& options = {});
  // The same from bytes in memory (copied into an aligned buffer the model keeps).
  static std::shared_ptr<const Model> load_from_memory(const void* data, size_t size,
                                                       const LoadOptions& options = {});

  const std::vector<ModelIO>& inputs() const { return inputs_; }
  const std::vector<ModelIO>& outputs() const { return outputs_; }
  const std::vector<Symbol>& symbols() const;
  const ModelMetadata& metadata() const { return metadata_; }
  const ModelPlanRecord& recorded_plan() const { return recorded_plan_; }
  // Non-empty when this build's plan differs from the recorded one (plan_check "warn").
  const std::string& plan_warning() const { return plan_warning_; }
  uint32_t format_version() const { return format_version_; }
  // The producer's CompileOptions as recorded (threads, kernel policy, disabled passes).
  const CompileOptions& compile_options() const { return compile_options_; }

  const Graph& graph() const { return compiled_->graph(); }
  const std::shared_ptr<const CompiledGraph>& compiled() const { return compiled_; }
  Session session() const;

  struct Parts;  // the parsed file, before compilation (model_file internals)

 private:
  Model() = default;
  static std::shared_ptr<const Model> from_parts(Parts parts, const LoadOptions& options);

  std::shared_ptr<const CompiledGraph> compiled_;
  std::vector<ModelIO> inputs_, outputs_;
  ModelMetadata metadata_;
  ModelPlanRecord recorded_plan_;
  std::string plan_warning_;
  uint32_t format_version_ = 0;
  CompileOptions compile_options_;
};

// Runs a model. Cheap to create and copy; any number of sessions (and threads) may run one model.
class Session {
 public:
  explicit Session(std::shared_ptr<const Model> model) : model_(std::move(model)) {}
  const Model& model() const { return *model_; }
  // Output sizes for concrete input sizes (validated like run()).
  std::vector<std::vector<int64_t>> output_sizes(
      const std::vector<std::vector<int64_t>>& input_sizes) const;
  // Runs with Kiln-allocated outputs.
  std::vector<Tensor> run(const std::vector<TensorView>& inputs) const;
  // Runs writing into caller buffers of output_sizes().
  void run(const std::vector<TensorView>& inputs, const std::vector<TensorView>& outputs) const;

 private:
  std::shared_ptr<const Model> model_;
};

// Writes `compiled` (its optimized graph, constants, the plan for static input sizes and
// `metadata`) to `path`. Throws E10001 when the file can't be written.
void save_model(const CompiledGraph& compiled, const std::string& path,
                const ModelMetadata& metadata = {});
// The same file as bytes.
std::vector<uint8_t> serialize_model(const CompiledGraph& compiled,
                                     const ModelMetadata& metadata = {});

}  // namespace kiln
