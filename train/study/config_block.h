// pelab — top-level blocks of a study config: a comparison (`compare:`), a suite (`suite:`) and
// the papers' figures (`literature:`) each sit in one YAML file next to a normal run config. The
// file is parsed once (parse_config_yaml, train/config.h: anchors and aliases work across the
// sections); these take such a file apart without losing line numbers (errors name FILE:LINE of
// the original file). Shared by compare_spec.cpp, suite.cpp and literature.cpp.
#pragma once
#include <string>
#include <vector>

namespace YAML {
class Node;
}

namespace pelab {

// Splits a YAML text into everything but the top-level `key:` block (`rest`) and that block, both
// with the other lines blanked (line numbers kept): the text a suite's tasks show as their config
// (what they read is the parsed file, without_blocks).
void split_config_block(const std::string& text, const std::string& key, std::string& rest,
                        std::string& block);

// `root` (a parsed study config) without its top-level `keys`: what is left is the run config.
// Its nodes are root's (their marks give FILE:LINE); a root that is not a mapping is returned as
// it is (the run config's loader reports it).
YAML::Node without_blocks(const YAML::Node& root, const std::vector<std::string>& keys);

// "FILE:LINE" of a node of the config read from `source` (just FILE when the node has no mark).
std::string yaml_where(const std::string& source, const YAML::Node& n);

// Throws ConfigError("WHERE: MSG"): the one line a bad study config gets.
[[noreturn]] void fail_at(const std::string& where, const std::string& msg);

}  // namespace pelab
