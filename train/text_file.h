// pelab — whole-file text I/O shared by the trainer, evaluation and the studies (compare, suite,
// plot-pe, report), and the way pelab opens every file it writes. A run or report folder may come
// from someone else, so nothing here writes through a symbolic link planted in it: a whole-file
// write goes to a new, uniquely named temporary in the target's folder (O_EXCL | O_NOFOLLOW) that
// is renamed over PATH (a link at PATH is replaced, its target untouched), so a reader never sees a
// half-written file and two writers of the same file never share a temporary; files opened in place
// (appends, locks) are opened O_NOFOLLOW and must be regular files. Every failure throws one
// pelab::Error naming the path and the system's reason, and leaves no temporary behind.
#pragma once
#include <sys/types.h>

#include <string>

namespace pelab {

void write_text_file(const std::string& path, const std::string& text);
std::string read_text_file(const std::string& path);

// Creates and opens (write-only) a new empty file in the folder of `path` for an atomic write:
// "<path>.tmp.<pid>.<n>" with the smallest n from 0 whose name is free, created O_CREAT | O_EXCL |
// O_NOFOLLOW (a name already taken, by a planted link or another writer, is skipped, never
// opened). Returns the descriptor and sets *tmp; throws "cannot write <path>: <reason>".
int create_temporary_for(const std::string& path, std::string* tmp, mode_t mode = 0666);

// Opens `path` with `flags` (O_WRONLY or O_RDWR, maybe O_CREAT / O_APPEND) without following a
// symbolic link in its last component, and only when it is a regular file (a FIFO would block, a
// device is not ours). Throws one line naming the path: "<path> is a symbolic link; pelab never
// writes through one: remove it", "... is not a regular file ..." or "cannot open <path> for
// writing: <reason>".
int open_for_writing(const std::string& path, int flags, mode_t mode = 0666);

// Makes `path` a folder pelab writes into: creates it (and its parents) when missing, then checks
// that it is a folder. A symbolic link there — even one to a folder, planted in someone else's run
// folder — is refused, never written through: "<path> is a symbolic link; pelab never writes
// through one: remove it"; anything else but a folder is refused too.
void make_own_folder(const std::string& path);
// The same check without creating anything: true when `path` is a folder, false when nothing is
// there; throws as make_own_folder for a link or anything else.
bool own_folder_exists(const std::string& path);

}  // namespace pelab
