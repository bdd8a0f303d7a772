// pelab — the markdown key reference (`pelab config-reference`, docs/config.md), generated from
// the schema, the scheme keys and the cross-field rules.
#include "train/config.h"

#include <sstream>
#include <string>
#include <vector>

#include "pelab/strings.h"

namespace pelab {

std::string config_reference_markdown(const std::vector<ConfigReferenceSection>& extra) {
  auto cell = [](std::string s) {
    std::string out;
    for (char c : s) out += c == '|' ? std::string("\\|") : std::string(1, c);
    return out;
  };
  std::ostringstream md;
  md << "# pelab configuration reference\n\n"
     << "Generated from the schema in `train/config_schema.cpp` and the keys each "
        "positional-encoding scheme declares in its own file under `models/pe/`, by "
        "`config_reference_markdown()`; do not edit by hand.\n\n"
     << "A config file is YAML with the sections " << [] {
          std::vector<std::string> s;
          for (const auto& p : config_sections()) s.push_back("`" + p.first + "`");
          return join(s, ", ");
        }()
     << ". Every key is optional; missing keys take the defaults below. Unknown sections or keys, "
        "wrong types, out-of-range numbers and unknown enum values are errors naming the file "
        "and line.\n\n"
     << "Override any key on the command line with `--set section.key=value` (repeatable, "
        "applied after the file, validated the same way; the value is YAML: "
        "`--set task.test_lengths=[8,64]`, `--set train.tags={group: a}`, "
        "`--set 'train.stop_when={metric: exact_match, at_least: 0.99, patience: 2}'`). A key "
        "with sub-keys (`train.stop_when`) is one YAML mapping; its sub-keys are listed as "
        "`key.sub` rows below it and are checked like keys (unknown sub-keys and bad values name "
        "their line).\n\n"
     << "Ranges: `[a, b)` includes a and excludes b; for lists the range bounds every element.\n";
  auto row = [&cell](const ConfigKey& k) {
    std::string allowed;
    if (k.type == ConfigType::Enum) {
      std::vector<std::string> c;
      for (const auto& x : k.choices) c.push_back("`" + x + "`");
      allowed = join(c, ", ");
    } else if (!k.range.empty()) {
      allowed = (k.type == ConfigType::IntList ? "each in " : "") + k.range.str();
    } else if (k.type == ConfigType::Bool) {
      allowed = "true, false";
    }
    const std::string def = k.default_text.empty() ? "(none)" : "`" + cell(k.default_text) + "`";
    return "| `" + k.full_name() + "` | " + config_type_name(k.type) + " | " + def + " | " +
           cell(allowed) + " | " + cell(k.doc) +
           (k.omitted_at_default ? " (the resolved config lists it only when it is not the "
                                   "default, so older runs' config digests stay valid)"
                                 : "") +
           " |\n";
  };
  for (const auto& sec : config_sections()) {
    md << "\n## `" << sec.first << "`\n\n" << sec.second << ".\n\n"
       << "| Key | Type | Default | Allowed | Description |\n"
       << "|---|---|---|---|---|\n";
    for (const auto& k : config_schema()) {
      if (k.section != sec.first) continue;
      md << row(k);
      for (const auto& f : k.fields) md << row(f);
    }
  }
  for (const auto& sec : extra) {
    md << "\n## " << sec.heading << "\n\n" << sec.intro << "\n\n"
       << "| Key | Type | Default | Allowed | Description |\n"
       << "|---|---|---|---|---|\n";
    for (const auto& k : sec.keys) md << row(k);
  }
  md << "\n## Cross-field rules\n\nChecked after the file and all `--set` overrides:\n\n";
  for (const auto& r : config_cross_field_rules()) md << "- " << r << "\n";
  return md.str();
}

}  // namespace pelab
