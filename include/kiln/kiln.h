// Kiln's public C++ API: build a graph, compile it, run it.
#pragma once

#include "kiln/dtype.h"
#include "kiln/error.h"
#include "kiln/graph.h"
#include "kiln/runtime.h"
#include "kiln/shape.h"
#include "kiln/tensor.h"
