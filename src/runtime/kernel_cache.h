// Kernels shared by the plans of one compiled graph. A dynamic graph gets a plan per input
// shape (an LLM's decode step, one per sequence length), yet most of its nodes see the same
// shapes in every plan (the projections of one token): their kernel, selected and created once,
// serves each plan. Entries are weak, as PreparedConstants' are: a kernel lives as long as a plan
// holds it, so the plan cache's capacity bounds this one too.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "runtime/kernel_selection.h"

namespace kiln {

struct SharedKernel {
  const KernelDef* kernel = nullptr;
  std::shared_ptr<const KernelInstance> instance;
};

class KernelCache {
 public:
  // The kernel select_kernel gives `spec` under `policy` (one policy per cache): a live one
  // made for the same node and the same input and output sizes, else a new one.
  SharedKernel select(const OpDef& def, const KernelSpec& spec, const std::string& policy);

 private:
  using Key = std::pair<const Node*, std::vector<std::vector<int64_t>>>;
  struct Entry {
    const KernelDef* kernel = nullptr;
    std::weak_ptr<const KernelInstance> instance;
  };
  std::mutex mutex_;
  std::map<Key, Entry> entries_;
  size_t inserts_since_sweep_ = 0;
};

}  // namespace kiln
