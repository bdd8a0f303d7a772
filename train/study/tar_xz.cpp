// pelab — xz-compressed tar files (tar_xz.h): libarchive reads and writes the tar format in
// memory, liblzma the xz stream around it (its decoder under kXzMemoryLimit).
#include "train/study/tar_xz.h"

#include <archive.h>
#include <archive_entry.h>
#include <lzma.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <set>

#include "pelab/error.h"

namespace pelab {

namespace {

// "" when `name` (trailing '/' removed) may name a member; else why not.
std::string bad_name(const std::string& name) {
  if (name.empty()) return "an empty name";
  if (name.size() > 4096) return "a name longer than 4096 characters";
  for (unsigned char c : name)
    if (c < 0x20 || c > 0x7e || c == '\\')
      return "a name with a byte that is not printable ASCII (or a backslash)";
  if (name[0] == '/') return "an absolute name; a member must be relative to the archive";
  size_t start = 0;
  for (;;) {
    const size_t slash = name.find('/', start);
    const std::string part =
        name.substr(start, slash == std::string::npos ? std::string::npos : slash - start);
    if (part.empty()) return "an empty component in its name";
    if (part == "..") return "'..' in its name; a member must stay inside the archive";
    if (part == ".") return "'.' in its name";
    if (part.size() > 255) return "a name component longer than 255 characters";
    if (slash == std::string::npos) break;
    start = slash + 1;
  }
  return "";
}

// The decompressed bytes of an xz file open at a descriptor, handed to libarchive block by block.
struct XzReader {
  int fd = -1;
  int64_t limit = 0;  // largest decompressed stream (TarLimits::stream_bytes)
  lzma_stream strm = LZMA_STREAM_INIT;
  bool in_eof = false, done = false;
  int64_t total = 0;
  std::string why;  // the reason of a failure, for the error
  unsigned char in[1 << 16];
  unsigned char out[1 << 16];

  ~XzReader() { lzma_end(&strm); }

  static std::string lzma_reason(lzma_ret r, const lzma_stream& s) {
    switch (r) {
      case LZMA_MEMLIMIT_ERROR:
        return "its xz stream needs " + std::to_string(lzma_memusage(&s)) +
               " bytes of memory to decode, more than pelab allows (" +
               std::to_string(kXzMemoryLimit) + ")";
      case LZMA_FORMAT_ERROR: return "not an xz-compressed file";
      case LZMA_OPTIONS_ERROR: return "unsupported xz options";
      case LZMA_DATA_ERROR: return "corrupt xz data";
      case LZMA_BUF_ERROR: return "truncated (the xz stream ends early)";
      case LZMA_MEM_ERROR: return "out of memory while decompressing";
      default: return "xz decoder error " + std::to_string(static_cast<int>(r));
    }
  }

  // libarchive's read callback: the next decompressed block (0 at the end, -1 on an error).
  static la_ssize_t read(struct archive* a, void* self, const void** buf) {
    auto* x = static_cast<XzReader*>(self);
    *buf = x->out;
    if (x->done) return 0;
    x->strm.next_out = x->out;
    x->strm.avail_out = sizeof x->out;
    for (;;) {
      if (x->strm.avail_in == 0 && !x->in_eof) {
        ssize_t n;
        do n = ::read(x->fd, x->in, sizeof x->in);
        while (n < 0 && errno == EINTR);
        if (n < 0) {
          x->why = std::string("cannot read it: ") + std::strerror(errno);
          archive_set_error(a, EIO, "%s", x->why.c_str());
          return -1;
        }
        if (n == 0) x->in_eof = true;
        x->strm.next_in = x->in;
        x->strm.avail_in = static_cast<size_t>(n);
      }
      const lzma_ret r = lzma_code(&x->strm, x->in_eof ? LZMA_FINISH : LZMA_RUN);
      const size_t produced = sizeof x->out - x->strm.avail_out;
      if (r == LZMA_STREAM_END) x->done = true;
      else if (r != LZMA_OK) {
        x->why = lzma_reason(r, x->strm);
        archive_set_error(a, EINVAL, "%s", x->why.c_str());
        return -1;
      }
      x->total += static_cast<int64_t>(produced);
      if (x->total > x->limit) {
        x->why = "its tar stream is larger than " + std::to_string(x->limit) + " bytes";
        archive_set_error(a, EFBIG, "%s", x->why.c_str());
        return -1;
      }
      if (produced > 0 || x->done) return static_cast<la_ssize_t>(produced);
    }
  }
};

struct ArchiveFree {
  void operator()(struct archive* a) const { archive_read_free(a); }
};
struct WriteFree {
  void operator()(struct archive* a) const { archive_write_free(a); }
};
struct EntryFree {
  void operator()(struct archive_entry* e) const { archive_entry_free(e); }
};

}  // namespace

std::string tar_member_where(const std::string& archive, const std::string& member) {
  return archive + ":" + member;
}

std::vector<TarMember> read_tar_xz(
    int fd, const std::string& archive, const TarLimits& limits,
    const std::function<std::string(const std::string&, bool)>& check) {
  auto xz = std::make_unique<XzReader>();
  xz->fd = fd;
  xz->limit = limits.total_bytes + limits.members * 3 * 512 + (int64_t{8} << 20);
  const lzma_ret init = lzma_stream_decoder(&xz->strm, kXzMemoryLimit, LZMA_CONCATENATED);
  PELAB_CHECK(init == LZMA_OK, archive, ": cannot start the xz decoder (", static_cast<int>(init),
              ")");
  std::unique_ptr<struct archive, ArchiveFree> a(archive_read_new());
  PELAB_CHECK(a, archive, ": cannot start libarchive");
  archive_read_support_format_tar(a.get());  // ustar, pax and GNU tar; no other format
  std::string last;                          // the last member read, for errors past it
  // The reason libarchive stopped: the xz decoder's, else its own.
  auto reason = [&]() -> std::string {
    if (!xz->why.empty()) return xz->why;
    const char* msg = archive_error_string(a.get());
    return msg ? msg : "unknown error";
  };
  if (archive_read_open(a.get(), xz.get(), nullptr, &XzReader::read, nullptr) != ARCHIVE_OK)
    throw Error(archive + ": cannot read it: " + reason());
  std::vector<TarMember> members;
  std::set<std::string> seen;
  int64_t count = 0, total = 0;
  for (;;) {
    struct archive_entry* e = nullptr;
    const int r = archive_read_next_header(a.get(), &e);
    if (r == ARCHIVE_EOF) break;
    if (r != ARCHIVE_OK)
      throw Error(archive + ": cannot read " +
                  (last.empty() ? std::string("its first member") : "past member " + last) + ": " +
                  reason());
    const char* raw = archive_entry_pathname(e);
    std::string name = raw ? raw : "";
    const bool folder = archive_entry_filetype(e) == AE_IFDIR;
    if (folder && name.size() > 1 && name.back() == '/') name.pop_back();
    const std::string where = tar_member_where(archive, name.empty() ? "<unnamed>" : name);
    auto refuse = [&](const std::string& why) -> Error { return Error(where + why); };
    const char* const kOnly = "; an archive of run records holds only regular files and folders";
    if (++count > limits.members)
      throw refuse(": one member too many; an archive of run records holds at most " +
                   std::to_string(limits.members));
    if (const std::string bad = bad_name(name); !bad.empty()) throw refuse(": " + bad);
    if (archive_entry_hardlink(e)) throw refuse(std::string(" is a hard link") + kOnly);
    if (archive_entry_filetype(e) == AE_IFLNK)
      throw refuse(std::string(" is a symbolic link") + kOnly);
    if (!folder && archive_entry_filetype(e) != AE_IFREG)
      throw refuse(std::string(" is not a regular file (a device, FIFO or socket)") + kOnly);
    if (archive_entry_sparse_count(e) > 0) throw refuse(std::string(" is a sparse file") + kOnly);
    if (!seen.insert(name).second) throw refuse(" appears twice");
    int64_t size = 0;
    if (!folder) {
      if (!archive_entry_size_is_set(e)) throw refuse(": its size is not recorded");
      size = archive_entry_size(e);
      if (size < 0 || size > limits.member_bytes)
        throw refuse(" declares " + std::to_string(size) + " bytes, more than a member may be (" +
                     std::to_string(limits.member_bytes) + ")");
      if (size > limits.total_bytes - total)
        throw refuse(" declares " + std::to_string(size) + " bytes, which take the members past " +
                     std::to_string(limits.total_bytes) + " bytes in all");
    }
    if (const std::string why = check(name, folder); !why.empty()) throw refuse(": " + why);
    last = name;
    if (folder) continue;
    total += size;
    TarMember m;
    m.name = name;
    m.data.resize(static_cast<size_t>(size));
    size_t got = 0;
    while (got < m.data.size()) {
      const la_ssize_t n = archive_read_data(a.get(), &m.data[got], m.data.size() - got);
      if (n < 0) throw Error(where + ": cannot read it: " + reason());
      if (n == 0) break;
      got += static_cast<size_t>(n);
    }
    if (got != m.data.size())
      throw Error(where + ": truncated: " + std::to_string(got) + " of its " +
                  std::to_string(size) + " bytes");
    members.push_back(std::move(m));
  }
  // libarchive stops at the tar end marker: the rest of the xz stream is decoded here, so that its
  // integrity check (CRC64, at the stream's end) is verified, and must hold nothing but zeros.
  for (;;) {
    const void* block = nullptr;
    const la_ssize_t n = XzReader::read(a.get(), xz.get(), &block);
    if (n < 0)
      throw Error(archive + ": cannot read past its last member" +
                  (last.empty() ? std::string() : " " + last) + ": " + reason());
    if (n == 0) break;
    const auto* b = static_cast<const unsigned char*>(block);
    for (la_ssize_t i = 0; i < n; ++i)
      PELAB_CHECK(b[i] == 0, archive, ": data after the end of its tar archive");
  }
  return members;
}

std::string xz_bytes(const std::string& bytes) {
  lzma_options_lzma opt;
  PELAB_CHECK(!lzma_lzma_preset(&opt, 9 | LZMA_PRESET_EXTREME), "xz: no preset 9e");
  opt.dict_size = uint32_t{8} << 20;  // records of one comparison: a few MB
  const lzma_filter filters[] = {{LZMA_FILTER_LZMA2, &opt}, {LZMA_VLI_UNKNOWN, nullptr}};
  std::string out(lzma_stream_buffer_bound(bytes.size()), '\0');
  size_t pos = 0;
  const lzma_ret r = lzma_stream_buffer_encode(
      const_cast<lzma_filter*>(filters), LZMA_CHECK_CRC64, nullptr,
      reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(),
      reinterpret_cast<uint8_t*>(&out[0]), &pos, out.size());
  PELAB_CHECK(r == LZMA_OK, "xz: compression failed (", static_cast<int>(r), ")");
  out.resize(pos);
  return out;
}

std::string tar_xz_bytes(const std::vector<TarMember>& members) {
  std::string tar;
  std::unique_ptr<struct archive, WriteFree> w(archive_write_new());
  PELAB_CHECK(w, "tar: cannot start libarchive");
  auto check = [&](int r, const std::string& what) {
    if (r == ARCHIVE_OK) return;
    const char* msg = archive_error_string(w.get());
    fail("tar: cannot write ", what, ": ", msg ? msg : "unknown error");
  };
  check(archive_write_set_format_pax_restricted(w.get()), "the format");
  check(archive_write_set_bytes_in_last_block(w.get(), 1), "the format");
  auto append = [](struct archive*, void* out, const void* buf, size_t n) -> la_ssize_t {
    static_cast<std::string*>(out)->append(static_cast<const char*>(buf), n);
    return static_cast<la_ssize_t>(n);
  };
  check(archive_write_open(w.get(), &tar, nullptr, append, nullptr), "the archive");
  for (const auto& m : members) {
    const std::string bad = bad_name(m.name);
    PELAB_CHECK(bad.empty(), "tar: ", m.name, ": ", bad);
    std::unique_ptr<struct archive_entry, EntryFree> e(archive_entry_new());
    archive_entry_set_pathname(e.get(), m.name.c_str());
    archive_entry_set_filetype(e.get(), AE_IFREG);
    archive_entry_set_perm(e.get(), 0644);
    archive_entry_set_size(e.get(), static_cast<la_int64_t>(m.data.size()));
    archive_entry_set_mtime(e.get(), 0, 0);
    check(archive_write_header(w.get(), e.get()), m.name);
    size_t done = 0;
    while (done < m.data.size()) {
      const la_ssize_t n = archive_write_data(w.get(), m.data.data() + done, m.data.size() - done);
      if (n <= 0) check(ARCHIVE_FATAL, m.name);
      done += static_cast<size_t>(n);
    }
  }
  check(archive_write_close(w.get()), "the archive");
  return xz_bytes(tar);
}

}  // namespace pelab
