// pelab — xz-compressed tar files, read into memory and written whole: the form a comparison's
// run records travel and are published in (run_record.h, records.tar.xz). The tar format is
// libarchive's, the xz stream liblzma's (Debian's libarchive13 and liblzma5).
//
// A tar file read here is someone else's file, so nothing in it is trusted: it is read only into
// memory, never extracted by libarchive onto a disk; only regular files and folders are accepted
// (a symbolic link, hard link, device, FIFO or sparse file refuses the archive); every name must be
// relative, of printable ASCII, without an empty, "." or ".." component; the number of members,
// each member's size and their sum are checked against TarLimits from the member's header before
// its bytes are allocated, the decompressed stream is cut off past those bounds (plus 1.5 KiB of
// headers per member and 8 MiB), and the xz decoder's memory is capped (kXzMemoryLimit) before it
// allocates its dictionary. Every refusal is one pelab::Error naming the archive and the member:
// "<archive>:<member>: <why>" ("<archive>: <why>" where no member is concerned).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace pelab {

struct TarMember {
  std::string name;  // relative path inside the archive, '/'-separated
  std::string data;  // the whole file
};

struct TarLimits {
  int64_t members = 65536;                // entries of any kind, folders included
  int64_t member_bytes = int64_t{256} << 20;  // one member's size
  int64_t total_bytes = int64_t{1} << 30;     // the sum of the members read
};

// The xz decoder's memory limit: an archive whose xz header asks for more (a dictionary larger
// than xz -9's 64 MiB) is refused before the decoder allocates it.
constexpr uint64_t kXzMemoryLimit = uint64_t{128} << 20;

// `member` of `archive` as messages name it: "<archive>:<member>".
std::string tar_member_where(const std::string& archive, const std::string& member);

// Reads the xz-compressed tar file open at `fd` (named `archive` in messages) into memory, in
// archive order. `check(name, is_folder)` sees every member's name before its data is read (and
// after the checks above): it returns "" to keep a file (folders are never kept), or the reason
// the member is refused. Throws one line on a refused member, a limit exceeded, a name that
// appears twice, and a truncated or corrupt archive or xz stream.
std::vector<TarMember> read_tar_xz(
    int fd, const std::string& archive, const TarLimits& limits,
    const std::function<std::string(const std::string& name, bool is_folder)>& check);

// A tar file of `members` (regular files, mode 0644, owner 0, time 0, in the order given: the same
// members give the same bytes), xz-compressed (preset 9 extreme, 16 MiB dictionary). Throws when a
// name is not one read_tar_xz accepts.
std::string tar_xz_bytes(const std::vector<TarMember>& members);

// `bytes` as one xz stream (the compression tar_xz_bytes uses).
std::string xz_bytes(const std::string& bytes);

}  // namespace pelab
