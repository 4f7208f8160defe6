// `kiln`: inspect, run, benchmark and dump .kiln models (docs/file-format.md) without Python.
//
//   kiln info  model.kiln
//   kiln run   model.kiln [--input NAME=FILE.npy ...] [--shape NAME=1x3x224x224 ...] --output-dir DIR
//   kiln bench model.kiln [--threads N] [--iterations N] [--warmup N] [--shape NAME=1x3x224x224 ...]
//              [--profile trace.json]
//   kiln dump  model.kiln --format txt|json|dot|png|svg -o OUT
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "ir/graph_dump.h"
#include "kernels/cpu/float16.h"
#include "kiln/kiln.h"
#include "kiln/model.h"
#include "runtime/profiler.h"

namespace kiln {
namespace {

const char* kUsage =
    "usage: kiln <command> [options]   (kiln <command> --help for its options)\n"
    "commands:\n"
    "  info   inputs, outputs, op and engine counts, memory plan size, producer\n"
    "  run    run once on .npy inputs (random when none are given), write .npy outputs\n"
    "  bench  latency (min, median, p90, p99) and throughput\n"
    "  dump   the graph as txt, json, dot, png or svg\n";

const std::map<std::string, std::string> kCommandHelp = {
    {"info", "usage: kiln info MODEL.kiln\n"
             "Prints the model's inputs and outputs (symbolic dims with their ranges), op counts,\n"
             "kernel and engine counts of the recorded plan, memory plan size and producer.\n"},
    {"run", "usage: kiln run MODEL.kiln [--input NAME=FILE.npy ...] [--shape NAME=DxDx... ...]\n"
            "                [--threads N] [--seed N] --output-dir DIR\n"
            "Runs the model once. Inputs not given as .npy files are random, with the size given\n"
            "by --shape or, for symbolic dims, the smallest of their range. Each output is\n"
            "written to DIR/<output name>.npy.\n"},
    {"bench", "usage: kiln bench MODEL.kiln [--threads N] [--iterations N] [--warmup N]\n"
              "                  [--shape NAME=DxDx... ...] [--seed N]\n"
              "Loads the model (the load time is reported), runs --warmup untimed then\n"
              "--iterations timed runs (default 5 and 100) on random inputs, and prints latency\n"
              "min, median, p90, p99, throughput and the peak resident memory. --threads is the\n"
              "threads per kernel (0: every core; default: the producer's compile option).\n"
              "--profile PATH times every node of the timed runs (which adds a little to the\n"
              "latency), writes a Chrome trace to PATH (open it in Perfetto) and prints the nodes\n"
              "that took the most time.\n"},
    {"dump", "usage: kiln dump MODEL.kiln --format txt|json|dot|png|svg -o OUT\n"
             "Writes the model's graph: txt (textual IR, docs/ir.md), json, dot (Graphviz), or\n"
             "png/svg rendered by Graphviz's dot program.\n"},
};

[[noreturn]] void usage_error(const std::string& message) {
  throw_error(ErrorCode::InvalidArgument, message, "; see kiln --help");
}

struct Args {
  std::string model;
  std::map<std::string, std::vector<std::string>> options;  // --name → values in order
  bool help = false;

  std::string one(const std::string& name, const std::string& fallback) const {
    auto it = options.find(name);
    return it == options.end() ? fallback : it->second.back();
  }
};

// Parses "MODEL --opt value --opt2 value ..."; every option takes one value.
Args parse_args(int argc, char** argv, int first, const std::vector<std::string>& known) {
  Args a;
  for (int i = first; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      a.help = true;
    } else if (arg.rfind("-", 0) == 0) {
      std::string name = arg == "-o" ? "-o" : arg.substr(2);
      if (std::find(known.begin(), known.end(), name) == known.end())
        usage_error("unknown option '" + arg + "'");
      if (i + 1 >= argc) usage_error("option '" + arg + "' needs a value");
      a.options[name].push_back(argv[++i]);
    } else if (a.model.empty()) {
      a.model = arg;
    } else {
      usage_error("unexpected argument '" + arg + "'");
    }
  }
  if (!a.help && a.model.empty()) usage_error("no model file given");
  return a;
}

int64_t parse_int(const std::string& text, const std::string& what, int64_t min) {
  size_t used = 0;
  int64_t v = 0;
  try {
    v = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size() || v < min)
    usage_error(what + " '" + text + "' is not an integer >= " + std::to_string(min));
  return v;
}

std::pair<std::string, std::string> split_pair(const std::string& text, const std::string& what) {
  size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0) usage_error(what + " '" + text + "' is not NAME=VALUE");
  return {text.substr(0, eq), text.substr(eq + 1)};
}

size_t input_index(const Model& model, const std::string& name) {
  for (size_t i = 0; i < model.inputs().size(); ++i)
    if (model.inputs()[i].name == name) return i;
  std::string names;
  for (const ModelIO& in : model.inputs()) names += " " + in.name;
  usage_error("the model has no input '" + name + "'; its inputs are:" + names);
}

std::string io_string(const Model& model, const ModelIO& io) {
  std::ostringstream out;
  out << io.name << " : " << dtype_name(io.dtype) << "[";
  for (size_t d = 0; d < io.sizes.size(); ++d) {
    out << (d ? ", " : "");
    if (io.sizes[d] >= 0) {
      out << io.sizes[d];
      continue;
    }
    out << io.dim_names[d];
    for (const Symbol& s : model.symbols())
      if (s.name == io.dim_names[d]) out << " in [" << s.min << ", " << s.max << "]";
  }
  return out.str() + "]";
}

// ---------------------------------------------------------------- .npy

const std::map<DType, std::string> kNpyDescr = {
    {DType::F32, "<f4"}, {DType::F16, "<f2"}, {DType::F64, "<f8"}, {DType::I64, "<i8"},
    {DType::I32, "<i4"}, {DType::I16, "<i2"}, {DType::I8, "|i1"},  {DType::U8, "|u1"},
    {DType::Bool, "|b1"}};

// NumPy has no bfloat16: such tensors are stored as their raw 16-bit patterns.
std::string npy_descr(DType dtype) {
  return dtype == DType::BF16 ? "<u2" : kNpyDescr.at(dtype);
}

[[noreturn]] void bad_npy(const std::string& path, const std::string& why) {
  throw_error(ErrorCode::InvalidArgument, "'", path, "' is not a readable .npy file: ", why,
              "; write it with numpy.save");
}

// The value of `key` in the header dict: the text up to the next top-level ',' or '}'.
std::string npy_field(const std::string& header, const std::string& key, const std::string& path) {
  size_t at = header.find("'" + key + "'");
  if (at == std::string::npos) bad_npy(path, "the header has no '" + key + "'");
  size_t colon = header.find(':', at);
  if (colon == std::string::npos) bad_npy(path, "the header is malformed");
  size_t begin = header.find_first_not_of(' ', colon + 1), end = begin;
  if (begin == std::string::npos) bad_npy(path, "the header is malformed");
  int depth = 0;
  for (; end < header.size(); ++end) {
    char c = header[end];
    if (c == '(') ++depth;
    if (c == ')') --depth;
    if (depth == 0 && (c == ',' || c == '}')) break;
  }
  return header.substr(begin, end - begin);
}

Tensor read_npy(const std::string& path, DType expected, const std::string& input) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_error(ErrorCode::InvalidArgument, "can't open '", path, "'");
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (all.size() < 10 || all.compare(0, 6, "\x93NUMPY") != 0) bad_npy(path, "no NumPy magic");
  int major = static_cast<uint8_t>(all[6]);
  size_t len_bytes = major == 1 ? 2 : 4;
  if (major < 1 || major > 3 || all.size() < 8 + len_bytes) bad_npy(path, "unknown version");
  size_t header_len = 0;
  for (size_t i = 0; i < len_bytes; ++i) header_len |= size_t(uint8_t(all[8 + i])) << (8 * i);
  size_t data_at = 8 + len_bytes + header_len;
  if (data_at > all.size()) bad_npy(path, "truncated header");
  std::string header = all.substr(8 + len_bytes, header_len);

  std::string descr = npy_field(header, "descr", path);
  if (descr.size() < 2) bad_npy(path, "bad descr");
  descr = descr.substr(1, descr.size() - 2);  // strip quotes
  if (descr != npy_descr(expected))
    throw_error(ErrorCode::InputDType, "'", path, "' holds dtype '", descr, "' but input '",
                input, "' is ", dtype_name(expected), " ('", npy_descr(expected),
                "'); convert it with array.astype");
  if (npy_field(header, "fortran_order", path) != "False")
    bad_npy(path, "it is in Fortran order; save numpy.ascontiguousarray(a)");
  std::string shape = npy_field(header, "shape", path);
  std::vector<int64_t> sizes;
  std::string item;
  std::istringstream dims(shape.substr(1, shape.size() >= 2 ? shape.size() - 2 : 0));
  while (std::getline(dims, item, ',')) {
    item.erase(0, item.find_first_not_of(' '));
    if (!item.empty()) sizes.push_back(parse_int(item, "the shape of '" + path + "'", 0));
  }
  int64_t bytes = static_cast<int64_t>(dtype_size(expected));
  for (int64_t d : sizes)
    if (__builtin_mul_overflow(bytes, d, &bytes)) bad_npy(path, "its shape is too large");
  if (all.size() - data_at != static_cast<uint64_t>(bytes))
    bad_npy(path, "it has " + std::to_string(all.size() - data_at) + " data bytes, its shape needs " +
                      std::to_string(bytes));
  Tensor t = Tensor::empty(expected, sizes);
  if (t.nbytes()) std::memcpy(t.data(), all.data() + data_at, t.nbytes());
  return t;
}

void write_npy(const std::string& path, const Tensor& t) {
  std::string shape = "(";
  for (int64_t s : t.sizes()) shape += std::to_string(s) + ", ";
  if (t.sizes().size() > 1) shape.resize(shape.size() - 2);
  if (t.sizes().size() == 1) shape.pop_back();
  shape += ")";
  std::string header = "{'descr': '" + npy_descr(t.dtype()) + "', 'fortran_order': False, 'shape': " +
                       shape + ", }";
  // Data starts on a 64-byte boundary; the header ends with a newline (NumPy's format 1.0).
  header.append(63 - (10 + header.size()) % 64, ' ').push_back('\n');
  std::ofstream out(path, std::ios::binary);
  uint16_t len = static_cast<uint16_t>(header.size());
  out.write("\x93NUMPY\x01\x00", 8);
  out.put(char(len & 0xFF)).put(char(len >> 8));
  out << header;
  out.write(static_cast<const char*>(t.data()), static_cast<std::streamsize>(t.nbytes()));
  if (!out) throw_error(ErrorCode::InvalidArgument, "can't write '", path, "'");
}

// ---------------------------------------------------------------- inputs

// Random values: floats in [-1, 1), integers in [0, 8) (valid indices for any table of 8 rows
// or more), bools half true.
Tensor random_tensor(DType dtype, const std::vector<int64_t>& sizes, std::mt19937_64& rng) {
  Tensor t = Tensor::empty(dtype, sizes);
  std::uniform_real_distribution<float> real(-1.0f, 1.0f);
  std::uniform_int_distribution<int> small(0, 7);
  const int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i) {
    switch (dtype) {
      case DType::F32: t.data<float>()[i] = real(rng); break;
      case DType::F64: t.data<double>()[i] = real(rng); break;
      case DType::F16: t.data<cpu::Float16>()[i] = cpu::to_float16(real(rng)); break;
      case DType::BF16: t.data<cpu::BFloat16>()[i] = cpu::to_bfloat16(real(rng)); break;
      case DType::I64: t.data<int64_t>()[i] = small(rng); break;
      case DType::I32: t.data<int32_t>()[i] = small(rng); break;
      case DType::I16: t.data<int16_t>()[i] = static_cast<int16_t>(small(rng)); break;
      case DType::I8: t.data<int8_t>()[i] = static_cast<int8_t>(small(rng)); break;
      case DType::U8: t.data<uint8_t>()[i] = static_cast<uint8_t>(small(rng)); break;
      case DType::Bool: t.data<bool>()[i] = small(rng) < 4; break;
    }
  }
  return t;
}

// Sizes per input: --shape NAME=DxD... where given, else static dims and each symbol's minimum.
std::vector<std::vector<int64_t>> input_sizes(const Model& model, const Args& args) {
  std::vector<std::vector<int64_t>> sizes;
  for (const ModelIO& in : model.inputs()) {
    std::vector<int64_t> s = in.sizes;
    for (size_t d = 0; d < s.size(); ++d)
      for (const Symbol& sym : model.symbols())
        if (s[d] < 0 && sym.name == in.dim_names[d]) s[d] = sym.min;
    sizes.push_back(s);
  }
  auto it = args.options.find("shape");
  if (it == args.options.end()) return sizes;
  for (const std::string& spec : it->second) {
    auto [name, dims] = split_pair(spec, "--shape");
    std::vector<int64_t> s;
    std::string item;
    std::istringstream in(dims);
    while (std::getline(in, item, 'x')) s.push_back(parse_int(item, "a dim of --shape " + name, 0));
    sizes[input_index(model, name)] = s;
  }
  return sizes;
}

std::vector<Tensor> make_inputs(const Model& model, const Args& args) {
  std::vector<std::vector<int64_t>> sizes = input_sizes(model, args);
  std::mt19937_64 rng(static_cast<uint64_t>(parse_int(args.one("seed", "0"), "--seed", 0)));
  std::vector<Tensor> inputs(model.inputs().size());
  auto it = args.options.find("input");
  if (it != args.options.end())
    for (const std::string& spec : it->second) {
      auto [name, path] = split_pair(spec, "--input");
      size_t i = input_index(model, name);
      inputs[i] = read_npy(path, model.inputs()[i].dtype, name);
    }
  for (size_t i = 0; i < inputs.size(); ++i)
    if (!inputs[i].defined())
      inputs[i] = random_tensor(model.inputs()[i].dtype, sizes[i], rng);
  return inputs;
}

std::vector<TensorView> views(const std::vector<Tensor>& tensors) {
  std::vector<TensorView> v;
  for (const Tensor& t : tensors) v.push_back(t.view());
  return v;
}

LoadOptions load_options(const Args& args) {
  LoadOptions o;
  o.threads = static_cast<int>(parse_int(args.one("threads", "-1"), "--threads", -1));
  return o;
}

// ---------------------------------------------------------------- commands

int cmd_info(const Args& args) {
  auto model = Model::load(args.model);
  const ModelMetadata& meta = model->metadata();
  std::cout << "model:      " << args.model << " (format version " << model->format_version()
            << ")\nproducer:   " << meta.producer
            << (meta.torch_version.empty() ? "" : ", torch " + meta.torch_version) << "\n";
  for (const auto& [key, value] : meta.properties) std::cout << "  " << key << ": " << value << "\n";
  const CompileOptions& o = model->compile_options();
  std::cout << "compiled:   optimization_level " << o.optimization_level << ", kernel_policy '"
            << o.kernel_policy << "', threads " << o.threads << "\n";
  std::cout << "inputs:\n";
  for (const ModelIO& io : model->inputs()) std::cout << "  " << io_string(*model, io) << "\n";
  std::cout << "outputs:\n";
  for (const ModelIO& io : model->outputs()) std::cout << "  " << io_string(*model, io) << "\n";

  const Graph& graph = model->graph();
  std::map<std::string, int> ops;
  for (const Node* n : graph.nodes()) ++ops[n->op()];
  size_t constant_bytes = 0;
  for (const Value* c : graph.constants()) constant_bytes += c->constant().nbytes();
  std::cout << "ops:        " << graph.num_nodes() << " nodes\n";
  for (const auto& [op, n] : ops) std::cout << "  " << op << " x" << n << "\n";
  std::cout << "constants:  " << graph.constants().size() << " (" << constant_bytes << " bytes)\n";

  const ModelPlanRecord& plan = model->recorded_plan();
  if (!plan.present) {
    std::cout << "plan:       none recorded (symbolic input dims: planned per shape at run time)\n";
    return 0;
  }
  // "node = op [kernel NAME]": kernels are named for their engine (onednn, openblas, avx2,
  // reference); a variant may follow the first word.
  std::map<std::string, int> engines;
  for (const std::string& line : plan.node_kernels) {
    size_t at = line.rfind(" [kernel ");
    std::string kernel = line.substr(at + 9, line.size() - at - 10);
    ++engines[kernel.substr(0, kernel.find_first_of(" _.:/"))];
  }
  std::cout << "engines:    (recorded plan, " << plan.node_kernels.size() << " steps)\n";
  for (const auto& [engine, n] : engines) std::cout << "  " << engine << " x" << n << "\n";
  std::cout << "memory:     arena " << plan.arena_bytes << " bytes per run\n";
  if (!model->plan_warning().empty()) std::cout << "warning:    " << model->plan_warning() << "\n";
  return 0;
}

int cmd_run(const Args& args) {
  std::string dir = args.one("output-dir", "");
  if (dir.empty()) usage_error("kiln run needs --output-dir DIR");
  auto model = Model::load(args.model, load_options(args));
  std::vector<Tensor> inputs = make_inputs(*model, args);
  std::vector<Tensor> outputs = model->session().run(views(inputs));
  std::filesystem::create_directories(dir);
  for (size_t i = 0; i < outputs.size(); ++i) {
    // Names come from the file: anything but [A-Za-z0-9_.-] becomes '_', so no name leaves DIR.
    std::string name = model->outputs()[i].name;
    for (char& c : name)
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.') c = '_';
    if (name.find_first_not_of('.') == std::string::npos) name = "output_" + std::to_string(i);
    std::string path = (std::filesystem::path(dir) / (name + ".npy")).string();
    write_npy(path, outputs[i]);
    std::cout << path << " : " << dtype_name(outputs[i].dtype()) << shape_string(outputs[i].sizes())
              << "\n";
  }
  return 0;
}

double percentile(const std::vector<double>& sorted, double p) {
  size_t i = static_cast<size_t>(p * static_cast<double>(sorted.size() - 1) + 0.5);
  return sorted[std::min(i, sorted.size() - 1)];
}

// The process's peak resident memory in MB, from /proc (Linux): getrusage's ru_maxrss would
// include the high-water mark of the process that started this one (exec keeps it); -1 where
// /proc has none.
double peak_resident_mb() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;  // in kB
  return -1.0;
}

int cmd_bench(const Args& args) {
  int64_t iterations = parse_int(args.one("iterations", "100"), "--iterations", 1);
  int64_t warmup = parse_int(args.one("warmup", "5"), "--warmup", 0);
  using clock = std::chrono::steady_clock;
  auto t0 = clock::now();
  auto model = Model::load(args.model, load_options(args));
  double load_ms = std::chrono::duration<double, std::milli>(clock::now() - t0).count();
  std::vector<Tensor> inputs = make_inputs(*model, args);
  Session session = model->session();
  std::vector<TensorView> in = views(inputs);
  std::vector<std::vector<int64_t>> out_sizes;
  for (const Tensor& t : inputs) out_sizes.push_back(t.sizes());
  out_sizes = session.output_sizes(out_sizes);
  std::vector<Tensor> outputs;
  for (size_t j = 0; j < out_sizes.size(); ++j)
    outputs.push_back(Tensor::empty(model->outputs()[j].dtype, out_sizes[j]));
  std::vector<TensorView> out = views(outputs);
  for (int64_t i = 0; i < warmup; ++i) session.run(in, out);
  // --profile: the timed runs report every node to a profiler of their own.
  const std::string profile_path = args.one("profile", "");
  std::unique_ptr<Profiler> profiler;
  if (!profile_path.empty()) {
    profiler = std::make_unique<Profiler>(profile_path);
    profiler->write();  // an empty trace: a path that can't be written fails before the runs
  }
  std::vector<double> ms;
  auto start = clock::now();
  for (int64_t i = 0; i < iterations; ++i) {
    auto a = clock::now();
    model->compiled()->run(in, out, profiler.get());
    ms.push_back(std::chrono::duration<double, std::milli>(clock::now() - a).count());
  }
  double total_s = std::chrono::duration<double>(clock::now() - start).count();
  std::sort(ms.begin(), ms.end());
  std::printf("model:      %s\n", args.model.c_str());
  for (size_t i = 0; i < inputs.size(); ++i)
    std::printf("input:      %s %s\n", model->inputs()[i].name.c_str(),
                shape_string(inputs[i].sizes()).c_str());
  std::printf("load:       %.3f ms (memory-mapped, planned)\n", load_ms);
  std::printf("iterations: %lld (after %lld warm-up)\n", static_cast<long long>(iterations),
              static_cast<long long>(warmup));
  std::printf("latency:    min %.3f ms, median %.3f ms, p90 %.3f ms, p99 %.3f ms\n", ms.front(),
              percentile(ms, 0.5), percentile(ms, 0.9), percentile(ms, 0.99));
  std::printf("throughput: %.2f runs/s\n", static_cast<double>(iterations) / total_s);
  if (const double peak_mb = peak_resident_mb(); peak_mb >= 0)
    std::printf("memory:     peak resident %.1f MB\n", peak_mb);
  if (profiler) {
    profiler->write();
    std::printf("profile:    %s\n%s", profile_path.c_str(), profiler->summary(20).c_str());
  }
  return 0;
}

int cmd_dump(const Args& args) {
  std::string format = args.one("format", "");
  std::string out = args.one("-o", "");
  if (format.empty() || out.empty())
    usage_error("kiln dump needs --format txt|json|dot|png|svg and -o OUT");
  check_dump_type(format);
  auto model = Model::load(args.model);
  const Graph& graph = model->graph();
  std::string text;
  if (format == "txt") {
    text = print_graph_annotated(graph, kDumpMaxConstantBytes);
  } else if (format == "json") {
    text = graph_to_json(graph, "model");
  } else if (format == "dot") {
    text = graph_to_dot(graph, "model");
  } else {
    // png/svg: rendered by the dump writer (Graphviz) into a scratch folder, then moved.
    auto scratch = std::filesystem::temp_directory_path() /
                   ("kiln_dump_" + std::to_string(std::random_device()()));
    std::string written = write_graph_dump(graph, scratch.string(), 0, "model", format);
    std::filesystem::copy_file(written, out, std::filesystem::copy_options::overwrite_existing);
    std::filesystem::remove_all(scratch);
    std::cout << out << "\n";
    return 0;
  }
  std::ofstream file(out, std::ios::binary);
  file << text;
  if (!file) throw_error(ErrorCode::InvalidArgument, "can't write '", out, "'");
  std::cout << out << "\n";
  return 0;
}

int run_main(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    std::cout << kUsage;
    return argc < 2 ? 2 : 0;
  }
  std::string command = argv[1];
  auto help = kCommandHelp.find(command);
  if (help == kCommandHelp.end()) {
    std::cerr << "kiln: unknown command '" << command << "'\n" << kUsage;
    return 2;
  }
  static const std::map<std::string, std::vector<std::string>> kOptions = {
      {"info", {}},
      {"run", {"input", "shape", "threads", "seed", "output-dir"}},
      {"bench", {"threads", "iterations", "warmup", "shape", "seed", "profile"}},
      {"dump", {"format", "-o"}}};
  Args args = parse_args(argc, argv, 2, kOptions.at(command));
  if (args.help) {
    std::cout << help->second;
    return 0;
  }
  if (command == "info") return cmd_info(args);
  if (command == "run") return cmd_run(args);
  if (command == "bench") return cmd_bench(args);
  return cmd_dump(args);
}

}  // namespace
}  // namespace kiln

int main(int argc, char** argv) {
  try {
    return kiln::run_main(argc, argv);
  } catch (const kiln::Error& e) {
    std::cerr << "kiln: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "kiln: " << e.what() << "\n";
    return 1;
  }
}
