// What every oneDNN kernel shares: one CPU engine, a stream per thread, primitives whose
// scratchpad the executor provides (so one primitive serves concurrent runs), and weights
// reordered once into the layout a primitive prefers.
#pragma once

#include <bit>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "dnnl.hpp"
#include "kiln/tensor.h"
#include "ops/op_registry.h"

namespace kiln::cpu {

inline const dnnl::engine& onednn_engine() {
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

// CPU streams are cheap, but a run makes one per primitive: keep one per thread instead.
inline dnnl::stream& onednn_stream() {
  thread_local dnnl::stream stream(onednn_engine());
  return stream;
}

// Attributes for a primitive that takes its scratchpad from the caller at execution
// (DNNL_ARG_SCRATCHPAD): the library's own would be shared by concurrent runs.
inline dnnl::primitive_attr user_scratchpad_attr() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

inline dnnl::memory::dims to_dims(const std::vector<int64_t>& sizes) {
  return dnnl::memory::dims(sizes.begin(), sizes.end());
}

inline dnnl::memory::dims row_major_strides(const std::vector<int64_t>& sizes) {
  dnnl::memory::dims strides(sizes.size(), 1);
  for (size_t i = sizes.size(); i-- > 1;) strides[i - 1] = strides[i] * sizes[i];
  return strides;
}

// A dense row-major descriptor.
inline dnnl::memory::desc plain_desc(const std::vector<int64_t>& sizes,
                                     dnnl::memory::data_type type) {
  return dnnl::memory::desc(to_dims(sizes), type, row_major_strides(sizes));
}

inline dnnl::memory::desc plain_f32_desc(const std::vector<int64_t>& sizes) {
  return plain_desc(sizes, dnnl::memory::data_type::f32);
}

// Runs a primitive on this thread's stream and waits for it (oneDNN's OpenMP CPU runtime
// returns when done; the wait keeps that true whatever the runtime).
inline void execute_and_wait(const dnnl::primitive& primitive,
                             const std::unordered_map<int, dnnl::memory>& args) {
  dnnl::stream& stream = onednn_stream();
  primitive.execute(stream, args);
  stream.wait();
}

// Copies `data` (laid out as `from`) into a new buffer laid out as `to`, once at kernel creation.
inline Tensor reorder_into(const dnnl::memory::desc& from, const void* data,
                           const dnnl::memory::desc& to) {
  Tensor packed = Tensor::empty(DType::U8, {static_cast<int64_t>(to.get_size())});
  dnnl::memory src(from, onednn_engine(), const_cast<void*>(data));
  dnnl::memory dst(to, onednn_engine(), packed.data());
  dnnl::stream& stream = onednn_stream();
  dnnl::reorder(src, dst).execute(stream, src, dst);
  stream.wait();
  return packed;
}

// A key naming the layout `d` describes, equal for equal layouts: blocked formats and the
// Winograd weights of oneDNN's wino convolutions (each shape of a dynamic graph plans its own
// kernels, and a Winograd weight keyed by nothing was transformed and held once per shape);
// empty for formats it doesn't spell out.
inline std::string layout_key(const dnnl::memory::desc& d) {
  const dnnl_memory_desc_t& m = d.data;
  if ((m.format_kind != dnnl_blocked && m.format_kind != dnnl_format_kind_wino) ||
      m.extra.flags != 0)
    return {};
  std::string key = std::to_string(m.data_type) + "@" + std::to_string(m.offset0);
  auto append = [&key](char tag, const auto* values, int count) {
    key += tag;
    for (int i = 0; i < count; ++i) key += std::to_string(values[i]) + ",";
  };
  append('d', m.dims, m.ndims);
  append('p', m.padded_dims, m.ndims);
  append('o', m.padded_offsets, m.ndims);
  if (m.format_kind == dnnl_format_kind_wino) {
    const dnnl_wino_desc_t& w = m.format_desc.wino_desc;
    const int64_t fields[] = {w.wino_format, w.r,         w.alpha,     w.ic,
                              w.oc,          w.ic_block,  w.oc_block,  w.ic2_block,
                              w.oc2_block,   int64_t(w.size), std::bit_cast<uint32_t>(w.adj_scale)};
    append('w', fields, 11);
    return key;
  }
  const dnnl_blocking_desc_t& b = m.format_desc.blocking;
  append('s', b.strides, m.ndims);
  append('b', b.inner_blks, b.inner_nblks);
  append('i', b.inner_idxs, b.inner_nblks);
  return key;
}

// Input `index` of the kernel (a constant) reordered from `from` into `to`: shared with every
// other kernel, of this compiled graph or another, that asks for the same reorder of it.
inline std::shared_ptr<const Tensor> prepacked_constant(const KernelSpec& spec, size_t index,
                                                        const dnnl::memory::desc& from,
                                                        const dnnl::memory::desc& to) {
  const Tensor& source = *spec.constant_inputs.at(index);
  auto reorder = [&] { return reorder_into(from, source.data(), to); };
  const std::string from_key = layout_key(from), to_key = layout_key(to);
  std::shared_ptr<const Tensor> packed =
      !spec.prepared || from_key.empty() || to_key.empty()
          ? std::make_shared<const Tensor>(reorder())
          : spec.prepared->get(source, "onednn:" + from_key + "->" + to_key, reorder);
  // A source in a model file's mapping gives its pages back (reordering or hashing read them): a
  // loaded model holds one copy of each prepacked weight, not two (docs/file-format.md).
  source.release_pages();
  return packed;
}

}  // namespace kiln::cpu
