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
//   The last instruction's result is the output. 1 to 4 inputs of one dtype, f32 or f64,
//   broadcast NumPy-style.
//
// Each instruction rounds as the unfused op does (elementwise.cc): arithmetic in the element
// type, transcendental functions in double rounded once for the reference kernel; the AVX2
// kernel calls the elementwise ops' own AVX2 array functions block by block, so a fused chain
// gives the same bits as the unfused one under either kernel policy.
#include <algorithm>
#include <cmath>
#include <optional>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "kernels/cpu/broadcast.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/elementwise_avx2.h"
#include "kernels/cpu/gemm_epilogue.h"
#include "kernels/cpu/parallel_chunks.h"
#include "ops/op_registry.h"

namespace kiln {

namespace {

enum class Code : uint8_t {
  Relu, Neg, Abs, Exp, Log, Sqrt, Rsqrt, Reciprocal, Sigmoid, Tanh, Erf, GeluErf, GeluTanh, Silu,
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
    {Code::Add, "add"},         {Code::Sub, "sub"},         {Code::Mul, "mul"},
    {Code::Div, "div"},         {Code::Maximum, "maximum"}, {Code::Minimum, "minimum"},
};

std::optional<Code> code_of(std::string_view name) {
  for (const CodeName& c : kCodes)
    if (c.name == name) return c.code;
  return std::nullopt;
}

bool is_binary(Code c) { return c >= kFirstBinary; }

std::string code_names() {
  std::string out;
  for (const CodeName& c : kCodes) out += (out.empty() ? "" : ", ") + std::string(c.name);
  return out;
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
};

Program program_of(const AttrMap& attrs, int64_t num_inputs) {
  Program p;
  p.num_inputs = num_inputs;
  const auto& ops = std::get<std::vector<std::string>>(attrs.at("ops"));
  const auto& args = std::get<std::vector<int64_t>>(attrs.at("args"));
  p.immediates = std::get<std::vector<double>>(attrs.at("immediates"));
  for (size_t i = 0; i < ops.size(); ++i)
    p.code.push_back({*code_of(ops[i]), args[2 * i], args[2 * i + 1]});
  return p;
}

void infer_fused_elementwise(InferContext& ctx) {
  const size_t n = ctx.num_inputs();
  ctx.check(n >= 1 && n <= cpu::BroadcastPlan::kMaxInputs,
            "takes 1 to " + std::to_string(cpu::BroadcastPlan::kMaxInputs) + " inputs, got " +
                std::to_string(n));
  const DType dtype = ctx.input(0).dtype;
  ctx.check(dtype == DType::F32 || dtype == DType::F64, "takes f32 or f64 inputs");
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
  }
  return x;
}

std::vector<std::vector<int64_t>> input_sizes(const KernelSpec& spec) {
  std::vector<std::vector<int64_t>> sizes;
  for (size_t i = 0; i < spec.inputs.size(); ++i) sizes.push_back(spec.input_sizes(i));
  return sizes;
}

template <typename T>
std::unique_ptr<KernelInstance> create_reference(const KernelSpec& spec) {
  Program p = program_of(spec.node.attrs(), static_cast<int64_t>(spec.inputs.size()));
  cpu::BroadcastPlan plan(input_sizes(spec), spec.output_sizes(0));
  return make_kernel([p = std::move(p), plan, threads = spec.threads](
                         std::span<const void* const> in, std::span<void* const> out) {
    T* y = static_cast<T*>(out[0]);
    const auto work = static_cast<int64_t>(p.code.size()) * 8;
    cpu::parallel_chunks(plan.numel(), work, threads, [&](int64_t begin, int64_t end) {
      std::vector<T> regs(static_cast<size_t>(p.num_inputs) + p.code.size());
      auto read = [&](int64_t r) {
        return r >= 0 ? regs[static_cast<size_t>(r)] : static_cast<T>(p.immediates[-2 - r]);
      };
      plan.for_each_run_n(begin, end, [&](int64_t o, const int64_t* offsets, int64_t count,
                                         const int64_t* steps) {
        for (int64_t e = 0; e < count; ++e) {
          for (int64_t i = 0; i < p.num_inputs; ++i)
            regs[i] = static_cast<const T*>(in[i])[offsets[i] + e * steps[i]];
          for (size_t i = 0; i < p.code.size(); ++i) {
            const Instruction& ins = p.code[i];
            regs[p.num_inputs + i] =
                evaluate(ins.code, read(ins.a), ins.b == -1 ? T(0) : read(ins.b));
          }
          y[o + e] = regs.back();
        }
      });
    });
  });
}

// ---------------------------------------------------------------- AVX2

#ifdef KILN_X86
cpu::UnaryArrayFn unary_fn(Code c) {
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

std::unique_ptr<KernelInstance> create_avx2(const KernelSpec& spec) {
  Program p = program_of(spec.node.attrs(), static_cast<int64_t>(spec.inputs.size()));
  cpu::BroadcastPlan plan(input_sizes(spec), spec.output_sizes(0));
  std::vector<float> immediates(p.immediates.begin(), p.immediates.end());
  return make_kernel([p = std::move(p), immediates = std::move(immediates), plan,
                      threads = spec.threads](std::span<const void* const> in,
                                              std::span<void* const> out) {
    float* y = static_cast<float*>(out[0]);
    const auto work = static_cast<int64_t>(p.code.size()) * 8;
    cpu::parallel_chunks(plan.numel(), work, threads, [&](int64_t begin, int64_t end) {
      // One block per instruction but the last, which writes the output.
      std::vector<float> blocks(p.code.size() * kBlock);
      plan.for_each_run_n(begin, end, [&](int64_t o, const int64_t* offsets, int64_t count,
                                         const int64_t* steps) {
        for (int64_t start = 0; start < count; start += kBlock) {
          const int64_t n = std::min(kBlock, count - start);
          // An operand: its first element and its step (0: the same element throughout).
          auto operand = [&](int64_t r) -> std::pair<const float*, int64_t> {
            if (r <= -2) return {&immediates[static_cast<size_t>(-2 - r)], 0};
            if (r < p.num_inputs)
              return {static_cast<const float*>(in[r]) + offsets[r] + start * steps[r], steps[r]};
            return {&blocks[static_cast<size_t>(r - p.num_inputs) * kBlock], 1};
          };
          for (size_t i = 0; i < p.code.size(); ++i) {
            const Instruction& ins = p.code[i];
            float* result = i + 1 == p.code.size() ? y + o + start : &blocks[i * kBlock];
            auto [a, a_step] = operand(ins.a);
            if (is_binary(ins.code)) {
              auto [b, b_step] = operand(ins.b);
              binary_fn(ins.code)(a, a_step, b, b_step, result, n);
              continue;
            }
            if (a_step == 0) {  // a broadcast operand: unary kernels read consecutive elements
              std::fill_n(result, n, *a);
              a = result;
            }
            unary_fn(ins.code)(a, result, n);
          }
        }
      });
    });
  });
}

std::string avx2_unsupported(const KernelSpec& spec) {
  return cpu::avx2_f32_unsupported_reason(spec.inputs[0].dtype);
}
#endif

}  // namespace

void register_fused_elementwise_ops(OpRegistry& registry) {
  OpDef def;
  def.name = "fused_elementwise";
  def.inputs = {{"inputs", /*variadic=*/true}};
  def.attrs = {{"ops", std::vector<std::string>{}, /*required=*/true},
               {"args", std::vector<int64_t>{}, /*required=*/true},
               {"immediates", std::vector<double>{}}};
  def.infer = infer_fused_elementwise;
#ifdef KILN_X86
  def.kernels.push_back({"avx2", "native", avx2_unsupported, create_avx2});
#endif
  def.kernels.push_back({"reference", "native", [](const KernelSpec&) { return std::string(); },
                         [](const KernelSpec& spec) {
                           return spec.inputs[0].dtype == DType::F64
                                      ? create_reference<double>(spec)
                                      : create_reference<float>(spec);
                         }});
  registry.add(std::move(def));
}

}  // namespace kiln
