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

void check_attention(const char* op, const AttentionArgs& a, const View* grad_out,
                     const AttentionGrads* g) {
  const int64_t B = a.B, H = a.H;
  const View &q = a.q, &k = a.k, &v = a.v;
  PELAB_CHECK(B >= 0 && H >= 0 && q.shape.size() == 3 && k.shape.size() == 3 && k.shape == v.shape &&
                  q.shape[0] == B * H && k.shape[0] == B * H && q.shape[2] == k.shape[2],
              op, ": expected q [", B * H, ", Lq, dh] and k = v [", B * H, ", Lk, dh], got q ",
              shape_str(q.shape), ", k ", shape_str(k.shape), ", v ", shape_str(v.shape));
  const int64_t Lq = q.shape[1], Lk = k.shape[1], dh = q.shape[2];
  const Shape scores = {B, H, Lq, Lk};
  auto dense = [&](const View& t, const Shape& want, const char* what, bool optional) {
    if (optional && t.data == nullptr) return;
    PELAB_CHECK(t.data != nullptr && t.shape == want && t.contiguous(), op, ": ", what, " ",
                shape_str(t.shape), " must be contiguous ", shape_str(want));
    PELAB_CHECK(t.dtype == q.dtype, op, ": ", what, " has dtype ", dtype_name(t.dtype),
                ", expected ", dtype_name(q.dtype));
  };
  dense(q, q.shape, "q", false);
  dense(k, k.shape, "k", false);
  dense(v, k.shape, "v", false);
  dense(a.out, q.shape, "out", false);
  dense(a.stats, {B * H, Lq, 2}, "stats", false);
  dense(a.probs, scores, "probs", true);
  for (const auto& [t, what] : {std::pair<const View*, const char*>{&a.bias, "bias"}, {&a.mask, "mask"}}) {
    if (t->data == nullptr) continue;
    PELAB_CHECK(t->shape == scores && t->strides.size() == 4, op, ": ", what, " ",
                shape_str(t->shape), " must be a view of ", shape_str(scores));
    PELAB_CHECK(t->dtype == q.dtype, op, ": ", what, " has dtype ", dtype_name(t->dtype),
                ", expected ", dtype_name(q.dtype));
  }
  const bool rel = a.rel_keys.data || a.rel_values.data;
  PELAB_CHECK(rel == (a.rel_index.data != nullptr), op,
              ": a relative index needs a table and a table needs the index");
  int64_t R = 0;
  for (const auto& [t, what] : {std::pair<const View*, const char*>{&a.rel_keys, "relative keys"},
                                {&a.rel_values, "relative values"}}) {
    if (!t->data) continue;
    const Shape& ts = t->shape;
    PELAB_CHECK(ts.size() == 3 && (ts[0] == 1 || ts[0] == H) && ts[1] >= 1 && ts[2] == dh &&
                    (R == 0 || ts[1] == R),
                op, ": ", what, " table ", shape_str(ts), " must be [1 or ", H, ", R, ", dh,
                "] with the same R as the other table");
    R = ts[1];
    dense(*t, ts, what, false);
  }
  if (rel)
    PELAB_CHECK(a.rel_index.dtype == DType::Int64 && a.rel_index.shape == (Shape{Lq, Lk}) &&
                    a.rel_index.contiguous(),
                op, ": relative index ", shape_str(a.rel_index.shape), " ",
                dtype_name(a.rel_index.dtype), " must be contiguous int64 [", Lq, ", ", Lk, "]");
  if (!g) return;
  PELAB_CHECK(grad_out != nullptr, op, ": no grad_out");
  dense(*grad_out, q.shape, "grad_out", false);
  dense(g->q, q.shape, "grad q", false);
  dense(g->k, k.shape, "grad k", false);
  dense(g->v, k.shape, "grad v", false);
  dense(g->scores, scores, "grad scores", true);
  PELAB_CHECK((!g->rel_keys.data || a.rel_keys.data) && (!g->rel_values.data || a.rel_values.data),
              op, ": a relative-table gradient without its table");
  if (a.rel_keys.data) dense(g->rel_keys, {B * H, R, dh}, "relative keys gradient", true);
  if (a.rel_values.data) dense(g->rel_values, {B * H, R, dh}, "relative values gradient", true);
}

void Backend::attention(const AttentionArgs&) {
  fail("attention: the ", name(), " backend has no fused attention kernel");
}

void Backend::attention_backward(const AttentionArgs&, const View&, const AttentionGrads&) {
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
