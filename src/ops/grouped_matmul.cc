// grouped_matmul: the expert products of a mixture-of-experts layer, A's rows sorted by expert
// and each run of rows multiplied by its expert's matrix:
//   C[r, :] = A[r, :] · B[g]   for offsets[g - 1] <= r < offsets[g]   (offsets[-1] = 0)
// A [S, K], B [G, K, N] ([G, N, K] with transpose_b, how nn.Linear stores its weights),
// offsets [G] of i32 or i64: cumulative row counts, read at run time, which must be
// non-decreasing within [0, S] (else E40002 naming the node and the offending entry; no row is
// read out of bounds). Rows from offsets[G - 1] on are zeros (torch._grouped_mm leaves them
// unspecified, transformers' fallback writes zeros). f32 and f64, and bf16 with f32 sums
// rounded once, as PyTorch's per-group mm does.
//
// Kernels, best first: oneDNN (f32, and bf16 on CPUs where oneDNN runs it natively: a matmul per
// group, on constant B prepacked once, else read in place), then the reference loops.
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <type_traits>
#include <unordered_map>

#include "dnnl.hpp"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/float16.h"
#include "kernels/cpu/library_threads.h"
#include "kernels/cpu/onednn_util.h"
#include "kernels/cpu/parallel_chunks.h"
#include "ops/op_registry.h"

namespace kiln {

namespace {

void infer_grouped_matmul(InferContext& ctx) {
  const TensorType& a = ctx.input(0);
  const TensorType& b = ctx.input(1);
  const TensorType& offsets = ctx.input(2);
  ctx.check(a.dtype == b.dtype, "A and B must have the same dtype");
  ctx.check(a.dtype == DType::F32 || a.dtype == DType::F64 || a.dtype == DType::BF16,
            "grouped_matmul supports f32, f64 and bf16");
  ctx.check(a.rank() == 2, "A must be [S, K] (rows sorted by group)");
  ctx.check(b.rank() == 3, "B must be [G, K, N] (or [G, N, K] with transpose_b): one matrix a group");
  ctx.check(offsets.rank() == 1 && (offsets.dtype == DType::I32 || offsets.dtype == DType::I64),
            "offsets must be a rank-1 i32 or i64 tensor: the cumulative row count of each group");
  const bool transpose_b = ctx.attr_bool("transpose_b");
  ctx.unify(offsets.shape[0], b.shape[0], "offsets length and B's group count (G)");
  ctx.unify(a.shape[1], b.shape[transpose_b ? 2 : 1], "contraction dims (K)");
  ctx.set_output(0, TensorType{a.dtype, {a.shape[0], b.shape[transpose_b ? 1 : 2]}, Layout::Plain});
}

// The problem one kernel instance solves; the group bounds come from the offsets at run time.
struct Grouped {
  int64_t s = 0, k = 0, n = 0, groups = 0;
  bool transpose_b = false;
  DType offsets_dtype = DType::I64;
  std::string node, op;

  explicit Grouped(const KernelSpec& spec)
      : transpose_b(spec.node.attr_bool("transpose_b")),
        offsets_dtype(spec.inputs[2].dtype),
        node(spec.node.name()),
        op(spec.node.op()) {
    const std::vector<int64_t> a = spec.input_sizes(0), b = spec.input_sizes(1);
    s = a[0];
    k = a[1];
    groups = b[0];
    n = b[transpose_b ? 1 : 2];
  }

  // bounds[g] .. bounds[g + 1] are group g's rows. Throws E40002 (before anything is written)
  // unless the offsets are non-decreasing within [0, S].
  std::vector<int64_t> bounds(const void* offsets) const {
    std::vector<int64_t> bounds(groups + 1, 0);
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t end = offsets_dtype == DType::I64 ? static_cast<const int64_t*>(offsets)[g]
                                                      : static_cast<const int32_t*>(offsets)[g];
      if (end < bounds[g] || end > s)
        throw_error(ErrorCode::ShapeInference, "node '", node, "' (", op, "): offsets[", g,
                    "] is ", end,
                    end > s    ? ", more than A's " + std::to_string(s) + " rows"
                    : g == 0 ? std::string(", negative")
                             : ", below offsets[" + std::to_string(g - 1) + "] = " +
                                   std::to_string(bounds[g]),
                    "; the offsets must be non-decreasing cumulative row counts within [0, ", s,
                    "]. Check the offsets fed to this node.");
      bounds[g + 1] = end;
    }
    return bounds;
  }
};

// Sums rounded to f32 first for bf16, as the GEMMs accumulate.
template <typename T, typename Sum = std::conditional_t<std::is_same_v<T, double>, double, float>>
void reference_grouped(const Grouped& p, const std::vector<int64_t>& bounds, const T* a,
                       const T* b, T* c, int threads) {
  cpu::parallel_chunks(bounds.back(), p.n * p.k, threads, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      // The group whose rows hold `row`: the last bound at or below it among the non-empty.
      const int64_t g = std::upper_bound(bounds.begin(), bounds.end(), row) - bounds.begin() - 1;
      const T* b_mat = b + g * p.k * p.n;
      for (int64_t j = 0; j < p.n; ++j) {
        double sum = 0;  // exact to about 2^-53 of the sum of |a*b|, as matmul's reference
        for (int64_t q = 0; q < p.k; ++q)
          sum += cpu::convert<double>(a[row * p.k + q]) *
                 cpu::convert<double>(p.transpose_b ? b_mat[j * p.k + q] : b_mat[q * p.n + j]);
        c[row * p.n + j] = cpu::convert<T>(static_cast<Sum>(sum));
      }
    }
  });
  // The rows past the last group: zeros.
  std::fill(c + bounds.back() * p.n, c + p.s * p.n, T{});
}

std::unique_ptr<KernelInstance> create_reference(const KernelSpec& spec) {
  auto make = [&]<typename T>(T*) {
    return make_kernel([p = Grouped(spec), threads = spec.threads](
                           std::span<const void* const> in, std::span<void* const> out) {
      reference_grouped(p, p.bounds(in[2]), static_cast<const T*>(in[0]),
                        static_cast<const T*>(in[1]), static_cast<T*>(out[0]), threads);
    });
  };
  switch (spec.inputs[0].dtype) {
    case DType::F64: return make(static_cast<double*>(nullptr));
    case DType::BF16: return make(static_cast<cpu::BFloat16*>(nullptr));
    default: return make(static_cast<float*>(nullptr));
  }
}

// Each group's rows times its matrix through oneDNN's matmul (f32 sums, each bf16 result rounded
// once), in one of two ways:
//  * B a constant (experts' weights) and not read in place (memory.gemm_weights_in_place): each
//    group's matrix reordered once into the layout oneDNN's brgemm matmul prefers, and one
//    primitive per row count, made the first time a group has that many rows (0.2-1 ms) and kept.
//    A group of more than kMaxRowsPerCall rows runs in calls of at most that many, which bounds
//    the primitives at kMaxRowsPerCall.
//  * otherwise one primitive whose M is given at run time (oneDNN's jit GEMM, which packs B on
//    every call) on B as it lies.
// 8 groups of [N, K] = 4096 x 1024 (Xeon with AMX, 2 threads, ms; prepacked / run-time M /
// dnnl_sgemm / OpenBLAS sgemm): f32 M = 1: 3.4 / 4.0 / 2.8 / 7.5; M = 8: 5.0 / 7.9 / 9.5 / 10.8;
// M = 32: 9.5 / 11.9 / 15.7 / 13.3; M = 64: 14.4 / 17.8 / 20.7 / 18.0. bf16 (AMX), prepacked /
// run-time M: M = 1: 2.2 / 1.3; M = 8: 2.2 / 3.4; M = 32: 3.1 / 4.6; M = 64: 5.6 / 5.8.
class OneDnnGrouped final : public KernelInstance {
 public:
  static constexpr int64_t kMaxRowsPerCall = 256;

  explicit OneDnnGrouped(const KernelSpec& spec)
      : p_(spec),
        threads_(std::max(spec.threads, 1)),
        type_(spec.inputs[0].dtype == DType::BF16 ? dnnl::memory::data_type::bf16
                                                  : dnnl::memory::data_type::f32),
        element_bytes_(static_cast<int64_t>(dtype_size(spec.inputs[0].dtype))) {
    // Creation sizes a primitive's work split by the thread count it sees.
    cpu::LibraryThreads scope(threads_);
    const dnnl::memory::dim runtime = DNNL_RUNTIME_DIM_VAL;
    dnnl::matmul::primitive_desc pd(
        dnnl::matmul::desc(rows_desc(runtime, p_.k), stored_desc(), rows_desc(runtime, p_.n)),
        cpu::user_scratchpad_attr(), cpu::onednn_engine());
    scratchpad_ = pd.scratchpad_desc();
    runtime_rows_ = dnnl::matmul(pd);
    if (spec.constant_inputs.size() > 1 && spec.constant_inputs[1] && !spec.gemm_weights_in_place)
      prepack(spec);
  }
  size_t scratch_bytes() const override { return scratchpad_.get_size(); }

  void run(std::span<const void* const> in, std::span<void* const> out,
           void* scratch) const override {
    const std::vector<int64_t> bounds = p_.bounds(in[2]);
    auto at = [&](const void* base, int64_t elements) {
      return const_cast<char*>(static_cast<const char*>(base) + elements * element_bytes_);
    };
    const dnnl::engine& engine = cpu::onednn_engine();
    cpu::LibraryThreads scope(threads_);
    for (int64_t g = 0; g < p_.groups; ++g) {
      for (int64_t row = bounds[g]; row < bounds[g + 1];) {
        const int64_t rows = packed_ ? std::min(kMaxRowsPerCall, bounds[g + 1] - row)
                                     : bounds[g + 1] - row;
        std::unordered_map<int, dnnl::memory> args{
            {DNNL_ARG_SRC, dnnl::memory(rows_desc(rows, p_.k), engine, at(in[0], row * p_.k))},
            {DNNL_ARG_DST, dnnl::memory(rows_desc(rows, p_.n), engine, at(out[0], row * p_.n))}};
        const Prepacked* call = packed_ ? &prepacked_for(rows) : nullptr;
        if (call && call->primitive) {
          args.emplace(DNNL_ARG_WEIGHTS,
                       dnnl::memory(packed_desc_, engine,
                                    const_cast<std::byte*>(packed_->data<std::byte>()) +
                                        g * packed_desc_.get_size()));
          args.emplace(DNNL_ARG_SCRATCHPAD,
                       dnnl::memory(call->scratchpad, engine, call_scratch(call->scratchpad)));
          cpu::execute_and_wait(call->primitive, args);
        } else {
          args.emplace(DNNL_ARG_WEIGHTS,
                       dnnl::memory(stored_desc(), engine, at(in[1], g * p_.k * p_.n)));
          args.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory(scratchpad_, engine, scratch));
          cpu::execute_and_wait(runtime_rows_, args);
        }
        row += rows;
      }
    }
    // The rows past the last group: zeros (all-zero bytes in both dtypes).
    std::memset(at(out[0], bounds.back() * p_.n), 0, (p_.s - bounds.back()) * p_.n * element_bytes_);
  }

 private:
  struct Prepacked {
    dnnl::matmul primitive;  // empty where oneDNN wants another layout: B as stored serves
    dnnl::memory::desc scratchpad;
  };

  dnnl::memory::desc rows_desc(dnnl::memory::dim rows, int64_t columns) const {
    return dnnl::memory::desc({rows, columns}, type_, {columns, 1});
  }
  // One group's matrix as [K, N], strided as stored, transposed or not.
  dnnl::memory::desc stored_desc() const {
    return dnnl::memory::desc({p_.k, p_.n}, type_,
                              p_.transpose_b ? dnnl::memory::dims{1, p_.k}
                                             : dnnl::memory::dims{p_.n, 1});
  }
  dnnl::matmul::primitive_desc fixed_rows_desc(int64_t rows) const {
    const dnnl::memory::desc any({p_.k, p_.n}, type_, dnnl::memory::format_tag::any);
    return dnnl::matmul::primitive_desc(
        dnnl::matmul::desc(rows_desc(rows, p_.k), any, rows_desc(rows, p_.n)),
        cpu::user_scratchpad_attr(), cpu::onednn_engine());
  }

  // Every group's matrix in the layout the one-row primitive prefers, which oneDNN 2.6.3's
  // brgemm matmul keeps for every row count (checked for 1 to 1000 rows, f32 and bf16; calls
  // whose primitive would want another layout read B as stored instead, prepacked_for).
  void prepack(const KernelSpec& spec) {
    packed_desc_ = fixed_rows_desc(1).weights_desc();
    const dnnl::memory::desc stored = stored_desc();
    const std::string from = cpu::layout_key(stored), to = cpu::layout_key(packed_desc_);
    if (from.empty() || to.empty() || from == to) return;  // nothing to gain, or no key to share
    const Tensor& source = *spec.constant_inputs[1];
    auto reorder_all = [&] {
      const size_t group_bytes = packed_desc_.get_size();
      Tensor packed = Tensor::empty(DType::U8, {static_cast<int64_t>(group_bytes * p_.groups)});
      const dnnl::engine& engine = cpu::onednn_engine();
      const dnnl::reorder reorder(dnnl::reorder::primitive_desc(engine, stored, engine, packed_desc_));
      for (int64_t g = 0; g < p_.groups; ++g) {
        dnnl::memory from(stored, engine,
                          const_cast<std::byte*>(static_cast<const std::byte*>(source.data())) +
                              g * p_.k * p_.n * element_bytes_);
        dnnl::memory to(packed_desc_, engine, packed.data<std::byte>() + g * group_bytes);
        cpu::execute_and_wait(reorder, {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}});
      }
      return packed;
    };
    const std::string how = "onednn-grouped:" + std::to_string(p_.groups) + ":" + from + "->" + to;
    packed_ = spec.prepared ? spec.prepared->get(source, how, reorder_all)
                            : std::make_shared<const Tensor>(reorder_all());
    source.release_pages();
  }

  // The primitive for calls of `rows` rows on the prepacked matrices, made on first use.
  const Prepacked& prepacked_for(int64_t rows) const {
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = by_rows_.find(rows);
    if (found != by_rows_.end()) return found->second;
    const dnnl::matmul::primitive_desc pd = fixed_rows_desc(rows);
    Prepacked made;
    if (pd.weights_desc() == packed_desc_) made = {dnnl::matmul(pd), pd.scratchpad_desc()};
    return by_rows_.emplace(rows, std::move(made)).first->second;
  }

  // The scratchpad of a call on prepacked matrices, whose size depends on its row count: a
  // buffer of the calling thread's (one run at a time per thread), grown as needed.
  static void* call_scratch(const dnnl::memory::desc& scratchpad) {
    thread_local std::vector<std::byte> buffer;
    if (buffer.size() < scratchpad.get_size()) buffer.resize(scratchpad.get_size());
    return buffer.data();
  }

  Grouped p_;
  int threads_;
  dnnl::memory::data_type type_;
  int64_t element_bytes_;
  dnnl::memory::desc scratchpad_;
  dnnl::matmul runtime_rows_;
  std::shared_ptr<const Tensor> packed_;  // the matrices in packed_desc_, one after another
  dnnl::memory::desc packed_desc_;
  mutable std::mutex mutex_;
  mutable std::map<int64_t, Prepacked> by_rows_;
};

std::string onednn_unsupported(const KernelSpec& spec) {
  const DType dtype = spec.inputs[0].dtype;
  if (dtype == DType::BF16 && !cpu::onednn_has_bf16())
    return "oneDNN runs bf16 natively only with AVX512-BF16";
  if (dtype != DType::F32 && dtype != DType::BF16) return "f32 and bf16 only";
  // oneDNN 2.6 traps creating a primitive with K = 0 (as matmul's kernels note).
  const Grouped p(spec);
  if (p.k == 0 || p.n == 0) return "K or N is 0: nothing to multiply";
  return "";
}

std::unique_ptr<KernelInstance> create_onednn(const KernelSpec& spec) {
  return std::make_unique<OneDnnGrouped>(spec);
}

}  // namespace

void register_grouped_matmul_ops(OpRegistry& registry) {
  OpDef def;
  def.name = "grouped_matmul";
  def.inputs = {{"A"}, {"B"}, {"offsets"}};
  def.attrs = {{"transpose_b", false}};
  def.infer = infer_grouped_matmul;
  def.kernels = {
      {"onednn", "onednn", onednn_unsupported, create_onednn},
      {"reference", "native", nullptr, create_reference},
  };
  registry.add(std::move(def));
}

}  // namespace kiln
