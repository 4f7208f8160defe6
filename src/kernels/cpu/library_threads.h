// oneDNN and OpenBLAS (both OpenMP builds) size their thread teams by the calling thread's
// omp_get_max_threads(); kernels that call them set it to their KernelSpec::threads for the call.
#pragma once

#include <omp.h>

#include <algorithm>

namespace kiln::cpu {

class LibraryThreads {
 public:
  // Affects only the calling thread (the setting is per thread), so concurrent runs don't clash.
  explicit LibraryThreads(int threads) : saved_(omp_get_max_threads()) {
    omp_set_num_threads(std::max(threads, 1));
  }
  ~LibraryThreads() { omp_set_num_threads(saved_); }
  LibraryThreads(const LibraryThreads&) = delete;
  LibraryThreads& operator=(const LibraryThreads&) = delete;

 private:
  int saved_;
};

}  // namespace kiln::cpu
