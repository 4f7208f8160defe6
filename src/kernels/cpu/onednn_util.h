// What every oneDNN kernel shares: one CPU engine, a stream per thread, primitives whose
// scratchpad the executor provides (so one primitive serves concurrent runs), and weights
// reordered once into the layout a primitive prefers.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "dnnl.hpp"
#include "kiln/tensor.h"

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

// A dense row-major f32 descriptor.
inline dnnl::memory::desc plain_f32_desc(const std::vector<int64_t>& sizes) {
  return dnnl::memory::desc(to_dims(sizes), dnnl::memory::data_type::f32, row_major_strides(sizes));
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

}  // namespace kiln::cpu
