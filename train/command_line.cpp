// pelab — the one command-line parser of every verb (command_line.h).
#include "train/command_line.h"

#include <algorithm>
#include <ostream>

#include "pelab/strings.h"

namespace pelab {

namespace {

bool listed(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

}  // namespace

std::string CommandLine::value(const std::string& option, const std::string& otherwise) const {
  const auto it = options.find(option);
  return it == options.end() ? otherwise : it->second;
}

int64_t CommandLine::integer(const std::string& option, int64_t min, int64_t otherwise,
                             const std::string& hint) const {
  if (!has(option)) return otherwise;
  const std::string v = value(option);
  int64_t x = 0;
  if (!parse_whole_number(v, x) || x < min)
    throw error(option + " must be an integer >= " + std::to_string(min) +
                (hint.empty() ? "" : " (" + hint + ")") + ", got '" + v + "'");
  return x;
}

int CommandLine::progress() const {
  if (!has("--progress")) return -1;
  const std::string m = value("--progress");
  static const std::map<std::string, int> modes = {
      {"auto", -1}, {"lines", 0}, {"bar", 1}, {"none", 2}};
  const auto it = modes.find(m);
  if (it == modes.end())
    throw error("--progress must be auto, bar, lines or none, got '" + m + "'");
  return it->second;
}

void CommandLine::expect_positional(size_t n, const std::string& what) const {
  if (positional.size() < n) throw error("missing " + what);
  if (positional.size() > n) throw error("unexpected argument '" + positional[n] + "'");
}

UsageError CommandLine::error(const std::string& message) const {
  return UsageError(verb + ": " + message + " (see pelab " + verb + " --help)");
}

CommandLine parse_command_line(const CommandSpec& spec, const std::vector<std::string>& a) {
  CommandLine r;
  r.verb = spec.verb;
  // The first mistake is thrown after the loop: --help anywhere still wins.
  std::string mistake;
  auto wrong = [&](const std::string& m) {
    if (mistake.empty()) mistake = m;
  };
  for (size_t i = 1; i < a.size(); ++i) {
    const std::string& s = a[i];
    if (s == "-h" || s == "--help") {
      r.help = true;
      return r;
    }
    if (s.size() < 2 || s[0] != '-') {
      r.positional.push_back(s);
      continue;
    }
    std::string name = s, value;
    bool inline_value = false;
    const size_t eq = s.find('=');
    if (s.rfind("--", 0) == 0 && eq != std::string::npos) {
      name = s.substr(0, eq);
      value = s.substr(eq + 1);
      inline_value = true;
    }
    const bool is_set = spec.sets && name == "--set";
    if (is_set || listed(spec.values, name)) {
      if (!inline_value) {
        if (i + 1 >= a.size()) {
          wrong("option " + name + " needs a value");
          break;
        }
        value = a[++i];
      }
      if (is_set)
        r.sets.push_back(value);
      else
        r.options[name] = value;
      continue;
    }
    if (listed(spec.flags, name)) {
      if (inline_value) wrong("option " + name + " takes no value, got '" + s + "'");
      r.options[name] = "";
      continue;
    }
    std::vector<std::string> known = spec.values;
    known.insert(known.end(), spec.flags.begin(), spec.flags.end());
    known.push_back("--help");
    if (spec.sets) known.push_back("--set");
    const std::string near = nearest_name(name, known);
    wrong("unknown option '" + s + "'" + (near.empty() ? "" : "; did you mean '" + near + "'?"));
  }
  if (!mistake.empty()) throw r.error(mistake);
  return r;
}

bool parse_whole_number(const std::string& text, int64_t& out) {
  if (text.empty() || text.size() > 18 ||
      text.find_first_not_of("0123456789") != std::string::npos)
    return false;
  out = std::stoll(text);
  return true;
}

int report_usage_error(std::ostream& err, const UsageError& e) {
  err << "pelab: error: " << e.what() << "\n";
  return 2;
}

}  // namespace pelab
