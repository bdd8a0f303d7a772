// pelab — tests of records.tar.xz (train/study/run_record.h, train/study/tar_xz.h): a comparison
// folder's run records in one xz-compressed tar file, written by `pelab compare --archive` and read
// in place of runs/ by --merge, reuse and --report-only; hostile archives (links, names leaving the
// archive, huge declared sizes, too many members, truncated or corrupt streams, an xz header asking
// for too much memory) refused with one line naming the archive and member, nothing written
// outside OUT. The comparisons are tinycompare_yaml's (1+1 layers, d_model 16, 12 steps), run in
// process through the command line (run_cli) with --jobs 1.
#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <lzma.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "tests/test_util.h"
#include "train/study/run_record.h"
#include "train/study/tar_xz.h"

namespace fs = std::filesystem;
using namespace pelab;

namespace {

using pelab::testing::file_tree;
using pelab::testing::results_without_timing;
using pelab::testing::slurp;

const char* const kRuns[] = {"rope_seed1", "rope_seed2", "t5_seed1", "t5_seed2"};

// A tar file (libarchive, pax) of the entries `add` writes.
std::string tar_of(const std::function<void(struct archive*)>& add) {
  std::string tar;
  struct archive* w = archive_write_new();
  archive_write_set_format_pax_restricted(w);
  auto append = [](struct archive*, void* out, const void* buf, size_t n) -> la_ssize_t {
    static_cast<std::string*>(out)->append(static_cast<const char*>(buf), n);
    return static_cast<la_ssize_t>(n);
  };
  EXPECT_EQ(archive_write_open(w, &tar, nullptr, append, nullptr), ARCHIVE_OK);
  add(w);
  EXPECT_EQ(archive_write_close(w), ARCHIVE_OK);
  archive_write_free(w);
  return tar;
}


// One entry: a regular file with `data`, or (type AE_IFLNK / hard link) a link to `data`.
void add_entry(struct archive* w, const std::string& name, const std::string& data,
               unsigned type = AE_IFREG, bool hardlink = false) {
  struct archive_entry* e = archive_entry_new();
  archive_entry_set_pathname(e, name.c_str());
  archive_entry_set_filetype(e, type);
  archive_entry_set_perm(e, 0644);
  if (hardlink) {
    archive_entry_set_hardlink(e, data.c_str());
    archive_entry_set_size(e, 0);
  } else if (type == AE_IFLNK) {
    archive_entry_set_symlink(e, data.c_str());
    archive_entry_set_size(e, 0);
  } else {
    archive_entry_set_size(e, static_cast<la_int64_t>(data.size()));
  }
  EXPECT_EQ(archive_write_header(w, e), ARCHIVE_OK) << name;
  if (type == AE_IFREG && !hardlink) {
    EXPECT_EQ(archive_write_data(w, data.data(), data.size()),
              static_cast<la_ssize_t>(data.size()));
  }
  archive_entry_free(e);
}

// A ustar header block for a regular file `name` declaring `size_octal` bytes (11 octal digits),
// with no data after it: what a hand-made archive claiming a huge member looks like.
std::string ustar_header(const std::string& name, const std::string& size_octal) {
  std::string h(512, '\0');
  auto put = [&](size_t at, const std::string& v) { h.replace(at, v.size(), v); };
  put(0, name);
  put(100, "0000644");
  put(108, "0000000");
  put(116, "0000000");
  put(124, size_octal);
  put(136, "00000000000");
  put(156, "0");
  put(257, std::string("ustar\0", 6));
  put(263, "00");
  put(148, "        ");
  unsigned sum = 0;
  for (unsigned char c : h) sum += c;
  char chk[8];
  std::snprintf(chk, sizeof chk, "%06o", sum);
  put(148, std::string(chk, 6) + std::string("\0 ", 2));
  return h;
}

// `xz` (one stream from xz_bytes) with its first block's LZMA2 dictionary declared as `dict` bytes
// (the block header re-encoded, its CRC32 with it): a stream whose decoder would need that much.
std::string with_dictionary(std::string xz, uint32_t dict) {
  auto* p = reinterpret_cast<uint8_t*>(&xz[0]);
  lzma_filter filters[LZMA_FILTERS_MAX + 1];
  lzma_block block{};
  block.version = 0;
  block.check = LZMA_CHECK_CRC64;
  block.filters = filters;
  block.header_size = lzma_block_header_size_decode(p[12]);  // after the 12-byte stream header
  EXPECT_EQ(lzma_block_header_decode(&block, nullptr, p + 12), LZMA_OK);
  const uint32_t size = block.header_size;
  static_cast<lzma_options_lzma*>(filters[0].options)->dict_size = dict;
  EXPECT_EQ(lzma_block_header_size(&block), LZMA_OK);
  EXPECT_EQ(block.header_size, size);
  EXPECT_EQ(lzma_block_header_encode(&block, p + 12), LZMA_OK);
  for (size_t i = 0; filters[i].id != LZMA_VLI_UNKNOWN; ++i) std::free(filters[i].options);
  return xz;
}

// `xz` (one stream of one block, from xz_bytes) with a bit of its block's CRC64 flipped: every
// byte decodes, and only the integrity check at the stream's end can tell.
std::string with_bad_check(std::string xz) {
  lzma_stream_flags footer;
  EXPECT_EQ(lzma_stream_footer_decode(
                &footer, reinterpret_cast<const uint8_t*>(xz.data()) + xz.size() - 12),
            LZMA_OK);
  const size_t check = xz.size() - 12 - footer.backward_size - 8;  // before the index
  xz[check] = static_cast<char>(xz[check] ^ 1);
  return xz;
}

// The members of the archive file `path` read with `limits`, every name accepted.
std::vector<TarMember> read_members(const fs::path& path, const TarLimits& limits = {}) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  EXPECT_GE(fd, 0) << path;
  try {
    auto m = read_tar_xz(fd, path.string(), limits,
                         [](const std::string&, bool) { return std::string(); });
    ::close(fd);
    return m;
  } catch (...) {
    ::close(fd);
    throw;
  }
}

class RecordArchiveTest : public pelab::testing::TinyCompareTest {
 protected:
  RecordArchiveTest() : TinyCompareTest("pelab_record_archive") {}

  // dir_/<folder>/records.tar.xz holding `bytes` (and nothing else in the folder).
  fs::path publish(const std::string& folder, const std::string& bytes) {
    fs::create_directories(dir_ / folder);
    const fs::path p = dir_ / folder / records_archive_file();
    pelab::testing::write_file(p, bytes);
    return p;
  }
};

// --archive writes records.tar.xz beside the report: each finished run's record files verbatim,
// without the derived metrics.csv, eval.csv and train.log, the same bytes when written again. A
// folder holding only that file then stands for its runs: --merge gathers them into the same
// results.csv and tables as the folder's (nothing written into it), --report-only in place and a
// plain comparison (reuse) read them, training nothing; --plan names them.
TEST_F(RecordArchiveTest, ArchiveStandsForTheRunsInMergeReuseAndReportOnly) {
  const std::string cfg = config();
  ASSERT_EQ(compare(cfg, {"--out", at("whole"), "--archive"}), 0) << err_;
  const fs::path archive = dir_ / "whole" / "records.tar.xz";
  EXPECT_NE(err_.find(archive.string() + ": 4 run records, "), std::string::npos) << err_;
  std::set<std::string> names;
  for (const auto& m : read_members(archive)) {
    names.insert(m.name);
    EXPECT_EQ(m.data, slurp(dir_ / "whole" / m.name)) << m.name;  // verbatim
  }
  std::set<std::string> want;
  for (const char* run : kRuns)
    for (const char* f : {"config.yaml", "record.json", "eval.json", "metrics.jsonl",
                          "compare_eval/base.csv"})
      want.insert(std::string("runs/") + run + "/" + f);
  EXPECT_EQ(names, want);
  for (const char* derived : {"metrics.csv", "eval.csv", "train.log"})
    EXPECT_TRUE(fs::exists(dir_ / "whole" / "runs" / "rope_seed1" / derived)) << derived;
  const std::string bytes = slurp(archive);
  ASSERT_EQ(compare(cfg, {"--out", at("whole"), "--report-only", "--archive"}), 0) << err_;
  EXPECT_EQ(slurp(archive), bytes);

  const auto whole = results_without_timing(dir_ / "whole" / "results.csv");
  ASSERT_EQ(whole.size(), 4u * 3u);
  auto same_report = [&](const std::string& folder) {
    EXPECT_EQ(results_csv(results_without_timing(dir_ / folder / "results.csv")),
              results_csv(whole))
        << folder;
    for (const char* t : {"table_exact_match.csv", "table_token_accuracy.csv"})
      EXPECT_EQ(slurp(dir_ / folder / t), slurp(dir_ / "whole" / t)) << folder << "/" << t;
  };
  // --merge of a folder holding only the archive.
  publish("pub", bytes);
  const auto pub_before = file_tree(dir_ / "pub");
  ASSERT_EQ(compare(cfg, {"--merge", at("pub"), "--out", at("merged")}), 0) << err_;
  EXPECT_NE(err_.find("4 runs from " + at("pub")), std::string::npos) << err_;
  EXPECT_EQ(err_.find("training"), std::string::npos) << err_;
  same_report("merged");
  EXPECT_EQ(file_tree(dir_ / "pub"), pub_before);
  // --report-only in a folder holding only the archive: unpacked into its runs/, then reported.
  publish("inplace", bytes);
  ASSERT_EQ(compare(cfg, {"--out", at("inplace"), "--report-only"}), 0) << err_;
  EXPECT_NE(err_.find("4 run records unpacked from " + at("inplace") + "/records.tar.xz"),
            std::string::npos)
      << err_;
  same_report("inplace");
  EXPECT_FALSE(fs::exists(dir_ / "inplace" / "runs" / "rope_seed1" / "train.log"));
  // Reuse: the comparison itself finds its runs in the archive and trains none of them.
  publish("reuse", bytes);
  ASSERT_EQ(compare(cfg, {"--out", at("reuse"), "--plan"}), 0) << err_;
  EXPECT_NE(out_.find("\n    1  rope_seed1 "), std::string::npos) << out_;
  EXPECT_NE(out_.find("  in records.tar.xz (unpacked and checked when run)\n"), std::string::npos)
      << out_;
  ASSERT_EQ(compare(cfg, {"--out", at("reuse")}), 0) << err_;
  EXPECT_NE(err_.find("[1/4] rope seed 1: finished run reused (" + at("reuse") +
                      "/runs/rope_seed1, its record: no checkpoints)"),
            std::string::npos)
      << err_;
  EXPECT_EQ(err_.find("training"), std::string::npos) << err_;
  same_report("reuse");
  // A run folder of its own wins over the archive's copy, which is unpacked only where runs/ has
  // no folder of that run.
  const std::string marker = write("reuse/runs/t5_seed2/marker", "own\n");
  fs::remove_all(dir_ / "reuse" / "runs" / "rope_seed2");
  ASSERT_EQ(compare(cfg, {"--out", at("reuse"), "--report-only"}), 0) << err_;
  EXPECT_NE(err_.find("1 run record unpacked from"), std::string::npos) << err_;
  EXPECT_EQ(slurp(marker), "own\n");
  same_report("reuse");
  // --archive is a report's: not with --plan, --only or --emit-slurm (one usage line each).
  for (const std::vector<std::string>& extra :
       {std::vector<std::string>{"--plan"}, {"--only", "1"}, {"--emit-slurm", at("s")}}) {
    std::vector<std::string> args = {"--out", at("x"), "--archive"};
    args.insert(args.end(), extra.begin(), extra.end());
    EXPECT_EQ(compare(cfg, args), 2) << extra[0];
    EXPECT_NE(err_.find("--archive writes the records of a report"), std::string::npos) << err_;
  }
}

// A suite's --archive writes one archive per task folder; a suite folder holding only those
// merges into the whole suite's summary.
TEST_F(RecordArchiveTest, SuiteTaskArchivesMergeIntoTheWholeSummary) {
  const std::string cfg = write("suite.yaml", pelab::testing::tiny_suite_yaml());
  ASSERT_EQ(compare(cfg, {"--out", at("whole"), "--archive"}), 0) << err_;
  for (const char* task : {"parity_check", "reverse_string"})
    publish(std::string("pub/") + task, slurp(dir_ / "whole" / task / "records.tar.xz"));
  ASSERT_EQ(compare(cfg, {"--merge", at("pub"), "--out", at("merged")}), 0) << err_;
  EXPECT_EQ(err_.find("training"), std::string::npos) << err_;
  EXPECT_EQ(slurp(dir_ / "merged" / "summary.csv"), slurp(dir_ / "whole" / "summary.csv"));
  for (const char* task : {"parity_check", "reverse_string"})
    EXPECT_EQ(results_csv(results_without_timing(dir_ / "merged" / task / "results.csv")),
              results_csv(results_without_timing(dir_ / "whole" / task / "results.csv")))
        << task;
}

// Hostile archives in a merged folder: each refuses the merge with one line naming the archive
// and the member (exit 1, no report, no run copied), and nothing is written outside OUT — the
// names that leave the archive ('..', absolute) create nothing.
TEST_F(RecordArchiveTest, HostileArchivesAreRefusedWithOneLine) {
  const std::string cfg = config();
  ASSERT_EQ(compare(cfg, {"--out", at("a"), "--only", "1", "--archive"}), 2);  // a usage error
  ASSERT_EQ(compare(cfg, {"--out", at("a"), "--only", "1"}), 0) << err_;
  bool found = false;
  const auto files = read_run_record_files(at("a"), "runs", "rope_seed1", &found);
  ASSERT_TRUE(found);
  // The record of rope_seed1 as archive members, then `extra`.
  auto tar_with = [&](const std::function<void(struct archive*)>& extra) {
    return tar_of([&](struct archive* w) {
      for (const auto& [rel, text] : files) add_entry(w, "runs/rope_seed1/" + rel, text);
      extra(w);
    });
  };
  auto archive_with = [&](const std::function<void(struct archive*)>& extra) {
    return xz_bytes(tar_with(extra));
  };
  const std::string tar = tar_with([](struct archive*) {});
  const std::string good = xz_bytes(tar);
  // The same tar, then 256 KiB of zeros (a tar may end in padding) and maybe more: the end of its
  // xz stream lies past what libarchive reads of it, where only the reader's own decoding reaches.
  const std::string padding(256 << 10, '\0');
  const fs::path outside = dir_ / "escaped.txt";
  const fs::path absolute = dir_ / "absolute.txt";
  struct Case {
    std::string name, bytes, says;  // says: the message after "<archive>"
    std::string why = "";           // and further on the line
  };
  const std::vector<Case> cases = {
      {"symlink",
       archive_with([](struct archive* w) {
         add_entry(w, "runs/t5_seed1/eval.json", "/etc/passwd", AE_IFLNK);
       }),
       ":runs/t5_seed1/eval.json is a symbolic link; an archive of run records holds only "
       "regular files and folders"},
      {"hardlink",
       archive_with([](struct archive* w) {
         add_entry(w, "runs/t5_seed1/eval.json", "runs/rope_seed1/eval.json", AE_IFREG, true);
       }),
       ":runs/t5_seed1/eval.json is a hard link"},
      {"dotdot",
       archive_with([](struct archive* w) { add_entry(w, "runs/../../escaped.txt", "x"); }),
       ":runs/../../escaped.txt: '..' in its name; a member must stay inside the archive"},
      {"absolute",
       archive_with([&](struct archive* w) { add_entry(w, absolute.string(), "x"); }),
       ":" + absolute.string() + ": an absolute name; a member must be relative to the archive"},
      {"huge", xz_bytes(ustar_header("runs/rope_seed1/metrics.jsonl", "77777777777")),
       ":runs/rope_seed1/metrics.jsonl declares 8589934591 bytes, more than a member may be "
       "(268435456)"},
      {"stranger",
       archive_with([](struct archive* w) {
         add_entry(w, "runs/rope_seed1/checkpoints/step_12.h5", "weights");
       }),
       ":runs/rope_seed1/checkpoints/step_12.h5: not a file of a run record"},
      {"twice",
       archive_with([](struct archive* w) { add_entry(w, "runs/rope_seed1/eval.json", "{}"); }),
       ":runs/rope_seed1/eval.json appears twice"},
      {"truncated", good.substr(0, good.size() / 2),
       "cannot read it: truncated (the xz stream ends early)"},  // in the member cut (below)
      {"not_xz", "a text file, not an archive\n", ": cannot read it: not an xz-compressed file"},
      {"check", with_bad_check(xz_bytes(tar + padding)),
       ": cannot read past its last member runs/rope_seed1/", "corrupt xz data"},
      {"trailing", xz_bytes(tar + padding + "stray bytes"), ": data after the end of its tar archive"},
      {"memory", with_dictionary(good, uint32_t{3} << 29), ": cannot read it: its xz stream needs ",
       "bytes of memory to decode, more than pelab allows (134217728)"},
  };
  for (size_t k = 0; k < cases.size(); ++k) {
    const Case& c = cases[k];
    const fs::path archive = publish(c.name, c.bytes);
    const std::string out = at("m_" + c.name);
    EXPECT_EQ(compare(cfg, {"--merge", at(c.name), "--out", out}), 1) << c.name;
    // The archive, then the member (where one is concerned) and why.
    const std::string line = "pelab: error: compare --merge: " + archive.string();
    EXPECT_NE(err_.find(line), std::string::npos) << c.name << ": " << err_;
    EXPECT_NE(err_.find(c.says), std::string::npos) << c.name << ": " << err_;
    EXPECT_NE(err_.find(c.why), std::string::npos) << c.name << ": " << err_;
    if (c.says[0] == ':') {
      EXPECT_NE(err_.find(line + c.says), std::string::npos) << c.name << ": " << err_;
    } else if (c.name == "truncated") {
      EXPECT_NE(err_.find(line + ":runs/rope_seed1/"), std::string::npos) << err_;
    }
    EXPECT_NE(err_.find("pelab: error: compare --merge: 1 record refused; no report written"),
              std::string::npos)
        << c.name << ": " << err_;
    EXPECT_FALSE(fs::exists(fs::path(out) / "report.md")) << c.name;
    EXPECT_FALSE(fs::exists(fs::path(out) / "runs" / "rope_seed1")) << c.name;
  }
  EXPECT_FALSE(fs::exists(outside));
  EXPECT_FALSE(fs::exists(absolute));
  // A corrupt stream (a byte of the compressed data flipped) is refused, whatever it decodes to.
  std::string flipped = good;
  flipped[flipped.size() / 2] = static_cast<char>(flipped[flipped.size() / 2] ^ 0x55);
  const fs::path corrupt = publish("corrupt", flipped);
  EXPECT_EQ(compare(cfg, {"--merge", at("corrupt"), "--out", at("m_corrupt")}), 1);
  EXPECT_NE(err_.find("pelab: error: compare --merge: " + corrupt.string()), std::string::npos)
      << err_;
  EXPECT_FALSE(fs::exists(dir_ / "m_corrupt" / "runs" / "rope_seed1"));
  // The archive itself a symbolic link (to a good one): refused like any link in a merged folder.
  const fs::path real = publish("real", good);
  fs::create_directories(dir_ / "linked");
  fs::create_symlink(real, dir_ / "linked" / "records.tar.xz");
  EXPECT_EQ(compare(cfg, {"--merge", at("linked"), "--out", at("m_linked")}), 1);
  EXPECT_NE(err_.find(at("linked") + "/records.tar.xz is a symbolic link; pelab never follows "
                                     "one in a merged folder"),
            std::string::npos)
      << err_;
  // The good archive merges (the plan's other runs are missing: exit 1, the report written).
  publish("fine", good);
  EXPECT_EQ(compare(cfg, {"--merge", at("fine"), "--out", at("m_fine")}), 1);
  EXPECT_NE(err_.find("3 of 4 runs are not finished"), std::string::npos) << err_;
  EXPECT_TRUE(fs::exists(dir_ / "m_fine" / "runs" / "rope_seed1" / "record.json"));
}

// The reader's bounds, checked from each header before anything is allocated: the member count
// and the members' total size; and the writer's archive reads back as written.
TEST(RecordArchive, LimitsAreCheckedBeforeReading) {
  const fs::path dir = pelab::testing::fresh_temp_dir("pelab_record_archive_limits");
  const std::vector<TarMember> members = {
      {"a/1", std::string(60, 'x')}, {"a/2", std::string(60, 'y')}, {"a/3", "z"}, {"a/4", ""}};
  const fs::path path = dir / "t.tar.xz";
  pelab::testing::write_file(path, tar_xz_bytes(members));
  const auto back = read_members(path);
  ASSERT_EQ(back.size(), members.size());
  for (size_t i = 0; i < back.size(); ++i) {
    EXPECT_EQ(back[i].name, members[i].name);
    EXPECT_EQ(back[i].data, members[i].data);
  }
  EXPECT_EQ(tar_xz_bytes(members), slurp(path));  // the same members, the same bytes
  TarLimits few;
  few.members = 3;
  const std::string where = path.string();
  EXPECT_EQ(pelab::testing::error_of([&] { read_members(path, few); }),
            where + ":a/4: one member too many; an archive of run records holds at most 3");
  TarLimits small;
  small.total_bytes = 100;
  EXPECT_EQ(pelab::testing::error_of([&] { read_members(path, small); }),
            where + ":a/2 declares 60 bytes, which take the members past 100 bytes in all");
  TarLimits tiny;
  tiny.member_bytes = 59;
  EXPECT_EQ(pelab::testing::error_of([&] { read_members(path, tiny); }),
            where + ":a/1 declares 60 bytes, more than a member may be (59)");
  EXPECT_THROW(tar_xz_bytes({{"../x", ""}}), Error);
  fs::remove_all(dir);
}

}  // namespace
