// pelab — the op registry. Every public op registers its name here (PELAB_REGISTER_OP in the file
// that implements it). The op test driver walks this list and fails for any op that has no
// gradient-check / parity case, so an op cannot be added untested.
#pragma once
#include <string>
#include <vector>

namespace pelab {

struct OpInfo {
  std::string name;
  bool differentiable;
};

const std::vector<OpInfo>& registered_ops();
bool register_op(const char* name, bool differentiable);

}  // namespace pelab

#define PELAB_REGISTER_OP_IMPL2(name, diff, line) \
  static const bool pelab_op_registered_##line = ::pelab::register_op(name, diff)
#define PELAB_REGISTER_OP_IMPL(name, diff, line) PELAB_REGISTER_OP_IMPL2(name, diff, line)
// PELAB_REGISTER_OP("add", true);
#define PELAB_REGISTER_OP(name, diff) PELAB_REGISTER_OP_IMPL(name, diff, __LINE__)
