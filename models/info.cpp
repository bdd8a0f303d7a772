// pelab — parameter-count table and model summary for `pelab info`.
#include "models/info.h"

#include <algorithm>
#include <iomanip>
#include <sstream>
#include <vector>

namespace pelab::models {
namespace {
std::vector<std::string> split_dots(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t i = 0; i <= s.size(); ++i)
    if (i == s.size() || s[i] == '.') {
      out.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  return out;
}

std::string with_commas(int64_t n) {
  std::string s = std::to_string(n), out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i && (s.size() - i) % 3 == 0) out += ',';
    out += s[i];
  }
  return out;
}
}  // namespace

std::string parameter_table(const Module& model) {
  std::vector<std::string> order;
  std::vector<int64_t> counts;
  std::vector<size_t> depths;
  auto bump = [&](const std::string& key, size_t depth, int64_t n) {
    for (size_t i = 0; i < order.size(); ++i)
      if (order[i] == key) {
        counts[i] += n;
        return;
      }
    order.push_back(key);
    counts.push_back(n);
    depths.push_back(depth);
  };
  int64_t total = 0;
  for (const auto& nt : model.named_parameters()) {
    const int64_t n = nt.second.numel();
    total += n;
    const std::vector<std::string> parts = split_dots(nt.first);
    // The last part is the parameter itself; module prefixes are the parts before it.
    const size_t module_depth = parts.size() - 1;
    std::string key;
    for (size_t d = 0; d < module_depth && d < 3; ++d) {
      if (d == 2 && parts[1] != "layers") break;
      key += (d ? "." : "") + parts[d];
      bump(key, d, n);
    }
    if (module_depth == 0) bump(nt.first, 0, n);  // a parameter of the root module
  }
  size_t width = 6;
  for (size_t i = 0; i < order.size(); ++i) width = std::max(width, 2 * depths[i] + order[i].size());
  std::ostringstream os;
  os << std::left << std::setw(static_cast<int>(width)) << "module" << "  " << std::right
     << std::setw(12) << "parameters" << "\n";
  for (size_t i = 0; i < order.size(); ++i)
    os << std::left << std::setw(static_cast<int>(width))
       << (std::string(2 * depths[i], ' ') + order[i]) << "  " << std::right << std::setw(12)
       << with_commas(counts[i]) << "\n";
  os << std::left << std::setw(static_cast<int>(width)) << "total" << "  " << std::right
     << std::setw(12) << with_commas(total) << "\n";
  return os.str();
}

std::string model_info(const Transformer& model) {
  const ModelConfig& c = model.config();
  std::ostringstream os;
  os << "arch " << c.arch << ": d_model " << c.d_model << ", heads " << c.heads << " (head dim "
     << c.head_dim() << "), d_ff " << c.d_ff << ", ";
  if (c.is_seq2seq()) os << c.encoder_layers << " encoder + ";
  os << c.decoder_layers << " decoder layers, vocab " << c.vocab << "\n";
  os << "pe " << c.pe.scheme << ", norm " << c.norm << "-LN, activation " << c.activation
     << ", dropout " << c.dropout << ", embed_scale " << c.embed_scale << " (x"
     << model.decoder->embed_scale << "), tie_embeddings " << (c.tie_embeddings ? "yes" : "no")
     << ", dtype " << c.dtype << "\n\n";
  os << parameter_table(model);
  return os.str();
}

}  // namespace pelab::models
