// pelab — small shared utilities: shape printing, dtype/device names, version.
#include <sstream>

#include "pelab/pelab.h"

namespace pelab {

const char* version() { return PELAB_VERSION_STRING; }

std::string shape_str(const int64_t* dims, size_t n) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < n; ++i) os << (i ? ", " : "") << dims[i];
  os << "]";
  return os.str();
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::Float32: return "float32";
    case DType::Float64: return "float64";
    case DType::Int64: return "int64";
  }
  return "?";
}

DType dtype_from_name(const std::string& name) {
  if (name == "float32") return DType::Float32;
  if (name == "float64") return DType::Float64;
  if (name == "int64") return DType::Int64;
  fail("unknown dtype '", name, "' (expected float32, float64 or int64)");
}

std::string Device::str() const {
  return is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(index);
}

Device Device::parse(const std::string& s) {
  if (s == "cpu") return cpu();
  if (s == "cuda") return cuda(0);
  if (s.rfind("cuda:", 0) == 0) {
    const std::string n = s.substr(5);
    PELAB_CHECK(!n.empty() && n.find_first_not_of("0123456789") == std::string::npos,
                "unknown device '", s, "' (expected cpu, cuda or cuda:N)");
    return cuda(std::stoi(n));
  }
  fail("unknown device '", s, "' (expected cpu, cuda or cuda:N)");
}

static std::vector<OpInfo>& op_list() {
  static std::vector<OpInfo> ops;
  return ops;
}
const std::vector<OpInfo>& registered_ops() { return op_list(); }
bool register_op(const char* name, bool differentiable) {
  for (const auto& o : op_list())
    if (o.name == name) return true;
  op_list().push_back({name, differentiable});
  return true;
}

}  // namespace pelab
