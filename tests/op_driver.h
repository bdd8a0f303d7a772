// The one op test driver: every registered op has at least one OpCase; the driver runs each case on
// every available backend x dtype:
//   * forward: Float32 on each backend vs the CPU Float64 result,
//   * backward (differentiable ops): Float64 analytic gradients vs central finite differences,
//     with contiguous inputs and again with non-contiguous (transposed / strided-slice) inputs.
// tests/test_op_driver.cpp fails for any op in pelab::registered_ops() without a case here.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "pelab/pelab.h"

namespace pelab::testing {

struct OpCase {
  std::string op;                  // name in the op registry, e.g. "add"
  std::string label;               // short description, e.g. "broadcast [3,1] x [1,4]"
  std::vector<Shape> shapes;       // floating inputs, filled with seeded N(0,1) values
  // Computes the op from the inputs (same device/dtype as inputs[0]). Integer side inputs (indices,
  // targets) are built inside from fixed values, on inputs[0].device().
  std::function<Tensor(const std::vector<Tensor>&)> fn;
  // Optional: maps a raw N(0,1) value of input i to a valid domain (e.g. positive for log).
  std::function<double(size_t input, double x)> domain;
  bool grad = true;                // false for non-differentiable ops (argmax, eq, ...)
  bool noncontig = true;           // also run with non-contiguous views of the inputs
  double fd_eps = 1e-6;            // central-difference step (float64)
  double grad_tol = 1e-6;          // max relative gradient error
  double fwd_tol = 1e-5;           // max relative float32-vs-float64 forward error
};

using Values = std::vector<double>;

// Seed for a case's random values (FNV-1a of "op/label"), so every driver draws the same inputs.
uint64_t case_seed(const OpCase& c);
// Raw input values of a case: seeded N(0,1) mapped through its domain.
std::vector<Values> case_inputs(const OpCase& c);
// An input holding `vals` (row-major for `shape`). Non-contiguous layout: rank >= 2 is a transposed
// view of a contiguous tensor of the permuted shape; rank 1 is a stride-2 slice whose gaps hold NaN
// (so a kernel that ignores strides produces NaN).
Tensor make_input(const Values& vals, const Shape& shape, DType dt, Device dev, bool noncontig);
std::vector<Tensor> make_inputs(const OpCase& c, const std::vector<Values>& raw, DType dt,
                                Device dev, bool noncontig, bool requires_grad);

// max |ref - got| / max(1, max |finite ref|); NaN and inf must match exactly (else infinity).
// `worst` gets the index of the largest error.
double scaled_error(const Values& ref, const Values& got, size_t* worst);

// Registers a case at static-init time; returns true.
bool add_case(OpCase c);
const std::vector<OpCase>& all_cases();

}  // namespace pelab::testing

#define PELAB_CASE_CAT2(a, b) a##b
#define PELAB_CASE_CAT(a, b) PELAB_CASE_CAT2(a, b)
// PELAB_OP_CASE({ .op = "add", ... });   (one per statement; any number per file)
#define PELAB_OP_CASE(...) \
  static const bool PELAB_CASE_CAT(pelab_case_, __LINE__) = ::pelab::testing::add_case(__VA_ARGS__)
