// pelab — HDF5 checkpoint writer/reader (HDF5 C API). See checkpoint.h and docs/checkpoint.md.
//
// Writing: the HDF5 file is built in memory (the core driver, no backing store), its image is taken
// and written with plain POSIX calls (write/fsync/close/rename/fsync of the directory), each one
// checked. HDF5 therefore never sees a failing disk: a full disk is one error line, the temporary file
// is removed and the HDF5 library keeps no half-open file behind (which crashed at exit before).
//
// Reading: every dataset's rank, element type and size is checked before anything is allocated (its
// bytes must be stored in the file), and every dataset's FNV-1a 64 checksum (attribute `fnv1a64`)
// is verified; metadata (object headers, link tables) carry HDF5's own checksums because files are
// written in the HDF5 1.8+ format.
#include "train/checkpoint.h"

#include <fcntl.h>
#include <hdf5.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <set>

#include "pelab/pelab.h"

namespace pelab {

namespace {

// Failure injection for tests: throw after this many datasets were written (-1 = off).
int64_t g_fail_after = -1;

constexpr const char* kChecksumAttr = "fnv1a64";

struct H5Quiet {  // keep HDF5 from printing its error stack; we report errors ourselves
  H5Quiet() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }
};
const H5Quiet h5_quiet;

// Owns one HDF5 id (file, group, dataset, dataspace, datatype, attribute, property list) and closes
// it on every path out, errors included.
class Hid {
 public:
  Hid(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  ~Hid() { if (id_ >= 0 && close_) close_(id_); }
  Hid(const Hid&) = delete;
  Hid& operator=(const Hid&) = delete;
  Hid(Hid&& o) noexcept : id_(o.id_), close_(o.close_) { o.id_ = -1; }
  hid_t get() const { return id_; }
  hid_t release() {  // the caller closes it now
    const hid_t id = id_;
    id_ = -1;
    return id;
  }
  bool ok() const { return id_ >= 0; }
 private:
  hid_t id_;
  herr_t (*close_)(hid_t);
};

// FNV-1a, 64 bits: any change confined to one byte always changes the hash (each step is a bijection
// of the state), and it needs no library.
struct Fnv64 {
  uint64_t h = 1469598103934665603ull;
  void add(const void* data, size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  }
  void add_length(uint64_t n) {
    unsigned char b[8];
    for (int i = 0; i < 8; ++i) b[i] = static_cast<unsigned char>(n >> (8 * i));
    add(b, 8);
  }
};

uint64_t hash_bytes(const void* data, size_t n) {
  Fnv64 f;
  f.add(data, n);
  return f.h;
}

// Strings hash as (length, bytes) pairs, whatever their HDF5 representation.
uint64_t hash_strings(const std::vector<std::string>& values) {
  Fnv64 f;
  for (const auto& v : values) {
    f.add_length(v.size());
    f.add(v.data(), v.size());
  }
  return f.h;
}

std::string hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

bool has_nul(const std::string& s) { return s.find('\0') != std::string::npos; }

Hid string_type() {
  Hid type(H5Tcopy(H5T_C_S1), H5Tclose);
  PELAB_CHECK(type.ok() && H5Tset_size(type.get(), H5T_VARIABLE) >= 0 &&
                  H5Tset_cset(type.get(), H5T_CSET_UTF8) >= 0,
              "HDF5: cannot create the string type");
  return type;
}

struct Writer {
  hid_t file;
  std::string path;
  int64_t datasets = 0;

  // Attaches the checksum to a written dataset and counts it.
  void finish(hid_t ds, const std::string& name, uint64_t checksum) {
    Hid space(H5Screate(H5S_SCALAR), H5Sclose);
    Hid attr(H5Acreate2(ds, kChecksumAttr, H5T_STD_U64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT),
             H5Aclose);
    PELAB_CHECK(attr.ok() && H5Awrite(attr.get(), H5T_NATIVE_UINT64, &checksum) >= 0, "checkpoint ",
                path, ": cannot write the checksum of dataset ", name);
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
    PELAB_CHECK(!has_nul(value), "checkpoint ", path, ": dataset ", name,
                " contains a NUL byte, which an HDF5 string cannot hold");
    Hid type = string_type();
    Hid space(H5Screate(H5S_SCALAR), H5Sclose);
    Hid ds(H5Dcreate2(loc, name.c_str(), type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
           H5Dclose);
    const char* p = value.c_str();
    PELAB_CHECK(ds.ok() && H5Dwrite(ds.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, &p) >= 0,
                "checkpoint ", path, ": cannot write dataset ", name);
    finish(ds.get(), name, hash_strings({value}));
  }
  // A string array: variable-length UTF-8 strings, or, when an entry contains a NUL byte (which ends
  // an HDF5 string), variable-length uint8 sequences, so every entry is stored faithfully.
  void strings(hid_t loc, const std::string& name, const std::vector<std::string>& values) {
    bool bytes = false;
    for (const auto& v : values) bytes = bytes || has_nul(v);
    Hid type = bytes ? Hid(H5Tvlen_create(H5T_NATIVE_UINT8), H5Tclose) : string_type();
    hsize_t n = values.size();
    Hid space(H5Screate_simple(1, &n, nullptr), H5Sclose);
    Hid ds(H5Dcreate2(loc, name.c_str(), type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
           H5Dclose);
    PELAB_CHECK(type.ok() && ds.ok(), "checkpoint ", path, ": cannot create dataset ", name);
    herr_t st = 0;
    if (n > 0 && bytes) {
      std::vector<hvl_t> seqs;
      for (const auto& v : values) seqs.push_back(hvl_t{v.size(), const_cast<char*>(v.data())});
      st = H5Dwrite(ds.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, seqs.data());
    } else if (n > 0) {
      std::vector<const char*> ptrs;
      for (const auto& v : values) ptrs.push_back(v.c_str());
      st = H5Dwrite(ds.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, ptrs.data());
    }
    PELAB_CHECK(st >= 0, "checkpoint ", path, ": cannot write dataset ", name);
    finish(ds.get(), name, hash_strings(values));
  }
  template <class T>
  void scalar(hid_t loc, const std::string& name, T value, hid_t type) {
    Hid space(H5Screate(H5S_SCALAR), H5Sclose);
    Hid ds(H5Dcreate2(loc, name.c_str(), type, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
           H5Dclose);
    PELAB_CHECK(ds.ok() && H5Dwrite(ds.get(), type, H5S_ALL, H5S_ALL, H5P_DEFAULT, &value) >= 0,
                "checkpoint ", path, ": cannot write dataset ", name);
    finish(ds.get(), name, hash_bytes(&value, sizeof value));
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
    const size_t nbytes = static_cast<size_t>(h.numel()) * dtype_size(h.dtype());
    if (h.numel() > 0)
      PELAB_CHECK(H5Dwrite(ds.get(), type, H5S_ALL, H5S_ALL, H5P_DEFAULT, h.raw_data()) >= 0,
                  "checkpoint ", path, ": cannot write dataset ", name);
    finish(ds.get(), name, hash_bytes(h.numel() > 0 ? h.raw_data() : nullptr, nbytes));
  }
};

std::string parent_dir(const std::string& p) {
  const auto pos = p.find_last_of('/');
  return pos == std::string::npos ? "." : (pos == 0 ? "/" : p.substr(0, pos));
}

std::string base_name(const std::string& p) {
  const auto pos = p.find_last_of('/');
  return pos == std::string::npos ? p : p.substr(pos + 1);
}

// Writes `n` bytes to `path` atomically: `<path>.tmp.<pid>`, write, fsync, close, before_publish
// (if given) on the temporary, rename over `path`, fsync of the directory. Every call is checked;
// on failure the temporary is removed and one error line names the step and the system's reason.
void write_file_atomic(const std::string& path, const char* data, size_t n,
                       const std::function<void(const std::string&)>& before_publish = {}) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  // The name is this process's: whatever is there (a leftover, a planted link) is removed, never
  // opened, and the file is created afresh.
  ::unlink(tmp.c_str());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  PELAB_CHECK(fd >= 0, "checkpoint ", path, ": cannot create ", tmp, " (", std::strerror(errno), ")");
  auto bail = [&](const char* what, int err) {
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    const bool space = err == ENOSPC || err == EFBIG || err == EDQUOT;
    fail("checkpoint ", path, ": ", what, " ", base_name(tmp), " failed (", std::strerror(err), ")",
         space ? "; free disk space (or raise the file size limit) and continue with --resume" : "");
  };
  size_t off = 0;
  while (off < n) {
    const ssize_t w = ::write(fd, data + off, std::min<size_t>(n - off, size_t{1} << 30));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) bail("writing", w < 0 ? errno : EIO);
    off += static_cast<size_t>(w);
  }
  if (::fsync(fd) != 0) bail("fsync of", errno);
  const int closed = ::close(fd);
  fd = -1;
  if (closed != 0) bail("closing", errno);
  if (before_publish) {
    try {
      before_publish(tmp);
    } catch (...) {
      ::unlink(tmp.c_str());
      throw;
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) bail("renaming into place", errno);
  const std::string dir = parent_dir(path);
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  PELAB_CHECK(dfd >= 0, "checkpoint ", path, ": cannot open directory ", dir, " to sync it (",
              std::strerror(errno), ")");
  const int synced = ::fsync(dfd);
  const int err = errno;
  ::close(dfd);
  // Some file systems cannot sync a directory (EINVAL); the rename itself has succeeded.
  PELAB_CHECK(synced == 0 || err == EINVAL, "checkpoint ", path, ": fsync of directory ", dir,
              " failed (", std::strerror(err), ")");
}

struct Reader {
  hid_t file;
  std::string path;
  bool need_checksums = false;  // format 2 and later: every dataset carries one
  hsize_t file_size = 0;

  [[noreturn]] void bad(const std::string& full, const std::string& what) const {
    fail("checkpoint ", path, ": dataset ", full, " ", what);
  }
  bool exists(hid_t loc, const std::string& name) const {
    return H5Lexists(loc, name.c_str(), H5P_DEFAULT) > 0;
  }
  hid_t open_group(hid_t loc, const std::string& name, const std::string& full) const {
    PELAB_CHECK(exists(loc, name), "checkpoint ", path, ": missing group ", full);
    hid_t g = H5Gopen2(loc, name.c_str(), H5P_DEFAULT);
    PELAB_CHECK(g >= 0, "checkpoint ", path, ": ", full, " is not a group (corrupt file?)");
    return g;
  }
  hid_t open_ds(hid_t loc, const std::string& name, const std::string& full) const {
    PELAB_CHECK(exists(loc, name), "checkpoint ", path, ": missing dataset ", full);
    hid_t d = H5Dopen2(loc, name.c_str(), H5P_DEFAULT);
    PELAB_CHECK(d >= 0, "checkpoint ", path, ": cannot open dataset ", full, " (corrupt file?)");
    return d;
  }
  // Names of a group's members, in name order.
  std::vector<std::string> members(hid_t g, const std::string& full) const {
    H5G_info_t info{};
    PELAB_CHECK(H5Gget_info(g, &info) >= 0, "checkpoint ", path, ": cannot list group ", full);
    std::vector<std::string> out;
    for (hsize_t i = 0; i < info.nlinks; ++i) {
      const ssize_t len =
          H5Lget_name_by_idx(g, ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
      PELAB_CHECK(len >= 0 && len < 4096, "checkpoint ", path, ": cannot list group ", full);
      std::string name(static_cast<size_t>(len) + 1, '\0');
      PELAB_CHECK(H5Lget_name_by_idx(g, ".", H5_INDEX_NAME, H5_ITER_INC, i, &name[0], name.size(),
                                     H5P_DEFAULT) >= 0,
                  "checkpoint ", path, ": cannot list group ", full);
      name.resize(static_cast<size_t>(len));
      out.push_back(name);
    }
    return out;
  }
  // Verifies the stored checksum of an open dataset against the hash of what was read.
  void verify(hid_t ds, const std::string& full, uint64_t actual) const {
    const htri_t has = H5Aexists(ds, kChecksumAttr);
    PELAB_CHECK(has >= 0, "checkpoint ", path, ": cannot read the attributes of dataset ", full,
                " (corrupt file?)");
    if (has == 0) {
      if (need_checksums) bad(full, "has no checksum attribute (corrupt file?)");
      return;
    }
    Hid attr(H5Aopen(ds, kChecksumAttr, H5P_DEFAULT), H5Aclose);
    Hid type(attr.ok() ? H5Aget_type(attr.get()) : -1, H5Tclose);
    Hid space(attr.ok() ? H5Aget_space(attr.get()) : -1, H5Sclose);
    uint64_t stored = 0;
    PELAB_CHECK(type.ok() && space.ok() && H5Tget_class(type.get()) == H5T_INTEGER &&
                    H5Tget_size(type.get()) == 8 &&
                    H5Sget_simple_extent_npoints(space.get()) == 1 &&
                    H5Aread(attr.get(), H5T_NATIVE_UINT64, &stored) >= 0,
                "checkpoint ", path, ": cannot read the checksum of dataset ", full,
                " (corrupt file?)");
    if (stored != actual)
      bad(full, "fails its checksum (stored " + hex(stored) + ", computed " + hex(actual) +
                    "): the file is corrupt; use another checkpoint of the run");
  }
  // The number of elements of a dataset's dataspace, checked against the file size for `elem`-byte
  // elements before anything is allocated.
  std::vector<hsize_t> dims_of(hid_t ds, const std::string& full, size_t elem) const {
    Hid space(H5Dget_space(ds), H5Sclose);
    PELAB_CHECK(space.ok(), "checkpoint ", path, ": bad dataspace for ", full, " (corrupt file?)");
    const int rank = H5Sget_simple_extent_ndims(space.get());
    if (rank < 0 || rank > 8) bad(full, "has an unreadable or unsupported rank " + std::to_string(rank));
    std::vector<hsize_t> dims(static_cast<size_t>(rank));
    if (rank > 0 && H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr) < 0)
      bad(full, "has an unreadable dataspace (corrupt file?)");
    if (H5Sget_simple_extent_type(space.get()) == H5S_NULL) bad(full, "has no dataspace");
    hsize_t bytes = elem;
    bool overflow = false;
    for (hsize_t d : dims) {
      if (d != 0 && bytes > std::numeric_limits<int64_t>::max() / d) overflow = true;
      bytes *= d;
    }
    const Shape s(dims.begin(), dims.end());
    if (overflow)
      bad(full, "declares shape " + shape_str(s) + ", more than 2^63 bytes (crafted or corrupt file)");
    if (bytes > file_size)
      bad(full, "declares shape " + shape_str(s) + " (" + std::to_string(bytes) +
                    " bytes), more than the whole file (" + std::to_string(file_size) +
                    " bytes) holds (crafted or corrupt file)");
    return dims;
  }
  // A 1-D string array, or with `scalar` one string.
  std::vector<std::string> strings(hid_t loc, const std::string& name, const std::string& full,
                                   bool scalar = false) const {
    Hid ds(open_ds(loc, name, full), H5Dclose);
    Hid type(H5Dget_type(ds.get()), H5Tclose);
    const H5T_class_t cls = H5Tget_class(type.get());
    bool bytes = false;
    if (cls == H5T_VLEN) {  // entries with a NUL byte: uint8 sequences
      Hid base(H5Tget_super(type.get()), H5Tclose);
      bytes = base.ok() && H5Tget_class(base.get()) == H5T_INTEGER && H5Tget_size(base.get()) == 1;
    }
    if (!bytes && !(cls == H5T_STRING && H5Tis_variable_str(type.get()) > 0))
      bad(full, "is not a string array");
    const auto dims = dims_of(ds.get(), full, sizeof(hvl_t));
    if (dims.size() != (scalar ? 0u : 1u))
      bad(full, scalar ? "is not a scalar string" : "is not a 1-D string array");
    const hsize_t n = scalar ? 1 : dims[0];
    std::vector<std::string> out;
    if (n > 0) {
      Hid space(H5Dget_space(ds.get()), H5Sclose);
      if (bytes) {
        Hid mem(H5Tvlen_create(H5T_NATIVE_UINT8), H5Tclose);
        std::vector<hvl_t> seqs(n, hvl_t{0, nullptr});
        const herr_t st = H5Dread(ds.get(), mem.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, seqs.data());
        if (st >= 0)
          for (const hvl_t& s : seqs) out.emplace_back(static_cast<const char*>(s.p), s.p ? s.len : 0);
        H5Dvlen_reclaim(mem.get(), space.get(), H5P_DEFAULT, seqs.data());  // also after a failed read
        if (st < 0) bad(full, "cannot be read (corrupt or truncated file?)");
      } else {
        Hid smem = string_type();
        std::vector<char*> ptrs(n, nullptr);
        const herr_t st = H5Dread(ds.get(), smem.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, ptrs.data());
        if (st >= 0)
          for (char* p : ptrs) out.emplace_back(p ? p : "");
        H5Dvlen_reclaim(smem.get(), space.get(), H5P_DEFAULT, ptrs.data());  // also after a failed read
        if (st < 0) bad(full, "cannot be read (corrupt or truncated file?)");
      }
    }
    verify(ds.get(), full, hash_strings(out));
    return out;
  }
  std::string string(hid_t loc, const std::string& name, const std::string& full) const {
    return strings(loc, name, full, true).at(0);
  }
  template <class T>
  T scalar(hid_t loc, const std::string& name, const std::string& full) const {
    constexpr bool integer = std::is_integral<T>::value;
    Hid ds(open_ds(loc, name, full), H5Dclose);
    Hid type(H5Dget_type(ds.get()), H5Tclose);
    if (H5Tget_class(type.get()) != (integer ? H5T_INTEGER : H5T_FLOAT) ||
        H5Tget_size(type.get()) != sizeof(T))
      bad(full, integer ? "is not a 64-bit integer" : "is not a 64-bit float");
    Hid space(H5Dget_space(ds.get()), H5Sclose);
    if (H5Sget_simple_extent_type(space.get()) != H5S_SCALAR) bad(full, "is not a scalar");
    T v{};
    if (H5Dread(ds.get(), integer ? H5T_NATIVE_INT64 : H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL,
                H5P_DEFAULT, &v) < 0)
      bad(full, "cannot be read (corrupt or truncated file?)");
    verify(ds.get(), full, hash_bytes(&v, sizeof v));
    return v;
  }
  // A parameter or optimizer-state tensor: float32/float64 with finite values. Rank, element type
  // and size are checked before the tensor is allocated.
  Tensor tensor(hid_t loc, const std::string& name, const std::string& full) const {
    Hid ds(open_ds(loc, name, full), H5Dclose);
    Hid type(H5Dget_type(ds.get()), H5Tclose);
    const H5T_class_t cls = H5Tget_class(type.get());
    const size_t size = H5Tget_size(type.get());
    DType dt;
    hid_t mem;
    if (cls == H5T_FLOAT && size == 4) { dt = DType::Float32; mem = H5T_NATIVE_FLOAT; }
    else if (cls == H5T_FLOAT && size == 8) { dt = DType::Float64; mem = H5T_NATIVE_DOUBLE; }
    else if (cls == H5T_INTEGER) bad(full, "has integer elements; parameters and optimizer state are float32 or float64");
    else bad(full, "has an unsupported element type (float32 or float64 expected)");
    const auto dims = dims_of(ds.get(), full, size);
    const Shape shape(dims.begin(), dims.end());
    Tensor t = Tensor::empty(shape, dt, Device::cpu());
    const size_t nbytes = static_cast<size_t>(t.numel()) * size;
    if (t.numel() > 0 && H5Dread(ds.get(), mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, t.raw_data()) < 0)
      bad(full, "cannot be read (corrupt or truncated file?)");
    verify(ds.get(), full, hash_bytes(t.numel() > 0 ? t.raw_data() : nullptr, nbytes));
    const int64_t n = t.numel();
    for (int64_t i = 0; i < n; ++i) {
      const double v = dt == DType::Float32 ? static_cast<const float*>(t.raw_data())[i]
                                            : static_cast<const double*>(t.raw_data())[i];
      if (!std::isfinite(v)) bad(full, "holds a non-finite value (" + std::to_string(v) + ") at element " + std::to_string(i));
    }
    return t;
  }
};

// Collects the in-memory file the core driver hands back when it is closed. (H5Fget_file_image on an
// open file clears the superblock's status flags without updating its checksum in HDF5 1.10, which
// makes the image unreadable; the image released at close is complete and consistent.)
struct ImageSink {
  size_t size = 0;          // size of the driver's current buffer
  std::vector<char> image;  // the buffer at close
};
void* sink_malloc(size_t size, H5FD_file_image_op_t, void* udata) {
  static_cast<ImageSink*>(udata)->size = size;
  return std::malloc(size);
}
void* sink_memcpy(void* dest, const void* src, size_t size, H5FD_file_image_op_t, void*) {
  return std::memcpy(dest, src, size);
}
void* sink_realloc(void* ptr, size_t size, H5FD_file_image_op_t, void* udata) {
  void* p = std::realloc(ptr, size);
  if (p) static_cast<ImageSink*>(udata)->size = size;
  return p;
}
herr_t sink_free(void* ptr, H5FD_file_image_op_t op, void* udata) {
  auto* sink = static_cast<ImageSink*>(udata);
  if (ptr && op == H5FD_FILE_IMAGE_OP_FILE_CLOSE) {
    const char* p = static_cast<const char*>(ptr);
    sink->image.assign(p, p + sink->size);
  }
  std::free(ptr);
  return 0;
}
void* sink_udata_copy(void* udata) { return udata; }
herr_t sink_udata_free(void*) { return 0; }

// The file's length: the end-of-file address of its superblock (version 2 or 3, 8-byte offsets, as
// written with H5F_LIBVER_V18), which the driver's buffer may exceed.
size_t image_length(const std::vector<char>& img, const std::string& path) {
  const auto* b = reinterpret_cast<const unsigned char*>(img.data());
  PELAB_CHECK(img.size() >= 48 && std::memcmp(b, "\x89HDF\r\n\x1a\n", 8) == 0 &&
                  (b[8] == 2 || b[8] == 3) && b[9] == 8,
              "checkpoint ", path, ": the HDF5 library produced an unexpected file image");
  uint64_t eof = 0;
  for (int i = 7; i >= 0; --i) eof = (eof << 8) | b[28 + i];
  PELAB_CHECK(eof >= 48 && eof <= img.size(), "checkpoint ", path,
              ": the HDF5 file image is inconsistent (end of file ", eof, ", buffer ", img.size(), ")");
  return static_cast<size_t>(eof);
}

}  // namespace

void set_checkpoint_fault_injection(int64_t fail_after_datasets) { g_fail_after = fail_after_datasets; }

void save_checkpoint(const std::string& path, const CheckpointData& d,
                     const std::function<void(const std::string&)>& before_publish) {
  ImageSink sink;
  {
    // The file is built in memory (core driver without a backing store) in the HDF5 1.8+ format,
    // whose object headers and link tables carry checksums.
    Hid fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
    H5FD_file_image_callbacks_t cb{sink_malloc, sink_memcpy,     sink_realloc, sink_free,
                                   sink_udata_copy, sink_udata_free, &sink};
    PELAB_CHECK(fapl.ok() && H5Pset_fapl_core(fapl.get(), size_t{1} << 20, 0) >= 0 &&
                    H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V18, H5F_LIBVER_LATEST) >= 0 &&
                    H5Pset_file_image_callbacks(fapl.get(), &cb) >= 0,
                "checkpoint ", path, ": cannot set up HDF5 file access properties");
    // (The name only identifies the in-memory file; nothing is created under it.)
    const std::string mem_name = path + ".in-memory." + std::to_string(::getpid());
    Hid file(H5Fcreate(mem_name.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()), H5Fclose);
    PELAB_CHECK(file.ok(), "checkpoint ", path, ": cannot create the HDF5 file in memory");
    const hid_t fid = file.get();
    Writer w{fid, path};
    w.scalar<int64_t>(fid, "format_version", d.format_version, H5T_NATIVE_INT64);
    w.scalar<int64_t>(fid, "step", d.step, H5T_NATIVE_INT64);
    w.string(fid, "scheme", d.scheme);
    w.string(fid, "arch", d.arch);
    w.string(fid, "config", d.config_yaml);
    w.string(fid, "metrics", d.metrics_jsonl);
    w.string(fid, "pelab_version", version());
    w.strings(fid, "vocab", d.vocab);
    std::vector<std::string> names;
    for (const auto& [n, t] : d.params) names.push_back(n);
    w.strings(fid, "param_names", names);
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
    PELAB_CHECK(H5Fclose(file.release()) >= 0, "checkpoint ", path,
                ": closing the in-memory HDF5 file failed");
  }
  write_file_atomic(path, sink.image.data(), image_length(sink.image, path), before_publish);
}

CheckpointData load_checkpoint(const std::string& path) {
  struct stat st {};
  PELAB_CHECK(::stat(path.c_str(), &st) == 0, "checkpoint ", path, ": no such file");
  PELAB_CHECK(S_ISREG(st.st_mode), "checkpoint ", path, ": not a regular file");
  PELAB_CHECK(H5Fis_hdf5(path.c_str()) > 0, "checkpoint ", path,
              ": not an HDF5 file (or its header is damaged)");
  Hid file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  PELAB_CHECK(file.ok(), "checkpoint ", path, ": cannot open (corrupt or truncated HDF5 file)");
  const hid_t fid = file.get();
  Reader r{fid, path};
  PELAB_CHECK(H5Fget_filesize(fid, &r.file_size) >= 0, "checkpoint ", path, ": cannot read its size");
  CheckpointData d;
  d.format_version = r.scalar<int64_t>(fid, "format_version", "format_version");
  PELAB_CHECK(d.format_version >= 1 && d.format_version <= kCheckpointFormatVersion, "checkpoint ",
              path, ": format version ", d.format_version,
              " is not supported (this pelab reads versions 1 to ", kCheckpointFormatVersion, ")");
  // Version 1 (before checksums) has none to verify; from version 2 on every dataset has one.
  r.need_checksums = d.format_version >= 2;
  if (r.need_checksums) {  // format_version was read before need_checksums was known
    Hid ds(r.open_ds(fid, "format_version", "format_version"), H5Dclose);
    r.verify(ds.get(), "format_version", hash_bytes(&d.format_version, sizeof d.format_version));
  }
  d.step = r.scalar<int64_t>(fid, "step", "step");
  PELAB_CHECK(d.step >= 0, "checkpoint ", path, ": dataset step is ", d.step, ", must be >= 0");
  d.scheme = r.string(fid, "scheme", "scheme");
  d.arch = r.string(fid, "arch", "arch");
  d.config_yaml = r.string(fid, "config", "config");
  d.metrics_jsonl = r.string(fid, "metrics", "metrics");
  d.vocab = r.strings(fid, "vocab", "vocab");
  PELAB_CHECK(!d.vocab.empty(), "checkpoint ", path, ": dataset vocab is empty");
  const auto names = r.strings(fid, "param_names", "param_names");
  PELAB_CHECK(std::set<std::string>(names.begin(), names.end()).size() == names.size(),
              "checkpoint ", path, ": dataset param_names lists a name twice");
  // Every member of `group` must be one of the parameter names (no extra datasets).
  auto only_params = [&](hid_t g, const std::string& group) {
    const std::set<std::string> known(names.begin(), names.end());
    for (const auto& m : r.members(g, group))
      PELAB_CHECK(known.count(m), "checkpoint ", path, ": dataset ", group, "/", m,
                  " is not in param_names (unexpected extra dataset)");
  };
  {
    Hid g(r.open_group(fid, "params", "params"), H5Gclose);
    only_params(g.get(), "params");
    for (const auto& n : names) d.params.emplace_back(n, r.tensor(g.get(), n, "params/" + n));
  }
  {
    Hid g(r.open_group(fid, "optimizer", "optimizer"), H5Gclose);
    d.optimizer = r.string(g.get(), "kind", "optimizer/kind");
    d.optimizer_step = r.scalar<int64_t>(g.get(), "step", "optimizer/step");
    PELAB_CHECK(d.optimizer_step >= 0, "checkpoint ", path, ": dataset optimizer/step is ",
                d.optimizer_step, ", must be >= 0");
    for (const auto& state : r.members(g.get(), "optimizer")) {
      if (state == "kind" || state == "step") continue;  // the two datasets beside the state groups
      const std::string full = "optimizer/" + state;
      Hid sg(r.open_group(g.get(), state, full), H5Gclose);
      only_params(sg.get(), full);
      auto& vec = d.optimizer_state[state];
      for (const auto& n : names) vec.push_back(r.tensor(sg.get(), n, full + "/" + n));
    }
  }
  {
    Hid g(r.open_group(fid, "counters", "counters"), H5Gclose);
    for (const auto& k : r.members(g.get(), "counters"))
      d.counters[k] = r.scalar<int64_t>(g.get(), k, "counters/" + k);
  }
  {
    Hid g(r.open_group(fid, "values", "values"), H5Gclose);
    for (const auto& k : r.members(g.get(), "values"))
      d.values[k] = r.scalar<double>(g.get(), k, "values/" + k);
  }
  return d;
}

int64_t checkpoint_step(const std::string& path) {
  struct stat st {};
  PELAB_CHECK(::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && H5Fis_hdf5(path.c_str()) > 0,
              "checkpoint ", path, ": no such file or not an HDF5 file");
  Hid file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  PELAB_CHECK(file.ok(), "checkpoint ", path, ": cannot open (corrupt or truncated HDF5 file)");
  Reader r{file.get(), path};
  PELAB_CHECK(H5Fget_filesize(file.get(), &r.file_size) >= 0, "checkpoint ", path,
              ": cannot read its size");
  r.need_checksums = r.scalar<int64_t>(file.get(), "format_version", "format_version") >= 2;
  const int64_t step = r.scalar<int64_t>(file.get(), "step", "step");
  PELAB_CHECK(step >= 0, "checkpoint ", path, ": dataset step is ", step, ", must be >= 0");
  return step;
}

void check_training_counters(const CheckpointData& d, const std::string& path) {
  // name, lowest value, highest value (INT64_MAX = none). The rng seeds and offsets and data_seed
  // are 64-bit patterns: every value is one.
  const int64_t none = std::numeric_limits<int64_t>::max();
  auto get = [&](const char* name, int64_t def) {
    auto it = d.counters.find(name);
    return it == d.counters.end() ? def : it->second;
  };
  const int64_t skipped = get("skipped_steps", 0);
  const struct {
    const char* name;
    int64_t lo, hi;
  } ranges[] = {
      {"schedule_step", d.step, d.step},          // the step the LR schedule is at: /step
      {"data_position", 0, none},                 // micro-batches consumed
      {"skipped_steps", 0, d.step},
      {"consecutive_skipped", 0, skipped},        // the latest skipped steps in a row
      {"last_finite_step", -1, d.step},           // -1 = none
      {"log_loss_count", 0, d.step},              // steps since the last training log row
      {"best_step", -1, d.step},                  // -1 = no best yet
      {"train_positions", 0, none},               // 0 = not recorded
      {"criterion_hits", 0, d.step + 1},          // validations in a row meeting train.stop_when
      {"criterion_met_step", -1, d.step},         // -1 = not met
  };
  PELAB_CHECK(d.optimizer_step <= d.step, "checkpoint ", path, ": dataset optimizer/step is ",
              d.optimizer_step, ", more than the ", d.step, " steps of /step");
  for (const auto& c : ranges) {
    auto it = d.counters.find(c.name);
    if (it == d.counters.end()) continue;  // a required one missing is named by the trainer
    const int64_t v = it->second;
    if (v >= c.lo && v <= c.hi) continue;
    if (c.lo == c.hi)
      fail("checkpoint ", path, ": dataset counters/", c.name, " is ", v, ", must equal ", c.lo,
           " (/step)");
    fail("checkpoint ", path, ": dataset counters/", c.name, " is ", v, ", outside [", c.lo, ", ",
         c.hi == none ? std::string("inf") : std::to_string(c.hi), "]",
         c.hi == d.step ? " (/step is " + std::to_string(d.step) + ")" : std::string());
  }
}

void copy_checkpoint(const std::string& from, const std::string& to) {
  std::FILE* f = std::fopen(from.c_str(), "rb");
  PELAB_CHECK(f, "checkpoint ", from, ": cannot open (", std::strerror(errno), ")");
  std::vector<char> bytes;
  char buf[1 << 16];
  size_t got;
  while ((got = std::fread(buf, 1, sizeof buf, f)) > 0) bytes.insert(bytes.end(), buf, buf + got);
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  PELAB_CHECK(!failed, "checkpoint ", from, ": read error");
  write_file_atomic(to, bytes.data(), bytes.size());
}

std::vector<std::string> remove_stale_temporaries(const std::string& dir) {
  namespace fs = std::filesystem;
  std::vector<std::string> removed;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    const auto at = n.rfind(".tmp.");
    if (at == std::string::npos || at + 5 >= n.size() ||
        n.find_first_not_of("0123456789", at + 5) != std::string::npos)
      continue;
    const long long pid = std::atoll(n.c_str() + at + 5);
    // Alive (or not ours to signal): keep. Only a process that no longer exists is stale.
    if (pid <= 0 || pid > std::numeric_limits<pid_t>::max() || ::kill(static_cast<pid_t>(pid), 0) == 0 ||
        errno != ESRCH)
      continue;
    std::error_code rm;
    if (fs::remove(e.path(), rm)) removed.push_back(e.path().string());
  }
  return removed;
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
