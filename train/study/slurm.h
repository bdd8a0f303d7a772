// pelab — comparisons on a Slurm cluster (`pelab compare CONFIG --emit-slurm DIR`,
// docs/experiments.md "Comparisons on a Slurm cluster"). The comparison's runs become one Slurm
// job array (task I runs `pelab compare CONFIG --only I`), a dependent job writes the report
// (`--report-only`), and DIR/submit.sh submits both. Optional settings, in the compare config or
// with --set compare.slurm.KEY=VALUE:
//
//   compare:
//     slurm:
//       cpus_per_task: 4        # CPUs of each array task (default: the runs' train.threads)
//       time: "02:00:00"        # time limit of each task: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S
//       mem: 4G                 # memory of each task: an integer, optional K/M/G/T suffix
//       partition: cpu          # the partition (default: the cluster's default)
//       max_parallel: 16        # array tasks running at once (--array=1-N%K; default
//                               #   compare.jobs / --jobs, else every run at once)
//       options: ["--account=proj42", "--qos=normal"]   # further #SBATCH lines, as written
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace YAML {
class Node;
}

namespace pelab {

struct SlurmSettings {
  int64_t cpus_per_task = 0;  // 0 = not set
  std::string time, mem, partition;
  int64_t max_parallel = 0;   // 0 = not set
  std::vector<std::string> options;
};

// Sets compare.slurm.<key> from `value` (a YAML node: the config's, or a --set value parsed as
// YAML). Throws ConfigError "WHERE: ..." for an unknown key or a bad value.
void set_slurm_key(SlurmSettings& s, const std::string& key, const YAML::Node& value,
                   const std::string& where);

// What the scripts are made of, taken from the comparison (compare.h) by `pelab compare
// --emit-slurm` (compare_cli.cpp): its config file, title, compare.slurm and compare.jobs, and per
// run of its validated plan, in order, the run name and train.threads.
struct SlurmJob {
  std::string source, title;
  SlurmSettings settings;
  int64_t jobs = 0;
  struct Run {
    std::string name;
    int64_t threads = 0;
  };
  std::vector<Run> runs;
};

// What the emitted scripts run: the command line of the comparison, made absolute.
struct SlurmEmitOptions {
  std::string dir;                // where the scripts go
  std::string exe;                // the pelab binary (made absolute)
  std::string config;             // the config file (made absolute)
  std::string workdir;            // the jobs' working directory ("" = the current one)
  std::string out;                // --out as given ("" = none)
  std::vector<std::string> sets;  // every --set as given
  std::string progress;           // --progress as given ("" = none)
  bool plots = true;              // false: --no-plots for the report job
  int64_t jobs = 0;               // --jobs N (0 = not given)
};

// The three files (array.sbatch, report.sbatch, submit.sh) by name. Throws ConfigError for
// settings that do not fit the runs.
std::map<std::string, std::string> slurm_scripts(const SlurmJob& comparison,
                                                 const SlurmEmitOptions& opt);

// Writes slurm_scripts() into opt.dir (created if needed) and opt.dir/logs/: every file is
// written in full to a temporary name first, then the three are renamed into place, so a failure
// leaves no partial script behind. Returns the paths written. Throws Error naming the path.
std::vector<std::string> emit_slurm(const SlurmJob& job, const SlurmEmitOptions& opt);

}  // namespace pelab
