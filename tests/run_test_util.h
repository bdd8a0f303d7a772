// pelab — helpers of the tests that train tiny runs in process (test_trainer.cpp,
// test_stop_when.cpp, test_stop_when_per_length.cpp, test_valid_positions.cpp,
// test_input_limits.cpp, test_run_faults.cpp, test_task_positions.cpp, test_multi_addition.cpp):
// a run config from a fixture's settings, training options that print nothing, a config's load
// error.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "train/config.h"
#include "train/trainer.h"

namespace pelab::testing {

// The run config of a test: `base` (the fixture's task, model and train settings), then the run
// directory `run_dir`/`name`, then `extra` (the test's own settings, which win), all applied as
// `--set` overrides to the defaults.
inline Config tiny_run_config(std::vector<std::string> base, const std::filesystem::path& run_dir,
                              const std::string& name, const std::vector<std::string>& extra) {
  base.push_back("train.run_dir=" + run_dir.string());
  base.push_back("train.run_name=" + name);
  base.insert(base.end(), extra.begin(), extra.end());
  return load_config_string("", "<test>", base);
}

// The message of the ConfigError that loading `yaml` throws, or "" when it loads.
inline std::string config_error(const std::string& yaml) {
  try {
    load_config_string(yaml, "c.yaml");
    return "";
  } catch (const ConfigError& e) {
    return e.what();
  }
}

// Whether `s` contains `part`.
inline bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// Training options without progress output.
inline TrainOptions quiet_train() {
  TrainOptions o;
  o.progress = 2;
  return o;
}

}  // namespace pelab::testing
