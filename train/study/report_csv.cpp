// pelab — results.csv: writing and reading the rows of a comparison, and the CSV, markdown and
// number formatting helpers shared by the report, compare, suites and plot-pe (report.h).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>

#include "pelab/error.h"
#include "train/metrics.h"
#include "train/study/report.h"
#include "train/study/report_internal.h"

namespace pelab {
using namespace report_detail;

// ---------------- small helpers ----------------

std::string csv_number(double v) { return std::isfinite(v) ? json_number(v) : std::string(); }

std::string format_double(double v, int precision) {
  if (!std::isfinite(v)) return "";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g", precision, v);
  return buf;
}

// ---------------- markdown ----------------

namespace {

constexpr const char* kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// The code point of the UTF-8 sequence at s[i] (its length in *n); -1 for a byte that does not
// start a valid, shortest-form sequence of a scalar value (*n = 1).
int32_t utf8_at(const std::string& s, size_t i, size_t* n) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char c = b(0);
  *n = 1;
  if (c < 0x80) return c;
  const size_t len = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 ? (c <= 0xEF ? 3 : 0) : c >= 0xC2 ? 2 : 0;
  if (len == 0 || i + len > s.size()) return -1;
  int32_t cp = c & (len == 2 ? 0x1F : len == 3 ? 0x0F : 0x07);
  for (size_t k = 1; k < len; ++k) {
    if ((b(k) & 0xC0) != 0x80) return -1;
    cp = (cp << 6) | (b(k) & 0x3F);
  }
  if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
      (cp >= 0xD800 && cp <= 0xDFFF))
    return -1;
  *n = len;
  return cp;
}

// Characters that must not reach a reader as they are: controls (C0 but line breaks and tabs,
// which the callers treat, DEL, C1), bidirectional controls, invisible formatting characters.
bool hidden(int32_t cp) {
  return cp < 0x20 || (cp >= 0x7F && cp <= 0x9F) || cp == 0x061C || cp == 0x180E ||
         (cp >= 0x200B && cp <= 0x200F) || (cp >= 0x202A && cp <= 0x202E) ||
         (cp >= 0x2060 && cp <= 0x2064) || (cp >= 0x2066 && cp <= 0x206F) || cp == 0xFEFF;
}

// `s` with what a reader must see replaced: each hidden character or invalid byte as U+FFFD,
// except those `keep` returns true for (kept as they are).
template <class Keep>
std::string visible(const std::string& s, Keep&& keep) {
  std::string o;
  for (size_t i = 0, n = 0; i < s.size(); i += n) {
    const int32_t cp = utf8_at(s, i, &n);
    if (cp >= 0 && keep(cp)) o.append(s, i, n);
    else if (cp < 0 || hidden(cp)) o += kReplacement;
    else o.append(s, i, n);
  }
  return o;
}

// The longest run of backquotes in `s`.
size_t longest_backquotes(const std::string& s) {
  size_t best = 0, run = 0;
  for (char c : s) {
    run = c == '`' ? run + 1 : 0;
    best = std::max(best, run);
  }
  return best;
}

std::string spaced(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  return s;
}

}  // namespace

std::string md_text(const std::string& s) {
  std::string o;
  for (char c : visible(spaced(s), [](int32_t) { return false; })) {
    if (std::strchr("\\`*[]<&|~", c) != nullptr && c != '\0') o += '\\';
    o += c;
  }
  return o;
}

std::string md_code(const std::string& s) {
  std::string body;
  for (char c : visible(spaced(s), [](int32_t) { return false; })) {
    if (c == '|') body += '\\';
    body += c;
  }
  const std::string ticks(longest_backquotes(body) + 1, '`');
  // A span that starts or ends with a backquote needs a space inside its delimiters.
  const bool pad = !body.empty() && (body.front() == '`' || body.back() == '`');
  return ticks + (pad ? " " : "") + body + (pad ? " " : "") + ticks;
}

std::string md_fence(const std::string& s, const std::string& info) {
  std::string text;  // (CRLF line ends as LF; a lone CR, which hides text, is replaced)
  for (size_t i = 0; i < s.size(); ++i)
    if (!(s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n')) text += s[i];
  std::string body = visible(text, [](int32_t cp) { return cp == '\n' || cp == '\t'; });
  if (!body.empty() && body.back() != '\n') body += '\n';
  const std::string fence(std::max<size_t>(3, longest_backquotes(body) + 1), '`');
  return fence + info + "\n" + body + fence + "\n";
}

// ---------------- CSV ----------------

namespace {

// Splits CSV text into records of fields (RFC 4180 quoting).
std::vector<std::vector<std::string>> parse_csv(const std::string& text, const std::string& where) {
  std::vector<std::vector<std::string>> out;
  std::vector<std::string> rec;
  std::string field;
  bool quoted = false, any = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted) {
      if (c == '"') {
        if (i + 1 < text.size() && text[i + 1] == '"') {
          field += '"';
          ++i;
        } else {
          quoted = false;
        }
      } else {
        field += c;
      }
      continue;
    }
    if (c == '"') {
      quoted = true;
      any = true;
    } else if (c == ',') {
      rec.push_back(field);
      field.clear();
      any = true;
    } else if (c == '\n' || c == '\r') {
      if (c == '\r' && i + 1 < text.size() && text[i + 1] == '\n') ++i;
      if (any || !field.empty()) {
        rec.push_back(field);
        out.push_back(rec);
      }
      rec.clear();
      field.clear();
      any = false;
    } else {
      field += c;
      any = true;
    }
  }
  PELAB_CHECK(!quoted, where, ": unterminated quoted field");
  if (any || !field.empty()) {
    rec.push_back(field);
    out.push_back(rec);
  }
  return out;
}

double parse_num(const std::string& s, const std::string& where) {
  if (s.empty() || s == "null") return std::numeric_limits<double>::quiet_NaN();
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  PELAB_CHECK(end && *end == '\0', where, ": not a number: '", s, "'");
  return v;
}

}  // namespace

// ---------------- results.csv ----------------

const std::vector<std::string>& results_csv_columns() {
  static const std::vector<std::string> c = {
      "scheme",          "variant",      "seed",       "split",      "length",
      "in_distribution", "status",       "loss",       "perplexity", "token_accuracy",
      "exact_match",     "train_wall_s", "eval_wall_s", "converged",  "criterion_step"};
  return c;
}

std::string results_csv(const std::vector<ResultRow>& rows) {
  std::string out;
  for (size_t i = 0; i < results_csv_columns().size(); ++i)
    out += (i ? "," : "") + results_csv_columns()[i];
  out += "\n";
  for (const auto& r : rows) {
    out += csv_cell(r.scheme) + "," + csv_cell(r.variant) + "," + std::to_string(r.seed) + "," +
           csv_cell(r.split) + "," + (r.length > 0 ? std::to_string(r.length) : "") + "," +
           (r.in_distribution == 1   ? "true"
            : r.in_distribution == 0 ? "false"
                                     : "") +
           "," + csv_cell(r.status) + "," + num_cell(r.loss) + "," + num_cell(r.perplexity) + "," +
           num_cell(r.token_accuracy) + "," + num_cell(r.exact_match) + "," +
           num_cell(r.train_wall_s) + "," + num_cell(r.eval_wall_s) + "," +
           converged_cell(r.converged) +
           "," + (r.criterion_step >= 0 ? std::to_string(r.criterion_step) : "") + "\n";
  }
  return out;
}

std::vector<ResultRow> parse_results_csv(const std::string& text, const std::string& where) {
  const auto recs = parse_csv(text, where);
  PELAB_CHECK(!recs.empty(), where, ": empty (no header)");
  std::map<std::string, size_t> col;
  for (size_t i = 0; i < recs[0].size(); ++i) col[recs[0][i]] = i;
  // eval_wall_s, converged and criterion_step came later: files without them still read.
  for (const auto& c : results_csv_columns())
    if (c != "eval_wall_s" && c != "converged" && c != "criterion_step")
      PELAB_CHECK(col.count(c), where, ": missing column '", c, "'");
  std::vector<ResultRow> rows;
  for (size_t k = 1; k < recs.size(); ++k) {
    const auto& f = recs[k];
    const std::string at = where + ": row " + std::to_string(k + 1);
    auto get = [&](const std::string& name) -> std::string {
      auto it = col.find(name);
      if (it == col.end() || it->second >= f.size()) return "";
      return f[it->second];
    };
    ResultRow r;
    r.scheme = csv_unfield(get("scheme"));
    r.variant = csv_unfield(get("variant"));
    r.seed = static_cast<int64_t>(parse_num(get("seed"), at));
    r.split = csv_unfield(get("split"));
    const double len = parse_num(get("length"), at);
    r.length = std::isfinite(len) ? static_cast<int64_t>(len) : 0;
    const std::string ind = get("in_distribution");
    r.in_distribution = ind == "true" ? 1 : ind == "false" ? 0 : -1;
    r.status = csv_unfield(get("status"));
    r.loss = parse_num(get("loss"), at);
    r.perplexity = parse_num(get("perplexity"), at);
    r.token_accuracy = parse_num(get("token_accuracy"), at);
    r.exact_match = parse_num(get("exact_match"), at);
    r.train_wall_s = parse_num(get("train_wall_s"), at);
    r.eval_wall_s = parse_num(get("eval_wall_s"), at);
    r.converged = parse_converged_cell(get("converged"), at);
    const double cs = parse_num(get("criterion_step"), at);
    r.criterion_step = std::isfinite(cs) ? static_cast<int64_t>(cs) : -1;
    rows.push_back(r);
  }
  return rows;
}

double row_metric(const ResultRow& r, const std::string& metric) {
  if (metric == "loss") return r.loss;
  if (metric == "perplexity") return r.perplexity;
  if (metric == "token_accuracy") return r.token_accuracy;
  if (metric == "exact_match") return r.exact_match;
  fail("report: unknown metric '", metric,
       "' (expected exact_match, token_accuracy, perplexity or loss)");
}

}  // namespace pelab
