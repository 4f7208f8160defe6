#include <algorithm>
#include <chrono>

#include "kiln/error.h"
#include "passes/pass.h"

namespace kiln {

void PassPipeline::add_stage(std::string name, int min_level) {
  KILN_ASSERT(!in_fixed_point_, "stage " << name << " starts inside a fixed-point group");
  stages_.push_back(Stage{std::move(name), min_level, {}});
}

void PassPipeline::add(std::unique_ptr<Pass> pass) {
  KILN_ASSERT(!stages_.empty(), "pass " << pass->name() << " added before any stage");
  if (in_fixed_point_) {
    stages_.back().groups.back().passes.push_back(std::move(pass));
    return;
  }
  Group single;
  single.passes.push_back(std::move(pass));
  stages_.back().groups.push_back(std::move(single));
}

void PassPipeline::begin_fixed_point(std::string name, int max_rounds) {
  KILN_ASSERT(!stages_.empty() && !in_fixed_point_ && !name.empty() && max_rounds >= 1,
              "begin_fixed_point(" << name << ") outside a stage, nested or unnamed");
  stages_.back().groups.push_back(Group{std::move(name), max_rounds, {}});
  in_fixed_point_ = true;
}

void PassPipeline::end_fixed_point() {
  KILN_ASSERT(in_fixed_point_, "end_fixed_point without begin_fixed_point");
  in_fixed_point_ = false;
}

std::vector<std::string> PassPipeline::pass_names() const {
  std::vector<std::string> names;
  for (const Stage& s : stages_)
    for (const Group& g : s.groups)
      for (const auto& p : g.passes) names.push_back(p->name());
  return names;
}

std::vector<std::string> PassPipeline::stage_names() const {
  std::vector<std::string> names;
  for (const Stage& s : stages_) names.push_back(s.name);
  return names;
}

PipelineReport PassPipeline::run(Graph& graph, const PipelineOptions& options) const {
  KILN_ASSERT(!in_fixed_point_, "pipeline run with an open fixed-point group");
  if (options.optimization_level < 0 || options.optimization_level > 3)
    throw_error(ErrorCode::InvalidArgument, "optimization_level = ", options.optimization_level,
                " is out of range; use 0, 1, 2 or 3");
  std::vector<std::string> known = pass_names();
  for (const std::string& disabled : options.disabled_passes)
    if (std::find(known.begin(), known.end(), disabled) == known.end()) {
      std::string list;
      for (const auto& n : known) list += (list.empty() ? "" : ", ") + n;
      throw_error(ErrorCode::InvalidArgument, "disabled_passes names '", disabled,
                  "', which is not a pass; the passes are: ", list);
    }
  PipelineReport report;
  for (const Stage& stage : stages_) {
    if (stage.min_level > options.optimization_level) continue;
    for (const Group& group : stage.groups) {
      bool changed = true;
      int round = 0;
      for (; round < group.max_rounds && changed; ++round) {
        changed = false;
        for (const auto& pass : group.passes) {
          if (options.disabled_passes.count(pass->name())) continue;
          PassRecord record{pass->name(), stage.name, round, false, graph.num_nodes(), 0, 0};
          auto start = std::chrono::steady_clock::now();
          record.changed = pass->run(graph);
          record.seconds =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
          record.nodes_after = graph.num_nodes();
          changed |= record.changed;
          report.records.push_back(record);
          if (options.verify) {
            try {
              verify(graph);
            } catch (const Error& e) {
              KILN_ASSERT(false, "pass " << pass->name() << " (stage " << stage.name
                                         << ") broke the graph: " << e.what());
            }
          }
        }
      }
      // A group run once (no name) is done after one round whatever it changed.
      if (group.name.empty() || !changed) continue;
      std::string warning = "fixed-point group '" + group.name + "' (stage " + stage.name +
                            ") still changed the graph after " + std::to_string(round) +
                            " rounds; its passes undo each other or need a higher cap";
      KILN_ASSERT(!options.verify, warning);
      report.warnings.push_back(warning);
    }
    if (options.after_stage) options.after_stage(stage.name, graph);
  }
  return report;
}

}  // namespace kiln
