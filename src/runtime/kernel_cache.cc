#include "runtime/kernel_cache.h"

#include <iterator>

namespace kiln {

SharedKernel KernelCache::select(const OpDef& def, const KernelSpec& spec,
                                 const std::string& policy) {
  Key key{&spec.node, {}};
  for (size_t i = 0; i < spec.inputs.size(); ++i) key.second.push_back(spec.input_sizes(i));
  for (size_t i = 0; i < spec.outputs.size(); ++i) key.second.push_back(spec.output_sizes(i));
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = entries_.find(key);
    if (it != entries_.end())
      if (auto held = it->second.instance.lock()) return {it->second.kernel, std::move(held)};
  }
  // Selected outside the lock: creation (and autotune's timing) takes long. Two plans missing
  // the same key at once each make one; either serves.
  KernelChoice choice = select_kernel(def, spec, policy);
  SharedKernel made{choice.kernel, std::move(choice.instance)};
  std::lock_guard<std::mutex> lock(mutex_);
  entries_[std::move(key)] = Entry{made.kernel, made.instance};
  // Expired entries (their plans evicted) are swept now and then, keeping the map near the
  // size of what the live plans hold.
  if (++inserts_since_sweep_ >= entries_.size()) {
    inserts_since_sweep_ = 0;
    for (auto it = entries_.begin(); it != entries_.end();)
      it = it->second.instance.expired() ? entries_.erase(it) : std::next(it);
  }
  return made;
}

}  // namespace kiln
