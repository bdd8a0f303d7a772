// pelab — umbrella header for the engine.
#pragma once
#include "pelab/autograd.h"
#include "pelab/backend.h"
#include "pelab/dtype.h"
#include "pelab/error.h"
#include "pelab/nn.h"
#include "pelab/ops.h"
#include "pelab/optim.h"
#include "pelab/parallel.h"
#include "pelab/random.h"
#include "pelab/registry.h"
#include "pelab/tensor.h"

namespace pelab {
const char* version();
}
