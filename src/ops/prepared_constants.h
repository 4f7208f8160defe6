// Constants prepared for a kernel (weights reordered into a library's preferred layout), shared
// by every kernel that prepares the same constant the same way: within one compiled graph (the
// plans of a dynamic graph, one per input shape, and the candidates max-autotune times), and
// across the compiled graphs of a process by the constant's contents (dynamo's static graph and
// the dynamic one it compiles at the next shape read the same weights: BERT-base held 340 MB of
// prepacked GEMM weights twice). Entries are weak: a prepared copy lives as long as a kernel
// holds it.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "kiln/tensor.h"

namespace kiln {

class PreparedConstants {
 public:
  // The prepared form of the constant `source`, keyed by its data and `how` (a description of
  // the preparation complete enough that equal keys mean equal results, the source's dtype and
  // sizes included), made by `prepare` when no kernel of any graph holds one of equal contents.
  // The constants must outlive this object (the compiled graph owns both).
  std::shared_ptr<const Tensor> get(const Tensor& source, const std::string& how,
                                    const std::function<Tensor()>& prepare);

  // Entries in the map: those held and those expired since the last miss.
  size_t entries() const;
  // Bytes of the prepared copies that this graph's kernels hold now.
  size_t held_bytes() const;

 private:
  mutable std::mutex mutex_;
  // Keyed by address: a compiled graph's constants don't change while it lives.
  std::map<std::pair<const void*, std::string>, std::weak_ptr<const Tensor>> prepared_;
};

}  // namespace kiln
