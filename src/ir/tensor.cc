#include "kiln/tensor.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <new>

#include "kiln/error.h"
#include "kiln/shape.h"

namespace kiln {

int64_t TensorView::numel() const { return num_elements(sizes); }

bool TensorView::is_contiguous() const {
  // Strides of an empty tensor are arbitrary (NumPy reports zeros): there is nothing to lay out.
  if (strides.empty() || numel() == 0) return true;
  if (strides.size() != sizes.size()) return false;
  int64_t expected = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    if (sizes[i] != 1 && strides[i] != expected) return false;
    expected *= sizes[i];
  }
  return true;
}

int64_t Tensor::numel() const { return num_elements(sizes_); }

Tensor Tensor::empty(DType dtype, std::vector<int64_t> sizes) {
  Tensor t;
  t.dtype_ = dtype;
  t.sizes_ = std::move(sizes);
  for (int64_t s : t.sizes_)
    if (s < 0) throw_error(ErrorCode::InvalidArgument, "negative size in ", shape_string(t.sizes_));
  size_t bytes = t.nbytes();
  size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  void* p = std::aligned_alloc(kAlignment, rounded ? rounded : kAlignment);
  if (!p)
    throw_error(ErrorCode::OutOfMemory, "could not allocate ", bytes, " bytes for a ",
                dtype_name(dtype), shape_string(t.sizes_), " tensor");
  t.storage_ = std::shared_ptr<std::byte>(static_cast<std::byte*>(p), [](std::byte* q) { std::free(q); });
  return t;
}

Tensor Tensor::zeros(DType dtype, std::vector<int64_t> sizes) {
  Tensor t = empty(dtype, std::move(sizes));
  std::memset(t.data(), 0, t.nbytes());
  return t;
}

Tensor Tensor::copy_of(const TensorView& view) {
  if (!view.is_contiguous())
    throw_error(ErrorCode::InputBuffer, "copy_of needs a contiguous tensor");
  Tensor t = empty(view.dtype, view.sizes);
  if (t.nbytes()) std::memcpy(t.data(), view.data, t.nbytes());
  return t;
}

Tensor Tensor::borrowed(DType dtype, std::vector<int64_t> sizes, const void* data,
                        std::shared_ptr<const void> owner) {
  KILN_ASSERT(reinterpret_cast<uintptr_t>(data) % kAlignment == 0, "borrowed data is misaligned");
  Tensor t;
  t.dtype_ = dtype;
  t.sizes_ = std::move(sizes);
  // The aliasing constructor: the pointer is `data`, the lifetime is the owner's. Kiln never
  // writes through a constant's pointer, so dropping const here is safe.
  t.storage_ = std::shared_ptr<std::byte>(std::const_pointer_cast<void>(std::move(owner)),
                                          static_cast<std::byte*>(const_cast<void*>(data)));
  return t;
}

Tensor Tensor::mapped_from_file(DType dtype, std::vector<int64_t> sizes, const void* data,
                                std::shared_ptr<const void> mapping) {
  Tensor t = borrowed(dtype, std::move(sizes), data, std::move(mapping));
  t.mapped_from_file_ = true;
  return t;
}

void Tensor::release_pages() const {
  if (!mapped_from_file_ || nbytes() == 0) return;
  static const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  // Only whole pages: a partial one is shared with the neighbouring constant.
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(data()) + page - 1) & ~(page - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(data()) + nbytes()) & ~(page - 1);
  // Advice only: a failure leaves the pages resident, which is what not calling would do.
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

Tensor Tensor::without_data() const {
  Tensor t;
  t.dtype_ = dtype_;
  t.sizes_ = sizes_;
  return t;
}

bool Tensor::same_contents(const Tensor& other) const {
  if (defined() != other.defined()) return false;
  if (!defined()) return true;
  return dtype_ == other.dtype_ && sizes_ == other.sizes_ &&
         (nbytes() == 0 || std::memcmp(data(), other.data(), nbytes()) == 0);
}

}  // namespace kiln
