// pelab — small string helpers shared by every layer (the engine, models, data, train): trimming,
// joining, case folding and the "did you mean" of every error that names an unknown word (config
// keys, scheme names, commands, command-line options). They know nothing of what the words mean.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

namespace pelab {

// `s` without leading and trailing ASCII white space (space, \t, \n, \v, \f, \r: std::isspace in
// the C locale).
std::string trim(const std::string& s);

// The elements of `v` with `sep` between them ("" for an empty list).
std::string join(const std::vector<std::string>& v, const std::string& sep);

// `s` with ASCII letters in lower case.
std::string lower(std::string s);

// `v` printed with one printf conversion for a double, e.g. printf_number("%.3f", v) (at most 63
// characters).
std::string printf_number(const char* format, double v);

// `s` as one /bin/sh word: as it is when it has only letters, digits and _-+./=:,@, else in single
// quotes (a ' inside written '\'').
std::string shell_word(const std::string& s);

// Removes a leading UTF-8 byte-order mark (EF BB BF) from `s`, as text files written on Windows
// often start with one; true if there was one. Every text input is read through it, so the mark
// never becomes a symbol, a key or part of the first line.
bool strip_utf8_bom(std::string& s);

// Optimal string alignment distance (Levenshtein plus adjacent transpositions), case-folded.
size_t edit_distance(const std::string& a, const std::string& b);

// The candidate closest to `word` when it is close enough to be a plausible typo (edit distance
// at most max(2, |word| / 3), or one of the two containing the other when both have at least three
// characters: "num_heads" -> "heads"), else "".
std::string nearest_name(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace pelab
