// pelab — comparisons on a Slurm cluster (slurm.h): the compare.slurm settings and the scripts of
// `pelab compare CONFIG --emit-slurm DIR`.
#include "train/study/slurm.h"

#include <sys/stat.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <sstream>

#include "pelab/error.h"
#include "pelab/strings.h"
#include "train/config.h"
#include "train/study/report.h"

namespace fs = std::filesystem;

namespace pelab {

namespace {

[[noreturn]] void slurm_fail(const std::string& where, const std::string& msg) {
  throw ConfigError(where + ": " + msg);
}

bool all_digits(const std::string& s) {
  return !s.empty() && s.size() <= 9 && s.find_first_not_of("0123456789") == std::string::npos;
}

// Slurm's time formats: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S (every field digits).
bool slurm_time(const std::string& t) {
  std::string rest = t;
  const size_t dash = t.find('-');
  if (dash != std::string::npos) {
    if (!all_digits(t.substr(0, dash))) return false;
    rest = t.substr(dash + 1);
  }
  std::vector<std::string> f;
  std::string item;
  std::istringstream parts(rest);
  while (std::getline(parts, item, ':')) f.push_back(item);
  if (!rest.empty() && rest.back() == ':') return false;
  if (f.empty() || f.size() > 3) return false;
  for (const auto& x : f)
    if (!all_digits(x)) return false;
  return true;
}

// A path written into an #SBATCH line: no blanks, quotes, backslashes or % (Slurm's filename
// patterns), which the directive parser would not take as written.
void check_directive_path(const std::string& what, const std::string& p) {
  if (p.find_first_of(" \t\n\r'\"\\%") != std::string::npos)
    throw ConfigError("compare --emit-slurm: " + what + " '" + p +
                      "' contains a blank, a quote, a backslash or %, which #SBATCH lines cannot "
                      "hold; use a path without them");
}

std::string int_text(const YAML::Node& v) { return v.IsScalar() ? v.Scalar() : "(not a number)"; }

// The words sbatch makes of the text of an #SBATCH line (its _get_argument): split at blanks,
// quotes group characters (blanks included) and are removed, a backslash takes the next
// character as it is, and an unquoted # starts a comment.
std::vector<std::string> sbatch_words(const std::string& line) {
  std::vector<std::string> words;
  std::string w;
  bool in_word = false, escape = false;
  char quote = 0;
  for (char c : line) {
    if (escape) {
      w += c;
      escape = false;
    } else if (c == '\\') {
      escape = in_word = true;
    } else if (quote) {
      if (c == quote)
        quote = 0;
      else
        w += c;
    } else if (c == '"' || c == '\'') {
      quote = c;
      in_word = true;
    } else if (c == '#') {
      break;
    } else if (std::isspace(static_cast<unsigned char>(c))) {
      if (in_word) words.push_back(w);
      w.clear();
      in_word = false;
    } else {
      w += c;
      in_word = true;
    }
  }
  if (in_word) words.push_back(w);
  return words;
}

// "is set by ..." when the #SBATCH text `line` sets an option the emitted scripts set themselves,
// read as sbatch reads it: every word of the line (sbatch_words), a long option by any prefix of
// its name (getopt_long takes an unambiguous abbreviation, "--chd=x" for "--chdir=x"; an ambiguous
// one is an sbatch error), and short options also inside a cluster ("-vD dir": -v takes no
// argument, so -D follows). "" when it sets none.
std::string managed_sbatch_option(const std::string& line) {
  struct Managed {
    const char* name;
    char letter;  // its short option (0 = none)
    const char* owner;
  };
  static const Managed managed[] = {
      {"--array", 'a', "the runs of the comparison"},
      {"--dependency", 'd', "submit.sh"},
      {"--output", 'o', "the scripts (DIR/logs)"},
      {"--error", 'e', "the scripts (DIR/logs)"},
      {"--chdir", 'D', "the scripts (the directory --emit-slurm ran in)"},
      {"--cpus-per-task", 'c', "compare.slurm.cpus_per_task"},
      {"--time", 't', "compare.slurm.time"},
      {"--mem", 0, "compare.slurm.mem"},
      {"--partition", 'p', "compare.slurm.partition"},
      {"--job-name", 'J', "the scripts (pelab-<config name>)"},
  };
  // sbatch's short options that take no argument (after any other short option, the rest of a
  // cluster is that option's argument; -k's is optional).
  static const std::string flags = "hHOQsuvVW";
  for (const std::string& w : sbatch_words(line)) {
    if (w.size() < 2 || w[0] != '-') continue;
    if (w[1] == '-') {
      const std::string name = w.substr(0, w.find('='));
      if (name.size() < 3) continue;  // "--" ends the options
      for (const auto& m : managed)
        if (std::string(m.name).rfind(name, 0) == 0)
          return name == m.name ? std::string("is set by ") + m.owner
                                : std::string("is set by ") + m.owner + " (sbatch reads " + name +
                                      " as " + m.name + ")";
      continue;
    }
    for (size_t i = 1; i < w.size(); ++i) {
      for (const auto& m : managed)
        if (m.letter == w[i])
          return std::string("is set by ") + m.owner + " (sbatch reads -" + w[i] + " as " +
                 m.name + ")";
      if (flags.find(w[i]) == std::string::npos) break;
    }
  }
  return "";
}

}  // namespace

void set_slurm_key(SlurmSettings& s, const std::string& key, const YAML::Node& v,
                   const std::string& where) {
  const std::string name = "compare.slurm." + key;
  auto scalar = [&]() -> std::string {
    if (!v.IsScalar() || v.Scalar().empty())
      slurm_fail(where, name + " must be a single value");
    return v.Scalar();
  };
  auto positive = [&](const std::string& what) -> int64_t {
    const std::string t = int_text(v);
    if (!v.IsScalar() || !all_digits(t) || std::stoll(t) < 1)
      slurm_fail(where, name + " must be an integer >= 1 (" + what + "), got '" + t + "'");
    return std::stoll(t);
  };
  if (key == "cpus_per_task") {
    s.cpus_per_task = positive("CPUs of each array task");
  } else if (key == "max_parallel") {
    s.max_parallel = positive("array tasks running at once");
  } else if (key == "time") {
    const std::string t = scalar();
    if (!slurm_time(t))
      slurm_fail(where, name + ": expected a Slurm time limit (M, M:S, H:M:S, D-H, D-H:M or "
                               "D-H:M:S, e.g. \"02:00:00\"), got '" + t + "'");
    s.time = t;
  } else if (key == "mem") {
    const std::string m = scalar();
    std::string digits = m;
    if (!digits.empty() && std::string("KMGT").find(digits.back()) != std::string::npos)
      digits.pop_back();
    if (!all_digits(digits) || std::stoll(digits) < 1)
      slurm_fail(where, name + ": expected memory per task as an integer with an optional K, M, "
                               "G or T suffix (e.g. 4G), got '" + m + "'");
    s.mem = m;
  } else if (key == "partition") {
    const std::string p = scalar();
    if (p.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.,-") !=
        std::string::npos)
      slurm_fail(where, name + ": '" + p +
                            "' is not a partition name (letters, digits, _ . - ; a comma between "
                            "several)");
    s.partition = p;
  } else if (key == "options") {
    if (!v.IsSequence())
      slurm_fail(where, name + " must be a list of sbatch options, e.g. [\"--account=proj42\"]");
    std::vector<std::string> opts;
    for (size_t i = 0; i < v.size(); ++i) {
      const std::string o = v[i].IsScalar() ? v[i].Scalar() : "";
      const std::string what = name + "[" + std::to_string(i) + "]";
      if (o.size() < 2 || o[0] != '-' || o.find_first_of("\n\r") != std::string::npos)
        slurm_fail(where, what + " must be one sbatch option starting with - (e.g. "
                                 "--account=proj42), got '" + o + "'");
      const std::string managed = managed_sbatch_option(o);
      if (!managed.empty()) slurm_fail(where, what + " '" + o + "' " + managed);
      opts.push_back(o);
    }
    s.options = opts;
  } else {
    slurm_fail(where, "unknown key '" + name +
                          "' (valid: cpus_per_task, time, mem, partition, max_parallel, options)");
  }
}

namespace {

// CPUs per array task: compare.slurm.cpus_per_task, else the most threads a run uses.
int64_t cpus_per_task(const SlurmJob& comparison) {
  int64_t threads = 0;
  std::string zero_run;
  for (const auto& r : comparison.runs) {
    threads = std::max<int64_t>(threads, r.threads);
    if (r.threads == 0 && zero_run.empty()) zero_run = r.name;
  }
  const int64_t cpus = comparison.settings.cpus_per_task;
  if (cpus == 0) {
    if (!zero_run.empty())
      throw ConfigError(comparison.source + ": compare --emit-slurm: run " + zero_run +
                        " has train.threads: 0 (all cores of whatever node it lands on); set "
                        "compare.slurm.cpus_per_task or train.threads to the CPUs each array task "
                        "should get");
    return threads;
  }
  if (threads > cpus)
    throw ConfigError(comparison.source + ": compare --emit-slurm: compare.slurm.cpus_per_task is " +
                      std::to_string(cpus) + " but the runs use up to train.threads=" +
                      std::to_string(threads) +
                      " threads; raise cpus_per_task or lower train.threads");
  return cpus;
}

// What the three scripts share: the resources, paths and the comparison's command line.
struct SlurmScriptParts {
  SlurmSettings settings;
  int64_t cpus = 0;
  int64_t parallel = 0;   // array tasks at once
  size_t n = 0;           // runs (array tasks)
  std::string runs;       // "N runs"
  std::string title;      // the comparison's title on one line (for comments)
  std::string job;        // the job name
  std::string exe, args;  // the pelab binary and the comparison's arguments (paths absolute)
  std::string workdir, logs, dir;
};

SlurmScriptParts script_parts(const SlurmJob& comparison, const SlurmEmitOptions& opt) {
  SlurmScriptParts p;
  p.settings = comparison.settings;
  p.n = comparison.runs.size();
  PELAB_CHECK(p.n > 0, "compare --emit-slurm: the comparison has no runs");
  p.cpus = cpus_per_task(comparison);
  if (opt.exe.empty())
    throw Error("compare --emit-slurm: the path of the pelab binary is unknown (run it from the "
                "pelab executable)");
  const SlurmSettings& s = comparison.settings;
  p.parallel = s.max_parallel > 0 ? s.max_parallel : opt.jobs > 0 ? opt.jobs : comparison.jobs;
  if (p.parallel <= 0 || p.parallel > static_cast<int64_t>(p.n)) p.parallel = static_cast<int64_t>(p.n);

  std::error_code ec;
  const fs::path dir = fs::absolute(opt.dir, ec);
  p.workdir = (opt.workdir.empty() ? fs::current_path() : fs::absolute(opt.workdir)).string();
  p.exe = fs::absolute(opt.exe).lexically_normal().string();
  const std::string config = fs::absolute(opt.config).lexically_normal().string();
  p.logs = (dir.lexically_normal() / "logs").string();
  p.dir = dir.lexically_normal().string();
  check_directive_path("the job directory", p.workdir);
  check_directive_path("the log directory", p.logs);

  p.job = "pelab-";
  for (char c : fs::path(opt.config).stem().string())
    p.job += std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' ? c : '_';
  // The comparison's command line, as the user gave it (paths absolute).
  p.args = shell_word(config);
  if (!opt.out.empty()) p.args += " --out " + shell_word(opt.out);
  for (const auto& x : opt.sets) p.args += " --set " + shell_word(x);
  if (!opt.progress.empty()) p.args += " --progress " + shell_word(opt.progress);
  p.runs = std::to_string(p.n) + (p.n == 1 ? " run" : " runs");
  p.title = comparison.title;
  std::replace_if(p.title.begin(), p.title.end(), [](char c) { return c == '\n' || c == '\r'; }, ' ');
  return p;
}

void sbatch_resources(std::ostringstream& o, const SlurmScriptParts& p) {
  const SlurmSettings& s = p.settings;
  o << "#SBATCH --cpus-per-task=" << p.cpus << "\n";
  if (!s.time.empty()) o << "#SBATCH --time=" << s.time << "\n";
  if (!s.mem.empty()) o << "#SBATCH --mem=" << s.mem << "\n";
  if (!s.partition.empty()) o << "#SBATCH --partition=" << s.partition << "\n";
  o << "#SBATCH --chdir=" << p.workdir << "\n";
}

void sbatch_options(std::ostringstream& o, const SlurmScriptParts& p) {
  for (const auto& x : p.settings.options) o << "#SBATCH " << x << "\n";
}

// array.sbatch: one array task per run.
std::string array_script(const SlurmScriptParts& p) {
  std::ostringstream a;
  a << "#!/bin/bash\n"
    << "# pelab comparison '" << p.title << "' on Slurm: one array task per run (" << p.runs
    << "; `pelab compare CONFIG --plan`\n"
    << "# lists them). Task I trains and evaluates run I (`pelab compare CONFIG --only I`) in\n"
    << "# the comparison's run directory; a finished run is skipped and an interrupted one resumed,\n"
    << "# so submitting again continues where the last submission stopped. At most " << p.parallel
    << " tasks run\n"
    << "# at once. Written by `pelab compare --emit-slurm`; submit with submit.sh (it also\n"
    << "# submits report.sbatch, which writes the report when every task has ended).\n"
    << "#SBATCH --job-name=" << p.job << "\n"
    << "#SBATCH --array=1-" << p.n << "%" << p.parallel << "\n";
  sbatch_resources(a, p);
  a << "#SBATCH --output=" << p.logs << "/run-%a.out\n";
  sbatch_options(a, p);
  a << "exec " << shell_word(p.exe) << " compare " << p.args << " --only \"$SLURM_ARRAY_TASK_ID\"\n";
  return a.str();
}

// report.sbatch: the report, once every array task has ended.
std::string report_script(const SlurmScriptParts& p, bool plots) {
  std::ostringstream r;
  r << "#!/bin/bash\n"
    << "# pelab comparison '" << p.title << "': the report job. submit.sh submits it with\n"
    << "# --dependency=afterany:<array job>, so it starts when every array task has ended\n"
    << "# (finished or not); it writes the report from the finished runs and exits 1 naming the\n"
    << "# runs that are missing (submit again to train them).\n"
    << "#SBATCH --job-name=" << p.job << "-report\n";
  sbatch_resources(r, p);
  r << "#SBATCH --output=" << p.logs << "/report.out\n";
  sbatch_options(r, p);
  r << "exec " << shell_word(p.exe) << " compare " << p.args << " --report-only"
    << (plots ? "" : " --no-plots") << "\n";
  return r.str();
}

// submit.sh: the array job, then the report job after it (the array cancelled if that fails).
std::string submit_script(const SlurmScriptParts& p) {
  std::ostringstream sub;
  sub << "#!/bin/sh\n"
      << "# Submits the comparison '" << p.title << "' (" << p.runs
      << "): the array job (array.sbatch), then\n"
      << "# the report job (report.sbatch) to start when every array task has ended. Needs Slurm's\n"
      << "# sbatch on PATH. Safe to run again: finished runs are skipped, interrupted ones resumed.\n"
      << "dir=" << shell_word(p.dir) << "\n"
      << "if ! command -v sbatch >/dev/null 2>&1; then\n"
      << "  echo \"submit.sh: sbatch not found on PATH: Slurm's client commands are needed (load the "
         "cluster's slurm module or install slurm-client); nothing was submitted\" >&2\n"
      << "  exit 1\n"
      << "fi\n"
      << "oneline() { printf '%s' \"$1\" | tr '\\n' ' ' | sed 's/ *$//'; }\n"
      << "if ! out=$(sbatch --parsable \"$dir/array.sbatch\" 2>&1); then\n"
      << "  echo \"submit.sh: sbatch could not submit the array job: $(oneline \"$out\"); nothing "
         "was submitted\" >&2\n"
      << "  exit 1\n"
      << "fi\n"
      << "array=$(printf '%s\\n' \"$out\" | tail -n 1)  # the job id (after any warnings)\n"
      << "array=${array%%;*}\n"
      << "case \"$array\" in\n"
      << "  '' | *[!0-9]*)\n"
      << "    echo \"submit.sh: unexpected answer from sbatch --parsable: '$(oneline \"$out\")'\" "
         ">&2\n"
      << "    exit 1 ;;\n"
      << "esac\n"
      << "if ! out=$(sbatch --parsable --dependency=afterany:\"$array\" \"$dir/report.sbatch\" "
         "2>&1); then\n"
      << "  scancel \"$array\" 2>/dev/null\n"
      << "  echo \"submit.sh: sbatch could not submit the report job: $(oneline \"$out\"); the "
         "array job $array was cancelled, nothing is left submitted\" >&2\n"
      << "  exit 1\n"
      << "fi\n"
      << "report=$(printf '%s\\n' \"$out\" | tail -n 1)\n"
      << "report=${report%%;*}\n"
      << "echo \"submitted: array job $array (" << p.runs << ", at most " << p.parallel
      << " at once), report job $report (after the array); logs in $dir/logs\"\n";
  return sub.str();
}

}  // namespace

std::map<std::string, std::string> slurm_scripts(const SlurmJob& comparison,
                                                 const SlurmEmitOptions& opt) {
  const SlurmScriptParts p = script_parts(comparison, opt);
  return {{"array.sbatch", array_script(p)},
          {"report.sbatch", report_script(p, opt.plots)},
          {"submit.sh", submit_script(p)}};
}

std::vector<std::string> emit_slurm(const SlurmJob& job, const SlurmEmitOptions& opt) {
  const std::map<std::string, std::string> files = slurm_scripts(job, opt);
  const fs::path dir(opt.dir);
  std::error_code ec;
  fs::create_directories(dir / "logs", ec);
  if (ec) throw Error("compare --emit-slurm: cannot create " + (dir / "logs").string() + ": " + ec.message());
  for (const auto& f : files)
    if (fs::is_directory(dir / f.first, ec))
      throw Error("compare --emit-slurm: " + (dir / f.first).string() +
                  " is a directory; remove it or choose another DIR");
  // Every file in full under a temporary name first; then the renames.
  std::vector<std::pair<fs::path, fs::path>> staged;
  auto unstage = [&]() {
    for (const auto& p : staged) fs::remove(p.first, ec);
  };
  try {
    for (const auto& f : files) {
      const fs::path tmp = dir / ("." + f.first + ".new");
      staged.push_back({tmp, dir / f.first});
      write_text_file(tmp.string(), f.second);
      fs::permissions(tmp, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                               fs::perms::others_read | fs::perms::others_exec);
    }
  } catch (const std::exception& e) {
    unstage();  // (a failed write_text_file leaves no temporary of its own)
    throw Error(std::string("compare --emit-slurm: ") + e.what());
  }
  std::vector<std::string> written;
  for (const auto& p : staged) {
    fs::rename(p.first, p.second, ec);
    if (ec) {
      const std::string why = ec.message();
      unstage();
      throw Error("compare --emit-slurm: cannot write " + p.second.string() + ": " + why);
    }
    written.push_back(p.second.string());
  }
  return written;
}

}  // namespace pelab
