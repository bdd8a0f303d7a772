// pelab — top-level blocks of a study config (config_block.h).
#include "train/study/config_block.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <sstream>
#include <vector>

#include "pelab/strings.h"
#include "train/config.h"

namespace pelab {

void split_config_block(const std::string& text, const std::string& key, std::string& rest,
                        std::string& block) {
  std::vector<std::string> lines;
  {
    std::string t = text;
    strip_utf8_bom(t);  // "\xEF\xBB\xBFsuite:" is the suite block too
    std::istringstream in(t);
    std::string l;
    while (std::getline(in, l)) lines.push_back(l);
  }
  std::vector<bool> in_block(lines.size(), false);
  bool inside = false;
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string& l = lines[i];
    const bool top = !l.empty() && !std::isspace(static_cast<unsigned char>(l[0])) && l[0] != '#';
    if (top) {
      std::string name = l.substr(0, l.find(':'));
      if (!name.empty() && (name.front() == '"' || name.front() == '\'')) name = name.substr(1);
      if (!name.empty() && (name.back() == '"' || name.back() == '\'')) name.pop_back();
      inside = trim(name) == key && l.find(':') != std::string::npos;
    }
    in_block[i] = inside;
  }
  rest.clear();
  block.clear();
  for (size_t i = 0; i < lines.size(); ++i) {
    rest += (in_block[i] ? "" : lines[i]) + "\n";
    block += (in_block[i] ? lines[i] : "") + "\n";
  }
}

YAML::Node without_blocks(const YAML::Node& root, const std::vector<std::string>& keys) {
  if (!root.IsMap()) return root;
  YAML::Node rest(YAML::NodeType::Map);
  for (auto it = root.begin(); it != root.end(); ++it) {
    const bool drop = it->first.IsScalar() &&
                      std::find(keys.begin(), keys.end(), it->first.Scalar()) != keys.end();
    if (!drop) rest.force_insert(it->first, it->second);
  }
  return rest;
}

std::string yaml_where(const std::string& source, const YAML::Node& n) {
  const int line = n.Mark().line;
  return line >= 0 ? source + ":" + std::to_string(line + 1) : source;
}

void fail_at(const std::string& where, const std::string& msg) {
  throw ConfigError(where + ": " + msg);
}

}  // namespace pelab
