// pelab — the positional-encoding registry: scheme name -> factory. Schemes register themselves with
// PELAB_REGISTER_PE in their own file; make_pe builds one PE object per stack.
#include <map>
#include <sstream>

#include "models/pe/pe.h"

namespace pelab::models {
namespace {
// Function-local static: safe to use from other files' static initialisers.
std::map<std::string, PEFactory>& pe_table() {
  static std::map<std::string, PEFactory> table;
  return table;
}

std::string joined_names() {
  std::ostringstream os;
  bool first = true;
  for (const auto& kv : pe_table()) {
    os << (first ? "" : ", ") << kv.first;
    first = false;
  }
  return first ? std::string("<none registered>") : os.str();
}
}  // namespace

// Returns false (and keeps the first factory) when the name is empty, the factory is empty or the
// name is already taken: registration runs at static-init time, where throwing would abort.
bool register_pe(const std::string& name, PEFactory factory) {
  if (name.empty() || !factory) return false;
  return pe_table().emplace(name, std::move(factory)).second;
}

std::vector<std::string> pe_names() {
  std::vector<std::string> out;
  for (const auto& kv : pe_table()) out.push_back(kv.first);
  return out;  // sorted (std::map order)
}

std::shared_ptr<PositionalEncoding> make_pe(const PEConfig& cfg, const StackInfo& stack,
                                            Generator& gen) {
  auto it = pe_table().find(cfg.scheme);
  PELAB_CHECK(it != pe_table().end(), "pe.scheme: unknown positional encoding '", cfg.scheme,
              "' (valid: ", joined_names(), ")");
  PELAB_CHECK(stack.heads > 0 && stack.d_model > 0 && stack.d_model % stack.heads == 0,
              "make_pe(", cfg.scheme, "): d_model ", stack.d_model, " must be a positive multiple of heads ",
              stack.heads);
  std::shared_ptr<PositionalEncoding> pe = it->second(cfg, stack, gen);
  PELAB_CHECK(pe != nullptr, "make_pe: the factory of scheme '", cfg.scheme, "' returned null");
  return pe;
}

}  // namespace pelab::models
