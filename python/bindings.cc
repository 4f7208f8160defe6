// The Python module kiln._C: thin nanobind wrappers over Kiln's public C++ API. Everything that
// decides anything (graph rules, compilation, input validation) stays in C++; this file only
// converts between Python objects and the C++ types.
//
// Arrays cross in both directions through DLPack without copies: inputs are read in place (any
// framework exporting CPU memory through DLPack or the buffer protocol), outputs wrap Kiln's own
// output tensors and are handed out as NumPy arrays or torch tensors. torch tensors cross
// through DLPack's C exchange API, with no Python code on the way; TorchCall is torch.compile's
// whole per-call path in C++.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "frontend/converter.h"
#include "passes/pass.h"
#include "runtime/profiler.h"
#include "kiln/kiln.h"
#include "kiln/model.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace kiln {
namespace {

// ---------------------------------------------------------------- dtypes

struct DTypeMapping {
  DType kiln;
  nb::dlpack::dtype dlpack;
};

constexpr nb::dlpack::dtype dl(nb::dlpack::dtype_code code, uint8_t bits) {
  return {static_cast<uint8_t>(code), bits, 1};
}

using Code = nb::dlpack::dtype_code;
constexpr DTypeMapping kDTypeMappings[] = {
    {DType::F32, dl(Code::Float, 32)}, {DType::F16, dl(Code::Float, 16)},
    {DType::BF16, dl(Code::Bfloat, 16)}, {DType::F64, dl(Code::Float, 64)},
    {DType::I64, dl(Code::Int, 64)},   {DType::I32, dl(Code::Int, 32)},
    {DType::I16, dl(Code::Int, 16)},   {DType::I8, dl(Code::Int, 8)},
    {DType::U8, dl(Code::UInt, 8)},    {DType::Bool, dl(Code::Bool, 8)},
};

std::optional<DType> dtype_from_dlpack(nb::dlpack::dtype t) {
  for (const DTypeMapping& m : kDTypeMappings)
    if (m.dlpack == t) return m.kiln;
  return std::nullopt;
}

nb::dlpack::dtype dlpack_dtype(DType d) {
  for (const DTypeMapping& m : kDTypeMappings)
    if (m.kiln == d) return m.dlpack;
  KILN_ASSERT(false, "no DLPack dtype for " << dtype_name(d));
}

std::string dtype_list() {
  std::string names;
  for (DType d : kAllDTypes) names += (names.empty() ? "" : ", ") + std::string(dtype_name(d));
  return names;
}

DType parse_dtype_or_throw(const std::string& name) {
  std::optional<DType> d = parse_dtype(name);
  if (!d)
    throw_error(ErrorCode::InvalidArgument, "unknown dtype '", name, "'; use one of ",
                dtype_list());
  return *d;
}

// ---------------------------------------------------------------- arrays in

std::string type_name_of(nb::handle obj) { return nb::type_name(obj.type()).c_str(); }

// A Python number as T, or E10001 when it doesn't fit (2**70 for an int64).
template <typename T>
T number_from_python(nb::handle h, const std::string& what) {
  T value;
  if (!nb::try_cast(h, value))
    throw_error(ErrorCode::InvalidArgument, what, " is ", nb::repr(h).c_str(),
                ", which doesn't fit a", std::is_integral_v<T> ? "n int64" : " double");
  return value;
}

// Kiln's view of DLPack-described memory; `what` names the argument in errors ("input 0").
TensorView dlpack_view(void* data, int32_t device_type, nb::dlpack::dtype t, size_t ndim,
                       const int64_t* shape, const int64_t* strides, const std::string& what) {
  if (device_type != nb::device::cpu::value)
    throw_error(ErrorCode::InputBuffer, what, " is not in CPU memory (DLPack device type ",
                device_type, "); Kiln runs on the CPU: move it there first, e.g. with "
                "tensor.cpu()");
  std::optional<DType> dtype = dtype_from_dlpack(t);
  if (!dtype)
    throw_error(ErrorCode::InputDType, what, " has a dtype Kiln doesn't support (DLPack code ",
                int(t.code), ", ", int(t.bits), " bits, ", int(t.lanes), " lanes); Kiln's "
                "dtypes are ", dtype_list());
  TensorView view;
  view.data = data;
  view.dtype = *dtype;
  view.sizes.assign(shape, shape + ndim);
  // Passed through as they are: the runtime decides what it accepts (E10005), nothing is copied.
  // An array without elements has no layout (NumPy reports zero strides): left empty, it reads
  // as contiguous, as do DLPack's null strides.
  if (view.numel() > 0 && strides) view.strides.assign(strides, strides + ndim);
  return view;
}

// Imports `obj` as an nb::ndarray (nb::ndarray<nb::ro> to read, nb::ndarray<> to write) without
// any conversion, and returns Kiln's view of its memory. `array` keeps the memory alive; `what`
// names the argument in errors ("input 0", "constant 'w'").
template <typename Array>
TensorView import_array(nb::handle obj, const std::string& what, Array& array) {
  if (!nb::try_cast(obj, array, /*convert=*/false)) {
    nb::ndarray<nb::ro> read_only;
    if (nb::try_cast(obj, read_only, /*convert=*/false))
      throw_error(ErrorCode::InputBuffer, what, " is read-only but Kiln writes to it; pass a "
                  "writable array");
    throw_error(ErrorCode::InvalidArgument, what, " is a ", type_name_of(obj),
                ", which Kiln can't read as an array; pass a NumPy array or a torch tensor on "
                "the CPU");
  }
  return dlpack_view(const_cast<void*>(static_cast<const void*>(array.data())),
                     array.device_type(), array.dtype(), array.ndim(), array.shape_ptr(),
                     array.stride_ptr(), what);
}

// ---------------------------------------------------------------- torch tensors at C level

// torch.Tensor crosses through DLPack's C exchange API (DLPack >= 1.2; the capsule
// torch.Tensor.__dlpack_c_exchange_api__): plain C calls, where Tensor.__dlpack__ and
// torch.utils.dlpack.from_dlpack are Python functions costing microseconds per tensor, most of
// a small graph's call (docs/benchmarks.md). The structs are DLPack's stable ABI as dlpack.h
// declares them; DLTensor is nanobind's nb::dlpack::dltensor.
namespace dlx {
struct Version {
  uint32_t major, minor;
};
struct ManagedTensorVersioned {
  Version version;
  void* manager_ctx;
  void (*deleter)(ManagedTensorVersioned* self);
  uint64_t flags;
  nb::dlpack::dltensor dl_tensor;
};
struct ExchangeAPI {
  Version version;
  void* prev_api;
  int (*managed_tensor_allocator)(nb::dlpack::dltensor*, ManagedTensorVersioned**, void*,
                                  void (*)(void*, const char*, const char*));
  int (*managed_tensor_from_py_object_no_sync)(void* py_object, ManagedTensorVersioned** out);
  int (*managed_tensor_to_py_object_no_sync)(ManagedTensorVersioned* tensor, void** out);
  int (*dltensor_from_py_object_no_sync)(void* py_object, nb::dlpack::dltensor* out);
  int (*current_work_stream)(int32_t device_type, int32_t device_id, void** out);
};
}  // namespace dlx

// torch.Tensor and its exchange API, looked up once torch is loaded (a tensor can only exist
// then; sys.modules is read rather than importing torch). The API is null for a torch without
// it (older than 2.10), which then crosses through nanobind's DLPack import and export.
struct TorchTypes {
  PyTypeObject* tensor = nullptr;
  const dlx::ExchangeAPI* api = nullptr;
};

const TorchTypes* torch_types() {
  static TorchTypes types;
  static bool found = false;
  if (found) return &types;
  PyObject* torch = PyDict_GetItemString(PyImport_GetModuleDict(), "torch");
  if (!torch) return nullptr;
  nb::object tensor = nb::getattr(torch, "Tensor", nb::none());
  if (tensor.is_none() || !PyType_Check(tensor.ptr())) return nullptr;
  types.tensor = reinterpret_cast<PyTypeObject*>(tensor.ptr());
  nb::object capsule = nb::getattr(tensor, "__dlpack_c_exchange_api__", nb::none());
  if (PyCapsule_CheckExact(capsule.ptr())) {
    auto* api = static_cast<const dlx::ExchangeAPI*>(
        PyCapsule_GetPointer(capsule.ptr(), "dlpack_exchange_api"));
    // The table's layout is that of major version 1 from minor 2 on.
    if (api && api->version.major == 1 && api->version.minor >= 2) types.api = api;
    PyErr_Clear();
  }
  found = true;  // the type and the table live as long as the process
  return &types;
}

// True for torch.Tensor and its subclasses (nn.Parameter, ...).
bool is_torch_tensor(nb::handle obj) {
  const TorchTypes* torch = torch_types();
  return torch && PyObject_TypeCheck(obj.ptr(), torch->tensor);
}

// An owning DLPack tensor from torch, released (torch's deleter) when this goes.
struct ManagedTensorDeleter {
  void operator()(dlx::ManagedTensorVersioned* t) const {
    if (t->deleter) t->deleter(t);
  }
};
using ManagedTensor = std::unique_ptr<dlx::ManagedTensorVersioned, ManagedTensorDeleter>;

// Kiln's view of a torch tensor's memory through the exchange API, or nothing when torch has no
// such API or refuses the tensor (then nanobind's import runs and reports why).
std::optional<TensorView> import_torch(nb::handle obj, const std::string& what,
                                       ManagedTensor& held) {
  const TorchTypes* torch = torch_types();
  if (!torch || !torch->api || !PyObject_TypeCheck(obj.ptr(), torch->tensor)) return std::nullopt;
  dlx::ManagedTensorVersioned* managed = nullptr;
  if (torch->api->managed_tensor_from_py_object_no_sync(obj.ptr(), &managed) != 0) {
    PyErr_Clear();
    return std::nullopt;
  }
  held.reset(managed);
  const nb::dlpack::dltensor& t = managed->dl_tensor;
  return dlpack_view(static_cast<char*>(t.data) + t.byte_offset, t.device.device_type, t.dtype,
                     size_t(t.ndim), t.shape, t.strides, what);
}

// A Kiln-owned tensor as DLPack hands it to torch: torch calls the deleter when its tensor dies.
struct ExportedTensor {
  dlx::ManagedTensorVersioned managed{};
  Tensor tensor;
  std::vector<int64_t> shape, strides;
};

// The tensor as a torch.Tensor on its memory without a copy, or nothing when torch has no
// exchange API.
std::optional<nb::object> export_torch(Tensor& tensor) {
  const TorchTypes* torch = torch_types();
  if (!torch || !torch->api) return std::nullopt;
  auto exported = std::make_unique<ExportedTensor>();
  exported->tensor = std::move(tensor);
  const Tensor& t = exported->tensor;
  exported->shape.assign(t.sizes().begin(), t.sizes().end());
  exported->strides.resize(exported->shape.size());
  int64_t stride = 1;  // Kiln's output tensors are dense and row-major
  for (size_t i = exported->shape.size(); i-- > 0;) {
    exported->strides[i] = stride;
    stride *= exported->shape[i];
  }
  dlx::ManagedTensorVersioned& m = exported->managed;
  m.version = {1, 0};
  m.manager_ctx = exported.get();
  m.deleter = [](dlx::ManagedTensorVersioned* self) {
    delete static_cast<ExportedTensor*>(self->manager_ctx);
  };
  m.dl_tensor.data = const_cast<void*>(static_cast<const void*>(t.data()));
  m.dl_tensor.device = {nb::device::cpu::value, 0};
  m.dl_tensor.ndim = int32_t(exported->shape.size());
  m.dl_tensor.dtype = dlpack_dtype(t.dtype());
  m.dl_tensor.shape = exported->shape.data();
  m.dl_tensor.strides = exported->strides.data();
  void* out = nullptr;
  if (torch->api->managed_tensor_to_py_object_no_sync(&m, &out) != 0) throw nb::python_error();
  exported.release();  // torch owns it now
  return nb::steal(static_cast<PyObject*>(out));
}

// Kiln only reads the data: a tensor tracked by autograd refuses DLPack export, its detached
// alias (same memory) doesn't.
nb::object readable(nb::handle obj) {
  if (is_torch_tensor(obj) && nb::cast<bool>(obj.attr("requires_grad")))
    return obj.attr("detach")();
  return nb::borrow(obj);
}

// A constant that uses the array's memory in place when Kiln's kernels can read it there
// (contiguous and aligned to kAlignment), else a copy. The graph may outlive the call and be
// freed on any thread, so its reference to the array is dropped under the GIL.
Tensor borrow_or_copy(const TensorView& view, const nb::ndarray<nb::ro>& array) {
  const bool in_place = view.numel() > 0 && view.is_contiguous() &&
                        reinterpret_cast<uintptr_t>(view.data) % kAlignment == 0;
  if (!in_place) return Tensor::copy_of(view);
  std::shared_ptr<const void> owner(new nb::ndarray<nb::ro>(array), [](const void* p) {
    if (!Py_IsInitialized()) return;  // the interpreter is gone, and the memory with it
    nb::gil_scoped_acquire gil;
    delete static_cast<const nb::ndarray<nb::ro>*>(p);
  });
  return Tensor::borrowed(view.dtype, view.sizes, view.data, std::move(owner));
}

// Arrays read by one call, held until it returns.
struct ImportedArrays {
  std::vector<nb::ndarray<nb::ro>> arrays;
  std::vector<ManagedTensor> tensors;  // torch tensors through the exchange API
  std::vector<TensorView> views;

  void add(nb::handle obj, const std::string& what) {
    ManagedTensor held;
    if (std::optional<TensorView> view = import_torch(obj, what, held)) {
      tensors.push_back(std::move(held));
      views.push_back(std::move(*view));
      return;
    }
    views.push_back(import_array(readable(obj), what, arrays.emplace_back()));
  }
};

std::vector<nb::handle> sequence_items(nb::handle seq, const char* what) {
  if (nb::ndarray_check(seq) || !(PyList_Check(seq.ptr()) || PyTuple_Check(seq.ptr())))
    throw_error(ErrorCode::InvalidArgument, what, " must be a list or tuple of arrays, got a ",
                type_name_of(seq), "; wrap a single array in a list");
  std::vector<nb::handle> items;
  for (nb::handle h : nb::borrow<nb::sequence>(seq)) items.push_back(h);
  return items;
}

ImportedArrays import_inputs(const std::vector<nb::handle>& inputs) {
  ImportedArrays imported;
  for (size_t i = 0; i < inputs.size(); ++i) imported.add(inputs[i], "input " + std::to_string(i));
  return imported;
}

// ---------------------------------------------------------------- arrays out

// Hands a Kiln-owned tensor to Python without a copy: the array's owner capsule keeps the
// tensor (and so its storage) alive for as long as the array lives.
nb::object export_tensor(Tensor tensor, bool as_torch) {
  if (as_torch)
    if (std::optional<nb::object> exported = export_torch(tensor)) return *exported;
  auto* owned = new Tensor(std::move(tensor));
  nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<Tensor*>(p); });
  std::vector<size_t> shape(owned->sizes().begin(), owned->sizes().end());
  nb::ndarray<> array(owned->data(), shape.size(), shape.data(), owner, nullptr,
                      dlpack_dtype(owned->dtype()), nb::device::cpu::value);
  if (as_torch) return nb::ndarray<nb::pytorch>(array).cast();
  return nb::ndarray<nb::numpy>(array).cast();
}

// Outputs come back in the framework of the first input: torch tensors for torch inputs,
// NumPy arrays otherwise (and for graphs without inputs).
std::vector<nb::object> run_and_export(const CompiledGraph& compiled,
                                       const std::vector<nb::handle>& inputs) {
  ImportedArrays imported = import_inputs(inputs);
  std::vector<Tensor> results;
  {
    nb::gil_scoped_release release;
    results = compiled.run(imported.views);
  }
  bool as_torch = !inputs.empty() && is_torch_tensor(inputs[0]);
  std::vector<nb::object> outputs;
  for (Tensor& t : results) outputs.push_back(export_tensor(std::move(t), as_torch));
  return outputs;
}

// The precision check's observer (python/kiln/_precision.py): a copy of every output of each
// node computing an FX node's output (annotation "fx") in the plain layout, in execution order.
// Outputs in a blocked layout are counted as skipped: PyTorch has no equivalent to compare.
struct CaptureObserver : RunObserver {
  struct Capture {
    std::string fx, node, op, kernel, aten, source;
    size_t output;
    std::string input_shapes;
    Tensor value;
  };
  std::vector<Capture> captures;
  size_t skipped = 0;

  void on_node(const NodeRun& run) override {
    const std::string fx = run.node.annotation("fx");
    if (fx.empty()) return;
    std::string shapes;
    for (size_t i = 0; i < run.inputs.size(); ++i)
      shapes.append(i ? "x" : "").append(shape_string(run.inputs[i].sizes));
    for (size_t k = 0; k < run.outputs.size(); ++k) {
      if (run.node.output(k)->type().layout != Layout::Plain) {
        ++skipped;
        continue;
      }
      captures.push_back(Capture{fx, run.node.name(), run.node.op(), run.kernel,
                                 run.node.annotation("aten"), run.node.annotation("source"), k,
                                 shapes, Tensor::copy_of(run.outputs[k])});
    }
  }
};

nb::tuple run_capture(const CompiledGraph& compiled, const std::vector<nb::handle>& inputs) {
  ImportedArrays imported = import_inputs(inputs);
  std::vector<Tensor> results;
  CaptureObserver observer;
  {
    nb::gil_scoped_release release;
    results = compiled.run(imported.views, observer);
  }
  bool as_torch = !inputs.empty() && is_torch_tensor(inputs[0]);
  nb::list outputs, captures;
  for (Tensor& t : results) outputs.append(export_tensor(std::move(t), as_torch));
  for (CaptureObserver::Capture& c : observer.captures) {
    nb::dict d;
    d["fx"] = c.fx;
    d["node"] = c.node;
    d["op"] = c.op;
    d["kernel"] = c.kernel;
    d["aten"] = c.aten;
    d["source"] = c.source;
    d["output"] = c.output;
    d["input_shapes"] = c.input_shapes;
    d["value"] = export_tensor(std::move(c.value), as_torch);
    captures.append(d);
  }
  return nb::make_tuple(outputs, captures, observer.skipped);
}

void run_into(const CompiledGraph& compiled, const std::vector<nb::handle>& inputs,
              const std::vector<nb::handle>& outputs) {
  ImportedArrays imported = import_inputs(inputs);
  std::vector<nb::ndarray<>> out_arrays(outputs.size());
  std::vector<TensorView> out_views;
  for (size_t i = 0; i < outputs.size(); ++i)
    out_views.push_back(import_array(outputs[i], "output " + std::to_string(i), out_arrays[i]));
  nb::gil_scoped_release release;
  compiled.run(imported.views, out_views);
}

// ---------------------------------------------------------------- torch.compile's call path

// A Kiln partition as torch.compile calls it (python/kiln/backend.py, docs/frontend.md): takes
// the call's arguments, re-checks the frozen weights, runs the graph on the arguments that are
// its inputs and returns torch tensors, with no Python code on the way unless a frozen weight
// changed. Per-call overhead is the point (docs/benchmarks.md).
class TorchCall {
 public:
  // A frozen position of nullopt is a weight the caller doesn't pass (dynamo's
  // install_free_tensors keeps parameters out of the call): only its version is checked.
  TorchCall(nb::object compiled, std::vector<size_t> inputs,
            std::vector<std::optional<size_t>> frozen_positions, nb::list frozen,
            nb::object refreeze, bool single_output)
      : inputs_(std::move(inputs)), frozen_positions_(std::move(frozen_positions)),
        refreeze_(std::move(refreeze)), single_output_(single_output) {
    for (size_t p : inputs_) arity_ = std::max(arity_, p + 1);
    for (std::optional<size_t> p : frozen_positions_)
      if (p) arity_ = std::max(arity_, *p + 1);
    reset(std::move(compiled), frozen);
  }

  // A new compiled graph for new frozen weights (given in frozen_positions' order).
  void reset(nb::object compiled, nb::list frozen) {
    if (!nb::isinstance<CompiledGraph>(compiled))
      throw_error(ErrorCode::InvalidArgument, "TorchCall needs a CompiledGraph, got a ",
                  type_name_of(compiled));
    if (frozen.size() != frozen_positions_.size())
      throw_error(ErrorCode::InvalidArgument, "TorchCall has ", frozen_positions_.size(),
                  " frozen position(s) but got ", frozen.size(), " tensor(s)");
    compiled_ = std::move(compiled);
    frozen_.clear();
    for (nb::handle t : frozen) frozen_.push_back(Frozen{nb::borrow(t), version(t)});
  }

  nb::object call(nb::args args) {
    if (args.size() < arity_)
      throw_error(ErrorCode::InvalidArgument, "the compiled partition takes at least ", arity_,
                  " argument(s), got ", args.size());
    // A frozen weight changed in place (its version counter moved) or replaced: the partition
    // is rebuilt on the new weights before it runs, never run on stale ones.
    auto frozen_arg = [&](size_t i) -> nb::handle {
      return frozen_positions_[i] ? args[*frozen_positions_[i]] : frozen_[i].tensor;
    };
    for (size_t i = 0; i < frozen_.size(); ++i) {
      nb::handle arg = frozen_arg(i);
      if (!arg.is(frozen_[i].tensor) || version(arg) != frozen_[i].version) {
        nb::list tensors;
        for (size_t k = 0; k < frozen_.size(); ++k) tensors.append(frozen_arg(k));
        refreeze_(tensors);  // calls reset()
        break;
      }
    }
    nb::object compiled = compiled_;  // held: a refreeze on another thread may replace it
    ImportedArrays imported;
    std::vector<nb::object> dense;  // contiguous copies of strided inputs, held for the run
    for (size_t k = 0; k < inputs_.size(); ++k) {
      nb::handle arg = args[inputs_[k]];
      imported.add(arg, "input " + std::to_string(k));
      // Kiln reads dense row-major memory: views and channels-last tensors made by PyTorch
      // (around a fallback op, or by the caller) are made contiguous, a copy only for them.
      if (!imported.views.back().is_contiguous() && is_torch_tensor(arg)) {
        dense.push_back(arg.attr("contiguous")());
        imported.views.pop_back();
        imported.add(dense.back(), "input " + std::to_string(k));
      }
    }
    std::vector<Tensor> results;
    {
      const CompiledGraph& graph = nb::cast<const CompiledGraph&>(compiled);
      nb::gil_scoped_release release;
      results = graph.run(imported.views);
    }
    if (single_output_) {
      KILN_ASSERT(results.size() == 1, "a single-output partition returned " << results.size());
      return export_tensor(std::move(results[0]), /*as_torch=*/true);
    }
    nb::object outputs = nb::steal(PyTuple_New(Py_ssize_t(results.size())));
    if (!outputs) throw nb::python_error();
    for (size_t i = 0; i < results.size(); ++i)
      PyTuple_SET_ITEM(outputs.ptr(), Py_ssize_t(i),
                       export_tensor(std::move(results[i]), /*as_torch=*/true).release().ptr());
    return outputs;
  }

  // The garbage collector's view (the refreeze callback usually refers back to the module
  // holding this object).
  static int traverse(PyObject* self, visitproc visit, void* arg) {
    Py_VISIT(Py_TYPE(self));
    if (!nb::inst_ready(self)) return 0;
    TorchCall* c = nb::inst_ptr<TorchCall>(self);
    Py_VISIT(c->compiled_.ptr());
    Py_VISIT(c->refreeze_.ptr());
    for (Frozen& f : c->frozen_) Py_VISIT(f.tensor.ptr());
    return 0;
  }

  static int clear(PyObject* self) {
    TorchCall* c = nb::inst_ptr<TorchCall>(self);
    c->refreeze_ = nb::none();
    c->frozen_positions_.clear();
    c->frozen_.clear();
    return 0;
  }

 private:
  struct Frozen {
    nb::object tensor;
    int64_t version;
  };

  static int64_t version(nb::handle tensor) {
    static PyObject* name = PyUnicode_InternFromString("_version");
    PyObject* version = PyObject_GetAttr(tensor.ptr(), name);
    if (!version) throw nb::python_error();  // not a tensor: its AttributeError
    return nb::cast<int64_t>(nb::steal(version));
  }

  std::vector<size_t> inputs_;
  std::vector<std::optional<size_t>> frozen_positions_;
  size_t arity_ = 0;
  nb::object compiled_, refreeze_;
  std::vector<Frozen> frozen_;
  bool single_output_;
};

PyType_Slot torch_call_slots[] = {{Py_tp_traverse, (void*)TorchCall::traverse},
                                  {Py_tp_clear, (void*)TorchCall::clear},
                                  {0, nullptr}};

// ---------------------------------------------------------------- graph building

// A Value of a Graph, with the Python Graph object that owns it: keeps the graph alive, lets
// shapes name their symbols, and lets the graph reject values of other graphs.
struct ValueRef {
  nb::object graph;
  Value* value;

  const Graph& owner() const { return *nb::inst_ptr<Graph>(graph); }
};

std::vector<ValueRef> refs(nb::handle graph, const std::vector<Value*>& values) {
  std::vector<ValueRef> out;
  for (Value* v : values) out.push_back(ValueRef{nb::borrow(graph), v});
  return out;
}

std::vector<Value*> values_of(nb::handle graph, const std::vector<ValueRef>& refs) {
  std::vector<Value*> out;
  for (const ValueRef& r : refs) {
    if (!r.graph.is(graph))
      throw_error(ErrorCode::InvalidArgument, "value '", r.value->name(), "' belongs to graph '",
                  r.owner().name(), "', not to graph '", nb::inst_ptr<Graph>(graph)->name(),
                  "'; use values of the graph being built");
    out.push_back(r.value);
  }
  return out;
}

int32_t symbol_id(const Graph& graph, const std::string& name) {
  int32_t id = graph.symbols().find(name);
  if (id < 0)
    throw_error(ErrorCode::InvalidArgument, "symbol '", name, "' is not declared in graph '",
                graph.name(), "'; declare it first with add_symbol()");
  return id;
}

// A shape entry is an int, a Symbol from add_symbol() or a symbol's name.
Shape shape_from_python(const Graph& graph, nb::handle seq, const std::string& what) {
  if (!(PyList_Check(seq.ptr()) || PyTuple_Check(seq.ptr())))
    throw_error(ErrorCode::InvalidArgument, "the shape of ", what,
                " must be a list or tuple, got a ", type_name_of(seq));
  Shape shape;
  for (nb::handle d : nb::borrow<nb::sequence>(seq)) {
    if (nb::isinstance<Symbol>(d))
      shape.push_back(Dim::symbolic(symbol_id(graph, nb::cast<const Symbol&>(d).name)));
    else if (nb::isinstance<nb::str>(d))
      shape.push_back(Dim::symbolic(symbol_id(graph, nb::cast<std::string>(d))));
    else if (!PyBool_Check(d.ptr()) && PyIndex_Check(d.ptr()))
      shape.push_back(Dim(number_from_python<int64_t>(d, "a dim of " + what)));
    else
      throw_error(ErrorCode::InvalidArgument, "the shape of ", what, " has a ", type_name_of(d),
                  "; shape entries are ints, Symbols or symbol names");
  }
  return shape;
}

nb::list shape_to_python(const Graph& graph, const Shape& shape) {
  nb::list out;
  for (const Dim& d : shape) {
    if (d.is_static())
      out.append(d.size());
    else
      out.append(graph.symbols()[d.symbol()].name);
  }
  return out;
}

// Python attribute values map onto Attr kinds: bool, int, float, str, and lists of one of them
// (a list mixing ints and floats is a float list; an empty list fits any list attribute).
enum class AttrKind { Int, Float, Bool, Str, Other };

AttrKind attr_kind(nb::handle h) {
  if (PyBool_Check(h.ptr())) return AttrKind::Bool;  // before Int: bool is an int in Python
  if (PyIndex_Check(h.ptr())) return AttrKind::Int;
  if (PyFloat_Check(h.ptr())) return AttrKind::Float;
  if (PyUnicode_Check(h.ptr())) return AttrKind::Str;
  return AttrKind::Other;
}

template <typename T>
T attr_scalar(nb::handle h, const std::string& what) {
  if constexpr (std::is_same_v<T, std::string>)
    return nb::cast<std::string>(h);
  else if constexpr (std::is_same_v<T, bool>)
    return h.ptr() == Py_True;
  else
    return number_from_python<T>(h, what);
}

template <typename T>
std::vector<T> attr_list(const std::vector<nb::handle>& items, const std::string& what) {
  std::vector<T> out;
  for (nb::handle h : items) out.push_back(attr_scalar<T>(h, what + " item"));
  return out;
}

Attr attr_from_python(nb::handle v, const std::string& key) {
  const std::string what = "attribute '" + key + "'";
  auto bad = [&](const std::string& got) {
    return Error(ErrorCode::InvalidArgument,
                 what + " is " + got + "; attributes are bool, int, float, str or a list of one "
                 "of these");
  };
  switch (attr_kind(v)) {
    case AttrKind::Int: return attr_scalar<int64_t>(v, what);
    case AttrKind::Float: return attr_scalar<double>(v, what);
    case AttrKind::Bool: return attr_scalar<bool>(v, what);
    case AttrKind::Str: return attr_scalar<std::string>(v, what);
    case AttrKind::Other: break;
  }
  if (!(PyList_Check(v.ptr()) || PyTuple_Check(v.ptr()))) throw bad("a " + type_name_of(v));
  std::vector<nb::handle> items;
  for (nb::handle h : nb::borrow<nb::sequence>(v)) items.push_back(h);
  AttrKind kind = items.empty() ? AttrKind::Int : attr_kind(items[0]);
  for (nb::handle h : items) {
    AttrKind k = attr_kind(h);
    bool numbers = (k == AttrKind::Int || k == AttrKind::Float) &&
                   (kind == AttrKind::Int || kind == AttrKind::Float);
    if (k == AttrKind::Other) throw bad("a list holding a " + type_name_of(h));
    if (k != kind && !numbers)
      throw bad("a list mixing " + type_name_of(items[0]) + " and " + type_name_of(h));
    if (k != kind) kind = AttrKind::Float;
  }
  switch (kind) {
    case AttrKind::Int: return attr_list<int64_t>(items, what);
    case AttrKind::Float: return attr_list<double>(items, what);
    case AttrKind::Bool: return attr_list<bool>(items, what);
    default: return attr_list<std::string>(items, what);
  }
}

AttrMap attrs_from_python(const nb::dict& attrs) {
  AttrMap out;
  for (auto [k, v] : attrs) {
    if (!nb::isinstance<nb::str>(k))
      throw_error(ErrorCode::InvalidArgument, "attribute names must be str, got a ",
                  type_name_of(k));
    std::string key = nb::cast<std::string>(k);
    out.emplace(key, attr_from_python(v, key));
  }
  return out;
}

// ---------------------------------------------------------------- errors

// Raises kiln.Error with the full message ("E50001: ...") and the attributes `code` ("E50001")
// `detail` (the message without the code) and `fx_node` (Error::fx_node).
void translate_error(const std::exception_ptr& p, void* error_type) {
  try {
    std::rethrow_exception(p);
  } catch (const Error& e) {
    nb::object exc = nb::handle(static_cast<PyObject*>(error_type))(e.what());
    exc.attr("code") = std::string(error_code_string(e.code()));
    exc.attr("detail") = e.detail();
    exc.attr("fx_node") = e.fx_node();
    PyErr_SetObject(static_cast<PyObject*>(error_type), exc.ptr());
  }
}

}  // namespace
}  // namespace kiln

NB_MODULE(_C, m) {
  using namespace kiln;
  m.doc() = "Kiln's C++ core; use it through the `kiln` package.";
  // Objects still referenced when the interpreter tears modules down (a TorchCall kept in a
  // user's global next to dynamo's caches, which outlive this module) are reported by nanobind
  // as leaks at exit: noise for users, and no measure of memory held while running.
  nb::set_leak_warnings(false);

  nb::object error_type = nb::steal(PyErr_NewExceptionWithDoc(
      "kiln.Error",
      "An error Kiln reports with a code: `code` is the code (\"E50001\"), `detail` the message "
      "without it. docs/errors.md lists every code.",
      PyExc_Exception, nullptr));
  m.attr("Error") = error_type;
  nb::register_exception_translator(translate_error, error_type.ptr());

  nb::list dtypes;
  for (DType d : kAllDTypes) dtypes.append(std::string(dtype_name(d)));
  m.attr("dtypes") = nb::tuple(dtypes);

  nb::class_<Symbol>(m, "Symbol", "A dynamic dimension declared by Graph.add_symbol().")
      .def_ro("name", &Symbol::name)
      .def_ro("min", &Symbol::min)
      .def_ro("max", &Symbol::max)
      .def("__repr__", [](const Symbol& s) {
        return "Symbol(" + s.name + " in [" + std::to_string(s.min) + ", " +
               std::to_string(s.max) + "])";
      });

  nb::class_<ValueRef>(m, "Value", "A tensor of a Graph: an input, a constant or a node output.")
      .def_prop_ro("name", [](const ValueRef& r) { return r.value->name(); })
      .def_prop_ro("dtype",
                   [](const ValueRef& r) { return std::string(dtype_name(r.value->type().dtype)); })
      .def_prop_ro(
          "shape",
          [](const ValueRef& r) { return shape_to_python(r.owner(), r.value->type().shape); },
          "Dims as ints, or symbol names for dynamic ones.")
      .def("__repr__",
           [](const ValueRef& r) {
             return "Value(" + r.value->name() + ": " +
                    type_string(r.value->type(), &r.owner().symbols()) + ")";
           })
      .def("__eq__", [](const ValueRef& a, const ValueRef& b) { return a.value == b.value; })
      .def("__hash__", [](const ValueRef& r) { return std::hash<const Value*>()(r.value); });

  nb::class_<Graph>(m, "Graph", "A graph under construction (the C++ kiln::Graph builder).")
      .def(nb::init<std::string>(), "name"_a = "main")
      .def_prop_ro("name", &Graph::name)
      .def("add_symbol", [](Graph& g, const std::string& name, int64_t min, int64_t max) {
             return g.symbols()[g.add_symbol(name, min, max).symbol()];
           }, "name"_a, "min"_a, "max"_a,
           "Declares a dynamic dimension with the inclusive range [min, max]; use the returned "
           "Symbol (or its name) in input shapes.")
      .def("add_input",
           [](nb::pointer_and_handle<Graph> g, const std::string& name, const std::string& dtype,
              nb::handle shape) {
             TensorType type{parse_dtype_or_throw(dtype),
                             shape_from_python(*g.p, shape, "input '" + name + "'"),
                             Layout::Plain};
             return ValueRef{nb::borrow(g.h), g.p->add_input(name, std::move(type))};
           },
           "name"_a, "dtype"_a, "shape"_a,
           "Adds a graph input; `shape` holds ints, Symbols or symbol names.")
      .def("add_constant",
           [](nb::pointer_and_handle<Graph> g, const std::string& name, nb::handle data) {
             nb::ndarray<nb::ro> array;
             std::string what = "constant '" + name + "'";
             TensorView view = import_array(readable(data), what, array);
             if (!view.is_contiguous())
               throw_error(ErrorCode::InputBuffer, what, " is not contiguous; pass "
                           "numpy.ascontiguousarray(a) or tensor.contiguous()");
             return ValueRef{nb::borrow(g.h), g.p->add_constant(name, Tensor::copy_of(view))};
           },
           "name"_a, "data"_a, "Adds a constant (weights), copying the array's data once.")
      .def("add",
           [](nb::pointer_and_handle<Graph> g, const std::string& op,
              const std::vector<ValueRef>& inputs, const nb::dict& attrs, const std::string& name) {
             return ValueRef{nb::borrow(g.h), g.p->add(op, values_of(g.h, inputs),
                                                         attrs_from_python(attrs), name)};
           },
           "op"_a, "inputs"_a, "attrs"_a = nb::dict(), "name"_a = "",
           "Adds a node of a single-output op and returns its output.")
      .def("add_node",
           [](nb::pointer_and_handle<Graph> g, const std::string& op,
              const std::vector<ValueRef>& inputs, const nb::dict& attrs, const std::string& name) {
             return refs(g.h, g.p->add_node(op, values_of(g.h, inputs), attrs_from_python(attrs),
                                            name));
           },
           "op"_a, "inputs"_a, "attrs"_a = nb::dict(), "name"_a = "",
           "Adds a node and returns the list of its outputs.")
      .def("set_outputs",
           [](nb::pointer_and_handle<Graph> g, const std::vector<ValueRef>& outputs) {
             g.p->set_outputs(values_of(g.h, outputs));
           },
           "outputs"_a)
      .def_prop_ro("inputs",
                   [](nb::pointer_and_handle<Graph> g) { return refs(g.h, g.p->inputs()); })
      .def_prop_ro("outputs",
                   [](nb::pointer_and_handle<Graph> g) { return refs(g.h, g.p->outputs()); })
      .def("verify", [](const Graph& g) { verify(g); },
           "Checks every rule of the IR; raises kiln.Error E40001 naming the first broken one.")
      .def("__str__", &print_graph, "The textual IR (docs/ir.md).")
      .def_static("parse", &parse_graph, "text"_a,
                  "Parses the textual IR; raises kiln.Error E10010 with line:column.");

  nb::class_<CompiledGraph>(m, "CompiledGraph",
                            "A compiled graph; run it any number of times, from any threads.")
      .def("__call__",
           [](const CompiledGraph& c, nb::args inputs) -> nb::object {
             std::vector<nb::handle> items(inputs.begin(), inputs.end());
             std::vector<nb::object> outputs = run_and_export(c, items);
             if (outputs.size() == 1) return outputs[0];
             nb::list list;
             for (nb::object& o : outputs) list.append(o);
             return nb::tuple(list);
           },
           "Runs on the given arrays; returns the output for single-output graphs, else a tuple.")
      .def("run",
           [](const CompiledGraph& c, nb::handle inputs, nb::handle outputs) -> nb::object {
             std::vector<nb::handle> in = sequence_items(inputs, "inputs");
             if (outputs.is_none()) {
               nb::list list;
               for (nb::object& o : run_and_export(c, in)) list.append(o);
               return list;
             }
             run_into(c, in, sequence_items(outputs, "outputs"));
             return nb::none();
           },
           "inputs"_a, "outputs"_a = nb::none(),
           "Runs on a list of input arrays. Without `outputs`, returns a list of new output "
           "arrays; with `outputs` (writable arrays of output_sizes()), writes into them and "
           "returns None.")
      .def("output_sizes", &CompiledGraph::output_sizes, "input_sizes"_a,
           "The output sizes for the given input sizes (validated as run() would).")
      .def("describe_plan", &CompiledGraph::describe_plan, "input_sizes"_a,
           "The plan for the given input sizes: kernel per node and the memory plan.")
      .def(
          "memory_stats",
          [](const CompiledGraph& c, const std::vector<std::vector<int64_t>>& input_sizes) {
            MemoryStats m = c.memory_stats(input_sizes);
            nb::dict d;
            d["arena_bytes"] = m.arena_bytes;
            d["intermediate_bytes"] = m.intermediate_bytes;
            d["peak_live_bytes"] = m.peak_live_bytes;
            d["buffers"] = m.buffers;
            d["in_place"] = m.in_place;
            d["placement"] = m.placement;
            d["schedule"] = m.schedule;
            d["prepacked_bytes"] = m.prepacked_bytes;
            d["released_constant_bytes"] = m.released_constant_bytes;
            return d;
          },
          "input_sizes"_a,
          "What the memory planner did for these input sizes: a dict with arena_bytes, "
          "intermediate_bytes (all intermediates unshared), peak_live_bytes (the lower bound), "
          "buffers, in_place, placement, schedule, prepacked_bytes (weights reordered for the "
          "kernels, shared by every plan of the graph) and released_constant_bytes (constants the "
          "compile made, folded weights, dropped since only prepacked copies are read).")
      .def("cached_plans", &CompiledGraph::cached_plans,
           "The input sizes of the cached plans, most recently used first (gears included).")
      .def("memory_plan", &CompiledGraph::memory_plan, "input_sizes"_a, "format"_a = "table",
           "The memory plan for these input sizes as a table ('table': buffer, size, offset, "
           "first and last step, producer) or an SVG chart of offset over time ('svg').")
      .def(
          "pass_records",
          [](const CompiledGraph& c) {
            nb::list records;
            for (const PassRecord& r : c.pass_records()) {
              nb::dict d;
              d["pass"] = r.pass;
              d["stage"] = r.stage;
              d["round"] = r.round;
              d["changed"] = r.changed;
              d["nodes_before"] = r.nodes_before;
              d["nodes_after"] = r.nodes_after;
              d["seconds"] = r.seconds;
              records.append(d);
            }
            return records;
          },
          "Every pass run of the compile, in order: dicts with pass, stage, round, changed, "
          "nodes_before, nodes_after, seconds.")
      .def("run_capture",
           [](const CompiledGraph& c, nb::handle inputs) {
             return run_capture(c, sequence_items(inputs, "inputs"));
           },
           "inputs"_a,
           "Runs like run(inputs) and also returns a copy of each output of every node that "
           "computes an FX node's output (the precision check): (outputs, captures, skipped), "
           "captures in execution order as dicts with fx, node, op, kernel, aten, source, "
           "output (index), input_shapes and value; skipped counts outputs in a blocked layout.")
      .def("pipeline_warnings", &CompiledGraph::pipeline_warnings,
           "Fixed-point groups of the pipeline that hit their round cap (empty when all converged).");

  nb::class_<TorchCall>(m, "TorchCall", nb::type_slots(torch_call_slots),
                        "A Kiln partition as torch.compile calls it: call(*args) re-checks the "
                        "frozen weights, runs on the arguments at `inputs` and returns torch "
                        "tensors (the lone output with single_output, else a tuple).")
      .def(nb::init<nb::object, std::vector<size_t>, std::vector<std::optional<size_t>>,
                    nb::list, nb::object, bool>(),
           "compiled"_a, "inputs"_a, "frozen_positions"_a, "frozen"_a, "refreeze"_a,
           "single_output"_a,
           "compiled: a CompiledGraph; inputs: the argument positions of its inputs; frozen: "
           "the tensors frozen into it, at argument positions frozen_positions (None: not an "
           "argument, the frozen tensor itself is checked); refreeze: called with the tensors "
           "at frozen_positions (a list) when one of them is not the frozen tensor or its "
           "version counter moved, and must call reset().")
      .def("reset", &TorchCall::reset, "compiled"_a, "frozen"_a,
           "Replaces the compiled graph and the frozen tensors (in frozen_positions' order).")
      .def("__call__", &TorchCall::call);

  m.def(
      "import_fx",
      [](const std::string& graph_json, const nb::dict& constants) {
        std::map<std::string, Tensor> tensors;
        for (auto [key, value] : constants) {
          std::string name = nb::cast<std::string>(key);
          nb::ndarray<nb::ro> array;
          tensors[name] = borrow_or_copy(
              import_array(readable(value), "constant '" + name + "'", array), array);
        }
        return import_fx_graph(graph_json, tensors);
      },
      "graph_json"_a, "constants"_a,
      "Builds a Graph from a serialized ATen FX graph (docs/frontend.md). Contiguous, aligned "
      "constants are used in place (the frozen weights are not copied), the others copied.");
  m.def("fx_node_support", &fx_node_support, "graph_json"_a,
        "For each node of a serialized FX graph: '' when Kiln converts it, else why not.");
  m.def(
      "write_profiles",
      [](const std::string& path, size_t top) {
        nb::list reports;
        for (const std::shared_ptr<Profiler>& p : Profiler::shared_profilers()) {
          if (!path.empty() && p->path() != path) continue;
          p->write();
          nb::dict d;
          d["path"] = p->path();
          d["runs"] = p->runs();
          d["summary"] = p->summary(top);
          reports.append(d);
        }
        return reports;
      },
      "path"_a = "", "top"_a = 15,
      "Writes the profiles of the graphs alive now (debug.profile, KILN_PROFILE), or only the "
      "one at `path`; returns [{path, runs, summary}] with the top nodes by time as a table.");
  m.def("pass_names", [] { return default_pipeline().pass_names(); },
        "The passes of Kiln's pipeline, in order (for disabled_passes).");
  m.def("converter_targets", [] { return ConverterRegistry::instance().targets(); },
        "The ATen op overloads Kiln has converters for.");

  // Offline models (python/kiln/export.py, docs/file-format.md).
  m.def(
      "save_model",
      [](const CompiledGraph& compiled, const std::string& path, std::string torch_version,
         std::map<std::string, std::string> properties) {
        save_model(compiled, path, ModelMetadata{"", std::move(torch_version), std::move(properties)});
      },
      "compiled"_a, "path"_a, "torch_version"_a = "",
      "properties"_a = std::map<std::string, std::string>(),
      "Writes a compiled graph as a .kiln model file.");
  m.def(
      "load_model",
      [](const std::string& path, int threads, std::string plan_check) {
        auto model = Model::load(path, LoadOptions{threads, std::move(plan_check)});
        auto io = [](const std::vector<ModelIO>& list) {
          nb::list out;
          for (const ModelIO& v : list) {
            nb::dict d;
            d["name"] = v.name;
            d["dtype"] = std::string(dtype_name(v.dtype));
            d["sizes"] = v.sizes;
            d["dim_names"] = v.dim_names;
            out.append(d);
          }
          return out;
        };
        nb::dict info, meta;
        info["inputs"] = io(model->inputs());
        info["outputs"] = io(model->outputs());
        meta["producer"] = model->metadata().producer;
        meta["torch_version"] = model->metadata().torch_version;
        meta["properties"] = model->metadata().properties;
        info["metadata"] = meta;
        info["plan_warning"] = model->plan_warning();
        // The compiled graph keeps the file mapping alive through its constants.
        return nb::make_tuple(std::const_pointer_cast<CompiledGraph>(model->compiled()), info);
      },
      "path"_a, "threads"_a = -1, "plan_check"_a = "warn",
      "Loads a .kiln model: (CompiledGraph, info dict with inputs, outputs, metadata).");

  nb::class_<MemoryPool>(m, "MemoryPool",
                         "One arena lent in turn to the compiled graphs given it "
                         "(memory.enable_shared_pool; docs/config.md has the threading rule).")
      .def(nb::new_([] { return std::make_shared<MemoryPool>(); }))
      .def_prop_ro("arena_bytes", &MemoryPool::arena_bytes,
                   "The largest arena of the plans built with the pool so far.")
      .def_prop_ro("arenas", &MemoryPool::arenas, "Arenas allocated so far.");

  m.def(
      "compile",
      [](const Graph& graph, int threads, int optimization_level, std::string kernel_policy,
         bool verify, std::vector<std::string> disabled_passes, size_t plan_cache_capacity,
         std::string dump_type, std::string dump_path, size_t memory_reuse_threshold,
         std::string memory_optimization_level, std::shared_ptr<MemoryPool> memory_pool,
         std::vector<std::vector<std::vector<int64_t>>> gears, bool pad_to_gear,
         std::string profile_path, bool gemm_weights_in_place, bool release_prepacked_constants) {
        CompileOptions options;
        options.release_prepacked_constants = release_prepacked_constants;
        options.gemm_weights_in_place = gemm_weights_in_place;
        options.profile_path = std::move(profile_path);
        options.gears = std::move(gears);
        options.pad_to_gear = pad_to_gear;
        options.memory_reuse_threshold = memory_reuse_threshold;
        options.memory_optimization_level = std::move(memory_optimization_level);
        options.memory_pool = std::move(memory_pool);
        options.threads = threads;
        options.optimization_level = optimization_level;
        options.kernel_policy = std::move(kernel_policy);
        options.verify = verify;
        options.disabled_passes.insert(disabled_passes.begin(), disabled_passes.end());
        options.plan_cache_capacity = plan_cache_capacity;
        options.dump_type = std::move(dump_type);
        options.dump_path = std::move(dump_path);
        // nanobind binds non-const classes; every CompiledGraph method is const.
        return std::const_pointer_cast<CompiledGraph>(CompiledGraph::compile(graph, options));
      },
      "graph"_a, "threads"_a = 0, "optimization_level"_a = 3, "kernel_policy"_a = "",
      "verify"_a = false,
      "disabled_passes"_a = std::vector<std::string>(), "plan_cache_capacity"_a = 16,
      "dump_type"_a = "", "dump_path"_a = "./kiln_dump", "memory_reuse_threshold"_a = 0,
      "memory_optimization_level"_a = "default", "memory_pool"_a.none() = nb::none(),
      "gears"_a = std::vector<std::vector<std::vector<int64_t>>>(), "pad_to_gear"_a = false,
      "profile_path"_a = "", "gemm_weights_in_place"_a = false,
      "release_prepacked_constants"_a = true,
      "Compiles a graph (the graph is copied; later edits don't affect the result).");
}
