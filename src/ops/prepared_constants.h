// Constants prepared for a kernel (weights reordered into a library's preferred layout), shared
// by every kernel of one compiled graph that prepares the same constant the same way: the plans
// of a dynamic graph (one per input shape) and the candidates that max-autotune times use one
// copy instead of one each. Entries are weak: a prepared copy lives as long as a kernel holds it.
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
  // The prepared form of the constant whose data is `source`, keyed by `how` (a description of
  // the preparation complete enough that equal keys mean equal results), made by `prepare` when
  // no kernel holds it. The constants must outlive this object (the compiled graph owns both).
  std::shared_ptr<const Tensor> get(const void* source, const std::string& how,
                                    const std::function<Tensor()>& prepare) {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto key = std::make_pair(source, how);
    if (auto found = prepared_.find(key); found != prepared_.end())
      if (auto held = found->second.lock()) return held;
    // A miss: drop the entries no kernel holds any more (plans of shapes a dynamic graph
    // evicted), so the map stays as large as what is held.
    std::erase_if(prepared_, [](const auto& entry) { return entry.second.expired(); });
    auto made = std::make_shared<const Tensor>(prepare());
    prepared_[key] = made;
    return made;
  }

  // Entries in the map: those held and those expired since the last miss.
  size_t entries() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return prepared_.size();
  }

  // Bytes of the prepared copies that kernels hold now.
  size_t held_bytes() const {
    std::lock_guard<std::mutex> lock(mutex_);
    size_t bytes = 0;
    for (const auto& [key, entry] : prepared_)
      if (auto held = entry.lock()) bytes += held->nbytes();
    return bytes;
  }

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<const void*, std::string>, std::weak_ptr<const Tensor>> prepared_;
};

}  // namespace kiln
