// Concrete tensors: owned storage (Tensor) and borrowed views of caller memory (TensorView).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kiln/dtype.h"

namespace kiln {

// Every buffer Kiln allocates is aligned to this many bytes (cache line, widest vector).
inline constexpr size_t kAlignment = 64;

// A non-owning view of dense, row-major memory: what crosses the API in both directions.
struct TensorView {
  void* data = nullptr;
  DType dtype = DType::F32;
  std::vector<int64_t> sizes;
  // Element strides; empty means contiguous row-major.
  std::vector<int64_t> strides;

  int64_t numel() const;
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  bool is_contiguous() const;
  template <typename T> T* as() const { return static_cast<T*>(data); }
};

// An owned, 64-byte aligned, contiguous tensor with shared storage (copies share the bytes).
class Tensor {
 public:
  Tensor() = default;
  static Tensor empty(DType dtype, std::vector<int64_t> sizes);
  static Tensor zeros(DType dtype, std::vector<int64_t> sizes);
  // Copies the bytes of a contiguous view.
  static Tensor copy_of(const TensorView& view);
  // Uses `data` in place (e.g. a constant in a memory-mapped model file): no copy; `owner` (the
  // mapping) stays alive as long as any tensor sharing this storage. `data` must be aligned to
  // kAlignment and hold nbytes() bytes; it is read, never written.
  static Tensor borrowed(DType dtype, std::vector<int64_t> sizes, const void* data,
                         std::shared_ptr<const void> owner);
  // borrowed() from a read-only private mapping of a file (Model::load), whose pages
  // release_pages() may give back: read again, they fault back in from the file.
  static Tensor mapped_from_file(DType dtype, std::vector<int64_t> sizes, const void* data,
                                 std::shared_ptr<const void> mapping);

  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& sizes() const { return sizes_; }
  int64_t numel() const;
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  bool defined() const { return storage_ != nullptr || numel() == 0; }

  void* data() const { return storage_.get(); }
  template <typename T> T* data() const { return static_cast<T*>(static_cast<void*>(storage_.get())); }
  TensorView view() const { return TensorView{storage_.get(), dtype_, sizes_, {}}; }
  // For a tensor mapped_from_file: drops the resident pages that lie wholly inside it from this
  // process (madvise MADV_DONTNEED), once a prepared copy serves the kernels that read it.
  // Nothing for any other tensor, whose memory holds the only copy.
  void release_pages() const;
  // The same dtype and sizes without data (defined() is false unless it is empty): a constant
  // that a compiled graph dropped once prepared copies served every kernel reading it.
  Tensor without_data() const;
  // Byte-wise equality of dtype, sizes and contents.
  bool same_contents(const Tensor& other) const;
  // Value equality (attributes holding tensors compare by contents).
  bool operator==(const Tensor& other) const { return same_contents(other); }

 private:
  DType dtype_ = DType::F32;
  std::vector<int64_t> sizes_;
  std::shared_ptr<std::byte> storage_;
  bool mapped_from_file_ = false;
};

}  // namespace kiln
