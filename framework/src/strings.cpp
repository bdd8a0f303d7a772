// pelab — small string helpers (pelab/strings.h).
#include "pelab/strings.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <limits>

namespace pelab {

namespace {
bool space(char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; }
}  // namespace

std::string trim(const std::string& s) {
  size_t a = 0, b = s.size();
  while (a < b && space(s[a])) ++a;
  while (b > a && space(s[b - 1])) --b;
  return s.substr(a, b - a);
}

std::string join(const std::vector<std::string>& v, const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + v[i];
  return out;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string printf_number(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

std::string shell_word(const std::string& s) {
  if (!s.empty() &&
      s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                          "_-+./=:,@") == std::string::npos)
    return s;
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

bool strip_utf8_bom(std::string& s) {
  if (s.compare(0, 3, "\xEF\xBB\xBF") != 0) return false;
  s.erase(0, 3);
  return true;
}

size_t edit_distance(const std::string& a0, const std::string& b0) {
  const std::string a = lower(a0), b = lower(b0);
  const size_t n = a.size(), m = b.size();
  std::vector<std::vector<size_t>> d(n + 1, std::vector<size_t>(m + 1));
  for (size_t i = 0; i <= n; ++i) d[i][0] = i;
  for (size_t j = 0; j <= m; ++j) d[0][j] = j;
  for (size_t i = 1; i <= n; ++i)
    for (size_t j = 1; j <= m; ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[n][m];
}

std::string nearest_name(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_d = std::numeric_limits<size_t>::max();
  for (const auto& c : candidates) {
    const size_t d = edit_distance(word, c);
    if (d < best_d) best_d = d, best = c;
  }
  if (best.empty()) return best;
  const size_t limit = std::max<size_t>(2, word.size() / 3);
  if (best_d <= limit) return best;
  const std::string lw = lower(word);
  for (const auto& c : candidates) {
    const std::string lc = lower(c);
    if (lc.size() >= 3 && lw.size() >= 3 &&
        (lw.find(lc) != std::string::npos || lc.find(lw) != std::string::npos))
      return c;
  }
  return "";
}

}  // namespace pelab
