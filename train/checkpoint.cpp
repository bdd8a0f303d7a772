// pelab — HDF5 checkpoint writer/reader (HDF5 C API). See checkpoint.h and docs/checkpoint.md.
#include "train/checkpoint.h"

#include <fcntl.h>
#include <hdf5.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>

#include "pelab/pelab.h"

namespace pelab {

namespace {

// Failure injection for tests: throw after this many datasets were written (-1 = off).
int64_t g_fail_after = -1;

struct H5Quiet {  // keep HDF5 from printing its error stack; we report errors ourselves
  H5Quiet() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }
};
const H5Quiet h5_quiet;

class Hid {
 public:
  Hid(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  ~Hid() { if (id_ >= 0 && close_) close_(id_); }
  Hid(const Hid&) = delete;
  Hid& operator=(const Hid&) = delete;
  hid_t get() const { return id_; }
  bool ok() const { return id_ >= 0; }
 private:
  hid_t id_;
  herr_t (*close_)(hid_t);
};

struct Writer {
  hid_t file;
  std::string path;
  int64_t datasets = 0;

  void count() {
    ++datasets;
    if (g_fail_after >= 0 && datasets > g_fail_after)
      fail("checkpoint ", path, ": injected write failure after ", g_fail_after, " datasets");
  }
  hid_t group(const std::string& name) {
    hid_t g = H5Gcreate2(file, name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    PELAB_CHECK(g >= 0, "checkpoint ", path, ": cannot create group ", name);
    return g;
  }
  void string(hid_t loc, const std::string& name, const std::string& value) {
    Hid type(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(type.get(), H5T_VARIABLE);
    H5Tset_cset(type.get(), H5T_CSET_UTF8);
    Hid space(H5Screate(H5S_SCALAR), H5Sclose);
    Hid ds(H5Dcreate2(loc, name.c_str(), type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
           H5Dclose);
    const char* p = value.c_str();
    PELAB_CHECK(ds.ok() && H5Dwrite(ds.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, &p) >= 0,
                "checkpoint ", path, ": cannot write dataset ", name);
    count();
  }
  void strings(hid_t loc, const std::string& name, const std::vector<std::string>& values) {
    Hid type(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(type.get(), H5T_VARIABLE);
    H5Tset_cset(type.get(), H5T_CSET_UTF8);
    hsize_t n = values.size();
    Hid space(H5Screate_simple(1, &n, nullptr), H5Sclose);
    Hid ds(H5Dcreate2(loc, name.c_str(), type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
           H5Dclose);
    std::vector<const char*> ptrs;
    for (const auto& v : values) ptrs.push_back(v.c_str());
    PELAB_CHECK(ds.ok() && (n == 0 || H5Dwrite(ds.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT,
                                               ptrs.data()) >= 0),
                "checkpoint ", path, ": cannot write dataset ", name);
    count();
  }
  template <class T>
  void scalar(hid_t loc, const std::string& name, T value, hid_t type) {
    Hid space(H5Screate(H5S_SCALAR), H5Sclose);
    Hid ds(H5Dcreate2(loc, name.c_str(), type, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
           H5Dclose);
    PELAB_CHECK(ds.ok() && H5Dwrite(ds.get(), type, H5S_ALL, H5S_ALL, H5P_DEFAULT, &value) >= 0,
                "checkpoint ", path, ": cannot write dataset ", name);
    count();
  }
  void tensor(hid_t loc, const std::string& name, const Tensor& t) {
    NoGradGuard ng;
    Tensor h = t.detach().to(Device::cpu()).contiguous();
    std::vector<hsize_t> dims(h.shape().begin(), h.shape().end());
    Hid space(dims.empty() ? H5Screate(H5S_SCALAR)
                           : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
              H5Sclose);
    hid_t type = h.dtype() == DType::Float32   ? H5T_NATIVE_FLOAT
                 : h.dtype() == DType::Float64 ? H5T_NATIVE_DOUBLE
                                               : H5T_NATIVE_INT64;
    Hid ds(H5Dcreate2(loc, name.c_str(), type, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
           H5Dclose);
    PELAB_CHECK(ds.ok(), "checkpoint ", path, ": cannot create dataset ", name);
    if (h.numel() > 0)
      PELAB_CHECK(H5Dwrite(ds.get(), type, H5S_ALL, H5S_ALL, H5P_DEFAULT, h.raw_data()) >= 0,
                  "checkpoint ", path, ": cannot write dataset ", name);
    count();
  }
};

void fsync_path(const std::string& p, bool directory) {
  int fd = ::open(p.c_str(), directory ? O_RDONLY | O_DIRECTORY : O_RDONLY);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

std::string parent_dir(const std::string& p) {
  const auto pos = p.find_last_of('/');
  return pos == std::string::npos ? "." : (pos == 0 ? "/" : p.substr(0, pos));
}

struct Reader {
  hid_t file;
  std::string path;

  bool exists(hid_t loc, const std::string& name) const {
    return H5Lexists(loc, name.c_str(), H5P_DEFAULT) > 0;
  }
  hid_t open_group(const std::string& name) const {
    PELAB_CHECK(exists(file, name), "checkpoint ", path, ": missing group ", name);
    hid_t g = H5Gopen2(file, name.c_str(), H5P_DEFAULT);
    PELAB_CHECK(g >= 0, "checkpoint ", path, ": cannot open group ", name, " (corrupt file?)");
    return g;
  }
  hid_t open_ds(hid_t loc, const std::string& name, const std::string& full) const {
    PELAB_CHECK(exists(loc, name), "checkpoint ", path, ": missing dataset ", full);
    hid_t d = H5Dopen2(loc, name.c_str(), H5P_DEFAULT);
    PELAB_CHECK(d >= 0, "checkpoint ", path, ": cannot open dataset ", full, " (corrupt file?)");
    return d;
  }
  std::string string(hid_t loc, const std::string& name, const std::string& full) const {
    Hid ds(open_ds(loc, name, full), H5Dclose);
    Hid type(H5Dget_type(ds.get()), H5Tclose);
    PELAB_CHECK(H5Tget_class(type.get()) == H5T_STRING && H5Tis_variable_str(type.get()) > 0,
                "checkpoint ", path, ": dataset ", full, " is not a string");
    Hid mem(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(mem.get(), H5T_VARIABLE);
    H5Tset_cset(mem.get(), H5T_CSET_UTF8);
    char* p = nullptr;
    PELAB_CHECK(H5Dread(ds.get(), mem.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, &p) >= 0,
                "checkpoint ", path, ": cannot read dataset ", full, " (corrupt or truncated file?)");
    std::string out = p ? p : "";
    Hid space(H5Dget_space(ds.get()), H5Sclose);
    H5Dvlen_reclaim(mem.get(), space.get(), H5P_DEFAULT, &p);
    return out;
  }
  std::vector<std::string> strings(hid_t loc, const std::string& name, const std::string& full) const {
    Hid ds(open_ds(loc, name, full), H5Dclose);
    Hid space(H5Dget_space(ds.get()), H5Sclose);
    PELAB_CHECK(H5Sget_simple_extent_ndims(space.get()) == 1, "checkpoint ", path, ": dataset ", full,
                " is not a 1-D string array");
    hsize_t n = 0;
    H5Sget_simple_extent_dims(space.get(), &n, nullptr);
    Hid mem(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(mem.get(), H5T_VARIABLE);
    H5Tset_cset(mem.get(), H5T_CSET_UTF8);
    std::vector<char*> ptrs(n, nullptr);
    if (n > 0)
      PELAB_CHECK(H5Dread(ds.get(), mem.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, ptrs.data()) >= 0,
                  "checkpoint ", path, ": cannot read dataset ", full, " (corrupt or truncated file?)");
    std::vector<std::string> out;
    for (char* p : ptrs) out.emplace_back(p ? p : "");
    if (n > 0) H5Dvlen_reclaim(mem.get(), space.get(), H5P_DEFAULT, ptrs.data());
    return out;
  }
  template <class T>
  T scalar(hid_t loc, const std::string& name, const std::string& full, hid_t type) const {
    Hid ds(open_ds(loc, name, full), H5Dclose);
    Hid space(H5Dget_space(ds.get()), H5Sclose);
    PELAB_CHECK(H5Sget_simple_extent_npoints(space.get()) == 1, "checkpoint ", path, ": dataset ",
                full, " is not a scalar");
    T v{};
    PELAB_CHECK(H5Dread(ds.get(), type, H5S_ALL, H5S_ALL, H5P_DEFAULT, &v) >= 0, "checkpoint ", path,
                ": cannot read dataset ", full, " (corrupt or truncated file?)");
    return v;
  }
  Tensor tensor(hid_t loc, const std::string& name, const std::string& full) const {
    Hid ds(open_ds(loc, name, full), H5Dclose);
    Hid space(H5Dget_space(ds.get()), H5Sclose);
    const int rank = H5Sget_simple_extent_ndims(space.get());
    PELAB_CHECK(rank >= 0, "checkpoint ", path, ": bad dataspace for ", full);
    std::vector<hsize_t> dims(rank);
    if (rank > 0) H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
    Shape shape(dims.begin(), dims.end());
    Hid type(H5Dget_type(ds.get()), H5Tclose);
    const H5T_class_t cls = H5Tget_class(type.get());
    const size_t size = H5Tget_size(type.get());
    DType dt;
    hid_t mem;
    if (cls == H5T_FLOAT && size == 4) { dt = DType::Float32; mem = H5T_NATIVE_FLOAT; }
    else if (cls == H5T_FLOAT && size == 8) { dt = DType::Float64; mem = H5T_NATIVE_DOUBLE; }
    else if (cls == H5T_INTEGER) { dt = DType::Int64; mem = H5T_NATIVE_INT64; }
    else fail("checkpoint ", path, ": dataset ", full, " has an unsupported element type");
    Tensor t = Tensor::empty(shape, dt, Device::cpu());
    if (t.numel() > 0)
      PELAB_CHECK(H5Dread(ds.get(), mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, t.raw_data()) >= 0,
                  "checkpoint ", path, ": cannot read dataset ", full, " (corrupt or truncated file?)");
    return t;
  }
};

}  // namespace

void set_checkpoint_fault_injection(int64_t fail_after_datasets) { g_fail_after = fail_after_datasets; }

void save_checkpoint(const std::string& path, const CheckpointData& d) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  hid_t file = H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  PELAB_CHECK(file >= 0, "checkpoint ", path, ": cannot create ", tmp, " (", std::strerror(errno), ")");
  try {
    Writer w{file, path};
    w.scalar<int64_t>(file, "format_version", d.format_version, H5T_NATIVE_INT64);
    w.scalar<int64_t>(file, "step", d.step, H5T_NATIVE_INT64);
    w.string(file, "scheme", d.scheme);
    w.string(file, "arch", d.arch);
    w.string(file, "config", d.config_yaml);
    w.string(file, "metrics", d.metrics_jsonl);
    w.string(file, "pelab_version", version());
    w.strings(file, "vocab", d.vocab);
    std::vector<std::string> names;
    for (const auto& [n, t] : d.params) names.push_back(n);
    w.strings(file, "param_names", names);
    {
      Hid g(w.group("params"), H5Gclose);
      for (const auto& [n, t] : d.params) w.tensor(g.get(), n, t);
    }
    {
      Hid g(w.group("optimizer"), H5Gclose);
      w.string(g.get(), "kind", d.optimizer);
      w.scalar<int64_t>(g.get(), "step", d.optimizer_step, H5T_NATIVE_INT64);
      for (const auto& [state, tensors] : d.optimizer_state) {
        PELAB_CHECK(tensors.size() == d.params.size(), "checkpoint ", path, ": optimizer state ",
                    state, " has ", tensors.size(), " tensors for ", d.params.size(), " parameters");
        Hid sg(w.group("optimizer/" + state), H5Gclose);
        for (size_t i = 0; i < tensors.size(); ++i) w.tensor(sg.get(), d.params[i].first, tensors[i]);
      }
    }
    {
      Hid g(w.group("counters"), H5Gclose);
      for (const auto& [k, v] : d.counters) w.scalar<int64_t>(g.get(), k, v, H5T_NATIVE_INT64);
    }
    {
      Hid g(w.group("values"), H5Gclose);
      for (const auto& [k, v] : d.values) w.scalar<double>(g.get(), k, v, H5T_NATIVE_DOUBLE);
    }
    PELAB_CHECK(H5Fflush(file, H5F_SCOPE_GLOBAL) >= 0, "checkpoint ", path, ": flush failed");
  } catch (...) {
    H5Fclose(file);
    std::remove(tmp.c_str());
    throw;
  }
  PELAB_CHECK(H5Fclose(file) >= 0, "checkpoint ", path, ": closing ", tmp, " failed");
  fsync_path(tmp, false);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string err = std::strerror(errno);
    std::remove(tmp.c_str());
    fail("checkpoint ", path, ": cannot rename ", tmp, " into place (", err, ")");
  }
  fsync_path(parent_dir(path), true);
}

CheckpointData load_checkpoint(const std::string& path) {
  struct stat st {};
  PELAB_CHECK(::stat(path.c_str(), &st) == 0, "checkpoint ", path, ": no such file");
  PELAB_CHECK(S_ISREG(st.st_mode), "checkpoint ", path, ": not a regular file");
  PELAB_CHECK(H5Fis_hdf5(path.c_str()) > 0, "checkpoint ", path,
              ": not an HDF5 file (or its header is damaged)");
  hid_t fid = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  PELAB_CHECK(fid >= 0, "checkpoint ", path, ": cannot open (corrupt or truncated HDF5 file)");
  Hid file(fid, H5Fclose);
  Reader r{fid, path};
  CheckpointData d;
  d.format_version = r.scalar<int64_t>(fid, "format_version", "format_version", H5T_NATIVE_INT64);
  PELAB_CHECK(d.format_version == kCheckpointFormatVersion, "checkpoint ", path, ": format version ",
              d.format_version, " is not supported (this pelab reads version ",
              kCheckpointFormatVersion, ")");
  d.step = r.scalar<int64_t>(fid, "step", "step", H5T_NATIVE_INT64);
  d.scheme = r.string(fid, "scheme", "scheme");
  d.arch = r.string(fid, "arch", "arch");
  d.config_yaml = r.string(fid, "config", "config");
  d.metrics_jsonl = r.string(fid, "metrics", "metrics");
  d.vocab = r.strings(fid, "vocab", "vocab");
  const auto names = r.strings(fid, "param_names", "param_names");
  {
    Hid g(r.open_group("params"), H5Gclose);
    for (const auto& n : names) d.params.emplace_back(n, r.tensor(g.get(), n, "params/" + n));
  }
  {
    Hid g(r.open_group("optimizer"), H5Gclose);
    d.optimizer = r.string(g.get(), "kind", "optimizer/kind");
    d.optimizer_step = r.scalar<int64_t>(g.get(), "step", "optimizer/step", H5T_NATIVE_INT64);
    H5G_info_t info{};
    H5Gget_info(g.get(), &info);
    for (hsize_t i = 0; i < info.nlinks; ++i) {
      char buf[256];
      if (H5Lget_name_by_idx(g.get(), ".", H5_INDEX_NAME, H5_ITER_INC, i, buf, sizeof buf, H5P_DEFAULT) < 0)
        continue;
      const std::string state = buf;
      if (state == "kind" || state == "step") continue;  // the two datasets beside the state groups
      Hid sg(H5Gopen2(g.get(), buf, H5P_DEFAULT), H5Gclose);
      auto& vec = d.optimizer_state[state];
      for (const auto& n : names) vec.push_back(r.tensor(sg.get(), n, "optimizer/" + state + "/" + n));
    }
  }
  auto read_map = [&](const char* group, auto& out, hid_t type) {
    Hid g(r.open_group(group), H5Gclose);
    H5G_info_t info{};
    H5Gget_info(g.get(), &info);
    for (hsize_t i = 0; i < info.nlinks; ++i) {
      char buf[256];
      PELAB_CHECK(H5Lget_name_by_idx(g.get(), ".", H5_INDEX_NAME, H5_ITER_INC, i, buf, sizeof buf,
                                     H5P_DEFAULT) >= 0,
                  "checkpoint ", path, ": cannot list group ", group);
      using V = typename std::decay_t<decltype(out)>::mapped_type;
      out[buf] = r.scalar<V>(g.get(), buf, std::string(group) + "/" + buf, type);
    }
  };
  read_map("counters", d.counters, H5T_NATIVE_INT64);
  read_map("values", d.values, H5T_NATIVE_DOUBLE);
  return d;
}

void load_parameters(Module& module, const CheckpointData& data, const std::string& path) {
  NoGradGuard ng;
  std::map<std::string, const Tensor*> by_name;
  for (const auto& [n, t] : data.params) by_name[n] = &t;
  for (auto& [n, p] : module.named_parameters()) {
    auto it = by_name.find(n);
    PELAB_CHECK(it != by_name.end(), "checkpoint ", path, ": dataset params/", n,
                " is missing (the config builds a parameter the checkpoint does not have)");
    PELAB_CHECK(it->second->shape() == p.shape(), "checkpoint ", path, ": dataset params/", n,
                " has shape ", shape_str(it->second->shape()), " but the model expects ",
                shape_str(p.shape()));
    Tensor src = it->second->to(p.dtype());
    p.copy_(src);
    by_name.erase(it);
  }
  PELAB_CHECK(by_name.empty(), "checkpoint ", path, ": dataset params/", by_name.begin()->first,
              " has no matching parameter in the model (scheme or architecture differs?)");
}

void capture_parameters(const Module& module, CheckpointData& data) {
  data.params = module.named_parameters();
}

void capture_optimizer(Optimizer& opt, const std::string& kind, CheckpointData& data) {
  data.optimizer = kind;
  data.optimizer_step = opt.step_count();
  data.optimizer_state.clear();
  auto names = opt.state_names();
  auto& bufs = opt.state_buffers();
  for (size_t s = 0; s < names.size(); ++s) {
    auto& vec = data.optimizer_state[names[s]];
    for (auto& per_param : bufs) vec.push_back(per_param[s]);
  }
}

void restore_optimizer(Optimizer& opt, const CheckpointData& data, const std::string& path) {
  NoGradGuard ng;
  opt.set_step_count(data.optimizer_step);
  auto names = opt.state_names();
  auto& bufs = opt.state_buffers();
  for (size_t s = 0; s < names.size(); ++s) {
    auto it = data.optimizer_state.find(names[s]);
    PELAB_CHECK(it != data.optimizer_state.end(), "checkpoint ", path, ": missing optimizer state ",
                "group optimizer/", names[s]);
    PELAB_CHECK(it->second.size() == bufs.size(), "checkpoint ", path, ": optimizer/", names[s],
                " has ", it->second.size(), " tensors for ", bufs.size(), " parameters");
    for (size_t i = 0; i < bufs.size(); ++i) {
      Tensor& dst = bufs[i][s];
      const Tensor& src = it->second[i];
      PELAB_CHECK(src.shape() == dst.shape(), "checkpoint ", path, ": dataset optimizer/", names[s],
                  "/", data.params.at(i).first, " has shape ", shape_str(src.shape()),
                  " but the optimizer expects ", shape_str(dst.shape()));
      dst.copy_(src.to(dst.dtype()));
    }
  }
}

}  // namespace pelab
