// fused_elementwise: a chain or tree of elementwise ops evaluated per element in one kernel
// (made by src/passes/fuse_elementwise_chains.cc), reading each input once and writing the
// output once; intermediates live only in registers or an L1-sized block.
//
//   fused_elementwise(inputs... ; ops, args, immediates) -> broadcast of the inputs' shapes
//     ops[i]         the i-th instruction: a unary op (relu, neg, abs, exp, log, sqrt, rsqrt,
//                    reciprocal, sigmoid, tanh, erf, gelu_erf, gelu_tanh, silu) or a binary op
//                    (add, sub, mul, div, maximum, minimum)
//     args[2i, 2i+1] its operands: r < number of inputs is input r, r >= it is the result of
//                    instruction r - (number of inputs) (an earlier one), -2 - j is
//                    immediates[j]; a unary op's second operand is -1
//     immediates     scalars (Python numbers and rank-0 constants of the chain), converted to
//                    the element type as the unfused op converts them
//     reduce         "" (none), or sum, mean, amax, amin: the output is the last instruction's
//                    result reduced over reduce_dims (empty: all dims) of the inputs' broadcast
//                    shape, keepdim as the reduction ops'; the reduced dims must be its trailing
//                    ones, so each output reduces one contiguous row of the chain
//     row_ndim       the rows of the row reductions (row_sum, row_mean, row_amax, row_amin: unary,
//                    their operand an input): the broadcast shape's last row_ndim dims, which the
//                    operand has itself; the value at each element is the reduction of the
//                    operand's row it lies in (x - mean(x, -1, keepdim): ops = ["row_mean", "sub"])
//   Without a reduction the last instruction's result is the output. 1 to 4 inputs of one
//   dtype, f32, f64, f16 or bf16 (these two without reductions), broadcast NumPy-style.
//
// Each instruction rounds as the unfused op does (elementwise.cc): arithmetic in the element
// type, transcendental functions in double rounded once for the reference kernel; the AVX2
// kernel calls the elementwise ops' own AVX2 array functions block by block, so a fused chain
// gives the same bits as the unfused one under either kernel policy. An f16 or bf16 chain runs
// as the unfused ops run on 2-byte floats: its inputs are widened to f32, each instruction
// computes in f32 and its result is rounded to the 2-byte dtype (round to nearest even, the
// conversions of convert.h and cast.h) before the next one reads it, and the output is stored
// in the 2-byte dtype. A reduction folds each
// row's values as the reduction op's kernels do (reference: in double in row order; AVX2:
// reduction_avx2's blocks and pairwise tree, RowFold, fed by the chain 256 elements at a
// time), so a fused reduction gives the unfused bits too, and the chain's result is never
// written.
// Row reductions go row by row: the row reduced (the reduction op's kernel on that row), then
// the chain over the row while it is in cache.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "kernels/cpu/broadcast.h"
#include "kernels/cpu/cast.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/elementwise_avx2.h"
#include "kernels/cpu/gemm_epilogue.h"
#include "kernels/cpu/parallel_chunks.h"
#include "kernels/cpu/reduction_avx2.h"
#include "ops/op_registry.h"

namespace kiln {

namespace {

enum class Code : uint8_t {
  Relu, Neg, Abs, Exp, Log, Sqrt, Rsqrt, Reciprocal, Sigmoid, Tanh, Erf, GeluErf, GeluTanh, Silu,
  RowSum, RowMean, RowAmax, RowAmin,  // leading reductions: one value per row of an input
  Add, Sub, Mul, Div, Maximum, Minimum,
};
constexpr Code kFirstBinary = Code::Add;

struct CodeName {
  Code code;
  std::string_view name;
};
constexpr CodeName kCodes[] = {
    {Code::Relu, "relu"},       {Code::Neg, "neg"},         {Code::Abs, "abs"},
    {Code::Exp, "exp"},         {Code::Log, "log"},         {Code::Sqrt, "sqrt"},
    {Code::Rsqrt, "rsqrt"},     {Code::Reciprocal, "reciprocal"},
    {Code::Sigmoid, "sigmoid"}, {Code::Tanh, "tanh"},       {Code::Erf, "erf"},
    {Code::GeluErf, "gelu_erf"}, {Code::GeluTanh, "gelu_tanh"}, {Code::Silu, "silu"},
    {Code::RowSum, "row_sum"},  {Code::RowMean, "row_mean"}, {Code::RowAmax, "row_amax"},
    {Code::RowAmin, "row_amin"},
    {Code::Add, "add"},         {Code::Sub, "sub"},         {Code::Mul, "mul"},
    {Code::Div, "div"},         {Code::Maximum, "maximum"}, {Code::Minimum, "minimum"},
};

std::optional<Code> code_of(std::string_view name) {
  for (const CodeName& c : kCodes)
    if (c.name == name) return c.code;
  return std::nullopt;
}

bool is_binary(Code c) { return c >= kFirstBinary; }
bool is_row(Code c) { return c >= Code::RowSum && c < kFirstBinary; }

std::string code_names() {
  std::string out;
  for (const CodeName& c : kCodes) out += (out.empty() ? "" : ", ") + std::string(c.name);
  return out;
}

// The optional reduction stage (attribute `reduce`).
enum class Reduce : uint8_t { None, Sum, Mean, Amax, Amin };

std::optional<Reduce> reduce_of(std::string_view name) {
  if (name.empty()) return Reduce::None;
  if (name == "sum") return Reduce::Sum;
  if (name == "mean") return Reduce::Mean;
  if (name == "amax") return Reduce::Amax;
  if (name == "amin") return Reduce::Amin;
  return std::nullopt;
}

// One decoded instruction. Operand refs as in the attribute args.
struct Instruction {
  Code code;
  int64_t a, b;
};

struct Program {
  std::vector<Instruction> code;
  std::vector<double> immediates;
  int64_t num_inputs = 0;
  Reduce reduce = Reduce::None;
  int64_t row_ndim = 0;
  bool has_rows = false;  // some instruction is a row reduction
};

Reduce row_reduce(Code c) {
  switch (c) {
    case Code::RowSum: return Reduce::Sum;
    case Code::RowMean: return Reduce::Mean;
    case Code::RowAmax: return Reduce::Amax;
    case Code::RowAmin: return Reduce::Amin;
    default: break;
  }
  KILN_ASSERT(false, "not a row reduction");
  return Reduce::None;
}

Program program_of(const AttrMap& attrs, int64_t num_inputs) {
  Program p;
  p.num_inputs = num_inputs;
  const auto& ops = std::get<std::vector<std::string>>(attrs.at("ops"));
  const auto& args = std::get<std::vector<int64_t>>(attrs.at("args"));
  p.immediates = std::get<std::vector<double>>(attrs.at("immediates"));
  for (size_t i = 0; i < ops.size(); ++i)
    p.code.push_back({*code_of(ops[i]), args[2 * i], args[2 * i + 1]});
  p.reduce = *reduce_of(std::get<std::string>(attrs.at("reduce")));
  p.row_ndim = std::get<int64_t>(attrs.at("row_ndim"));
  p.has_rows = std::any_of(p.code.begin(), p.code.end(),
                           [](const Instruction& i) { return is_row(i.code); });
  return p;
}

// How many trailing dims of a rank-`rank` chain `reduce_dims` reduces (inference has checked
// that they are trailing ones; a rank-0 chain reduces nothing).
size_t reduced_count(const std::vector<int64_t>& dims, size_t rank) {
  return dims.empty() ? rank : std::min(dims.size(), rank);
}

// Checks reduce_dims against the chain's shape and returns the output shape.
Shape infer_reduction(InferContext& ctx, Reduce reduce, const Shape& chain) {
  const auto& dims = ctx.attr_ints("reduce_dims");
  const int64_t rank = static_cast<int64_t>(chain.size());
  const int64_t r = std::max<int64_t>(rank, 1);  // a rank-0 chain takes dim 0 or -1
  std::vector<bool> reduced(static_cast<size_t>(r), dims.empty());
  for (int64_t d : dims) {
    ctx.check(d >= -r && d < r, "reduce_dims holds " + std::to_string(d) +
                                    ", out of range for the chain's rank " + std::to_string(rank));
    const auto i = static_cast<size_t>(d < 0 ? d + r : d);
    ctx.check(!reduced[i], "reduce_dims holds dim " + std::to_string(i) + " twice");
    reduced[i] = true;
  }
  Shape out;
  for (int64_t d = 0; d < rank; ++d) {
    const auto i = static_cast<size_t>(d);
    if (!reduced[i]) {
      ctx.check(!std::count(reduced.begin(), reduced.begin() + d, true),
                "reduce_dims must be the chain's trailing dims (each output one row of it); "
                "reduce other dims with the reduction ops");
      out.push_back(chain[i]);
      continue;
    }
    if (reduce == Reduce::Amax || reduce == Reduce::Amin)
      ctx.check(!chain[i].is_static() || chain[i].size() > 0,
                "it reduces dim " + std::to_string(d) +
                    " of size 0, and amax or amin of no elements is undefined");
    if (ctx.attr_bool("keepdim")) out.push_back(Dim(1));
  }
  return out;
}

// The row reductions (row_sum, ...): each reduces an input over the chain's last row_ndim dims,
// which that input must have itself (not broadcast), so that its rows are contiguous.
void infer_rows(InferContext& ctx, const std::vector<std::string>& ops,
                const std::vector<int64_t>& args, const Shape& chain) {
  const int64_t row_ndim = ctx.attr_int("row_ndim");
  const auto rank = static_cast<int64_t>(chain.size());
  ctx.check(row_ndim >= 0 && row_ndim <= rank, "row_ndim is " + std::to_string(row_ndim) +
                                                   "; it must be in [0, " +
                                                   std::to_string(rank) + "] (the chain's rank)");
  bool rows = false;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (!is_row(*code_of(ops[i]))) continue;
    rows = true;
    const std::string where = "instruction " + std::to_string(i) + " (" + ops[i] + ")";
    const int64_t r = args[2 * i];
    ctx.check(r >= 0 && r < static_cast<int64_t>(ctx.num_inputs()),
              where + ": a row reduction's operand must be an input");
    const Shape& x = ctx.input(static_cast<size_t>(r)).shape;
    bool same = static_cast<int64_t>(x.size()) >= row_ndim;
    for (int64_t k = 1; same && k <= row_ndim; ++k)
      same = x[x.size() - static_cast<size_t>(k)] == chain[chain.size() - static_cast<size_t>(k)];
    ctx.check(same, where + ": input " + std::to_string(r) +
                        " must have the chain's last row_ndim dims itself (not broadcast)");
    if (*code_of(ops[i]) == Code::RowAmax || *code_of(ops[i]) == Code::RowAmin)
      for (int64_t k = 1; k <= row_ndim; ++k) {
        const Dim& d = chain[chain.size() - static_cast<size_t>(k)];
        ctx.check(!d.is_static() || d.size() > 0,
                  where + ": amax or amin of an empty row is undefined");
      }
  }
  ctx.check(rows || row_ndim == 0, "row_ndim needs a row reduction (row_sum, ...)");
  ctx.check(!rows || ctx.attr_string("reduce").empty(),
            "row reductions and a reduce stage don't combine");
  ctx.check(!is_row(*code_of(ops.back())), "the last instruction can't be a row reduction");
}

void infer_fused_elementwise(InferContext& ctx) {
  const size_t n = ctx.num_inputs();
  ctx.check(n >= 1 && n <= cpu::BroadcastPlan::kMaxInputs,
            "takes 1 to " + std::to_string(cpu::BroadcastPlan::kMaxInputs) + " inputs, got " +
                std::to_string(n));
  const DType dtype = ctx.input(0).dtype;
  ctx.check(is_floating(dtype), "takes f32, f64, f16 or bf16 inputs, not " +
                                    std::string(dtype_name(dtype)));
  Shape out = ctx.input(0).shape;
  for (size_t i = 1; i < n; ++i) {
    ctx.check(ctx.input(i).dtype == dtype, "every input must have input 0's dtype");
    out = ctx.broadcast(out, ctx.input(i).shape);
  }
  const auto& ops = std::get<std::vector<std::string>>(ctx.attrs().at("ops"));
  const auto& args = ctx.attr_ints("args");
  const auto num_immediates =
      static_cast<int64_t>(std::get<std::vector<double>>(ctx.attrs().at("immediates")).size());
  ctx.check(!ops.empty(), "the program (ops) is empty");
  ctx.check(args.size() == 2 * ops.size(),
            "args must hold two operands per op: " + std::to_string(2 * ops.size()) +
                " for " + std::to_string(ops.size()) + " ops, got " + std::to_string(args.size()));
  for (size_t i = 0; i < ops.size(); ++i) {
    const std::string where = "instruction " + std::to_string(i) + " (" + ops[i] + ")";
    std::optional<Code> code = code_of(ops[i]);
    ctx.check(code.has_value(), where + ": unknown op; known: " + code_names());
    // Inputs, earlier results and immediates are valid operands.
    const int64_t defined = static_cast<int64_t>(n + i);
    auto valid = [&](int64_t r) { return (r >= 0 && r < defined) || (r <= -2 && -2 - r < num_immediates); };
    ctx.check(valid(args[2 * i]), where + ": operand 0 is " + std::to_string(args[2 * i]) +
                                      ", which is no input, earlier result or immediate");
    if (is_binary(*code))
      ctx.check(valid(args[2 * i + 1]), where + ": operand 1 is " + std::to_string(args[2 * i + 1]) +
                                            ", which is no input, earlier result or immediate");
    else
      ctx.check(args[2 * i + 1] == -1, where + ": a unary op's operand 1 must be -1");
  }
  infer_rows(ctx, ops, args, out);
  const std::string& reduce_name = ctx.attr_string("reduce");
  // The reductions' own 2-byte rules (in f32 between casts) aren't the chain's per-op rounding.
  ctx.check(dtype_size(dtype) > 2 || (reduce_name.empty() && ctx.attr_int("row_ndim") == 0),
            "an f16 or bf16 chain takes no reduction (reduce, row_sum, ...); reduce its result "
            "with the reduction ops");
  const std::optional<Reduce> reduce = reduce_of(reduce_name);
  ctx.check(reduce.has_value(), "reduce is \"" + reduce_name +
                                    "\"; known: sum, mean, amax, amin, or \"\" for none");
  if (*reduce != Reduce::None)
    out = infer_reduction(ctx, *reduce, out);
  else
    ctx.check(ctx.attr_ints("reduce_dims").empty() && !ctx.attr_bool("keepdim"),
              "reduce_dims and keepdim need a reduce");
  ctx.set_output(0, TensorType{dtype, out, Layout::Plain});
}

// ---------------------------------------------------------------- reference

// The unfused ops' reference arithmetic (elementwise.cc): functions in double, rounded once;
// the activations a GEMM epilogue also has come from there.
template <typename T>
T evaluate(Code code, T x, T y) {
  using cpu::Activation;
  const double w = x;
  switch (code) {
    case Code::Relu: return cpu::reference_activation(Activation::Relu, x);
    case Code::Sigmoid: return cpu::reference_activation(Activation::Sigmoid, x);
    case Code::Tanh: return cpu::reference_activation(Activation::Tanh, x);
    case Code::GeluErf: return cpu::reference_activation(Activation::GeluErf, x);
    case Code::GeluTanh: return cpu::reference_activation(Activation::GeluTanh, x);
    case Code::Silu: return cpu::reference_activation(Activation::Silu, x);
    case Code::Neg: return -x;
    case Code::Abs: return std::fabs(x);
    case Code::Exp: return static_cast<T>(std::exp(w));
    case Code::Log: return static_cast<T>(std::log(w));
    case Code::Sqrt: return static_cast<T>(std::sqrt(w));
    case Code::Rsqrt: return static_cast<T>(1 / std::sqrt(w));
    case Code::Reciprocal: return static_cast<T>(1 / w);
    case Code::Erf: return static_cast<T>(std::erf(w));
    case Code::Add: return x + y;
    case Code::Sub: return x - y;
    case Code::Mul: return x * y;
    case Code::Div: return x / y;
    case Code::Maximum: return std::isnan(y) ? y : x < y ? y : x;
    case Code::Minimum: return std::isnan(y) ? y : y < x ? y : x;
    case Code::RowSum: case Code::RowMean: case Code::RowAmax: case Code::RowAmin: break;
  }
  KILN_ASSERT(false, "row reductions are evaluated per row, not per element");
  return x;
}

std::vector<std::vector<int64_t>> input_sizes(const KernelSpec& spec) {
  std::vector<std::vector<int64_t>> sizes;
  for (size_t i = 0; i < spec.inputs.size(); ++i) sizes.push_back(spec.input_sizes(i));
  return sizes;
}

// The chain (the inputs' broadcast shape) as [rows, n], n the product of the reduced trailing
// dims (1 without a reduction: every element is a row).
struct ChainExtents {
  std::vector<int64_t> sizes;
  int64_t rows = 1, n = 1;
};

ChainExtents chain_extents(const KernelSpec& spec, const Program& p) {
  ChainExtents e;
  for (size_t i = 0; i < spec.inputs.size(); ++i) {
    std::vector<int64_t> s = spec.input_sizes(i);
    if (s.size() > e.sizes.size()) e.sizes.insert(e.sizes.begin(), s.size() - e.sizes.size(), 1);
    // Right-aligned; inference has checked that the sizes broadcast.
    for (size_t k = 0; k < s.size(); ++k) {
      int64_t& size = e.sizes[e.sizes.size() - s.size() + k];
      if (size == 1) size = s[k];
    }
  }
  const size_t reduced = p.reduce != Reduce::None
                             ? reduced_count(spec.node.attr_ints("reduce_dims"), e.sizes.size())
                             : static_cast<size_t>(p.row_ndim);
  for (size_t d = 0; d < e.sizes.size(); ++d)
    (d + reduced < e.sizes.size() ? e.rows : e.n) *= e.sizes[d];
  return e;
}

// Folds one row's values as the reduction ops' reference kernels do (reduction.cc): sums in
// double, rounded once; a NaN wins an extremum.
template <typename T>
struct Fold {
  Reduce reduce;
  double sum = 0;
  T best = reduce == Reduce::Amax ? -std::numeric_limits<T>::infinity()
                                  : std::numeric_limits<T>::infinity();

  void add(T v) {
    if (reduce == Reduce::Sum || reduce == Reduce::Mean) {
      sum += static_cast<double>(v);
    } else if (!std::isnan(best) &&
               (std::isnan(v) || (reduce == Reduce::Amax ? v > best : v < best))) {
      best = v;
    }
  }
  T result(int64_t n) const {
    if (reduce == Reduce::Sum) return static_cast<T>(sum);
    if (reduce == Reduce::Mean) return static_cast<T>(sum / static_cast<double>(n));
    return best;
  }
};

// Where input r's row starting at the chain's flat element `first` begins (its rows are
// contiguous: inference checked that it has the row dims itself).
int64_t row_start(const cpu::BroadcastPlan& plan, int64_t first, int64_t r) {
  int64_t start = 0;
  plan.for_each_run_n(first, first + 1, [&](int64_t, const int64_t* offsets, int64_t,
                                            const int64_t*) { start = offsets[r]; });
  return start;
}

// v rounded to the stored type S and widened back to T: what the unfused op stores and the next
// one reads (v itself when S is T).
template <typename S, typename T>
T stored(T v) {
  return cpu::convert<T>(cpu::convert<S>(v));
}

// S the element type stored, T the type computed in: f32 and f64 compute in themselves, f16 and
// bf16 in f32, each instruction's result rounded to S.
template <typename S, typename T>
std::unique_ptr<KernelInstance> create_reference(const KernelSpec& spec) {
  Program p = program_of(spec.node.attrs(), static_cast<int64_t>(spec.inputs.size()));
  const ChainExtents e = chain_extents(spec, p);
  cpu::BroadcastPlan plan(input_sizes(spec), e.sizes);
  return make_kernel([p = std::move(p), e, plan, threads = spec.threads](
                         std::span<const void* const> in, std::span<void* const> out) {
    S* y = static_cast<S*>(out[0]);
    const auto work = static_cast<int64_t>(p.code.size()) * 8;
    // sink(i, value) for the chain's elements [begin, end), i their flat index, in order.
    auto run = [&](std::vector<T>& regs, int64_t begin, int64_t end, const auto& sink) {
      auto read = [&](int64_t r) {
        return r >= 0 ? regs[static_cast<size_t>(r)] : static_cast<T>(p.immediates[-2 - r]);
      };
      plan.for_each_run_n(begin, end, [&](int64_t o, const int64_t* offsets, int64_t count,
                                         const int64_t* steps) {
        for (int64_t k = 0; k < count; ++k) {
          for (int64_t i = 0; i < p.num_inputs; ++i)
            regs[i] = cpu::convert<T>(static_cast<const S*>(in[i])[offsets[i] + k * steps[i]]);
          for (size_t i = 0; i < p.code.size(); ++i) {
            const Instruction& ins = p.code[i];
            if (is_row(ins.code)) continue;  // set per row
            regs[p.num_inputs + i] =
                stored<S>(evaluate(ins.code, read(ins.a), ins.b == -1 ? T(0) : read(ins.b)));
          }
          sink(o + k, regs.back());
        }
      });
    };
    const size_t num_regs = static_cast<size_t>(p.num_inputs) + p.code.size();
    if (p.has_rows) {
      cpu::parallel_chunks(e.rows, e.n * work, threads, [&](int64_t begin, int64_t end) {
        std::vector<T> regs(num_regs);
        for (int64_t row = begin; row < end && e.n > 0; ++row) {
          const int64_t first = row * e.n;
          for (size_t i = 0; i < p.code.size(); ++i) {
            if (!is_row(p.code[i].code)) continue;
            const S* x =
                static_cast<const S*>(in[p.code[i].a]) + row_start(plan, first, p.code[i].a);
            Fold<T> fold{row_reduce(p.code[i].code)};
            for (int64_t k = 0; k < e.n; ++k) fold.add(cpu::convert<T>(x[k]));
            regs[p.num_inputs + i] = fold.result(e.n);
          }
          run(regs, first, first + e.n, [&](int64_t i, T v) { y[i] = cpu::convert<S>(v); });
        }
      });
      return;
    }
    if (p.reduce == Reduce::None) {
      cpu::parallel_chunks(plan.numel(), work, threads, [&](int64_t begin, int64_t end) {
        std::vector<T> regs(num_regs);
        run(regs, begin, end, [&](int64_t i, T v) { y[i] = cpu::convert<S>(v); });
      });
      return;
    }
    cpu::parallel_chunks(e.rows, e.n * work, threads, [&](int64_t begin, int64_t end) {
      std::vector<T> regs(num_regs);
      for (int64_t row = begin; row < end; ++row) {
        Fold<T> fold{p.reduce};
        run(regs, row * e.n, (row + 1) * e.n, [&](int64_t, T v) { fold.add(v); });
        y[row] = cpu::convert<S>(fold.result(e.n));
      }
    });
  });
}

// ---------------------------------------------------------------- AVX2

#ifdef KILN_X86
cpu::UnaryArrayFn avx2_unary_fn(Code c) {
  namespace v = cpu::avx2;
  switch (c) {
    case Code::Relu: return &v::relu;
    case Code::Neg: return &v::neg;
    case Code::Abs: return &v::abs;
    case Code::Exp: return &v::exp;
    case Code::Log: return &v::log;
    case Code::Sqrt: return &v::sqrt;
    case Code::Rsqrt: return &v::rsqrt;
    case Code::Reciprocal: return &v::reciprocal;
    case Code::Sigmoid: return &v::sigmoid;
    case Code::Tanh: return &v::tanh;
    case Code::Erf: return &v::erf;
    case Code::GeluErf: return &v::gelu_erf;
    case Code::GeluTanh: return &v::gelu_tanh;
    case Code::Silu: return &v::silu;
    default: return nullptr;
  }
}

// The unfused op's function (cpu::widest), so that fusing keeps its bits.
cpu::UnaryArrayFn unary_fn(Code c) { return cpu::widest(avx2_unary_fn(c)); }

cpu::BinaryArrayFn binary_fn(Code c) {
  namespace v = cpu::avx2;
  switch (c) {
    case Code::Add: return &v::add;
    case Code::Sub: return &v::sub;
    case Code::Mul: return &v::mul;
    case Code::Div: return &v::div;
    case Code::Maximum: return &v::maximum;
    case Code::Minimum: return &v::minimum;
    default: return nullptr;
  }
}

// Elements per block: every intermediate of a block stays in L1 (16 results: 16 KiB).
constexpr int64_t kBlock = 256;

// An f16 or bf16 chain's conversions (none for f32): the inputs are widened to f32 block by
// block, and each instruction's f32 result is rounded to the 2-byte dtype, as the unfused op
// stores it, then widened back for the next one to read; the last one's is stored rounded. The
// vector casts (avx2_unsupported checks that the CPU has them), called directly: a block is
// only 256 elements.
struct Narrowing {
  cpu::CastArrayFn widen = nullptr, narrow = nullptr;

  static Narrowing of(DType dtype) {
    if (dtype_size(dtype) != 2) return {};
    return {cpu::vector_cast(dtype, DType::F32), cpu::vector_cast(DType::F32, dtype)};
  }
  bool active() const { return narrow != nullptr; }
};

// The floats of scratch run_program takes: a block per instruction, and for a 2-byte chain one
// per input (widened) and one for a result's 2-byte values.
size_t scratch_floats(const Program& p, const Narrowing& low) {
  const size_t blocks = p.code.size() + (low.active() ? static_cast<size_t>(p.num_inputs) + 1 : 0);
  return blocks * static_cast<size_t>(kBlock);
}

// Runs the program over the `count` elements of one broadcast run (each input from its offset,
// advancing by its step), one block at a time, the intermediates in `blocks` (scratch_floats)
// and the last instruction writing y[0, count) (f32, or the 2-byte dtype when `low` is
// active); row reductions' results are row_values[i] (per instruction i; null when there are
// none).
void run_program(const Program& p, const Narrowing& low, const std::vector<float>& immediates,
                 const float* row_values, std::span<const void* const> in, const int64_t* offsets,
                 const int64_t* steps, int64_t count, void* y, float* blocks) {
  // 2-byte chains: a block per input, widened, and a rounded result's 2-byte values.
  float* widened = low.active() ? blocks + p.code.size() * kBlock : nullptr;
  void* bits = low.active() ? widened + p.num_inputs * kBlock : nullptr;
  for (int64_t start = 0; start < count; start += kBlock) {
    const int64_t n = std::min(kBlock, count - start);
    if (low.active())
      for (int64_t r = 0; r < p.num_inputs; ++r)
        low.widen(static_cast<const uint16_t*>(in[r]) + offsets[r] + start * steps[r],
                  widened + r * kBlock, steps[r] ? n : 1);
    // An operand: its first element and its step (0: the same element throughout).
    auto operand = [&](int64_t r) -> std::pair<const float*, int64_t> {
      if (r <= -2) return {&immediates[static_cast<size_t>(-2 - r)], 0};
      if (r < p.num_inputs && low.active()) return {widened + r * kBlock, steps[r]};
      if (r < p.num_inputs)
        return {static_cast<const float*>(in[r]) + offsets[r] + start * steps[r], steps[r]};
      if (row_values && is_row(p.code[static_cast<size_t>(r - p.num_inputs)].code))
        return {row_values + (r - p.num_inputs), 0};
      return {blocks + (r - p.num_inputs) * kBlock, 1};
    };
    for (size_t i = 0; i < p.code.size(); ++i) {
      const Instruction& ins = p.code[i];
      if (is_row(ins.code)) continue;
      const bool last = i + 1 == p.code.size();
      float* result = last && !low.active() ? static_cast<float*>(y) + start : blocks + i * kBlock;
      auto [a, a_step] = operand(ins.a);
      if (is_binary(ins.code)) {
        auto [b, b_step] = operand(ins.b);
        binary_fn(ins.code)(a, a_step, b, b_step, result, n);
      } else {
        if (a_step == 0) {  // a broadcast operand: unary kernels read consecutive elements
          std::fill_n(result, n, *a);
          a = result;
        }
        unary_fn(ins.code)(a, result, n);
      }
      if (!low.active()) continue;
      if (last) {
        low.narrow(result, static_cast<uint16_t*>(y) + start, n);
      } else {
        low.narrow(result, bits, n);
        low.widen(bits, result, n);
      }
    }
  }
}

cpu::VectorReduction vector_reduction(Reduce r) {
  switch (r) {
    case Reduce::Sum: return cpu::VectorReduction::Sum;
    case Reduce::Mean: return cpu::VectorReduction::Mean;
    case Reduce::Amax: return cpu::VectorReduction::Amax;
    case Reduce::Amin: return cpu::VectorReduction::Amin;
    case Reduce::None: break;
  }
  KILN_ASSERT(false, "no vector reduction for Reduce::None");
  return cpu::VectorReduction::Sum;
}

std::unique_ptr<KernelInstance> create_avx2(const KernelSpec& spec) {
  Program p = program_of(spec.node.attrs(), static_cast<int64_t>(spec.inputs.size()));
  const ChainExtents e = chain_extents(spec, p);
  cpu::BroadcastPlan plan(input_sizes(spec), e.sizes);
  std::vector<float> immediates(p.immediates.begin(), p.immediates.end());
  return make_kernel([p = std::move(p), e, immediates = std::move(immediates), plan,
                      low = Narrowing::of(spec.inputs[0].dtype), threads = spec.threads](
                         std::span<const void* const> in, std::span<void* const> out) {
    float* y = static_cast<float*>(out[0]);  // f32 (2-byte chains have no reductions)
    const size_t scratch_size = scratch_floats(p, low);
    const auto work = static_cast<int64_t>(p.code.size()) * 8;
    if (p.has_rows) {
      // Row by row: the row reductions (the reduction ops' own kernel on the row), then the
      // chain over the row while it is in cache. Few rows: each row over all threads.
      // A row's reductions (RowFold over the row in memory, which is reduce()'s fold; split
      // over the threads by reduce() itself), then the chain over the row; no thread team per
      // row unless the row is split.
      auto run_row = [&](int64_t row, int split, float* row_values, float* blocks) {
        const int64_t first = row * e.n;
        for (size_t i = 0; i < p.code.size(); ++i) {
          if (!is_row(p.code[i].code)) continue;
          const cpu::VectorReduction op = vector_reduction(row_reduce(p.code[i].code));
          const float* x = static_cast<const float*>(in[p.code[i].a]) +
                           row_start(plan, first, p.code[i].a);
          if (split > 1) {
            cpu::avx2::reduce(op, x, &row_values[i], {1, e.n, 1}, 0, split);
            continue;
          }
          cpu::avx2::RowFold fold(op);
          for (int64_t b = 0; b < e.n; b += cpu::avx2::RowFold::kBlock)
            fold.add(x + b, std::min(cpu::avx2::RowFold::kBlock, e.n - b));
          row_values[i] = fold.result(e.n);
        }
        auto chain = [&](int64_t begin, int64_t end, float* scratch) {
          plan.for_each_run_n(first + begin, first + end, [&](int64_t o, const int64_t* offsets,
                                                             int64_t count, const int64_t* steps) {
            run_program(p, low, immediates, row_values, in, offsets, steps, count, y + o,
                        scratch);
          });
        };
        if (split <= 1) return chain(0, e.n, blocks);
        cpu::parallel_chunks(e.n, work, split, [&](int64_t begin, int64_t end) {
          std::vector<float> scratch(scratch_size);
          chain(begin, end, scratch.data());
        });
      };
      if (e.n == 0) return;
      std::vector<float> row_values(p.code.size()), blocks(scratch_size);
      if (e.rows >= std::max(threads, 1)) {
        cpu::parallel_chunks(e.rows, e.n * work, threads, [&](int64_t begin, int64_t end) {
          std::vector<float> values(p.code.size()), scratch(scratch_size);
          for (int64_t row = begin; row < end; ++row)
            run_row(row, 1, values.data(), scratch.data());
        });
      } else {
        for (int64_t row = 0; row < e.rows; ++row)
          run_row(row, threads, row_values.data(), blocks.data());
      }
      return;
    }
    if (p.reduce == Reduce::None) {
      const int64_t y_size = low.active() ? 2 : int64_t{sizeof(float)};
      cpu::parallel_chunks(plan.numel(), work, threads, [&](int64_t begin, int64_t end) {
        std::vector<float> blocks(scratch_size);
        plan.for_each_run_n(begin, end, [&](int64_t o, const int64_t* offsets, int64_t count,
                                           const int64_t* steps) {
          run_program(p, low, immediates, nullptr, in, offsets, steps, count,
                      static_cast<std::byte*>(out[0]) + o * y_size, blocks.data());
        });
      });
      return;
    }
    // Each row's chain 256 elements at a time into an L1 buffer that RowFold folds as the
    // reduction's kernel folds a row in memory. Rows over the threads; with fewer rows than
    // threads, each row's blocks in runs over the threads, as the reduction's kernel splits.
    using cpu::avx2::RowFold;
    const cpu::VectorReduction op = vector_reduction(p.reduce);
    auto fold_blocks = [&](int64_t row, int64_t begin_block, int64_t end_block, RowFold& fold) {
      thread_local std::vector<float> blocks;  // the intermediates of the calling thread
      blocks.resize(scratch_size);
      alignas(32) float values[RowFold::kBlock];
      for (int64_t b = begin_block; b < end_block; ++b) {
        const int64_t first = row * e.n + b * RowFold::kBlock;
        const int64_t count = std::min(RowFold::kBlock, e.n - b * RowFold::kBlock);
        plan.for_each_run_n(first, first + count, [&](int64_t o, const int64_t* offsets,
                                                     int64_t run, const int64_t* steps) {
          run_program(p, low, immediates, nullptr, in, offsets, steps, run, values + (o - first),
                      blocks.data());
        });
        fold.add(values, count);
      }
    };
    const int64_t row_blocks = (e.n + RowFold::kBlock - 1) / RowFold::kBlock;
    if (e.rows >= std::max(threads, 1) || e.n * work < 2 * cpu::kParallelMinWork) {
      cpu::parallel_chunks(e.rows, e.n * work, threads, [&](int64_t begin, int64_t end) {
        for (int64_t row = begin; row < end; ++row) {
          RowFold fold(op);
          fold_blocks(row, 0, row_blocks, fold);
          y[row] = fold.result(e.n);
        }
      });
      return;
    }
    const int64_t run = RowFold::run_blocks(row_blocks, threads);
    const int64_t runs = (row_blocks + run - 1) / run;
    for (int64_t row = 0; row < e.rows; ++row) {
      std::vector<RowFold> folds(static_cast<size_t>(runs), RowFold(op));
      cpu::parallel_chunks(runs, run * RowFold::kBlock * work, threads,
                           [&](int64_t begin, int64_t end) {
                             for (int64_t r = begin; r < end; ++r)
                               fold_blocks(row, r * run, std::min(row_blocks, (r + 1) * run),
                                           folds[static_cast<size_t>(r)]);
                           });
      RowFold fold(op);
      for (const RowFold& f : folds) fold.append(f);
      y[row] = fold.result(e.n);
    }
  });
}

std::string avx2_unsupported(const KernelSpec& spec) {
  const DType dtype = spec.inputs[0].dtype;
  if (dtype_size(dtype) != 2) return cpu::avx2_f32_unsupported_reason(dtype);
  for (auto [from, to] : {std::pair{dtype, DType::F32}, std::pair{DType::F32, dtype}})
    if (std::string why = cpu::vector_cast_unsupported_reason(from, to); !why.empty()) return why;
  return cpu::avx2_f32_unsupported_reason(DType::F32);
}
#endif

}  // namespace

void register_fused_elementwise_ops(OpRegistry& registry) {
  OpDef def;
  def.name = "fused_elementwise";
  def.inputs = {{"inputs", /*variadic=*/true}};
  def.attrs = {{"ops", std::vector<std::string>{}, /*required=*/true},
               {"args", std::vector<int64_t>{}, /*required=*/true},
               {"immediates", std::vector<double>{}},
               {"reduce", std::string()},
               {"reduce_dims", std::vector<int64_t>{}},
               {"keepdim", false},
               {"row_ndim", int64_t{0}}};
  def.infer = infer_fused_elementwise;
#ifdef KILN_X86
  def.kernels.push_back({"avx2", "native", avx2_unsupported, create_avx2});
#endif
  def.kernels.push_back({"reference", "native", [](const KernelSpec&) { return std::string(); },
                         [](const KernelSpec& spec) {
                           switch (spec.inputs[0].dtype) {
                             case DType::F64: return create_reference<double, double>(spec);
                             case DType::F16: return create_reference<cpu::Float16, float>(spec);
                             case DType::BF16: return create_reference<cpu::BFloat16, float>(spec);
                             default: return create_reference<float, float>(spec);
                           }
                         }});
  registry.add(std::move(def));
}

}  // namespace kiln
