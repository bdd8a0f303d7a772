// pelab — a comparison folder's records.tar.xz (run_record.h) in `pelab compare`: unpacked into
// runs/ where it stands for runs runs/ does not hold (reuse, --report-only), written by --archive.
#include <unistd.h>

#include <filesystem>

#include "pelab/error.h"
#include "train/metrics.h"
#include "train/run_folder.h"
#include "train/study/compare_internal.h"
#include "train/study/run_record.h"

namespace fs = std::filesystem;

namespace pelab::compare_detail {

void unpack_records_archive(const std::vector<ComparePlanRun>& plan, const std::string& out_dir,
                            std::ostream& log) {
  std::error_code ec;
  const fs::path archive = fs::path(out_dir) / records_archive_file();
  if (!fs::exists(fs::symlink_status(archive, ec))) return;
  std::vector<size_t> todo;  // plan runs without a folder of their own
  for (size_t i = 0; i < plan.size(); ++i)
    if (!fs::exists(fs::symlink_status(run_directory(plan[i].cfg), ec))) todo.push_back(i);
  if (todo.empty()) return;
  const RunRecordSource source(out_dir, "", /*with_folder=*/false);
  int64_t unpacked = 0;
  for (size_t i : todo) {
    const std::string& name = plan[i].cfg.train.run_name;
    if (!source.archived(name)) continue;
    const fs::path dst = run_directory(plan[i].cfg);
    // Staged beside its place (a name no run has: run names end in _seed<N>), then renamed: a
    // reader never sees half a record, and two processes unpacking at once (--jobs children,
    // array tasks) never share a staging folder; the second rename finds the place taken.
    const fs::path stage =
        dst.parent_path() / (".unpack-" + std::to_string(::getpid()) + "-" + std::to_string(i));
    fs::remove_all(stage, ec);
    if (!source.copy(name, stage.string())) continue;
    fs::rename(stage, dst, ec);
    if (ec) {
      const bool taken = fs::exists(fs::symlink_status(dst));
      fs::remove_all(stage);
      PELAB_CHECK(taken, "compare: cannot move ", stage.string(), " to ", dst.string(), ": ",
                  ec.message());
      continue;
    }
    ++unpacked;
  }
  if (unpacked > 0)
    log << "pelab compare: " << count_text(unpacked, "run record") << " unpacked from "
        << archive.string() << " into " << (fs::path(out_dir) / "runs").string() << "\n"
        << std::flush;
}

void archive_records(const std::vector<ComparePlanRun>& plan, const std::vector<bool>& finished,
                     const std::string& out_dir, std::ostream& log) {
  std::vector<std::string> names;
  for (size_t i = 0; i < plan.size(); ++i)
    if (finished[i]) names.push_back(plan[i].cfg.train.run_name);
  const int64_t bytes = write_records_archive(out_dir, names);
  log << "pelab compare: " << (fs::path(out_dir) / records_archive_file()).string() << ": "
      << count_text(static_cast<int64_t>(names.size()), "run record") << ", " << bytes
      << " bytes\n"
      << std::flush;
}

}  // namespace pelab::compare_detail
