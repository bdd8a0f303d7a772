// pelab — whole-file text I/O (text_file.h).
#include "train/text_file.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "pelab/error.h"

namespace fs = std::filesystem;

namespace pelab {

void write_text_file(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    PELAB_CHECK(out.good(), "cannot write ", path);
    out << text;
    out.flush();
    PELAB_CHECK(out.good(), "error writing ", path);
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  PELAB_CHECK(!ec, "cannot write ", path, ": ", ec.message());
}

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  PELAB_CHECK(in.good(), "cannot read ", path);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

}  // namespace pelab
