// pelab — whole-file text I/O and safe opening of the files pelab writes (text_file.h).
#include "train/text_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "pelab/error.h"

namespace pelab {

int create_temporary_for(const std::string& path, std::string* tmp, mode_t mode) {
  // <n> counts up from 0 past every name already taken (by another thread's write of the same
  // file, a leftover of a killed process that had this pid, a planted link).
  const std::string stem = path + ".tmp." + std::to_string(::getpid()) + ".";
  for (int n = 0; n < 1000; ++n) {
    const std::string name = stem + std::to_string(n);
    const int fd =
        ::open(name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
    if (fd >= 0) {
      *tmp = name;
      return fd;
    }
    if (errno != EEXIST) fail("cannot write ", path, ": ", std::strerror(errno));
  }
  fail("cannot write ", path, ": no free temporary name ", stem, "<n> (1000 are taken)");
}

int open_for_writing(const std::string& path, int flags, mode_t mode) {
  const int fd = ::open(path.c_str(), flags | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, mode);
  const int err = errno;
  struct stat st {};
  auto not_regular = [&] {
    fail(path, " is not a regular file; pelab writes only regular files there: remove it");
  };
  if (fd < 0) {
    if (::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode))
      fail(path, " is a symbolic link; pelab never writes through one: remove it");
    if (::lstat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) not_regular();  // a FIFO: ENXIO
    fail("cannot open ", path, " for writing: ", std::strerror(err));
  }
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    not_regular();
  }
  // O_NONBLOCK was only for the open (a FIFO would have blocked it); a regular file ignores it.
  const int fl = ::fcntl(fd, F_GETFL);
  if (fl >= 0) ::fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
  return fd;
}

void write_text_file(const std::string& path, const std::string& text) {
  std::string tmp;
  int fd = create_temporary_for(path, &tmp);
  auto bail = [&](int err) {
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    fail("cannot write ", path, ": ", std::strerror(err));
  };
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) bail(n < 0 ? errno : EIO);
    done += static_cast<size_t>(n);
  }
  const int closed = ::close(fd);
  fd = -1;
  if (closed != 0) bail(errno);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) bail(errno);
}

bool own_folder_exists(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return false;
    fail("cannot use ", path, ": ", std::strerror(errno));
  }
  if (S_ISLNK(st.st_mode)) fail(path, " is a symbolic link; pelab never writes through one: remove it");
  if (!S_ISDIR(st.st_mode)) fail(path, " is not a folder; pelab writes its files there: remove it");
  return true;
}

void make_own_folder(const std::string& path) {
  if (own_folder_exists(path)) return;
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) fail("cannot create ", path, ": ", ec.message());
  own_folder_exists(path);  // (what was created in between is checked as well)
}

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  PELAB_CHECK(in.good(), "cannot read ", path);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

}  // namespace pelab
