// pelab — metric rows, JSON lines and CSV (metrics.h).
#include "train/metrics.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "pelab/error.h"
#include "train/text_file.h"

namespace pelab {

MetricValue MetricValue::of(double v) {
  MetricValue m;
  if (!std::isfinite(v)) return m;
  m.kind = Kind::Num;
  m.d = v;
  return m;
}

std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  std::string s = buf;
  // Keep it recognisably a float ("1" -> "1.0") so a reader does not take it for an int.
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

std::string format_metric(double v, int decimals) {
  if (std::isnan(v)) return "-";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  if (std::fabs(v) >= 1e6)
    std::snprintf(buf, sizeof buf, "%.3e", v);
  else
    std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

std::string count_text(int64_t n, const std::string& singular, const std::string& plural) {
  return std::to_string(n) + " " +
         (n == 1 ? singular : plural.empty() ? singular + "s" : plural);
}

void append_to_file(const std::string& path, const std::string& text) {
  const int fd = open_for_writing(path, O_WRONLY | O_APPEND | O_CREAT, 0644);  // never via a link
  struct stat st {};
  const off_t before = ::fstat(fd, &st) == 0 ? st.st_size : -1;
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      if (before >= 0 && ::ftruncate(fd, before) != 0) {
        // Could not cut the partial write back; the error below still stops the run.
      }
      ::close(fd);
      fail("error writing ", path, ": ", std::strerror(err));
    }
    done += static_cast<size_t>(n);
  }
  if (::close(fd) != 0) fail("error writing ", path, ": ", std::strerror(errno));
}

std::string json_quote(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

std::string MetricValue::json() const {
  switch (kind) {
    case Kind::Null: return "null";
    case Kind::Int: return std::to_string(i);
    case Kind::Num: return json_number(d);
    case Kind::Str: return json_quote(s);
  }
  return "null";
}

namespace {

// A decimal number and nothing else ("-0.5", "+12.0", "1e-3"): a spreadsheet reads it as the number
// it is, never as a formula.
bool plain_number(const std::string& s) {
  size_t i = s.size() > 0 && (s[0] == '+' || s[0] == '-') ? 1 : 0;
  size_t digits = 0;
  for (; i < s.size() && std::isdigit(static_cast<unsigned char>(s[i])); ++i) ++digits;
  if (i < s.size() && s[i] == '.')
    for (++i; i < s.size() && std::isdigit(static_cast<unsigned char>(s[i])); ++i) ++digits;
  if (digits == 0) return false;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
    size_t exp = 0;
    for (; i < s.size() && std::isdigit(static_cast<unsigned char>(s[i])); ++i) ++exp;
    if (exp == 0) return false;
  }
  return i == s.size();
}

}  // namespace

std::string csv_field(const std::string& text) {
  const bool formula = !text.empty() && text[0] != '\0' &&
                       std::strchr("=+-@\t\r'", text[0]) != nullptr && !plain_number(text);
  const std::string s = formula ? "'" + text : text;
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

std::string csv_unfield(const std::string& cell) {
  return !cell.empty() && cell[0] == '\'' ? cell.substr(1) : cell;
}

std::string MetricValue::csv() const {
  switch (kind) {
    case Kind::Null: return "";
    case Kind::Int: return std::to_string(i);
    case Kind::Num: return json_number(d);
    case Kind::Str: return csv_field(s);
  }
  return "";
}

bool MetricValue::operator==(const MetricValue& o) const {
  if (kind != o.kind) return false;
  switch (kind) {
    case Kind::Null: return true;
    case Kind::Int: return i == o.i;
    case Kind::Num: return d == o.d;
    case Kind::Str: return s == o.s;
  }
  return false;
}

MetricRow& MetricRow::set(const std::string& key, MetricValue v) {
  for (auto& f : fields)
    if (f.first == key) {
      f.second = std::move(v);
      return *this;
    }
  fields.emplace_back(key, std::move(v));
  return *this;
}

const MetricValue* MetricRow::get(const std::string& key) const {
  for (const auto& f : fields)
    if (f.first == key) return &f.second;
  return nullptr;
}

std::string MetricRow::json() const {
  std::string out = "{";
  for (size_t i = 0; i < fields.size(); ++i) {
    if (i) out += ", ";
    out += json_quote(fields[i].first) + ": " + fields[i].second.json();
  }
  return out + "}";
}

namespace {

// The one JSON reader of run files: flat metric rows (parse_metric_row) and, with skip(), the
// nested objects and arrays of eval.json (json_member_text). Strings are decoded to UTF-8 (\\uXXXX
// escapes and surrogate pairs included); an unknown escape or a lone surrogate is malformed.
struct Parser {
  const std::string& s;
  const std::string& where;
  size_t p = 0;
  bool document = false;  // a whole JSON file (offsets, newlines) rather than one metrics line
  [[noreturn]] void bad(const std::string& what) const {
    if (document) fail(where, ": malformed JSON (", what, " at offset ", p, ")");
    fail(where, ": malformed metrics line (", what, " at column ", p + 1, ")");
  }
  void ws() {
    while (p < s.size() && (s[p] == ' ' || s[p] == '\t' || s[p] == '\r' || s[p] == '\n')) ++p;
  }
  bool at(char c) {
    ws();
    return p < s.size() && s[p] == c;
  }
  // Members of the object at p ('{' next): calls member(key) with p at each value, which must
  // consume it.
  template <class F>
  void object(F&& member) {
    expect('{');
    if (at('}')) {
      ++p;
      return;
    }
    while (true) {
      const std::string key = str();
      expect(':');
      member(key);
      if (at(',')) {
        ++p;
        continue;
      }
      expect('}');
      return;
    }
  }
  // Any value: a scalar, a string, or a nested object or array, at most kMaxJsonDepth levels deep
  // (a file nested deeper is refused, never followed down the stack).
  void skip(int depth = 1) {
    if ((at('{') || at('[')) && depth > kMaxJsonDepth)
      bad("nested deeper than " + std::to_string(kMaxJsonDepth) + " levels");
    if (at('{')) return object([this, depth](const std::string&) { skip(depth + 1); });
    if (at('[')) {
      ++p;
      if (at(']')) {
        ++p;
        return;
      }
      while (true) {
        skip(depth + 1);
        if (at(',')) {
          ++p;
          continue;
        }
        expect(']');
        return;
      }
    }
    value();
  }
  void expect(char c) {
    ws();
    if (p >= s.size() || s[p] != c) bad(std::string("expected '") + c + "'");
    ++p;
  }
  // The four hex digits of a \\u escape at p.
  uint32_t hex4() {
    if (p + 4 > s.size()) bad("bad \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = s[p + i];
      const int d = c >= '0' && c <= '9'   ? c - '0'
                    : c >= 'a' && c <= 'f' ? c - 'a' + 10
                    : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                           : -1;
      if (d < 0) bad("bad \\u escape");
      v = v * 16 + static_cast<uint32_t>(d);
    }
    p += 4;
    return v;
  }
  static void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  std::string str() {
    expect('"');
    std::string out;
    while (true) {
      if (p >= s.size()) bad("unterminated string");
      char c = s[p++];
      if (c == '"') break;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (p >= s.size()) bad("bad escape");
      char e = s[p++];
      switch (e) {
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case '"': case '\\': case '/': out += e; break;
        case 'u': {
          // UTF-16 code units as UTF-8: a surrogate pair is one code point; a lone surrogate is
          // no character and refused.
          uint32_t cp = hex4();
          if (cp >= 0xDC00 && cp <= 0xDFFF) bad("lone low surrogate in a \\u escape");
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (s.compare(p, 2, "\\u") != 0) bad("lone high surrogate in a \\u escape");
            p += 2;
            const uint32_t lo = hex4();
            if (lo < 0xDC00 || lo > 0xDFFF) bad("lone high surrogate in a \\u escape");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }
          append_utf8(out, cp);
          break;
        }
        default: bad("bad escape");
      }
    }
    return out;
  }
  MetricValue value() {
    ws();
    if (p >= s.size()) bad("missing value");
    if (s[p] == '"') return MetricValue::of(str());
    if (s.compare(p, 4, "null") == 0) { p += 4; return MetricValue::null(); }
    if (s.compare(p, 4, "true") == 0) { p += 4; return MetricValue::of(int64_t{1}); }
    if (s.compare(p, 5, "false") == 0) { p += 5; return MetricValue::of(int64_t{0}); }
    size_t end = p;
    while (end < s.size() && std::string("+-0123456789.eE").find(s[end]) != std::string::npos) ++end;
    if (end == p) bad("bad value");
    const std::string num = s.substr(p, end - p);
    p = end;
    if (num.find_first_of(".eE") == std::string::npos) {
      char* e = nullptr;
      long long v = std::strtoll(num.c_str(), &e, 10);
      if (*e) bad("bad integer");
      return MetricValue::of(static_cast<int64_t>(v));
    }
    char* e = nullptr;
    double v = std::strtod(num.c_str(), &e);
    if (*e) bad("bad number");
    return MetricValue::of(v);
  }
};

}  // namespace

MetricRow parse_metric_row(const std::string& line, const std::string& where) {
  Parser ps{line, where};
  MetricRow row;
  ps.object([&](const std::string& key) { row.fields.emplace_back(key, ps.value()); });
  ps.ws();
  if (ps.p != line.size()) ps.bad("trailing text");
  return row;
}

std::string json_member_text(const std::string& text, const std::string& key,
                             const std::string& where) {
  Parser ps{text, where};
  ps.document = true;
  std::string found;
  ps.object([&](const std::string& k) {
    ps.ws();
    const size_t b = ps.p;
    ps.skip(2);  // a member's value: the second level
    if (k == key) found = text.substr(b, ps.p - b);
  });
  ps.ws();
  if (ps.p != text.size()) ps.bad("trailing text");
  return found;
}

std::vector<MetricRow> parse_metric_rows(const std::string& text, const std::string& where) {
  Parser ps{text, where};
  ps.document = true;
  std::vector<MetricRow> rows;
  ps.expect('[');
  if (ps.at(']')) {
    ++ps.p;
  } else {
    while (true) {
      MetricRow row;
      ps.object([&](const std::string& key) { row.fields.emplace_back(key, ps.value()); });
      rows.push_back(std::move(row));
      if (ps.at(',')) {
        ++ps.p;
        continue;
      }
      ps.expect(']');
      break;
    }
  }
  ps.ws();
  if (ps.p != text.size()) ps.bad("trailing text");
  return rows;
}

std::vector<MetricRow> parse_metrics_jsonl(const std::string& text, const std::string& where) {
  std::vector<MetricRow> rows;
  std::istringstream in(text);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    rows.push_back(parse_metric_row(line, where + ":" + std::to_string(n)));
  }
  return rows;
}

const std::vector<std::string>& metrics_csv_columns() {
  static const std::vector<std::string> c = {
      "type",     "step",       "split",      "loss",           "lr",
      "grad_norm", "tokens_per_s", "elapsed_s", "perplexity", "token_accuracy",
      "exact_match"};
  return c;
}

std::string metrics_csv_header() {
  std::string out;
  for (const auto& c : metrics_csv_columns()) out += (out.empty() ? "" : ",") + c;
  return out;
}

std::string metrics_csv_line(const MetricRow& row) {
  std::string out;
  bool first = true;
  for (const auto& c : metrics_csv_columns()) {
    if (!first) out += ",";
    first = false;
    const MetricValue* v = row.get(c);
    if (v) out += v->csv();
  }
  return out;
}

}  // namespace pelab
