// pelab — top-level blocks of a study config: a comparison (`compare:`), a suite (`suite:`) and
// the papers' figures (`literature:`) each sit in one YAML file next to a normal run config. These
// split such a text into the block and the rest without losing line numbers (errors name
// FILE:LINE of the original file). Shared by compare.cpp, suite.cpp and literature.cpp.
#pragma once
#include <string>

namespace YAML {
class Node;
}

namespace pelab {

// Splits a YAML text into everything but the top-level `key:` block (`rest`) and that block, both
// with the other lines blanked (line numbers kept).
void split_config_block(const std::string& text, const std::string& key, std::string& rest,
                        std::string& block);

// The top-level `key:` block of a YAML text parsed (a map holding `key`), the rest of the text in
// `rest` (see split_config_block); a YAML syntax error in the block is a ConfigError naming
// FILE:LINE.
YAML::Node load_config_block(const std::string& yaml, const std::string& key,
                             const std::string& source, std::string& rest);

// "FILE:LINE" of a node of the config read from `source` (just FILE when the node has no mark).
std::string yaml_where(const std::string& source, const YAML::Node& n);

// Throws ConfigError("WHERE: MSG"): the one line a bad study config gets.
[[noreturn]] void fail_at(const std::string& where, const std::string& msg);

}  // namespace pelab
