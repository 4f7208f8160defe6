#include <algorithm>

#include "kiln/error.h"
#include "passes/pass.h"

namespace kiln {

void PassPipeline::add_stage(std::string name, std::vector<std::unique_ptr<Pass>> passes,
                             bool fixed_point, int max_iterations) {
  stages_.push_back(Stage{std::move(name), std::move(passes), fixed_point, max_iterations});
}

std::vector<std::string> PassPipeline::pass_names() const {
  std::vector<std::string> names;
  for (const Stage& s : stages_)
    for (const auto& p : s.passes) names.push_back(p->name());
  return names;
}

void PassPipeline::run(Graph& graph, const PipelineOptions& options) const {
  std::vector<std::string> known = pass_names();
  for (const std::string& disabled : options.disabled_passes)
    if (std::find(known.begin(), known.end(), disabled) == known.end()) {
      std::string list;
      for (const auto& n : known) list += (list.empty() ? "" : ", ") + n;
      throw_error(ErrorCode::InvalidArgument, "disabled_passes names '", disabled,
                  "', which is not a pass; the passes are: ", list);
    }
  for (const Stage& stage : stages_) {
    for (int iteration = 0; iteration < stage.max_iterations; ++iteration) {
      bool changed = false;
      for (const auto& pass : stage.passes) {
        if (options.disabled_passes.count(pass->name())) continue;
        changed |= pass->run(graph);
        if (options.verify) {
          try {
            verify(graph);
          } catch (const Error& e) {
            KILN_ASSERT(false, "pass " << pass->name() << " (stage " << stage.name
                                       << ") broke the graph: " << e.what());
          }
        }
      }
      if (!stage.fixed_point || !changed) break;
    }
  }
}

}  // namespace kiln
