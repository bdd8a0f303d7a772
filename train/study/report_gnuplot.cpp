// pelab — running gnuplot safely: finding it, quoting every string it reads so that it stays
// inert, drawing into a temporary that is checked as a whole PNG before it replaces the picture
// (report.h; shared with `pelab plot-pe`).
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include "pelab/error.h"
#include "pelab/strings.h"
#include "train/study/report.h"

namespace fs = std::filesystem;

namespace pelab {

// ---------------- gnuplot ----------------

std::string gnuplot_path() {
  if (const char* env = std::getenv("PELAB_GNUPLOT")) {
    const std::string p = env;
    if (p.empty()) return "";
    return access(p.c_str(), X_OK) == 0 ? p : "";
  }
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/bin:/bin";
  std::stringstream ss(dirs);
  std::string d;
  while (std::getline(ss, d, ':')) {
    if (d.empty()) continue;
    const std::string p = d + "/gnuplot";
    if (access(p.c_str(), X_OK) == 0) return p;
  }
  return "";
}

std::string gnuplot_png_terminal() {
  static std::string cached;
  static bool done = false;
  if (done) return cached;
  done = true;
  const std::string gp = gnuplot_path();
  if (gp.empty()) return cached = "";
  const std::string cmd = shell_word(gp) + " -e 'set terminal' 2>&1";
  FILE* f = popen(cmd.c_str(), "r");
  std::string text;
  if (f) {
    char buf[512];
    while (fgets(buf, sizeof buf, f)) text += buf;
    pclose(f);
  }
  return cached = text.find("pngcairo") != std::string::npos ? "pngcairo" : "png";
}

std::string gnuplot_quote(const std::string& s) {
  std::string out = "\"";
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c < 0x20 || c == 0x7f || c == '`' || c == '@' || c == '$') {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\%03o", static_cast<unsigned>(c));
      out += buf;
    } else {
      out += ch;  // printable ASCII and the bytes of UTF-8 text: printed as they are
    }
  }
  return out + "\"";
}

bool run_gnuplot(const std::string& png_path, const std::string& script, std::string* error) {
  const std::string gp = gnuplot_path();
  if (gp.empty()) {
    if (error) *error = "gnuplot not found";
    return false;
  }
  const fs::path png = fs::absolute(png_path);
  const fs::path dir = png.parent_path();
  const std::string script_name = png.stem().string() + ".gp";
  write_text_file((dir / script_name).string(),
                  "set output (ARGC > 0 ? ARG1 : " + gnuplot_quote(png.filename().string()) +
                      ")\n" + script);
  // gnuplot draws into a new temporary of ours (so never through a link planted at the PNG's name)
  // and its messages go to another; both are removed whatever happens.
  std::string tmp_png, tmp_err;
  ::close(create_temporary_for(png.string(), &tmp_png));
  try {
    ::close(create_temporary_for((dir / script_name).string() + ".err", &tmp_err));
  } catch (...) {
    ::unlink(tmp_png.c_str());
    throw;
  }
  const std::string cmd = "cd " + shell_word(dir.string()) + " && " + shell_word(gp) + " -c " +
                          shell_word(script_name) + " " +
                          shell_word(fs::path(tmp_png).filename().string()) + " > /dev/null 2> " +
                          shell_word(tmp_err);
  const int rc = std::system(cmd.c_str());
  std::string msg;
  try {
    msg = read_text_file(tmp_err);
  } catch (const Error&) {
  }
  ::unlink(tmp_err.c_str());
  if (rc != 0) {
    ::unlink(tmp_png.c_str());
    if (error) {
      while (!msg.empty() && (msg.back() == '\n' || msg.back() == '\r')) msg.pop_back();
      *error = "gnuplot " + script_name + " failed (status " + std::to_string(rc) + ")" +
               (msg.empty() ? "" : ": " + msg);
    }
    return false;
  }
  // gnuplot exits 0 even when it could not write the whole picture (a full disk).
  std::string why;
  if (!is_png_file(tmp_png, &why)) {
    ::unlink(tmp_png.c_str());
    fail("cannot write ", png.string(), ": gnuplot's picture is not a whole PNG (", why,
         "); is the disk full? The previous ", png.filename().string(), ", if any, is kept");
  }
  if (std::rename(tmp_png.c_str(), png.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp_png.c_str());
    fail("cannot write ", png.string(), ": ", std::strerror(err));
  }
  return true;
}

namespace {

// CRC-32 of PNG chunks (ISO 3309, polynomial 0xEDB88320).
uint32_t png_crc(const unsigned char* p, size_t n) {
  static const std::vector<uint32_t> table = [] {
    std::vector<uint32_t> t(256);
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t big_endian_u32(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

}  // namespace

bool is_png_file(const std::string& path, std::string* why) {
  auto bad = [&](const std::string& w) {
    if (why) *why = w;
    return false;
  };
  static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A};
  std::ifstream in(path, std::ios::binary);
  if (!in.good()) return bad("cannot read it");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto* b = reinterpret_cast<const unsigned char*>(text.data());
  const size_t size = text.size();
  const std::string size_text = std::to_string(size) + " bytes";
  if (size < 8 || !std::equal(b, b + 8, sig)) return bad(size_text + ", no PNG signature");
  size_t at = 8;
  bool first = true;
  while (true) {
    if (size - at < 12)
      return bad(size_text + ", cut short after byte " + std::to_string(at) + " (no IEND chunk)");
    const uint32_t len = big_endian_u32(b + at);
    const std::string type(text, at + 4, 4);
    if (len > 0x7FFFFFFFu || size - at - 12 < len)
      return bad(size_text + ", chunk " + type + " at byte " + std::to_string(at) +
                 " runs past the end (no IEND chunk)");
    if (png_crc(b + at + 4, 4 + size_t{len}) != big_endian_u32(b + at + 8 + len))
      return bad(size_text + ", chunk " + type + " at byte " + std::to_string(at) +
                 " has a bad CRC");
    if (first && type != "IHDR")
      return bad(size_text + ", the first chunk is " + type + ", not IHDR");
    first = false;
    at += 12 + size_t{len};
    if (type == "IEND")
      return at == size ? true : bad(size_text + ", data after the IEND chunk");
  }
}

}  // namespace pelab
