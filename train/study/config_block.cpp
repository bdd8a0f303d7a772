// pelab — top-level blocks of a study config (config_block.h).
#include "train/study/config_block.h"

#include <yaml-cpp/yaml.h>

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
    std::istringstream in(text);
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

YAML::Node load_config_block(const std::string& yaml, const std::string& key,
                             const std::string& source, std::string& rest) {
  std::string block;
  split_config_block(yaml, key, rest, block);
  try {
    return YAML::Load(block);
  } catch (const YAML::ParserException& ex) {
    std::string where = source;
    if (!ex.mark.is_null() && ex.mark.line >= 0) where += ":" + std::to_string(ex.mark.line + 1);
    throw ConfigError(where + ": YAML syntax error in the " + key + " section: " + ex.msg);
  }
}

std::string yaml_where(const std::string& source, const YAML::Node& n) {
  const int line = n.Mark().line;
  return line >= 0 ? source + ":" + std::to_string(line + 1) : source;
}

void fail_at(const std::string& where, const std::string& msg) {
  throw ConfigError(where + ": " + msg);
}

}  // namespace pelab
