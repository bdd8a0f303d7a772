// pelab — the files pelab writes and the gnuplot scripts it runs, with someone else's config or
// folder (issue 29, items 1, 2, 8, 9, 14): text reaching a gnuplot script only prints (backquotes,
// @, quotes, line breaks; a compare title and a config file named with a backquote, run through
// the real gnuplot), no write follows a symbolic link planted in a run folder (the lock, a
// temporary's name, train.log / metrics.jsonl, a checkpoint temporary), two writers of one file
// never collide, a failed write (RLIMIT_FSIZE on a child process, as on a full disk) names the
// system's reason and leaves no temporary, a PNG that gnuplot cut short (RLIMIT_FSIZE again) never
// replaces the good one, and plot-pe does not exit 0 when gnuplot fails.
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
#include <sstream>
#include <string>
#include <vector>

#include "train/checkpoint.h"
#include "train/evaluate.h"
#include "train/metrics.h"
#include "train/run_folder.h"
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

// Files (recursively under `dir`) that a hostile text's `touch PWNED...` would have created.
std::vector<std::string> pwned(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& p : names_with(dir, "PWNED"))
    if (fs::path(p).filename().string().rfind("PWNED", 0) == 0) out.push_back(p);
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
std::string tiny_png() {
  const unsigned char b[] = {
      0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 0x00, 0x00, 0x00, 0x0D, 0x49, 0x48,
      0x44, 0x52, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00,
      0x00, 0x1F, 0x15, 0xC4, 0x89, 0x00, 0x00, 0x00, 0x0A, 0x49, 0x44, 0x41, 0x54, 0x78,
      0x9C, 0x63, 0x00, 0x01, 0x00, 0x00, 0x05, 0x00, 0x01, 0x0D, 0x0A, 0x2D, 0xB4, 0x00,
      0x00, 0x00, 0x00, 0x49, 0x45, 0x4E, 0x44, 0xAE, 0x42, 0x60, 0x82};
  return std::string(reinterpret_cast<const char*>(b), sizeof b);
}

// ---------------- item 1 / 9: text in gnuplot scripts only prints ----------------

const char* kNoGnuplot = "gnuplot is not installed (tools/setup.sh installs it)";

// Texts that were live or broke the script: a backquoted command (run inside double quotes), a
// macro, quotes of both kinds ('''' after the old doubling: a parse error, item 9's empty greedy
// output), a backslash, a line break (it ended the command: the rest ran as a command of its own).
const std::vector<std::string> kHostile = {
    "x `touch PWNED_bq` y", "@m", "say \"hi\"", "it's", "output ''", "''''", "back\\slash\\",
    "$HOME", "two\nsystem 'touch PWNED_nl'", "tab\there", "UTF-8 – ± ‖", ""};

TEST_F(HardeningFiles, GnuplotQuotePrintsEveryTextLiterally) {
  for (const std::string& s : kHostile) {
    const std::string q = gnuplot_quote(s);
    EXPECT_EQ(q.find('`'), std::string::npos) << q;
    EXPECT_EQ(q.find('@'), std::string::npos) << q;
    EXPECT_EQ(q.find('\n'), std::string::npos) << q;
    EXPECT_EQ(q.find('\t'), std::string::npos) << q;
    EXPECT_EQ(q.front(), '"');
    EXPECT_EQ(q.back(), '"');
  }
  if (gnuplot_path().empty()) GTEST_SKIP() << kNoGnuplot;
  // gnuplot prints each text back exactly (print writes to stderr), runs nothing.
  std::string gp = "m = \"print 'MACRO RAN'\"\n", expected;
  for (const std::string& s : kHostile) {
    gp += "print " + gnuplot_quote(s) + "\n";
    expected += s + "\n";
  }
  write_file(dir_ / "p.gp", gp);
  const Result r = sh(quote(gnuplot_path()) + " p.gp");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.err, expected);
  EXPECT_TRUE(pwned(dir_).empty()) << pwned(dir_).front();
}

// A title, series names and the length name full of gnuplot syntax: write_report draws every plot
// (all whole PNGs) and runs no command.
TEST_F(HardeningFiles, ReportTextRunsNoCommandInGnuplot) {
  if (gnuplot_path().empty()) GTEST_SKIP() << kNoGnuplot;
  ReportInput in;
  in.title = "t `touch PWNED_title` \"q\" 'x' '''' @m $HOME";
  in.task_summary = "task";
  in.primary_metric = "exact_match";
  in.length_name = "length `touch PWNED_len`";
  in.train_min = 1;
  in.train_max = 4;
  in.train_range_text = "1–4 `touch PWNED_range`";
  in.seeds = {1, 2};
  const std::string a = "rope`touch PWNED_label`", b = "t5 '' @x";
  in.labels = {a, b};
  for (int64_t seed = 1; seed <= 2; ++seed)
    for (const std::string& l : in.labels) {
      in.rows.push_back(pelab::testing::result_row(l, seed, 4, 1, 0.9));
      in.rows.push_back(pelab::testing::result_row(l, seed, 8, 0, 0.4 + 0.1 * seed));
      LossCurve c;
      c.scheme = l;
      c.seed = seed;
      for (int s = 10; s <= 50; s += 10) c.points.emplace_back(s, 1.0 / s);
      in.curves.push_back(c);
    }
  const fs::path out = dir_ / "report";
  const ReportFiles f = write_report(out.string(), in, true);
  EXPECT_TRUE(pwned(dir_).empty()) << pwned(dir_).front();
  EXPECT_EQ(f.plot_note, "");
  EXPECT_EQ(f.pngs.size(), 3u);
  for (const auto& p : f.pngs) EXPECT_TRUE(is_png_file(p)) << p;
  const std::string gp = slurp(out / "exact_match_vs_length.gp");
  EXPECT_EQ(gp.find('`'), std::string::npos) << gp;
  EXPECT_NE(gp.find("t \\140touch PWNED_title\\140 \\\"q\\\" 'x' '''' \\100m \\044HOME"),
            std::string::npos)
      << gp;
  EXPECT_NE(gp.find("rope\\140touch PWNED_label\\140"), std::string::npos) << gp;
}

// The default title is the config file's stem: a config file named with a backquoted command.
TEST_F(HardeningFiles, ConfigFileNamedWithABackquoteRunsNoCommand) {
  if (gnuplot_path().empty()) GTEST_SKIP() << kNoGnuplot;
  std::string yaml = pelab::testing::tiny_compare_yaml("[2, 6]", 4);
  yaml.replace(yaml.find("  title: tiny\n"), 14, "");
  yaml.replace(yaml.find("seeds: [1, 2]"), 13, "seeds: [1]");
  const std::string name = "q`touch PWNED_stem`.yaml";
  write_file(dir_ / name, yaml + "    - rope\n");
  const Result c = pelab("compare " + quote(name) + " --out rep --progress none");
  EXPECT_EQ(c.rc, 0) << c.err;
  EXPECT_TRUE(pwned(dir_).empty()) << pwned(dir_).front();
  const std::string gp = slurp(dir_ / "rep" / "exact_match_vs_length.gp");
  EXPECT_NE(gp.find("q\\140touch PWNED_stem\\140"), std::string::npos) << gp;
  EXPECT_TRUE(is_png_file((dir_ / "rep" / "exact_match_vs_length.png").string()));
}

// plot-pe --run on a model whose greedy output is empty (a 4-step run: for most one-symbol inputs
// it answers <eos> at once): the titles hold "output ''", which the old '' doubling made ''''
// (a gnuplot parse error: no PNG, or a 0-byte one, and exit 0). Every picture is drawn whole.
TEST_F(HardeningFiles, PlotPeRunWithAnEmptyGreedyOutputDrawsEveryPicture) {
  if (gnuplot_path().empty()) GTEST_SKIP() << kNoGnuplot;
  write_file(dir_ / "tiny.yaml", pelab::testing::tiny_cli_yaml(dir_ / "runs"));
  ASSERT_EQ(pelab("train tiny.yaml --progress none").rc, 0);
  int empty_outputs = 0;
  for (const char* input : {"0", "1", "2", "3"}) {
    const std::string out = std::string("pe_") + input;
    const Result r =
        pelab("plot-pe --run runs/tiny --run-only --out " + out + " --input " + input);
    EXPECT_EQ(r.rc, 0) << r.out << r.err;
    const std::string gp = slurp(dir_ / out / "attention_decoder_self_layer0.gp");
    if (gp.find("output '')\"") != std::string::npos) ++empty_outputs;
    EXPECT_EQ(names_with(dir_ / out, ".png").size(), 5u) << r.out;
    for (const auto& p : names_with(dir_ / out, ".png")) EXPECT_TRUE(is_png_file(p)) << p;
  }
  EXPECT_GT(empty_outputs, 0) << "no input gave an empty greedy output: the case is not tested";
}

// plot-pe with a gnuplot that fails every drawing (as a script gnuplot cannot parse did): the
// command says so in one line and exits non-zero, with no empty PNG left.
TEST_F(HardeningFiles, PlotPeDoesNotExitZeroWhenGnuplotFails) {
  const fs::path fake = dir_ / "fake gnuplot's";
  write_file(fake,
             "#!/bin/sh\n[ \"$1\" = -e ] && exit 0\n"
             "echo \"line 3: unexpected token\" >&2\nexit 1\n");
  fs::permissions(fake, fs::perms::owner_all);
  const Result r = pelab("plot-pe --out pe", "PELAB_GNUPLOT=" + quote(fake.string()));
  EXPECT_EQ(r.rc, 1) << r.out << r.err;
  EXPECT_EQ(lines_with(r.err, "error"), 1u) << r.err;
  EXPECT_NE(r.err.find("plot-pe: gnuplot could not draw"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("unexpected token"), std::string::npos) << r.err;
  EXPECT_TRUE(names_with(dir_ / "pe", ".png").empty());
  EXPECT_TRUE(names_with(dir_ / "pe", ".tmp").empty());
}

// PELAB_GNUPLOT with an apostrophe in its path: the terminal probe still runs it (shell quoting),
// so the scripts get the terminal it names. (A fake gnuplot: pngcairo, a whole PNG per drawing.)
TEST_F(HardeningFiles, GnuplotPathWithAnApostropheIsProbed) {
  write_file(dir_ / "tiny.png", tiny_png());
  const fs::path fake = dir_ / "it's gnuplot";
  write_file(fake, "#!/bin/sh\n[ \"$1\" = -e ] && { echo 'pngcairo  Cairo PNG'; exit 0; }\n"
                   "[ \"$1\" = -c ] && cp " + quote((dir_ / "tiny.png").string()) +
                   " \"$3\"\nexit 0\n");
  fs::permissions(fake, fs::perms::owner_all);
  const Result r = pelab("plot-pe --out pe", "PELAB_GNUPLOT=" + quote(fake.string()));
  EXPECT_EQ(r.rc, 0) << r.err;
  const std::string gp = slurp(dir_ / "pe" / "rope_rotation.gp");
  EXPECT_NE(gp.find("set terminal pngcairo"), std::string::npos) << gp;
}

// ---------------- item 8: a PNG cut short never replaces the good one ----------------

TEST_F(HardeningFiles, IsPngFileChecksTheWholeFile) {
  const std::string png = tiny_png();
  write_file(dir_ / "a.png", png);
  std::string why;
  EXPECT_TRUE(is_png_file((dir_ / "a.png").string(), &why)) << why;
  for (size_t n = 0; n < png.size(); ++n) {  // every cut, the 8-byte signature alone included
    write_file(dir_ / "a.png", png.substr(0, n));
    EXPECT_FALSE(is_png_file((dir_ / "a.png").string(), &why)) << n;
  }
  std::string flipped = png;
  flipped[45] ^= 1;  // a byte of IDAT's data: its CRC no longer matches
  write_file(dir_ / "a.png", flipped);
  EXPECT_FALSE(is_png_file((dir_ / "a.png").string(), &why));
  EXPECT_NE(why.find("IDAT"), std::string::npos) << why;
  write_file(dir_ / "a.png", png + "x");
  EXPECT_FALSE(is_png_file((dir_ / "a.png").string(), &why));
}

TEST_F(HardeningFiles, PngCutShortKeepsTheGoodOneAndNamesIt) {
  if (gnuplot_path().empty()) GTEST_SKIP() << kNoGnuplot;
  const std::string png = (dir_ / "p.png").string();
  const std::string script = "set terminal png size 1200,800 noenhanced\nset title " +
                             gnuplot_quote("p") + "\nplot sin(x), cos(x), x*x\n";
  std::string err;
  ASSERT_TRUE(run_gnuplot(png, script, &err)) << err;
  ASSERT_TRUE(is_png_file(png));
  const std::string good = slurp(png);
  ASSERT_GT(good.size(), 6000u);
  // Files limited to 4 KiB (the script fits, the picture does not); gnuplot exits 0.
  const std::string msg = error_with_file_limit(4096, [&] {
    std::string e;
    if (!run_gnuplot(png, script + "set title " + gnuplot_quote("again") + "\nreplot\n", &e))
      throw Error("returned false: " + e);
  });
  EXPECT_NE(msg.find("cannot write " + png + ": gnuplot's picture is not a whole PNG"),
            std::string::npos)
      << msg;
  EXPECT_EQ(slurp(png), good);
  EXPECT_TRUE(names_with(dir_, ".tmp").empty());
}

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

// `pelab compare --jobs 2` with a run's compare.log (its child's output, appended) replaced by a
// link: refused in one line naming it, the victim untouched.
TEST_F(HardeningFiles, CompareJobsRefuseAPlantedChildLogLink) {
  std::string yaml = pelab::testing::tiny_compare_yaml("[2, 6]", 4);
  yaml.replace(yaml.find("seeds: [1, 2]"), 13, "seeds: [1]");
  write_file(dir_ / "c.yaml", yaml + "    - rope\n    - t5\n");
  const fs::path run = dir_ / "rep" / "runs" / "rope_seed1";
  fs::create_directories(run);
  const fs::path v = victim("log_victim");
  fs::create_symlink(v, run / "compare.log");
  const Result r = pelab("compare c.yaml --out rep --jobs 2 --no-plots --progress none");
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_EQ(lines_with(r.err, "error"), 1u) << r.err;
  EXPECT_NE(r.err.find("rep/runs/rope_seed1/compare.log is a symbolic link"), std::string::npos)
      << r.err;
  expect_victim_unchanged(v);
}

// ---------------- #51 item 12: text in report.md only prints ----------------

// md_text / md_code / md_fence: what markdown would act on is escaped, what a reader would not see
// (controls, bidirectional overrides, invalid UTF-8) is replaced by U+FFFD, UTF-8 text is kept.
TEST_F(HardeningFiles, MarkdownHelpersOnlyPrint) {
  const std::string fffd = "\xEF\xBF\xBD";
  EXPECT_EQ(md_text("a|b\nc\td"), "a\\|b c d");
  EXPECT_EQ(md_text("bell\a v\xE2\x80\xAEm \xFF"), "bell" + fffd + " v" + fffd + "m " + fffd);
  EXPECT_EQ(md_text("![x](http://e/i.png) <img src=x> &#x202E; `c` *e* ~s~ \\"),
            "!\\[x\\](http://e/i.png) \\<img src=x> \\&#x202E; \\`c\\` \\*e\\* \\~s\\~ \\\\");
  EXPECT_EQ(md_text("rope_seed1, n/a (> max_positions) – ± é"),
            "rope_seed1, n/a (> max_positions) – ± é");
  EXPECT_EQ(md_code("train.lr=0.001"), "`train.lr=0.001`");
  EXPECT_EQ(md_code("a``b|c\nd"), "```a``b\\|c d```");
  EXPECT_EQ(md_code("`x"), "`` `x ``");
  EXPECT_EQ(md_fence("a: 1\n```\n# x\r\n", "yaml"), "````yaml\na: 1\n```\n# x\n````\n");
  EXPECT_EQ(md_fence("v\xE2\x80\xAEm\a", "sh"), "```sh\nv" + fffd + "m" + fffd + "\n```\n");
}

// report.md of a comparison whose title and split names (a test file's stem) hold a line break, a
// `|`, BEL and U+202E: no line is injected, every table keeps its columns, no control or
// bidirectional character lands in the file, and a config holding a ``` line stays in its block.
// Injected: those texts in a ReportInput; they once landed raw ("# injected" a heading of its own).
TEST_F(HardeningFiles, ReportTextCannotInjectMarkdown) {
  ReportInput in;
  in.title = "T\n# injected | x \a v\xE2\x80\xAEm";
  in.task_summary = "Task.";
  in.primary_metric = "exact_match";
  in.length_name = "task length";
  in.train_range_text = "files";
  in.seeds = {1};
  in.labels = {"rope"};
  for (const std::string split : {"a|b\n## injected", "v\xE2\x80\xAEm\a"}) {
    ResultRow r = pelab::testing::result_row("rope", 1, 0, -1, 0.5);
    r.split = split;
    r.length = 0;
    in.rows.push_back(r);
  }
  in.command = "pelab compare c.yaml";
  in.config_text = "compare:\n  title: x\n```\n# injected from the config\n";
  in.resolved_yaml = "task: {}\n";
  write_report(dir_.string(), in, false);
  const std::string md = slurp(dir_ / "report.md");
  EXPECT_EQ(md.find('\a'), std::string::npos);
  EXPECT_EQ(md.find("\xE2\x80\xAE"), std::string::npos);
  // Outside fenced blocks no line starts with injected markup; inside, the config stays whole.
  std::istringstream lines(md);
  std::string fence;  // the open block's fence, "" outside
  for (std::string l; std::getline(lines, l);) {
    const size_t ticks = l.find_first_not_of('`');
    if (fence.empty() && l.rfind("```", 0) == 0) {
      fence = l.substr(0, ticks);
      continue;
    }
    if (!fence.empty()) {
      if (ticks == std::string::npos && l.size() >= fence.size()) fence.clear();
      continue;
    }
    EXPECT_NE(l.rfind("# injected", 0), 0u) << l;
    EXPECT_NE(l.rfind("## injected", 0), 0u) << l;
  }
  EXPECT_TRUE(fence.empty()) << md;
  // The exact-match table: a header of scheme + two split columns, whatever the names hold.
  const size_t t = md.find("| scheme |", md.find("## exact match"));
  ASSERT_NE(t, std::string::npos) << md;
  const std::string header = md.substr(t, md.find('\n', t) - t);
  size_t bars = 0;
  for (size_t i = 0; i < header.size(); ++i) bars += header[i] == '|' && (i == 0 || header[i - 1] != '\\');
  EXPECT_EQ(bars, 4u) << header;
  EXPECT_NE(header.find("a\\|b ## injected"), std::string::npos) << header;
  EXPECT_NE(md.find("# T # injected \\| x \xEF\xBF\xBD v\xEF\xBF\xBDm\n"), std::string::npos) << md;
  EXPECT_NE(md.find("````yaml\ncompare:\n  title: x\n```\n# injected from the config\n````\n"),
            std::string::npos)
      << md;
}

// ---------------- #51 item 13: CSV cells never become formulas ----------------

// csv_field, the one writer of a CSV text cell: a cell starting with =, +, -, @, a tab or a CR that
// is not a plain number gets a leading ' (one starting with ' too, so csv_unfield gives it back);
// numbers stay numbers. Injected: test-file stems that start with =, +, -, @ as split names, which
// results.csv, table_<metric>.csv, the plots' .csv and eval.csv once wrote verbatim.
TEST_F(HardeningFiles, CsvTextCellsNeverBecomeFormulas) {
  const std::vector<std::pair<std::string, std::string>> cells = {
      {"=HYPERLINK(\"http://e\")", "\"'=HYPERLINK(\"\"http://e\"\")\""},
      {"+cmd", "'+cmd"},          {"-cmd", "'-cmd"},       {"@SUM(A1)", "'@SUM(A1)"},
      {"\tx", "'\tx"},            {"\rx", "\"'\rx\""},     {"'q", "''q"},
      {"-0.5", "-0.5"},           {"+12.0", "+12.0"},      {"1e-3", "1e-3"},
      {"len_2", "len_2"},         {"a,b", "\"a,b\""},      {"", ""}};
  for (const auto& [text, cell] : cells) {
    EXPECT_EQ(csv_field(text), cell) << text;
    const std::string unquoted =
        cell.size() > 1 && cell.front() == '"' ? cell.substr(1, cell.size() - 2) : cell;
    std::string undoubled;
    for (size_t i = 0; i < unquoted.size(); ++i) {
      undoubled += unquoted[i];
      if (unquoted[i] == '"') ++i;
    }
    EXPECT_EQ(csv_unfield(undoubled), text) << cell;
  }
  // results.csv of ordinary names is what it always was, byte for byte; hostile ones read back.
  ResultRow plain = pelab::testing::result_row("rope", 1, 2, 1, 0.5);
  EXPECT_EQ(results_csv({plain}).substr(results_csv({}).size()),
            "rope,,1,len_2,2,true,ok," + csv_number(plain.loss) + "," +
                csv_number(plain.perplexity) + ",0.5,0.5,,,,\n");
  std::vector<ResultRow> rows;
  int64_t length = 1;
  for (const std::string split : {"=1+1", "+cmd", "-cmd", "@x", "'q"}) {
    ResultRow r = pelab::testing::result_row("rope", 1, ++length, 0, 0.5);
    r.split = split;
    rows.push_back(r);
  }
  const std::string csv = results_csv(rows);
  for (const std::string cell : {",'=1+1,", ",'+cmd,", ",'-cmd,", ",'@x,", ",''q,"})
    EXPECT_NE(csv.find(cell), std::string::npos) << cell << "\n" << csv;
  const std::vector<ResultRow> back = parse_results_csv(csv, "results.csv");
  ASSERT_EQ(back.size(), rows.size());
  for (size_t i = 0; i < rows.size(); ++i) EXPECT_EQ(back[i].split, rows[i].split);
  // Every CSV of a report, and eval.csv.
  ReportInput in;
  in.title = "t";
  in.primary_metric = "exact_match";
  in.length_name = "task length";
  in.seeds = {1};
  in.labels = {"rope"};
  in.rows = rows;
  write_report(dir_.string(), in, false);
  EvalResult e;
  e.split = "=cmd";
  write_eval_files(dir_.string(), {e}, 1, "checkpoints/step_1.h5");
  for (const char* f : {"results.csv", "table_exact_match.csv", "exact_match_vs_length.csv",
                        "eval.csv"}) {
    const std::string text = slurp(dir_ / f);
    std::istringstream lines(text);
    for (std::string l; std::getline(lines, l);)
      for (size_t b = 0; b <= l.size();) {
        const size_t c = std::min(l.find(',', b), l.size());
        const std::string cell = l.substr(b, c - b);
        EXPECT_TRUE(cell.empty() || std::string("=+-@").find(cell[0]) == std::string::npos)
            << f << ": " << l;
        b = c + 1;
      }
    EXPECT_NE(text.find("'"), std::string::npos) << f << ": " << text;
  }
}

// A folder of a run's own replaced by a link to a folder elsewhere (#51 item 2): nothing is read,
// written or deleted through it. `pelab compare` with a run's compare_eval/ planted as a link:
// refused in one line naming it, nothing written into the link's target (base.csv was), nor a
// cache there read (the run's own base.csv, moved to the target, was published from it).
TEST_F(HardeningFiles, CompareRefusesAPlantedCompareEvalLink) {
  std::string yaml = pelab::testing::tiny_compare_yaml("[2, 6]", 4);
  yaml.replace(yaml.find("seeds: [1, 2]"), 13, "seeds: [1]");
  write_file(dir_ / "c.yaml", yaml + "    - rope\n");
  Result r = pelab("compare c.yaml --out rep --jobs 1 --no-plots --progress none");
  ASSERT_EQ(r.rc, 0) << r.err;
  const fs::path run = dir_ / "rep" / "runs" / "rope_seed1";
  fs::create_directories(dir_ / "elsewhere");
  const fs::path v = victim("elsewhere/notes.txt");
  fs::remove_all(run / "compare_eval");
  fs::create_directory_symlink(dir_ / "elsewhere", run / "compare_eval");
  r = pelab("compare c.yaml --out rep --jobs 1 --no-plots --progress none");
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_EQ(lines_with(r.err, "error"), 1u) << r.err;
  EXPECT_NE(r.err.find("rep/runs/rope_seed1/compare_eval is a symbolic link; pelab never writes "
                       "through one"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_ / "elsewhere"), fs::directory_iterator()), 1);
  EXPECT_EQ(slurp(v), "precious elsewhere/notes.txt\n");
  // The link's target holding a cache that would be accepted: not read through the link either.
  fs::remove(run / "compare_eval");
  ASSERT_EQ(pelab("compare c.yaml --out rep --jobs 1 --no-plots --progress none").rc, 0);
  fs::rename(run / "compare_eval" / "base.csv", dir_ / "elsewhere" / "base.csv");
  fs::remove(run / "compare_eval");
  fs::create_directory_symlink(dir_ / "elsewhere", run / "compare_eval");
  fs::remove(dir_ / "rep" / "report.md");
  r = pelab("compare c.yaml --out rep --jobs 1 --no-plots --progress none");
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_NE(r.err.find("rep/runs/rope_seed1/compare_eval is a symbolic link"), std::string::npos)
      << r.err;
  EXPECT_FALSE(fs::exists(dir_ / "rep" / "report.md"));
  fs::remove(run / "compare_eval");
  // A run folder itself planted as a link (training it afresh would clear the target's files).
  fs::rename(run, dir_ / "moved");
  fs::create_directory_symlink(dir_ / "moved", run);
  const auto before = names_with(dir_ / "moved", "");
  r = pelab("compare c.yaml --out rep --jobs 1 --no-plots --progress none --retrain");
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_NE(r.err.find("rep/runs/rope_seed1 is a symbolic link"), std::string::npos) << r.err;
  EXPECT_EQ(names_with(dir_ / "moved", ""), before);
}

// --resume of a run whose checkpoints/ is a link to a folder elsewhere: refused in one line before
// anything in it is read, written or deleted. It once wrote step_4.h5 and last.h5 there, and its
// pruning deleted files pelab never wrote (step_5.h5, and an older step_10.h5 it wrote over).
TEST_F(HardeningFiles, ResumeRefusesAPlantedCheckpointsLink) {
  write_file(dir_ / "tiny.yaml", pelab::testing::tiny_cli_yaml(dir_ / "runs"));
  const fs::path run = dir_ / "runs" / "tiny";
  Result r = pelab("train tiny.yaml --progress none --stop-after 2 --set train.keep_checkpoints=1");
  ASSERT_EQ(r.rc, 0) << r.err;
  fs::rename(run / "checkpoints", dir_ / "elsewhere");
  const fs::path v5 = victim("elsewhere/step_5.h5"), v10 = victim("elsewhere/step_10.h5");
  fs::create_directory_symlink(dir_ / "elsewhere", run / "checkpoints");
  const auto before = names_with(dir_ / "elsewhere", "");
  r = pelab("train --resume " + quote(run.string()) + " --progress none --set train.steps=12");
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_EQ(lines_with(r.err, "error"), 1u) << r.err;
  EXPECT_NE(r.err.find((run / "checkpoints").string() + " is a symbolic link"), std::string::npos)
      << r.err;
  EXPECT_EQ(names_with(dir_ / "elsewhere", ""), before);
  EXPECT_EQ(slurp(v5), "precious elsewhere/step_5.h5\n");
  EXPECT_EQ(slurp(v10), "precious elsewhere/step_10.h5\n");
}

// Pruning deletes only the checkpoints pelab wrote (checkpoints/written.tsv), never a file put in
// checkpoints/ by someone else, and a resume that would have to delete such a file is refused
// before anything changes. Injected: a step_1.h5 planted next to a run's own checkpoints (the
// rotation of train.keep_checkpoints deleted it), then a step_5.h5 and a step_10.h5 newer than the
// checkpoint a resume starts from (its removal of the discarded future deleted them).
// A kill can land at any instant of a save. HardeningRun.ASecondProcessCannotUseALockedRunDirectory
// once killed a run between a checkpoint's rename and its note in written.tsv, and the resume then
// refused the run's own newer step_15.h5. The note is now made on the finished temporary, before
// the rename: at no instant does a checkpoint of pelab's exist under its name without its proof,
// and a note whose rename never happened proves nothing for a file put there later.
TEST_F(HardeningFiles, ACheckpointIsProvenFromTheMomentItHasItsName) {
  const fs::path ck = dir_ / "run" / "checkpoints";
  fs::create_directories(ck);
  CheckpointData d;
  d.step = 3;
  d.scheme = "none";
  d.arch = "decoder";
  d.vocab = {"<pad>", "<bos>", "<eos>", "a"};
  const std::string path = (ck / "step_3.h5").string();
  bool noted = false;
  save_checkpoint(path, d, [&](const std::string& tmp) {
    EXPECT_TRUE(fs::exists(tmp));
    EXPECT_FALSE(fs::exists(path)) << "published before its proof";
    note_written_checkpoint(path, tmp);
    noted = true;
  });
  EXPECT_TRUE(noted);
  EXPECT_TRUE(wrote_checkpoint(path));  // the rename kept what the note recorded
  EXPECT_EQ(load_checkpoint(path).step, 3);
  // Killed before the rename (the hook throws): nothing published, the temporary removed, and a
  // file planted under the name later is not proven by the note.
  const std::string path4 = (ck / "step_4.h5").string();
  d.step = 4;
  EXPECT_THROW(save_checkpoint(path4, d,
                               [&](const std::string& tmp) {
                                 note_written_checkpoint(path4, tmp);
                                 throw Error("killed before the rename");
                               }),
               Error);
  EXPECT_FALSE(fs::exists(path4));
  for (const auto& e : fs::directory_iterator(ck))
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();
  write_file(path4, "planted step_4.h5\n");
  EXPECT_FALSE(wrote_checkpoint(path4));
  EXPECT_TRUE(wrote_checkpoint(path));
}

TEST_F(HardeningFiles, PruningDeletesOnlyCheckpointsPelabWrote) {
  write_file(dir_ / "tiny.yaml", pelab::testing::tiny_cli_yaml(dir_ / "runs"));
  const fs::path run = dir_ / "runs" / "tiny";
  const fs::path ck = run / "checkpoints";
  Result r = pelab("train tiny.yaml --progress none --stop-after 2 --set train.keep_checkpoints=1");
  ASSERT_EQ(r.rc, 0) << r.err;
  ASSERT_TRUE(fs::exists(ck / "step_2.h5"));
  const fs::path planted = write_file(ck / "step_1.h5", "precious step_1.h5\n");
  r = pelab("train --resume " + quote(run.string()) + " --progress none");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(fs::exists(ck / "step_4.h5"));
  EXPECT_FALSE(fs::exists(ck / "step_2.h5"));  // its own older checkpoint: rotated out
  expect_victim_unchanged(planted);              // not pelab's: kept
  EXPECT_NE(slurp(ck / "written.tsv").find("step_4.h5\t"), std::string::npos);
  EXPECT_EQ(slurp(ck / "written.tsv").find("step_2.h5\t"), std::string::npos);  // compacted
  // A resume from step 4 with a newer step_5.h5 and step_10.h5 it did not write: refused, nothing
  // changed.
  const fs::path future = write_file(ck / "step_5.h5", "precious step_5.h5\n");
  const fs::path future10 = write_file(ck / "step_10.h5", "precious step_10.h5\n");
  fs::copy_file(ck / "step_4.h5", dir_ / "step_4.copy");
  const std::string config = slurp(run / "config.yaml");
  r = pelab("train --resume " + quote((ck / "step_4.h5").string()) +
            " --progress none --set train.steps=6");
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_EQ(lines_with(r.err, "error"), 1u) << r.err;
  EXPECT_NE(r.err.find((ck / "step_5.h5").string() +
                       " is newer than the checkpoint resumed from (step 4) and would be deleted, "
                       "but pelab cannot tell that it wrote it"),
            std::string::npos)
      << r.err;
  expect_victim_unchanged(future);
  expect_victim_unchanged(future10);
  EXPECT_EQ(slurp(run / "config.yaml"), config);
  EXPECT_EQ(slurp(ck / "step_4.h5"), slurp(dir_ / "step_4.copy"));
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
