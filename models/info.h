// pelab — `pelab info`: a text table of parameter counts per module (top level, second level, and
// each layer of a `layers` list) with the total.
#pragma once
#include <string>

#include "models/transformer.h"
#include "pelab/nn.h"

namespace pelab::models {

// Rows: every module prefix of depth 1 and 2 that holds parameters (depth 3 under a "layers" list),
// in first-appearance order, indented by depth; then "total". Tied parameters count once, under the
// first name they are reached by (Module::named_parameters).
std::string parameter_table(const Module& model);

// A one-paragraph description of the model (arch, sizes, PE scheme, dtype, tying) followed by
// parameter_table().
std::string model_info(const Transformer& model);

}  // namespace pelab::models
