// pelab — the files pelab writes, with someone else's run folder (issue 29, items 2, 14): no write
// follows a symbolic link planted in a run folder (the lock, a temporary's name, train.log /
// metrics.jsonl, a checkpoint temporary), two writers of one file never collide, a failed write
// (RLIMIT_FSIZE on a child process, as on a full disk) names the system's reason and leaves no
// temporary.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "train/checkpoint.h"
#include "train/metrics.h"
#include "train/study/report.h"
#include "train/text_file.h"
#include "tests/test_paths.h"
#include "tests/test_util.h"

namespace fs = std::filesystem;
using namespace pelab;

namespace {

using pelab::testing::quote;
using pelab::testing::slurp;
using pelab::testing::write_file;
using Result = pelab::testing::CommandResult;

class HardeningFiles : public pelab::testing::TempDirTest {
 protected:
  HardeningFiles() : TempDirTest("pelab_hfiles") {}

  // Runs `command` with /bin/sh in dir_ (stdout and stderr captured).
  Result sh(const std::string& command) {
    return pelab::testing::run_captured("cd " + quote(dir_.string()) + " && " + command,
                                        dir_ / "stdout.txt", dir_ / "stderr.txt");
  }
  Result pelab(const std::string& args, const std::string& env = "") {
    return sh(env + " OMP_NUM_THREADS=1 " + quote(pelab::testing::pelab_binary()) + " " + args);
  }
  // A victim outside the run folder: a file whose text must never change.
  fs::path victim(const std::string& name) {
    write_file(dir_ / name, "precious " + name + "\n");
    return dir_ / name;
  }
  void expect_victim_unchanged(const fs::path& v) {
    EXPECT_EQ(slurp(v), "precious " + v.filename().string() + "\n") << v;
  }
};

// Names (recursively under `dir`) containing `needle`.
std::vector<std::string> names_with(const fs::path& dir, const std::string& needle) {
  std::vector<std::string> out;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec);
       it != fs::recursive_directory_iterator(); it.increment(ec))
    if (it->path().filename().string().find(needle) != std::string::npos)
      out.push_back(it->path().string());
  return out;
}

size_t lines_with(const std::string& text, const std::string& needle) {
  size_t n = 0;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) n += l.find(needle) != std::string::npos;
  return n;
}

// Runs `f` in a child process whose files are limited to `limit` bytes (SIGXFSZ ignored: a write
// past the limit fails with EFBIG, as on a full disk); returns the pelab::Error message it threw
// ("" when none; "<killed>" when the child did not exit normally).
std::string error_with_file_limit(rlim_t limit, const std::function<void()>& f) {
  int fds[2];
  if (::pipe(fds) != 0) return "<no pipe>";
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    struct rlimit rl {};
    rl.rlim_cur = rl.rlim_max = limit;
    ::setrlimit(RLIMIT_FSIZE, &rl);
    ::signal(SIGXFSZ, SIG_IGN);
    std::string msg;
    try {
      f();
    } catch (const std::exception& e) {
      msg = e.what();
    }
    if (!msg.empty() && ::write(fds[1], msg.data(), msg.size()) < 0) ::_exit(2);
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string msg;
  char buf[512];
  ssize_t n;
  while ((n = ::read(fds[0], buf, sizeof buf)) > 0) msg.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? msg : "<killed>";
}

// A whole 1x1 PNG (signature, IHDR, IDAT, IEND; 67 bytes).
// ---------------- item 2: no write follows a planted link ----------------

TEST_F(HardeningFiles, WholeFileWriteNeverFollowsAPlantedLink) {
  const fs::path run = dir_ / "run";
  fs::create_directories(run);
  const fs::path v1 = victim("v1"), v2 = victim("v2"), v3 = victim("v3");
  const std::string pid = std::to_string(::getpid());
  fs::create_symlink(v1, run / "eval.json.tmp");  // the old fixed temporary
  fs::create_symlink(v2, run / ("eval.json.tmp." + pid + ".0"));
  fs::create_symlink(dir_ / "created_through_a_link", run / ("eval.json.tmp." + pid + ".1"));
  fs::create_symlink(v3, run / "eval.json");
  write_text_file((run / "eval.json").string(), "{\"ours\": 1}\n");
  for (const auto& v : {v1, v2, v3}) expect_victim_unchanged(v);
  EXPECT_FALSE(fs::exists(dir_ / "created_through_a_link"));
  EXPECT_FALSE(fs::is_symlink(run / "eval.json"));
  EXPECT_EQ(slurp(run / "eval.json"), "{\"ours\": 1}\n");
  EXPECT_EQ(names_with(run, ".tmp").size(), 3u);  // the planted links only: none of ours is left
}

TEST_F(HardeningFiles, AppendRefusesAPlantedLink) {
  for (const char* name : {"train.log", "metrics.jsonl"}) {
    const fs::path v = victim(std::string("victim_") + name);
    fs::create_symlink(v, dir_ / name);
    const std::string e =
        pelab::testing::error_of([&] { append_to_file((dir_ / name).string(), "row\n"); });
    EXPECT_EQ(e, (dir_ / name).string() +
                     " is a symbolic link; pelab never writes through one: remove it");
    expect_victim_unchanged(v);
  }
  ASSERT_EQ(::mkfifo((dir_ / "fifo.log").c_str(), 0644), 0);  // would block an open for writing
  EXPECT_NE(pelab::testing::error_of([&] { append_to_file((dir_ / "fifo.log").string(), "x"); })
                .find("is not a regular file"),
            std::string::npos);
}

TEST_F(HardeningFiles, CheckpointWriteNeverFollowsAPlantedTemporary) {
  const fs::path v = victim("v");
  write_file(dir_ / "from.h5", "checkpoint bytes");
  fs::create_symlink(v, dir_ / ("to.h5.tmp." + std::to_string(::getpid())));
  copy_checkpoint((dir_ / "from.h5").string(), (dir_ / "to.h5").string());
  expect_victim_unchanged(v);
  EXPECT_EQ(slurp(dir_ / "to.h5"), "checkpoint bytes");
  EXPECT_TRUE(names_with(dir_, ".tmp").empty());
}

// `pelab train` in a run folder with a planted lock link: one error line naming it, the victim
// untouched (it was truncated and given the pid).
TEST_F(HardeningFiles, TrainRefusesAPlantedLockLink) {
  write_file(dir_ / "tiny.yaml", pelab::testing::tiny_cli_yaml(dir_ / "runs"));
  const fs::path run = dir_ / "runs" / "tiny";
  fs::create_directories(run);
  const fs::path v = victim("lock_victim");
  fs::create_symlink(v, run / ".pelab.lock");
  const Result r = pelab("train tiny.yaml --progress none");
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_EQ(lines_with(r.err, "error"), 1u) << r.err;
  EXPECT_NE(r.err.find((run / ".pelab.lock").string() + " is a symbolic link"), std::string::npos)
      << r.err;
  expect_victim_unchanged(v);
}

// --resume with train.log replaced by a link (it is appended to, never rewritten): refused in one
// line, the victim untouched.
TEST_F(HardeningFiles, ResumeRefusesAPlantedLogLink) {
  write_file(dir_ / "tiny.yaml", pelab::testing::tiny_cli_yaml(dir_ / "runs"));
  const fs::path run = dir_ / "runs" / "tiny";
  Result r = pelab("train tiny.yaml --progress none --stop-after 2");
  ASSERT_EQ(r.rc, 0) << r.err;
  const fs::path v = victim("log_victim");
  fs::remove(run / "train.log");
  fs::create_symlink(v, run / "train.log");
  r = pelab("train --resume " + quote(run.string()) + " --progress none");
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_EQ(lines_with(r.err, "error"), 1u) << r.err;
  EXPECT_NE(r.err.find((run / "train.log").string() + " is a symbolic link"), std::string::npos)
      << r.err;
  expect_victim_unchanged(v);
}

// Two processes writing the same file at once (two `--report-only` runs): neither fails, the file
// is one of the two texts whole, no temporary is left. A shared fixed temporary made one rename
// fail ("No such file or directory").
TEST_F(HardeningFiles, TwoWritersOfOneFileNeverCollide) {
  const std::string path = (dir_ / "report.md").string();
  const std::string a(20000, 'a'), b(30000, 'b');
  std::vector<pid_t> pids;
  for (const std::string* text : {&a, &b}) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      try {
        for (int i = 0; i < 300; ++i) write_text_file(path, *text);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "%s\n", e.what());
        ::_exit(1);
      }
      ::_exit(0);
    }
    pids.push_back(pid);
  }
  for (pid_t pid : pids) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  const std::string text = slurp(path);
  EXPECT_TRUE(text == a || text == b) << text.size();
  EXPECT_TRUE(names_with(dir_, ".tmp").empty());
}

// ---------------- item 14: a failed write says why and leaves nothing behind ----------------

TEST_F(HardeningFiles, FailedWriteNamesTheReasonAndLeavesNoTemporary) {
  const std::string path = (dir_ / "eval.json").string();
  write_file(path, "old\n");
  const std::string msg =
      error_with_file_limit(1000, [&] { write_text_file(path, std::string(5000, 'x')); });
  EXPECT_EQ(msg, "cannot write " + path + ": " + std::strerror(EFBIG));
  EXPECT_EQ(slurp(path), "old\n");
  EXPECT_TRUE(names_with(dir_, ".tmp").empty());
}

}  // namespace
