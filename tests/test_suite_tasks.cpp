// Tests of the tasks of the length-generalisation literature (data/literature_tasks.cpp,
// docs/tasks.md): each task's generator against an independent reference written here (itself
// checked on hand-written examples, several from the papers), length accounting (source and
// target sizes against max_source_len / max_target_len), determinism by seed, and the lengths a
// task cannot generate (data errors, and config errors naming FILE:LINE).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <set>
#include <string>

#include "data/error.h"
#include "data/tasks.h"
#include "tests/test_util.h"
#include "train/config.h"
#include "train/task_data.h"

namespace pelab {
namespace {

using data::DataError;
using data::Example;
using data::Task;
using data::TaskSpec;

std::unique_ptr<Task> task(const std::string& name, int64_t lo = 1, int64_t hi = 12,
                           int64_t num_symbols = 2) {
  TaskSpec s;
  s.name = name;
  s.num_symbols = num_symbols;
  s.train_min_len = lo;
  s.train_max_len = hi;
  return data::make_task(s);
}

// ---- independent references: source text -> target text (one character per symbol) ----

std::string bits_le(uint64_t v) {  // little-endian, no high zeros
  std::string s;
  for (; v; v >>= 1) s += static_cast<char>('0' + (v & 1));
  return s;
}
uint64_t from_le(const std::string& s) {
  uint64_t v = 0;
  for (size_t i = s.size(); i-- > 0;) v = 2 * v + static_cast<uint64_t>(s[i] - '0');
  return v;
}

std::string ref_parity(const std::string& s) {
  return std::count(s.begin(), s.end(), '1') % 2 ? "1" : "0";
}
// Even number of "ab"/"ba" pairs <=> the string starts and ends with the same symbol.
std::string ref_even_pairs(const std::string& s) { return s.front() == s.back() ? "1" : "0"; }
std::string ref_cycle(const std::string& s) {
  const long d = static_cast<long>(std::count(s.begin(), s.end(), '+')) -
                 static_cast<long>(std::count(s.begin(), s.end(), '-'));
  return std::to_string(((d % 5) + 5) % 5);
}
// Sum of signed products, the terms split at + and -.
std::string ref_modular(const std::string& s) {
  long total = 0, sign = 1;
  size_t i = 0;
  while (i < s.size()) {
    long prod = s[i] - '0';
    i += 1;
    while (i < s.size() && s[i] == '*') {
      prod *= s[i + 1] - '0';
      i += 2;
    }
    total += sign * prod;
    if (i < s.size()) {
      sign = s[i] == '+' ? 1 : -1;
      i += 1;
    }
  }
  return std::to_string(((total % 5) + 5) % 5);
}
std::string ref_odds_first(const std::string& s) {
  std::string odd, even;
  for (size_t i = 0; i < s.size(); ++i) (i % 2 == 0 ? odd : even) += s[i];
  return odd + even;
}
std::string ref_stack(const std::string& s) {
  std::string st;  // bottom .. top
  for (char c : s) {
    if (c == '0' || c == '1') st += c;
    if (c == 'a') st += '0';
    if (c == 'b') st += '1';
    if (c == 'p' && !st.empty()) st.pop_back();
  }
  return std::string(st.rbegin(), st.rend());
}
std::string ref_binary(const std::string& s) {
  const size_t op = s.find_first_of("+*");
  const uint64_t a = from_le(s.substr(0, op)), b = from_le(s.substr(op + 1));
  return bits_le(s[op] == '+' ? a + b : a * b);
}
std::string ref_missing(const std::string& s) {
  const size_t i = s.find('_'), h = s.size() / 2;
  return std::string(1, s[i < h ? i + h : i - h]);
}
std::string ref_sqrt(const std::string& s) {
  uint64_t x = 0;
  for (char c : s) x = 2 * x + static_cast<uint64_t>(c - '0');
  uint64_t r = static_cast<uint64_t>(std::sqrt(static_cast<long double>(x)));
  while (r * r > x) --r;
  while ((r + 1) * (r + 1) <= x) ++r;
  std::string out;
  for (size_t i = 0; i < (s.size() + 1) / 2; ++i, r >>= 1) out = static_cast<char>('0' + (r & 1)) + out;
  return out;
}
std::string ref_summation(const std::string& s) {
  long sum = 0;
  for (char c : s) sum += c - '0';
  return std::to_string(sum % 10);
}
std::string ref_polynomial(const std::string& s) {
  const size_t bar = s.find('|');
  const long x = s[bar + 1] - '0';
  long value = 0;
  for (size_t i = 0; i < bar; ++i) {
    long p = 1;
    for (size_t k = 0; k < bar - 1 - i; ++k) p = p * x % 10;
    value = (value + (s[i] - '0') * p) % 10;
  }
  return std::to_string(value);
}

using Ref = std::function<std::string(const std::string&)>;
const std::map<std::string, Ref>& references() {
  static const std::map<std::string, Ref> r = {
      {"parity_check", ref_parity},       {"even_pairs", ref_even_pairs},
      {"cycle_navigation", ref_cycle},    {"modular_arithmetic", ref_modular},
      {"odds_first", ref_odds_first},     {"stack_manipulation", ref_stack},
      {"binary_addition", ref_binary},    {"binary_multiplication", ref_binary},
      {"missing_duplicate", ref_missing}, {"compute_sqrt", ref_sqrt},
      {"summation", ref_summation},       {"polynomial_evaluation", ref_polynomial},
  };
  return r;
}

TEST(SuiteTasks, ReferencesAgreeWithHandWrittenExamples) {
  EXPECT_EQ(ref_parity("1011"), "1");
  EXPECT_EQ(ref_parity("0110"), "0");
  EXPECT_EQ(ref_even_pairs("abba"), "1");  // ab, ba: two pairs
  EXPECT_EQ(ref_even_pairs("aab"), "0");   // ab: one pair
  EXPECT_EQ(ref_cycle("+-=--"), "3");      // 1 - 1 + 0 - 1 - 1 = -2 = 3 (mod 5), Deletang et al.
  EXPECT_EQ(ref_cycle("+++-"), "2");
  EXPECT_EQ(ref_modular("1+2*3"), "2");  // the three examples of Deletang et al. (modulo 5)
  EXPECT_EQ(ref_modular("1-1-1"), "4");
  EXPECT_EQ(ref_modular("0*1+4*3-2"), "0");
  EXPECT_EQ(ref_odds_first("012345"), "024135");
  EXPECT_EQ(ref_stack("0110bpp"), "110");  // 0110, push 1, pop, pop -> 011, read top first
  EXPECT_EQ(ref_stack("110ppp"), "");
  EXPECT_EQ(ref_binary("001+01101"), "01011");  // 4 + 22 = 26 (little-endian), Deletang et al.
  EXPECT_EQ(ref_binary("1001+000001"), "100101");  // 9 + 32 = 41
  EXPECT_EQ(ref_binary("11*01"), "011");           // 3 * 2 = 6
  EXPECT_EQ(ref_missing("01100_10"), "1");          // w = 0110
  EXPECT_EQ(ref_sqrt("100101"), "110");             // 37 -> 6, three bits
  EXPECT_EQ(ref_sqrt("111"), "10");                 // 7 -> 2, two bits
  EXPECT_EQ(ref_summation("999"), "7");
  EXPECT_EQ(ref_polynomial("213|2"), "3");  // 2*4 + 1*2 + 3 = 13
}

TEST(SuiteTasks, GeneratorsMatchTheReferencesAndAccountLengths) {
  for (const auto& [name, ref] : references()) {
    auto t = task(name, 1, 30, name == "odds_first" ? 5 : 2);
    std::set<int64_t> seen;
    for (int64_t L = 1; L <= 30; ++L) {
      if (!t->length_problem(L).empty()) continue;
      seen.insert(L);
      for (const Example& ex : t->make_split(1000 + static_cast<uint64_t>(L), 40, L, L)) {
        // The source length is the task length (polynomial_evaluation: plus "|" and x).
        ASSERT_EQ(static_cast<int64_t>(ex.src.size()), t->max_source_len(L)) << name << " " << L;
        ASSERT_EQ(static_cast<int64_t>(ex.src.size()),
                  name == "polynomial_evaluation" ? L + 2 : L) << name;
        ASSERT_LE(static_cast<int64_t>(ex.tgt.size()), t->max_target_len(L)) << name << " " << L;
        const std::string src = t->render(ex.src), tgt = t->render(ex.tgt);
        ASSERT_EQ(tgt, ref(src)) << name << ": " << src;
        if (name == "compute_sqrt") {
          ASSERT_EQ(static_cast<int64_t>(tgt.size()), (L + 1) / 2);
        }
        if (name == "binary_addition" || name == "binary_multiplication") {
          const size_t op = src.find_first_of("+*");
          ASSERT_NE(from_le(src.substr(0, op)), 0u) << src;  // operands are >= 1
          ASSERT_NE(from_le(src.substr(op + 1)), 0u) << src;
        }
      }
    }
    EXPECT_FALSE(seen.empty()) << name;
  }
}

TEST(SuiteTasks, TrainingLengthsAreTheValidOnesOfTheRange) {
  // modular_arithmetic only has odd lengths: a range [2, 9] trains on 3, 5, 7, 9, all of them.
  auto t = task("modular_arithmetic", 2, 9);
  std::set<size_t> lengths;
  for (const Example& ex : t->make_split(5, 400, 2, 9)) lengths.insert(ex.src.size());
  EXPECT_EQ(lengths, (std::set<size_t>{3, 5, 7, 9}));
  EXPECT_EQ(t->valid_lengths(2, 9), (std::vector<int64_t>{3, 5, 7, 9}));
  for (int64_t k = 0; k < 50; ++k)  // length_at (train.stop_when.per_length) agrees
    EXPECT_EQ(t->length_at(5, k, 2, 9), static_cast<int64_t>(t->example_at(5, k, 2, 9).src.size()));
  // A task accepting every length draws exactly as before (uniform_int(min, max)).
  auto c = task("copy", 1, 12, 10);
  for (int64_t k = 0; k < 20; ++k) {
    data::Rng rng = data::Rng::for_index(77, static_cast<uint64_t>(k));
    EXPECT_EQ(static_cast<int64_t>(c->example_at(77, k, 3, 11).src.size()), rng.uniform_int(3, 11));
  }
}

TEST(SuiteTasks, DeterministicBySeed) {
  for (const auto& kv : references()) {
    auto t1 = task(kv.first, 3, 15), t2 = task(kv.first, 3, 15);
    const auto a = t1->make_split(42, 60, 3, 15);
    EXPECT_EQ(a, t2->make_split(42, 60, 3, 15)) << kv.first;
    EXPECT_NE(a, t1->make_split(43, 60, 3, 15)) << kv.first;
    EXPECT_EQ(a[9], t1->example_at(42, 9, 3, 15)) << kv.first;
  }
  // Pinned examples (the same on every platform: data/rng.h is our own integer mapping).
  auto pin = [](const std::string& name, int64_t L) {
    auto t = task(name, 1, 12);
    const Example ex = t->example_at(1, 0, L, L);
    return t->render(ex.src) + " -> " + t->render(ex.tgt);
  };
  EXPECT_EQ(pin("modular_arithmetic", 7), "2-0-3-3 -> 1");
  EXPECT_EQ(pin("binary_addition", 9), "1+0010011 -> 1010011");
  EXPECT_EQ(pin("stack_manipulation", 8), "1aaaabpa -> 000001");
}

void expect_data_error(const std::function<void()>& fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "expected DataError";
  } catch (const DataError& e) {
    for (const auto& p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what() << " lacks " << p;
  }
}

TEST(SuiteTasks, LengthsATaskCannotGenerateAreErrors) {
  auto mod = task("modular_arithmetic", 1, 9);
  expect_data_error([&] { mod->make_split(1, 2, 8, 8); }, {"modular_arithmetic", "8", "odd"});
  auto miss = task("missing_duplicate", 2, 10);
  expect_data_error([&] { miss->make_split(1, 2, 7, 7); }, {"missing_duplicate", "7", "even"});
  auto add = task("binary_addition", 3, 10);
  expect_data_error([&] { add->make_split(1, 2, 2, 2); }, {"binary_addition", ">= 3"});
  auto sq = task("compute_sqrt", 1, 10);
  expect_data_error([&] { sq->make_split(1, 2, 127, 127); }, {"compute_sqrt", "126"});
  EXPECT_EQ(sq->make_split(1, 2, 126, 126)[0].tgt.size(), 63u);
  // A training range without one valid length.
  expect_data_error([] { task("missing_duplicate", 5, 5); },
                    {"missing_duplicate", "no training length in [5, 5]", "even"});
}

// Every task is a (source, target) pair, so both formulations take it; positions are counted as
// docs/training.md says (decoder: bos + source + sep + target; seq2seq: the longer side + 1).
TEST(SuiteTasks, BothFormulationsTakeTheTasks) {
  for (const std::string arch : {"seq2seq", "decoder"}) {
    const Config cfg = load_config_string(
        "task:\n  name: polynomial_evaluation\n  formulation: " + arch +
        "\n  train_max_len: 6\n  test_lengths: [9]\n  num_eval_examples: 5\n"
        "model:\n  arch: " + arch + "\n  decoder_layers: 1\n  encoder_layers: 1\n",
        "cfg.yaml");
    TaskData data(cfg);
    EXPECT_EQ(data.train_positions(), arch == "decoder" ? (6 + 2) + 1 + 2 : (6 + 2) + 1) << arch;
    ASSERT_EQ(data.tests().size(), 1u);
    EXPECT_EQ(data.tests()[0].examples[0].src.size(), 11u);
    EXPECT_EQ(data.train_batch(0).size(), static_cast<size_t>(cfg.train.batch_size));
  }
}

// ---- item 5: the config names the key's FILE:LINE and nothing is trained ----

std::string config_error(const std::string& yaml) {
  try {
    (void)load_config_string(yaml, "cfg.yaml");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(SuiteTasks, ConfigRejectsLengthsTheTaskCannotGenerate) {
  const std::string odd = config_error(
      "task:\n  name: modular_arithmetic\n  train_min_len: 1\n  train_max_len: 9\n"
      "  test_lengths: [11, 12]\n");
  EXPECT_NE(odd.find("cfg.yaml:5"), std::string::npos) << odd;
  EXPECT_NE(odd.find("cannot generate length 12"), std::string::npos) << odd;
  EXPECT_NE(odd.find("odd"), std::string::npos) << odd;
  const std::string range = config_error(
      "task:\n  name: missing_duplicate\n  train_min_len: 3\n  train_max_len: 3\n"
      "  test_lengths: [4]\n");
  EXPECT_TRUE(range.rfind("cfg.yaml:3: ", 0) == 0 || range.rfind("cfg.yaml:4: ", 0) == 0) << range;
  EXPECT_NE(range.find("no training length"), std::string::npos) << range;
  const std::string unknown = config_error("task:\n  name: parity_chek\n");
  EXPECT_NE(unknown.find("cfg.yaml:2"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("did you mean 'parity_check'"), std::string::npos) << unknown;
  EXPECT_EQ(config_error("task:\n  name: modular_arithmetic\n  train_max_len: 9\n"
                         "  test_lengths: [11, 21]\n"),
            "");
}

}  // namespace
}  // namespace pelab
