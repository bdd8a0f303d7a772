// data/multi_addition.h - multi-operand addition with a scratchpad of running sums and two-level
// coupled position IDs (Cho et al. 2025, "Arithmetic Transformers Can Length-Generalize in Both
// Operand Length and Count"). The format and both ID levels are defined in docs/tasks.md
// ("multi_addition").
#pragma once

#include <map>
#include <string>
#include <vector>

#include "data/tasks.h"

namespace pelab::data {

inline constexpr const char* kMultiAdditionTask = "multi_addition";

// The sum's width W: the base-`base` digits of operands x (base^digits - 1), the largest sum of
// `operands` numbers of `digits` digits.
int64_t multi_addition_width(int64_t digits, int64_t operands, int64_t base);

// The example of `operands` (digit values, most significant first) in multi_addition's layout
// (docs/tasks.md): operands zero-padded to W joined by `plus`, the running sums S_0..S_m reversed
// and zero-padded to W joined by `next`, and (coupled) both ID levels. DataError on a digit outside
// the base.
Example multi_addition_layout(const std::vector<std::vector<int64_t>>& operands, int64_t base,
                              bool coupled, int64_t plus, int64_t next);

// Adds multi_addition to a task registry (called once by data/tasks.cpp).
void add_multi_addition_task(std::map<std::string, TaskFactory>& registry);

}  // namespace pelab::data
