#include "ops/prepared_constants.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <tuple>

namespace kiln {

namespace {

// Prepared copies held by any compiled graph of the process, by the contents they were made
// from: a 128-bit hash of the bytes and their count (an address alone could name other contents
// by now: a weight changed in place, or freed and its memory reused; 128 bits so that two
// different weights meeting on one key is not a risk worth weighing). Weak, as the graphs' own.
class ProcessPrepared {
 public:
  using Key = std::tuple<uint64_t, uint64_t, size_t, std::string>;

  static ProcessPrepared& instance() {
    static ProcessPrepared shared;
    return shared;
  }

  std::shared_ptr<const Tensor> find(const Key& key) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = prepared_.find(key);
    return found == prepared_.end() ? nullptr : found->second.lock();
  }

  void add(const Key& key, const std::shared_ptr<const Tensor>& made) {
    std::lock_guard<std::mutex> lock(mutex_);
    std::erase_if(prepared_, [](const auto& entry) { return entry.second.expired(); });
    prepared_[key] = made;
  }

 private:
  std::mutex mutex_;
  std::map<Key, std::weak_ptr<const Tensor>> prepared_;
};

}  // namespace

std::shared_ptr<const Tensor> PreparedConstants::get(const Tensor& source, const std::string& how,
                                                     const std::function<Tensor()>& prepare) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto key = std::make_pair(static_cast<const void*>(source.data()), how);
  if (auto found = prepared_.find(key); found != prepared_.end())
    if (auto held = found->second.lock()) return held;
  // A miss: drop the entries no kernel holds any more (plans of shapes a dynamic graph
  // evicted), so the map stays as large as what is held.
  std::erase_if(prepared_, [](const auto& entry) { return entry.second.expired(); });
  const XXH128_hash_t hash = XXH3_128bits(source.data(), source.nbytes());
  const ProcessPrepared::Key contents{hash.high64, hash.low64, source.nbytes(), how};
  std::shared_ptr<const Tensor> made = ProcessPrepared::instance().find(contents);
  if (!made) {
    made = std::make_shared<const Tensor>(prepare());
    ProcessPrepared::instance().add(contents, made);
  }
  prepared_[key] = made;
  return made;
}

size_t PreparedConstants::entries() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return prepared_.size();
}

size_t PreparedConstants::held_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  size_t bytes = 0;
  for (const auto& [key, entry] : prepared_)
    if (auto held = entry.lock()) bytes += held->nbytes();
  return bytes;
}

}  // namespace kiln
