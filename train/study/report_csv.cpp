// pelab — results.csv: writing and reading the rows of a comparison, and the CSV / number
// formatting helpers shared by the report, compare and plot-pe (report.h).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>

#include "pelab/error.h"
#include "train/metrics.h"
#include "train/study/report.h"
#include "train/study/report_internal.h"

namespace pelab {
using namespace report_detail;

// ---------------- small helpers ----------------

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

std::string csv_number(double v) { return std::isfinite(v) ? json_number(v) : std::string(); }

std::string format_double(double v, int precision) {
  if (!std::isfinite(v)) return "";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g", precision, v);
  return buf;
}

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
           (r.converged == 1   ? "true"
            : r.converged == 0 ? "false"
                               : "") +
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
    r.scheme = get("scheme");
    r.variant = get("variant");
    r.seed = static_cast<int64_t>(parse_num(get("seed"), at));
    r.split = get("split");
    const double len = parse_num(get("length"), at);
    r.length = std::isfinite(len) ? static_cast<int64_t>(len) : 0;
    const std::string ind = get("in_distribution");
    r.in_distribution = ind == "true" ? 1 : ind == "false" ? 0 : -1;
    r.status = get("status");
    r.loss = parse_num(get("loss"), at);
    r.perplexity = parse_num(get("perplexity"), at);
    r.token_accuracy = parse_num(get("token_accuracy"), at);
    r.exact_match = parse_num(get("exact_match"), at);
    r.train_wall_s = parse_num(get("train_wall_s"), at);
    r.eval_wall_s = parse_num(get("eval_wall_s"), at);
    const std::string conv = get("converged");
    PELAB_CHECK(conv.empty() || conv == "true" || conv == "false", at,
                ": converged must be true, false or empty, got '", conv, "'");
    r.converged = conv == "true" ? 1 : conv == "false" ? 0 : -1;
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
