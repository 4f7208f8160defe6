// Kiln's compile stages, after GE's: prepare (fold, simplify, clean up) first. Later stages —
// fuse, format, partition, select — slot in here as their passes land.
#include "passes/pass_list.h"

namespace kiln {

PassPipeline default_pipeline() {
  PassPipeline pipeline;
  std::vector<std::unique_ptr<Pass>> prepare;
  prepare.push_back(make_dead_code_elimination());
  pipeline.add_stage("prepare", std::move(prepare), /*fixed_point=*/true);
  return pipeline;
}

}  // namespace kiln
