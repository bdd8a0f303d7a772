// pelab — whole-file text I/O shared by the trainer, evaluation and the studies (compare, suite,
// plot-pe, report). A write goes to PATH.tmp and is renamed over PATH, so a reader never sees a
// half-written file; every failure throws pelab::Error naming the path.
#pragma once
#include <string>

namespace pelab {

void write_text_file(const std::string& path, const std::string& text);
std::string read_text_file(const std::string& path);

}  // namespace pelab
