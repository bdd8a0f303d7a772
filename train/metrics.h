// pelab — metric rows of a run: one flat JSON object per line (metrics.jsonl) and the same rows as
// CSV (metrics.csv). Numbers are written with 17 significant digits, so a row read back is bit for
// bit the row written; NaN / infinity are written as null.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace pelab {

struct MetricValue {
  enum class Kind { Null, Int, Num, Str } kind = Kind::Null;
  int64_t i = 0;
  double d = 0;
  std::string s;
  static MetricValue null() { return {}; }
  static MetricValue of(int64_t v) { MetricValue m; m.kind = Kind::Int; m.i = v; return m; }
  static MetricValue of(double v);  // non-finite -> null
  static MetricValue of(const std::string& v) {
    MetricValue m; m.kind = Kind::Str; m.s = v; return m;
  }
  std::string json() const;  // JSON text of the value
  std::string csv() const;   // CSV cell ("" for null; a string through csv_field)
  bool operator==(const MetricValue& o) const;
};

// Ordered key -> value pairs.
struct MetricRow {
  std::vector<std::pair<std::string, MetricValue>> fields;
  MetricRow& set(const std::string& key, MetricValue v);
  MetricRow& set(const std::string& key, int64_t v) { return set(key, MetricValue::of(v)); }
  MetricRow& set(const std::string& key, int v) { return set(key, MetricValue::of(int64_t{v})); }
  MetricRow& set(const std::string& key, double v) { return set(key, MetricValue::of(v)); }
  MetricRow& set(const std::string& key, const std::string& v) {
    return set(key, MetricValue::of(v));
  }
  MetricRow& set(const std::string& key, const char* v) { return set(key, std::string(v)); }
  const MetricValue* get(const std::string& key) const;
  std::string json() const;  // one line, no trailing newline
};

// Parses one line written by MetricRow::json() (a flat JSON object of numbers, strings, null,
// true/false). Strings are decoded to UTF-8 (\uXXXX escapes, surrogate pairs as one character);
// an unknown escape or a lone surrogate is malformed. Throws pelab::Error naming `where` on
// malformed input.
MetricRow parse_metric_row(const std::string& line, const std::string& where = "metrics");
// The deepest nesting of objects and arrays pelab reads in a JSON file (eval.json has 3 levels: the
// document, its "results" array, a result); a file nested deeper is malformed (a received file
// must not exhaust the stack).
constexpr int kMaxJsonDepth = 64;
// The text of the value of top-level member `key` of the JSON object `text` ("" when absent; the
// last one when repeated), e.g. eval.json's "convergence" record for parse_metric_row. Nested
// objects and arrays (at most kMaxJsonDepth levels) are checked and skipped. Throws pelab::Error
// naming `where` on malformed input.
std::string json_member_text(const std::string& text, const std::string& key,
                             const std::string& where);
// A JSON array of flat objects (each as parse_metric_row reads one), e.g. eval.json's "results"
// member as json_member_text returns it. Throws pelab::Error naming `where` on malformed input.
std::vector<MetricRow> parse_metric_rows(const std::string& text, const std::string& where);
// Every non-empty line of a metrics.jsonl text.
std::vector<MetricRow> parse_metrics_jsonl(const std::string& text, const std::string& where);

// The one writer of a CSV text cell (results.csv, eval.csv, metrics.csv, table_*.csv, the plots'
// and plot-pe's .csv, literature.csv, summary.csv): a cell a spreadsheet would take for a formula
// — it starts with =, +, -, @, a tab or a carriage return and is not a plain decimal number — gets
// a leading ' (so does one that starts with ', so that csv_unfield gives every text back); then
// RFC 4180 quoting when it holds a comma, a double quote or a line break. A number stays a number:
// "-0.5" and "+12.0" are written as they are (numeric columns use csv_number / json_number).
std::string csv_field(const std::string& s);
// The text of a cell csv_field wrote, its CSV quoting already undone: a leading ' removed.
std::string csv_unfield(const std::string& cell);

// Columns of metrics.csv, in order.
const std::vector<std::string>& metrics_csv_columns();
std::string metrics_csv_header();
std::string metrics_csv_line(const MetricRow& row);

// Quotes a string for JSON.
std::string json_quote(const std::string& s);
// Shortest-exact text of a double (17 significant digits), "null" if not finite.
std::string json_number(double v);

// A metric for people (tables, log lines): `decimals` fixed decimals for ordinary magnitudes,
// scientific notation (4 significant digits) from 1e6 on, "inf"/"-inf", and "-" for NaN (a value
// that does not exist, e.g. exact_match of an lm run).
std::string format_metric(double v, int decimals);
// "1 thread", "2 threads" (`plural` defaults to `singular` + "s").
std::string count_text(int64_t n, const std::string& singular, const std::string& plural = "");

// Appends `text` to the file at `path` (created if missing) with checked writes. When a write
// fails (disk full, file size limit, I/O error) the file is cut back to its previous size, so it
// never ends in half a line, and a pelab::Error names the file and the system's reason. A symbolic
// link or anything but a regular file at `path` is refused, never written through (text_file.h).
void append_to_file(const std::string& path, const std::string& text);

}  // namespace pelab
