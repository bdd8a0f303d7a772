// pelab — backend registry and View helpers.
#include "pelab/backend.h"

#include <array>
#include <mutex>
#include <utility>

namespace pelab {

void register_cpu_backend();  // framework/src/cpu/cpu_register.cpp
#ifdef PELAB_WITH_CUDA
void register_cuda_backend();  // framework/src/cuda/ (throws if no GPU is present)
#endif

namespace {
std::array<std::unique_ptr<Backend>, 2>& slots() {
  static std::array<std::unique_ptr<Backend>, 2> s;
  return s;
}
std::once_flag cpu_once;
#ifdef PELAB_WITH_CUDA
std::once_flag cuda_once;
bool cuda_failed = false;
std::string cuda_error;
#endif
}  // namespace

void register_backend(DeviceType type, std::unique_ptr<Backend> backend) {
  slots()[static_cast<size_t>(type)] = std::move(backend);
}

static void ensure(DeviceType type) {
  if (type == DeviceType::CPU) {
    std::call_once(cpu_once, [] { register_cpu_backend(); });
  }
#ifdef PELAB_WITH_CUDA
  if (type == DeviceType::CUDA) {
    std::call_once(cuda_once, [] {
      try {
        register_cuda_backend();
      } catch (const std::exception& e) {
        cuda_failed = true;
        cuda_error = e.what();
      }
    });
  }
#endif
}

bool backend_available(DeviceType type) {
  ensure(type);
  return slots()[static_cast<size_t>(type)] != nullptr;
}

Backend& backend_for(Device device) {
  ensure(device.type);
  auto& b = slots()[static_cast<size_t>(device.type)];
  if (!b) {
#ifdef PELAB_WITH_CUDA
    if (device.is_cuda()) fail("device ", device.str(), " is not available: ", cuda_error);
#endif
    fail("device ", device.str(), " is not available: pelab was built without its backend");
  }
  return *b;
}

bool View::contiguous() const {
  int64_t expected = 1;
  for (int64_t i = static_cast<int64_t>(shape.size()) - 1; i >= 0; --i) {
    if (shape[i] != 1 && strides[i] != expected) return false;
    expected *= shape[i];
  }
  return true;
}

void check_rotate_pairs(const View& out, const View& x, const View& cos, const View& sin,
                        int64_t outer, int64_t L, int64_t D, int64_t P) {
  const char* op = "rotate_pairs";
  PELAB_CHECK(P >= 1 && 2 * P <= D, op, ": ", P, " pairs do not fit rows of ", D);
  const std::pair<const View*, const char*> args[] = {
      {&x, "input"}, {&out, "output"}, {&cos, "cos"}, {&sin, "sin"}};
  for (const auto& [v, what] : args) {
    const int64_t want = v == &cos || v == &sin ? L * P : outer * L * D;
    PELAB_CHECK(v->data != nullptr && v->numel() == want && v->contiguous(), op, ": ", what, " ",
                shape_str(v->shape), " must be contiguous with ", want, " elements");
    PELAB_CHECK(v->dtype == x.dtype, op, ": ", what, " has dtype ", dtype_name(v->dtype),
                ", expected ", dtype_name(x.dtype));
  }
}

void check_attention(const char* op, const View& out, const View& stats, const View& probs,
                     const View& q, const View& k, const View& v, const View& bias,
                     const View& mask, int64_t B, int64_t H) {
  PELAB_CHECK(q.shape.size() == 3 && k.shape.size() == 3 && k.shape == v.shape &&
                  q.shape[0] == B * H && k.shape[0] == B * H && q.shape[2] == k.shape[2],
              op, ": expected q [", B * H, ", Lq, dh] and k = v [", B * H, ", Lk, dh], got q ",
              shape_str(q.shape), ", k ", shape_str(k.shape), ", v ", shape_str(v.shape));
  const int64_t Lq = q.shape[1], Lk = k.shape[1];
  const std::pair<const View*, const char*> dense[] = {
      {&q, "q"}, {&k, "k"}, {&v, "v"}, {&out, "out"}, {&stats, "stats"}};
  for (const auto& [t, what] : dense) {
    const Shape want = t == &stats ? Shape{B * H, Lq, 2} : t == &out ? q.shape : t->shape;
    PELAB_CHECK(t->data != nullptr && t->shape == want && t->contiguous(), op, ": ", what, " ",
                shape_str(t->shape), " must be contiguous ", shape_str(want));
  }
  const Shape scores = {B, H, Lq, Lk};
  PELAB_CHECK(probs.data == nullptr || (probs.shape == scores && probs.contiguous()), op,
              ": probs ", shape_str(probs.shape), " must be contiguous ", shape_str(scores));
  for (const auto& [t, what] : {std::pair<const View*, const char*>{&bias, "bias"}, {&mask, "mask"}})
    PELAB_CHECK(t->data == nullptr || (t->shape == scores && t->strides.size() == 4), op, ": ",
                what, " ", shape_str(t->shape), " must be a view of ", shape_str(scores));
  for (const View* t : {&k, &v, &out, &stats, &probs, &bias, &mask})
    PELAB_CHECK(t->data == nullptr || t->dtype == q.dtype, op, ": dtype ", dtype_name(t->dtype),
                " does not match q's ", dtype_name(q.dtype));
}

void Backend::attention(const View&, const View&, const View&, const View&, const View&,
                        const View&, const View&, const View&, int64_t, int64_t, double, double) {
  fail("attention: the ", name(), " backend has no fused attention kernel");
}

void Backend::attention_backward(const View&, const View&, const View&, const View&, const View&,
                                 const View&, const View&, const View&, const View&, const View&,
                                 const View&, const View&, const View&, int64_t, int64_t, double,
                                 double) {
  fail("attention_backward: the ", name(), " backend has no fused attention kernel");
}

View view_of(const Tensor& t) {
  View v;
  v.data = t.raw_data();
  v.dtype = t.dtype();
  v.shape = t.shape();
  v.strides = t.strides();
  return v;
}

View view_broadcast(const Tensor& t, const Shape& to) {
  const Shape& s = t.shape();
  PELAB_CHECK(s.size() <= to.size(), "broadcast: cannot broadcast ", shape_str(s), " to ",
              shape_str(to));
  View v;
  v.data = t.raw_data();
  v.dtype = t.dtype();
  v.shape = to;
  v.strides.assign(to.size(), 0);
  const size_t lead = to.size() - s.size();
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == to[lead + i]) {
      v.strides[lead + i] = s[i] == 1 ? 0 : t.strides()[i];
    } else {
      PELAB_CHECK(s[i] == 1, "broadcast: cannot broadcast ", shape_str(s), " to ", shape_str(to));
    }
  }
  return v;
}

}  // namespace pelab
