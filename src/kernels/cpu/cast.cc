#include "kernels/cpu/cast.h"

#include "kernels/cpu/convert.h"
#include "kernels/cpu/dtype_dispatch.h"

namespace kiln::cpu {

void cast_reference(DType from, DType to, const void* in, void* out, int64_t begin,
                    int64_t end) {
  dispatch_dtype(from, [&](auto from_zero) {
    dispatch_dtype(to, [&](auto to_zero) {
      using From = decltype(from_zero);
      using To = decltype(to_zero);
      const From* x = static_cast<const From*>(in);
      To* y = static_cast<To*>(out);
      for (int64_t i = begin; i < end; ++i) y[i] = convert<To>(x[i]);
    });
  });
}

}  // namespace kiln::cpu
