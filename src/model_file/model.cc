// Model and Session: a .kiln file memory-mapped, checked and compiled for this machine.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>

#include "model_file/reader.h"
#include "passes/pass.h"

namespace kiln {

namespace {

void check_load_options(const LoadOptions& o) {
  if (o.threads < -1)
    throw_error(ErrorCode::InvalidArgument, "LoadOptions.threads = ", o.threads,
                " is invalid; use -1 (the producer's), 0 (every core) or a positive count");
  if (o.plan_check != "warn" && o.plan_check != "strict" && o.plan_check != "ignore")
    throw_error(ErrorCode::InvalidArgument, "LoadOptions.plan_check = '", o.plan_check,
                "' is unknown; use 'warn', 'strict' or 'ignore'");
}

// The first line where two plan descriptions differ, for the mismatch message.
std::string first_difference(const std::string& a, const std::string& b) {
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  auto line_at = [i](const std::string& s) {
    size_t begin = s.rfind('\n', i == 0 ? 0 : i - 1);
    begin = begin == std::string::npos || i == 0 ? 0 : begin + 1;
    return s.substr(begin, s.find('\n', begin) - begin);
  };
  return "recorded '" + line_at(a) + "', this build '" + line_at(b) + "'";
}

}  // namespace

std::shared_ptr<const Model> Model::from_parts(Parts parts, const LoadOptions& options) {
  auto model = std::shared_ptr<Model>(new Model());
  model->format_version_ = parts.format_version;
  model->metadata_ = std::move(parts.metadata);
  model->recorded_plan_ = std::move(parts.plan);
  model->compile_options_ = parts.options;

  // The stored graph is the producer's pipeline output: planned as is, every pass off.
  CompileOptions compile = parts.options;
  if (options.threads >= 0) compile.threads = options.threads;
  compile.verify = false;
  std::vector<std::string> passes = default_pipeline().pass_names();
  compile.disabled_passes = std::set<std::string>(passes.begin(), passes.end());
  try {
    model->compiled_ = CompiledGraph::compile(*parts.graph, compile);
  } catch (const Error& e) {
    // A bad option or graph in the file; E50001 (an op or kernel this build lacks) and E60003
    // keep their codes.
    if (e.code() != ErrorCode::InvalidGraph && e.code() != ErrorCode::ShapeInference &&
        e.code() != ErrorCode::InvalidArgument)
      throw;
    throw_error(ErrorCode::BadModelFile, "the model file's graph is invalid: ", e.what(),
                "; re-export the model with this version of Kiln");
  }

  const Graph& graph = model->compiled_->graph();
  auto io = [&](const Value* v) {
    ModelIO m{v->name(), v->type().dtype, {}, {}};
    for (const Dim& d : v->type().shape) {
      m.sizes.push_back(d.is_static() ? d.size() : -1);
      m.dim_names.push_back(d.is_static() ? "" : graph.symbols()[d.symbol()].name);
    }
    return m;
  };
  for (const Value* v : graph.inputs()) model->inputs_.push_back(io(v));
  for (const Value* v : graph.outputs()) model->outputs_.push_back(io(v));

  // Kernel choice depends on the CPU and the thread count: compare like with like only.
  const ModelPlanRecord& recorded = model->recorded_plan_;
  if (recorded.present && options.plan_check != "ignore" &&
      compile.threads == model->compile_options_.threads) {
    std::vector<std::vector<int64_t>> sizes;
    for (const ModelIO& in : model->inputs_) sizes.push_back(in.sizes);
    std::string mine = model->compiled_->describe_plan(sizes);
    if (mine != recorded.description) {
      std::string message = "the model's recorded plan differs from this build's (a different "
                            "Kiln build or CPU): " + first_difference(recorded.description, mine);
      if (options.plan_check == "strict")
        throw_error(ErrorCode::ModelPlanMismatch, message,
                    "; load with plan_check 'warn' to re-plan, or re-export with this build");
      model->plan_warning_ = message + "; re-planned for this machine";
      std::cerr << "kiln: warning: " << model->plan_warning_ << "\n";
    }
  }
  return model;
}

std::shared_ptr<const Model> Model::load_from_memory(const void* data, size_t size,
                                                     const LoadOptions& options) {
  check_load_options(options);
  // An aligned copy: constants are used in place and must be 64-byte aligned.
  Tensor copy = Tensor::empty(DType::U8, {static_cast<int64_t>(size)});
  if (size) std::memcpy(copy.data(), data, size);
  auto owner = std::make_shared<Tensor>(copy);
  return from_parts(model_file::read_model(copy.data<uint8_t>(), size, owner), options);
}

std::shared_ptr<const Model> Model::load(const std::string& path, const LoadOptions& options) {
  check_load_options(options);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  struct stat st {};
  if (fd < 0 || ::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    std::string why = fd < 0 ? std::strerror(errno) : "not a regular file";
    if (fd >= 0) ::close(fd);
    throw_error(ErrorCode::InvalidArgument, "can't open the model file '", path, "': ", why);
  }
  size_t size = static_cast<size_t>(st.st_size);
  if (size < model_file::kHeaderSize) {
    ::close(fd);
    throw_error(ErrorCode::BadModelFile, "the model file '", path, "' is truncated (", size,
                " bytes; the header alone is ", model_file::kHeaderSize, ")");
  }
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);  // the mapping stays valid without the descriptor
  if (map == MAP_FAILED)
    throw_error(ErrorCode::OutOfMemory, "can't map the model file '", path, "' (", size,
                " bytes): ", std::strerror(errno));
  // Constants point into the mapping; the last tensor using one unmaps it.
  std::shared_ptr<const void> owner(map, [size](const void* p) { ::munmap(const_cast<void*>(p), size); });
  try {
    return from_parts(model_file::read_model(static_cast<const uint8_t*>(map), size, owner,
                                             /*file_mapping=*/true),
                      options);
  } catch (const Error& e) {
    throw Error(e.code(), "'" + path + "': " + e.detail());
  }
}

const std::vector<Symbol>& Model::symbols() const { return graph().symbols().all(); }

Session Model::session() const { return Session(shared_from_this()); }

std::vector<std::vector<int64_t>> Session::output_sizes(
    const std::vector<std::vector<int64_t>>& input_sizes) const {
  return model_->compiled()->output_sizes(input_sizes);
}

std::vector<Tensor> Session::run(const std::vector<TensorView>& inputs) const {
  return model_->compiled()->run(inputs);
}

void Session::run(const std::vector<TensorView>& inputs, const std::vector<TensorView>& outputs) const {
  model_->compiled()->run(inputs, outputs);
}

}  // namespace kiln
