// data/arithmetic_tasks.h - decoder-only integer arithmetic in the formats of the length-
// generalisation papers that give the model positions from the task: addition with the answer
// reversed (Cho et al. 2024, McLeish et al. 2024, Zhou et al. 2024) and N x 2 multiplication
// (Cho et al. 2024), each with coupled and abacus position IDs and index hints as options.
// The formats, IDs and offsets are defined in docs/tasks.md ("Position IDs from the task").
#pragma once

#include <map>
#include <string>
#include <vector>

#include "data/tasks.h"

namespace pelab::data {

// Adds addition_reversed and multiplication to a task registry (called once by data/tasks.cpp).
void add_arithmetic_tasks(std::map<std::string, TaskFactory>& registry);
// Names of the tasks that provide position IDs and index hints, sorted.
std::vector<std::string> arithmetic_task_names();

}  // namespace pelab::data
