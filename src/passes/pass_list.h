// Factories of every pass; the pipeline (pipeline.cc) composes them into stages.
#pragma once

#include <memory>

#include "passes/pass.h"

namespace kiln {

std::unique_ptr<Pass> make_dead_code_elimination();

}  // namespace kiln
