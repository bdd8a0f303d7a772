// tests/test_data.cpp - tests of the data library (vocab, tasks, streams, text files, LM,
// batching).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>

#include "data/batch.h"
#include "data/error.h"
#include "data/lm.h"
#include "data/rng.h"
#include "data/tasks.h"
#include "data/textfile.h"
#include "data/vocab.h"

using namespace pelab::data;
namespace fs = std::filesystem;

namespace {

// A fresh scratch directory per test, removed at the end.
class ScratchDir {
 public:
  ScratchDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::temp_directory_path() /
            ("pelab_data_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string write(const std::string& name, const std::string& content) const {
    const fs::path p = path_ / name;
    std::ofstream(p, std::ios::binary) << content;
    return p.string();
  }
  std::string path() const { return path_.string(); }

 private:
  fs::path path_;
};

// Runs fn, expects a DataError whose message contains every one of `parts`.
template <class F>
void expect_data_error(F&& fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "expected DataError";
  } catch (const DataError& e) {
    for (const auto& p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos)
          << "message '" << e.what() << "' lacks '" << p << "'";
  }
}

TaskSpec spec(const std::string& name, int64_t lo = 1, int64_t hi = 12, int64_t n = 10) {
  TaskSpec s;
  s.name = name;
  s.num_symbols = n;
  s.train_min_len = lo;
  s.train_max_len = hi;
  return s;
}

// Digits (ids) -> number, given the task vocabulary.
uint64_t to_number(const Vocab& v, std::vector<int64_t>::const_iterator b,
                   std::vector<int64_t>::const_iterator e, uint64_t base) {
  uint64_t x = 0;
  for (auto it = b; it != e; ++it) x = x * base + std::stoull(v.symbol(*it));
  return x;
}

}  // namespace

// ---------------------------------------------------------------- RNG

TEST(DataRng, UniformIntCoversRangeAndIsDeterministic) {
  Rng a(42), b(42), c(43);
  std::map<int64_t, int> hist;
  bool differs = false;
  for (int i = 0; i < 20000; ++i) {
    const int64_t x = a.uniform_int(-3, 3);
    EXPECT_EQ(x, b.uniform_int(-3, 3));
    differs = differs || x != c.uniform_int(-3, 3);
    ASSERT_GE(x, -3);
    ASSERT_LE(x, 3);
    ++hist[x];
  }
  EXPECT_TRUE(differs);
  ASSERT_EQ(hist.size(), 7u);
  for (const auto& kv : hist) EXPECT_NEAR(kv.second, 20000 / 7.0, 300) << kv.first;
  EXPECT_NE(Rng::for_index(1, 0).next_u64(), Rng::for_index(1, 1).next_u64());
  EXPECT_NE(Rng::for_index(1, 0).next_u64(), Rng::for_index(2, 0).next_u64());
  EXPECT_NE(derive_seed(7, "train"), derive_seed(7, "valid"));
  EXPECT_EQ(derive_seed(7, "train"), derive_seed(7, "train"));
  for (int i = 0; i < 1000; ++i) {
    const double u = a.uniform01();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
  }
  EXPECT_THROW(a.uniform_int(2, 1), DataError);
}

// ---------------------------------------------------------------- Vocab

TEST(DataVocab, SpecialsRoundTripAndCoding) {
  Vocab v;
  EXPECT_EQ(v.size(), 5);
  EXPECT_EQ(v.id("<pad>"), Vocab::kPad);
  EXPECT_EQ(v.id("<bos>"), Vocab::kBos);
  EXPECT_EQ(v.id("<eos>"), Vocab::kEos);
  EXPECT_EQ(v.id("<unk>"), Vocab::kUnk);
  EXPECT_EQ(v.id("<sep>"), Vocab::kSep);
  const int64_t x = v.add("x"), y = v.add("yz");
  EXPECT_EQ(x, 5);
  EXPECT_EQ(y, 6);
  EXPECT_EQ(v.add("x"), 5);
  EXPECT_EQ(v.id("nope"), Vocab::kUnk);

  const Vocab restored(v.tokens());
  EXPECT_EQ(restored, v);
  EXPECT_EQ(restored.id("yz"), 6);

  int64_t unk = 0;
  const auto ids = v.encode({"x", "q", "yz"}, &unk);
  EXPECT_EQ(ids, (std::vector<int64_t>{5, Vocab::kUnk, 6}));
  EXPECT_EQ(unk, 1);
  EXPECT_EQ(v.decode({Vocab::kBos, 5, 6, Vocab::kEos, Vocab::kPad}, " "), "x yz");
  EXPECT_EQ(v.decode({Vocab::kBos, 5}, "", false), "<bos>x");
  EXPECT_THROW(v.symbol(99), DataError);

  expect_data_error(
      [] {
        Vocab({"<pad>", "<bos>", "<eos>", "<unk>", "oops"});
      },
      {"entry 4", "oops"});
  expect_data_error(
      [] {
        Vocab({"<pad>", "<bos>", "<eos>", "<unk>", "<sep>", "a", "a"});
      },
      {"duplicate", "'a'"});
  expect_data_error([] { Vocab({"<pad>"}); }, {"special"});
}

TEST(DataVocab, Tokenization) {
  EXPECT_EQ(parse_tokenization("char"), Tokenization::Char);
  EXPECT_EQ(parse_tokenization("space"), Tokenization::Space);
  expect_data_error([] { parse_tokenization("bpe"); }, {"bpe"});
  const std::string s = "h\xC3\xA9llo \xE2\x82\xAC";  // "héllo €"
  const auto chars = tokenize(s, Tokenization::Char);
  ASSERT_EQ(chars.size(), 7u);
  EXPECT_EQ(chars[1], "\xC3\xA9");
  EXPECT_EQ(chars[6], "\xE2\x82\xAC");
  // Invalid / truncated UTF-8: each bad byte is its own symbol, nothing is lost.
  const std::string bad =
      "a\xFF\xC3"
      "b\xE2\x82";
  const auto bt = tokenize(bad, Tokenization::Char);
  std::string joined;
  for (const auto& t : bt) joined += t;
  EXPECT_EQ(joined, bad);
  EXPECT_EQ(bt.size(), 6u);
  EXPECT_EQ(tokenize("  ab  c\td ", Tokenization::Space),
            (std::vector<std::string>{"ab", "c", "d"}));
  const Vocab v = build_vocab({"ba", "ac"}, Tokenization::Char);
  EXPECT_EQ(v.tokens(),
            (std::vector<std::string>{"<pad>", "<bos>", "<eos>", "<unk>", "<sep>", "a", "b", "c"}));
  EXPECT_EQ(v.decode(v.encode_text("cab", Tokenization::Char)), "cab");
}

// ---------------------------------------------------------------- tasks

TEST(DataTasks, RegistryAndValidation) {
  const auto names = task_names();
  for (const char* n : {"copy", "reverse", "sort", "duplicate", "addition", "count"})
    EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
  expect_data_error([] { make_task(spec("nosuch")); }, {"nosuch", "copy"});
  expect_data_error([] { make_task(spec("copy", 0, 5)); }, {"copy", "train_min_len"});
  expect_data_error([] { make_task(spec("reverse", 5, 4)); }, {"reverse", "train_max_len"});
  expect_data_error([] { make_task(spec("sort", 1, 4, 0)); }, {"sort", "num_symbols"});
  expect_data_error([] { make_task(spec("addition", 1, 4, 11)); }, {"addition", "num_symbols"});
  // Every number task checks its base in one place (Task::add_digits): 1 and 11 are refused.
  for (const char* n : {"addition", "addition_reversed", "multiplication", "multi_addition"})
    for (int64_t base : {1, 11})
      expect_data_error([&] { make_task(spec(n, 1, 4, base)); },
                        {std::string("task '") + n + "'",
                         "num_symbols (the number base) = " + std::to_string(base) +
                             " must be in [2, 10]"});
  auto t = make_task(spec("copy"));
  expect_data_error([&] { t->make_split(1, 3, 0, 2); }, {"copy", "length"});
  EXPECT_EQ(t->vocab().size(), 15);
  EXPECT_EQ(t->vocab().symbol(5), "0");
  EXPECT_EQ(t->vocab().symbol(14), "9");
}

TEST(DataTasks, TargetsAreCorrect) {
  for (const std::string name : {"copy", "reverse", "sort", "duplicate", "count"}) {
    auto task = make_task(spec(name, 1, 20, 7));
    const Vocab& v = task->vocab();
    const auto split = task->make_split(11, 300, 1, 20);
    std::set<int64_t> lengths;
    for (const auto& ex : split) {
      const auto& s = ex.src;
      lengths.insert(static_cast<int64_t>(s.size()));
      ASSERT_GE(s.size(), 1u);
      ASSERT_LE(s.size(), 20u);
      EXPECT_LE(static_cast<int64_t>(ex.tgt.size()), task->max_target_len(s.size()));
      if (name == "count") {
        for (int64_t id : s) ASSERT_EQ(v.symbol(id), "a");
        ASSERT_EQ(ex.tgt.size(), s.size());
        for (int64_t id : ex.tgt) ASSERT_EQ(v.symbol(id), "b");
        continue;
      }
      for (int64_t id : s) ASSERT_TRUE(id >= 5 && id < 12) << name << " id " << id;
      std::vector<int64_t> want = s;
      if (name == "reverse") std::reverse(want.begin(), want.end());
      if (name == "duplicate") want.insert(want.end(), s.begin(), s.end());
      if (name == "sort") {
        ASSERT_TRUE(std::is_sorted(ex.tgt.begin(), ex.tgt.end()));
        ASSERT_TRUE(std::is_permutation(ex.tgt.begin(), ex.tgt.end(), s.begin(), s.end()));
        for (size_t i = 1; i < ex.tgt.size(); ++i)  // numeric symbol order
          ASSERT_LE(std::stoi(v.symbol(ex.tgt[i - 1])), std::stoi(v.symbol(ex.tgt[i])));
        continue;
      }
      ASSERT_EQ(ex.tgt, want) << name;
    }
    EXPECT_TRUE(lengths.count(1) && lengths.count(20)) << name;  // both ends of the range occur
  }
  // Fixed test length.
  auto rev = make_task(spec("reverse"));
  for (const auto& ex : rev->make_split(3, 20, 37, 37)) EXPECT_EQ(ex.src.size(), 37u);
  EXPECT_EQ(rev->render({5, 6, 7}), "012");
  EXPECT_EQ(make_task(spec("copy", 1, 3, 12))->render({5, 16}), "0 11");
}

TEST(DataTasks, AdditionIsCorrect) {
  for (int64_t base : {10, 2, 7}) {
    auto task = make_task(spec("addition", 1, 15, base));
    const Vocab& v = task->vocab();
    const int64_t plus = v.id("+");
    ASSERT_NE(plus, Vocab::kUnk);
    for (int64_t len = 1; len <= 15; ++len) {
      for (const auto& ex : task->make_split(100 + len, 30, len, len)) {
        ASSERT_EQ(static_cast<int64_t>(ex.src.size()), 2 * len + 1);
        ASSERT_EQ(ex.src[len], plus);
        if (len > 1) {
          EXPECT_NE(v.symbol(ex.src[0]), "0");
          EXPECT_NE(v.symbol(ex.src[len + 1]), "0");
        }
        const uint64_t a = to_number(v, ex.src.begin(), ex.src.begin() + len, base);
        const uint64_t b = to_number(v, ex.src.begin() + len + 1, ex.src.end(), base);
        const uint64_t c = to_number(v, ex.tgt.begin(), ex.tgt.end(), base);
        ASSERT_EQ(a + b, c) << "base " << base << " len " << len;
        if (a + b > 0) {
          ASSERT_NE(v.symbol(ex.tgt[0]), "0");  // no leading zero
        }
        ASSERT_LE(static_cast<int64_t>(ex.tgt.size()), task->max_target_len(len));
        ASSERT_EQ(static_cast<int64_t>(ex.src.size()), task->max_source_len(len));
      }
    }
  }
  // Long operands (length generalisation) stay well-formed.
  auto task = make_task(spec("addition"));
  for (const auto& ex : task->make_split(5, 10, 200, 200)) {
    EXPECT_EQ(ex.src.size(), 401u);
    EXPECT_TRUE(ex.tgt.size() == 200u || ex.tgt.size() == 201u);
    EXPECT_NE(task->vocab().symbol(ex.tgt[0]), "0");
  }
}

TEST(DataTasks, DeterministicSplits) {
  for (const auto& name : task_names()) {
    auto t1 = make_task(spec(name, 2, 9));
    auto t2 = make_task(spec(name, 2, 9));
    const auto a = t1->make_split(7, 50, 2, 9);
    EXPECT_EQ(a, t2->make_split(7, 50, 2, 9)) << name;
    EXPECT_NE(a, t1->make_split(8, 50, 2, 9)) << name;
    EXPECT_EQ(a[17], t1->example_at(7, 17, 2, 9)) << name;  // example k is a pure function
  }
}

TEST(DataStream, PositionRestoreGivesIdenticalContinuation) {
  auto task = make_task(spec("sort", 3, 30));
  ExampleStream s(*task, 99);
  const auto first = s.next_batch(50);
  EXPECT_EQ(s.position(), 50);
  const auto cont = s.next_batch(20);
  ExampleStream r(*task, 99, 50);
  EXPECT_EQ(r.next_batch(20), cont);
  ExampleStream q(*task, 99);
  q.set_position(50);
  EXPECT_EQ(q.next(), cont[0]);
  EXPECT_EQ(q.at(3), first[3]);
  ExampleStream other(*task, 100);
  EXPECT_NE(other.next_batch(50), first);
  for (const auto& ex : first) {
    EXPECT_GE(ex.src.size(), 3u);
    EXPECT_LE(ex.src.size(), 30u);
  }
  expect_data_error([&] { q.set_position(-1); }, {"position"});
}

TEST(DataStream, DatasetEpochsArePermutations) {
  std::vector<Example> data;
  for (int64_t i = 0; i < 13; ++i) data.push_back(Example{{5 + i}, {5 + i, 5 + i}, {}, {}});
  ExampleStream s(data, 3);
  const auto e0 = s.next_batch(13), e1 = s.next_batch(13);
  auto key = [](const std::vector<Example>& v) {
    std::vector<int64_t> k;
    for (const auto& e : v) k.push_back(e.src[0]);
    return k;
  };
  const auto k0 = key(e0), k1 = key(e1);
  EXPECT_TRUE(std::is_permutation(k0.begin(), k0.end(), k1.begin(), k1.end()));
  std::vector<int64_t> sorted = k0;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted.front(), 5);
  EXPECT_EQ(std::unique(sorted.begin(), sorted.end()) - sorted.begin(), 13);
  EXPECT_NE(k0, k1);
  ExampleStream r(data, 3, 20);
  EXPECT_EQ(r.next(), e1[7]);
  EXPECT_THROW(ExampleStream(std::vector<Example>{}, 1), DataError);
}

// ---------------------------------------------------------------- text files

TEST(DataTextFile, ParsesAndBuildsVocab) {
  ScratchDir dir;
  const auto train = dir.write("train.tsv", "abc\tcba\r\n\nba\tab\nc\t\n");
  const auto valid = dir.write("valid.tsv", "abz\tzba\n");
  TextData d({train}, Tokenization::Char);
  EXPECT_EQ(d.vocab().tokens(),
            (std::vector<std::string>{"<pad>", "<bos>", "<eos>", "<unk>", "<sep>", "a", "b", "c"}));
  ASSERT_EQ(d.train().size(), 3u);
  EXPECT_EQ(d.train()[0].src, (std::vector<int64_t>{5, 6, 7}));
  EXPECT_EQ(d.train()[0].tgt, (std::vector<int64_t>{7, 6, 5}));
  EXPECT_TRUE(d.train()[2].tgt.empty());
  EXPECT_EQ(d.render(d.train()[1].tgt), "ab");
  const auto pairs = read_pairs(train);
  EXPECT_EQ(pairs[2].line, 4);  // blank line 2 skipped, numbering kept
  int64_t unk = 0;
  const auto v = d.load(valid, &unk);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].src[2], Vocab::kUnk);
  EXPECT_EQ(unk, 2);

  const auto words = dir.write("words.tsv", "the cat  sat\tle chat\n");
  TextData w({words}, Tokenization::Space);
  EXPECT_EQ(w.vocab().size(), 5 + 5);
  EXPECT_EQ(w.train()[0].src.size(), 3u);
  EXPECT_EQ(w.render(w.train()[0].tgt), "le chat");

  // Arbitrary bytes do not crash and survive a round trip.
  const auto bytes = dir.write("bytes.tsv", std::string("\xFF\xFE\x80x\t\xC3\xA9\n"));
  TextData b({bytes}, Tokenization::Char);
  EXPECT_EQ(b.train()[0].src.size(), 4u);
  EXPECT_EQ(b.render(b.train()[0].tgt), "\xC3\xA9");
}

// A file saved with a UTF-8 byte-order mark (Windows editors) reads as without one: the mark
// (EF BB BF, U+FEFF) would otherwise be an invisible symbol of the first source and of the
// vocabulary. Only a leading mark is dropped; one inside a line is data.
TEST(DataTextFile, ByteOrderMarkIsNotASymbol) {
  ScratchDir dir;
  const std::string bom = "\xEF\xBB\xBF";
  const auto with = dir.write("bom.tsv", bom + "ab\tba\r\nb\tb\r\n");
  const auto without = dir.write("plain.tsv", "ab\tba\nb\tb\n");
  const auto pairs = read_pairs(with);
  ASSERT_EQ(pairs.size(), 2u);
  EXPECT_EQ(pairs[0].src, "ab");
  EXPECT_EQ(pairs[0].line, 1);
  TextData a({with}, Tokenization::Char), b({without}, Tokenization::Char);
  EXPECT_EQ(a.vocab().tokens(), b.vocab().tokens());
  EXPECT_FALSE(a.vocab().contains("\xEF\xBB\xBF"));
  EXPECT_EQ(a.train()[0].src, b.train()[0].src);
  const auto inside = dir.write("inside.tsv", "a" + bom + "\tb\n");
  EXPECT_EQ(read_pairs(inside)[0].src, "a" + bom);
  // The same for a language-modelling corpus, a file or each file of a directory.
  const auto corpus = dir.write("corpus.txt", bom + "text\n");
  EXPECT_EQ(read_corpus(corpus), "text\n");
  ScratchDir fortunes;
  fortunes.write("a", bom + "first\n%\n");
  fortunes.write("b", bom + "second\n");
  EXPECT_EQ(read_corpus(fortunes.path()), "first\nsecond\n");
}

TEST(DataTextFile, ErrorsNameFileAndLine) {
  ScratchDir dir;
  const auto missing = dir.path() + "/missing.tsv";
  expect_data_error([&] { TextData({missing}, Tokenization::Char); }, {missing});
  const auto notab = dir.write("notab.tsv", "a\tb\nc\td\nno tab here\n");
  expect_data_error([&] { read_pairs(notab); }, {notab + ":3", "TAB"});
  const auto empty_src = dir.write("empty.tsv", "a\tb\n\tb\n");
  expect_data_error([&] { TextData({empty_src}, Tokenization::Char); },
                    {empty_src + ":2", "empty source"});
  const auto space_src = dir.write("space.tsv", "a\tb\n   \tb\n");
  expect_data_error([&] { TextData({space_src}, Tokenization::Space); },
                    {space_src + ":2", "empty source"});
  const auto tabs = dir.write("tabs.tsv", "a\tb\tc\n");
  expect_data_error([&] { read_pairs(tabs); }, {tabs + ":1", "TAB"});
  const auto reserved = dir.write("reserved.tsv", "a <pad>\tb\n");
  expect_data_error([&] { TextData({reserved}, Tokenization::Space); }, {reserved + ":1", "<pad>"});
  const auto nothing = dir.write("nothing.tsv", "\n\n");
  expect_data_error([&] { read_pairs(nothing); }, {nothing, "no examples"});
  expect_data_error([&] { read_pairs(dir.path()); }, {dir.path()});
}

// ---------------------------------------------------------------- language modelling

TEST(DataLm, CorpusSplitAndWindows) {
  std::string text;
  for (int i = 0; i < 200; ++i) text += "line " + std::to_string(i) + " caf\xC3\xA9\n";
  LmCorpus c(text, 0.9, 0.05);
  const int64_t n = c.total_tokens();
  EXPECT_EQ(c.vocab().id("\xC3\xA9") >= Vocab::kNumSpecial, true);  // multibyte char = 1 token
  EXPECT_EQ(n, static_cast<int64_t>(text.size()) - 200);
  EXPECT_EQ(static_cast<int64_t>(c.tokens(LmSplit::Train).size()), static_cast<int64_t>(n * 0.9));
  EXPECT_EQ(static_cast<int64_t>(c.tokens(LmSplit::Valid).size()), static_cast<int64_t>(n * 0.05));
  EXPECT_EQ(c.num_unknown(), 0);
  // The splits are contiguous pieces of the corpus in order.
  std::vector<int64_t> all;
  for (auto s : {LmSplit::Train, LmSplit::Valid, LmSplit::Test})
    all.insert(all.end(), c.tokens(s).begin(), c.tokens(s).end());
  EXPECT_EQ(c.vocab().decode(all), text);
  // Restoring with the saved vocabulary gives identical ids.
  LmCorpus r(text, Vocab(c.vocab().tokens()), 0.9, 0.05);
  EXPECT_EQ(r.tokens(LmSplit::Test), c.tokens(LmSplit::Test));
  expect_data_error([&] { LmCorpus(text, 0.9, 0.2); }, {"fractions"});
  EXPECT_EQ(parse_lm_split("valid"), LmSplit::Valid);
  EXPECT_THROW(parse_lm_split("dev"), DataError);

  const auto& valid = c.tokens(LmSplit::Valid);
  const int64_t nv = static_cast<int64_t>(valid.size());
  for (int64_t L : std::vector<int64_t>{1, 7, 64, nv - 1, nv}) {
    const auto ev = lm_eval_windows(valid, L);
    const int64_t want = (nv - 1) / L;
    ASSERT_EQ(static_cast<int64_t>(ev.windows.size()), want) << L;
    EXPECT_EQ(ev.dropped_tokens, (nv - 1) - want * L);
    for (int64_t w = 0; w < want; ++w) {  // non-overlapping, contiguous, shifted targets
      const auto& win = ev.windows[static_cast<size_t>(w)];
      ASSERT_EQ(static_cast<int64_t>(win.input.size()), L);
      for (int64_t i = 0; i < L; ++i) {
        ASSERT_EQ(win.input[static_cast<size_t>(i)], valid[static_cast<size_t>(w * L + i)]);
        ASSERT_EQ(win.target[static_cast<size_t>(i)], valid[static_cast<size_t>(w * L + i + 1)]);
      }
    }
  }

  const auto& train = c.tokens(LmSplit::Train);
  LmWindowStream s(train, 32, 5);
  const auto b1 = s.next_batch(40);
  const auto b2 = s.next_batch(10);
  std::set<std::vector<int64_t>> distinct;
  for (const auto& w : b1) {
    ASSERT_EQ(w.input.size(), 32u);
    ASSERT_TRUE(std::equal(w.input.begin() + 1, w.input.end(), w.target.begin()));
    const auto pos = std::search(train.begin(), train.end(), w.input.begin(), w.input.end());
    ASSERT_NE(pos, train.end());
    distinct.insert(w.input);
  }
  EXPECT_GT(distinct.size(), 30u);
  LmWindowStream resumed(train, 32, 5, 40);
  const auto b2r = resumed.next_batch(10);
  for (size_t i = 0; i < 10; ++i) EXPECT_EQ(b2r[i].input, b2[i].input);
  EXPECT_EQ(lm_window_at(train, 32, 5, 3).input, b1[3].input);
  EXPECT_NE(lm_window_at(train, 32, 6, 3).input, b1[3].input);
  expect_data_error([&] { LmWindowStream(valid, nv, 1); }, {"tokens"});
}

TEST(DataLm, ReadCorpusDirectoryAndDefault) {
  ScratchDir dir;
  dir.write("b", "second\n%\nmore");
  dir.write("a", "first\n%\n");
  dir.write("a.dat", "BINARY");
  dir.write("c.u8", "DUPLICATE");
  dir.write(".hidden", "HIDDEN");
  EXPECT_EQ(read_corpus(dir.path()), "first\nsecond\nmore\n");
  const auto plain = dir.write("plain.txt", "keep\n%\nall");
  EXPECT_EQ(read_corpus(plain), "keep\n%\nall");
  expect_data_error([&] { read_corpus(dir.path() + "/nope"); }, {"nope"});

  std::error_code ec;
  if (fs::is_directory("/usr/share/games/fortunes", ec)) {
    const std::string text = read_corpus(default_corpus_path());
    EXPECT_GT(text.size(), 10000u);
    EXPECT_EQ(text.find("\n%\n"), std::string::npos);
    LmCorpus c(text);
    EXPECT_GT(c.vocab().size(), 60);
    EXPECT_EQ(c.num_unknown(), 0);
  } else {
    expect_data_error([] { default_corpus_path(); }, {"fortunes"});
  }
}

// ---------------------------------------------------------------- batching

TEST(DataBatch, Seq2SeqPaddingAndMasks) {
  const std::vector<Example> ex = {{{5, 6, 7}, {8}, {}, {}}, {{9}, {10, 11, 12, 13}, {}, {}}};
  const auto b = make_seq2seq_batch(ex);
  ASSERT_EQ(b.B, 2);
  ASSERT_EQ(b.S, 4);
  ASSERT_EQ(b.T, 5);
  const int64_t P = Vocab::kPad, E = Vocab::kEos, S = Vocab::kBos;
  EXPECT_EQ(b.src, (std::vector<int64_t>{5, 6, 7, E, 9, E, P, P}));
  EXPECT_EQ(b.src_mask, (std::vector<uint8_t>{1, 1, 1, 1, 1, 1, 0, 0}));
  EXPECT_EQ(b.tgt_in, (std::vector<int64_t>{S, 8, P, P, P, S, 10, 11, 12, 13}));
  EXPECT_EQ(b.tgt_out, (std::vector<int64_t>{8, E, P, P, P, 10, 11, 12, 13, E}));
  EXPECT_EQ(b.tgt_mask, (std::vector<uint8_t>{1, 1, 0, 0, 0, 1, 1, 1, 1, 1}));
  EXPECT_EQ(b.src_len, (std::vector<int64_t>{4, 2}));
  EXPECT_EQ(b.tgt_len, (std::vector<int64_t>{2, 5}));
  EXPECT_THROW(make_seq2seq_batch({}), DataError);
}

TEST(DataBatch, DecoderOnlyLayout) {
  const std::vector<Example> ex = {{{5, 6}, {7, 8, 9}, {}, {}}, {{10}, {}, {}, {}}};
  const auto b = make_decoder_batch(ex);
  ASSERT_EQ(b.B, 2);
  ASSERT_EQ(b.L, 7);
  const int64_t P = Vocab::kPad, E = Vocab::kEos, S = Vocab::kBos, Q = Vocab::kSep;
  EXPECT_EQ(b.input, (std::vector<int64_t>{S, 5, 6, Q, 7, 8, 9, S, 10, Q, P, P, P, P}));
  EXPECT_EQ(b.target, (std::vector<int64_t>{5, 6, Q, 7, 8, 9, E, 10, Q, E, P, P, P, P}));
  EXPECT_EQ(b.mask, (std::vector<uint8_t>{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0}));
  // Loss exactly where the target is a tgt token or the final eos.
  EXPECT_EQ(b.loss_mask, (std::vector<uint8_t>{0, 0, 0, 1, 1, 1, 1, 0, 0, 1, 0, 0, 0, 0}));
  EXPECT_EQ(b.prompt_len, (std::vector<int64_t>{4, 3}));
  EXPECT_EQ(b.seq_len, (std::vector<int64_t>{7, 3}));
  EXPECT_EQ(decoder_prompt({5, 6}), (std::vector<int64_t>{S, 5, 6, Q}));
  // Generic check on random examples: loss on exactly |tgt| + 1 positions, all after the prompt.
  auto task = make_task(spec("duplicate", 1, 9));
  const auto rnd = task->make_split(4, 16, 1, 9);
  const auto d = make_decoder_batch(rnd);
  for (int64_t r = 0; r < d.B; ++r) {
    int64_t cnt = 0;
    for (int64_t p = 0; p < d.L; ++p) {
      const size_t i = static_cast<size_t>(r * d.L + p);
      cnt += d.loss_mask[i];
      if (d.loss_mask[i]) {
        EXPECT_GE(p + 1, d.prompt_len[static_cast<size_t>(r)]);
      }
      if (p + 1 < d.L && d.mask[i + 1]) {
        EXPECT_EQ(d.input[i + 1], d.target[i]);
      }
    }
    EXPECT_EQ(cnt, static_cast<int64_t>(rnd[static_cast<size_t>(r)].tgt.size()) + 1);
  }
}

TEST(DataBatch, LmBatchAndBucketing) {
  const std::vector<LmWindow> w = {{{5, 6}, {6, 7}}, {{8, 9}, {9, 10}}};
  const auto lb = make_lm_batch(w);
  EXPECT_EQ(lb.B, 2);
  EXPECT_EQ(lb.L, 2);
  EXPECT_EQ(lb.input, (std::vector<int64_t>{5, 6, 8, 9}));
  EXPECT_EQ(lb.target, (std::vector<int64_t>{6, 7, 9, 10}));
  EXPECT_THROW(make_lm_batch({{{5, 6}, {6, 7}}, {{5}, {6}}}), DataError);

  auto task = make_task(spec("copy", 1, 40));
  const auto ex = task->make_split(2, 103, 1, 40);
  const auto plain = make_batches(ex, 10);
  ASSERT_EQ(plain.size(), 11u);
  EXPECT_EQ(plain.back().size(), 3u);
  EXPECT_EQ(plain[1][0], ex[10]);
  const auto bucketed = make_batches(ex, 10, true, 9);
  EXPECT_EQ(bucketed, make_batches(ex, 10, true, 9));
  ASSERT_EQ(bucketed.size(), 11u);
  std::vector<std::pair<size_t, size_t>> ranges;
  size_t total = 0;
  for (const auto& b : bucketed) {
    size_t lo = 1000, hi = 0;
    for (const auto& e : b) {
      lo = std::min(lo, e.src.size());
      hi = std::max(hi, e.src.size());
    }
    ranges.push_back({lo, hi});
    total += b.size();
  }
  EXPECT_EQ(total, ex.size());
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) EXPECT_LE(ranges[i - 1].second, ranges[i].first);

  // BatchSampler: exact resume, with and without pools.
  for (int64_t pool : {1, 4}) {
    BatchSampler s(ExampleStream(*task, 77), 8, pool);
    std::vector<std::vector<Example>> seq;
    for (int i = 0; i < 10; ++i) seq.push_back(s.next());
    BatchSampler r(ExampleStream(*task, 77), 8, pool, 6);
    EXPECT_EQ(r.next(), seq[6]) << pool;
    EXPECT_EQ(r.batch_at(2), seq[2]) << pool;
    if (pool == 1) {
      EXPECT_EQ(seq[1][0], ExampleStream(*task, 77).at(8));
    }
  }
}

// One-length batches (train.batch_lengths one; what randomized positions train on): every example
// of a batch has the batch's length, the lengths are uniform over the task's valid training
// lengths, and batch j is a pure function of (seed, j), so a run resumes exactly.
TEST(DataBatchSampler, OneLengthBatches) {
  auto task = make_task(spec("copy", 1, 8, 6));
  BatchSampler s(ExampleStream(*task, 5), 16, 1, 0, true);
  std::map<size_t, int> batches_of_length;
  const int n = 4000;
  for (int j = 0; j < n; ++j) {
    const std::vector<Example> b = s.batch_at(j);
    ASSERT_EQ(b.size(), 16u);
    for (const auto& e : b) ASSERT_EQ(e.src.size(), b[0].src.size()) << "batch " << j;
    // The batch's length is the one the stream draws for it, each example drawn at that length.
    ASSERT_EQ(static_cast<int64_t>(b[0].src.size()), ExampleStream(*task, 5).batch_length(j));
    EXPECT_EQ(b[3], ExampleStream(*task, 5).at_length(j * 16 + 3, ExampleStream(*task, 5).batch_length(j)));
    ++batches_of_length[b[0].src.size()];
  }
  ASSERT_EQ(batches_of_length.size(), 8u);  // lengths 1..8, each about n / 8 = 500 times
  for (const auto& [len, count] : batches_of_length) {
    EXPECT_GE(len, 1u);
    EXPECT_LE(len, 8u);
    EXPECT_NEAR(count, n / 8, 75) << "length " << len;
  }
  // Deterministic and resumable; the examples differ between batches of the same length.
  BatchSampler r(ExampleStream(*task, 5), 16, 1, 6, true);
  EXPECT_EQ(r.next(), s.batch_at(6));
  EXPECT_NE(s.batch_at(0), s.batch_at(1));
  BatchSampler other_seed(ExampleStream(*task, 6), 16, 1, 0, true);
  bool differs = false;
  for (int j = 0; j < 8; ++j) differs |= other_seed.batch_at(j) != s.batch_at(j);
  EXPECT_TRUE(differs);

  // A task with lengths it cannot generate draws only the valid ones (modular_arithmetic: odd).
  auto mt = make_task(spec("modular_arithmetic", 1, 9));
  BatchSampler m(ExampleStream(*mt, 3), 4, 1, 0, true);
  std::set<size_t> lengths;
  for (int j = 0; j < 200; ++j) {
    const std::vector<Example> b = m.batch_at(j);
    for (const auto& e : b) ASSERT_EQ(e.src.size(), b[0].src.size());
    lengths.insert(b[0].src.size());
  }
  EXPECT_EQ(lengths, (std::set<size_t>{1, 3, 5, 7, 9}));

  // A fixed dataset has the lengths it has; a pool (bucketing) mixes lengths: both refused.
  std::vector<Example> data = task->make_split(9, 20, 1, 8);
  EXPECT_THROW(BatchSampler(ExampleStream(data, 1), 4, 1, 0, true), DataError);
  EXPECT_THROW(BatchSampler(ExampleStream(*task, 5), 4, 4, 0, true), DataError);
  EXPECT_THROW(ExampleStream(data, 1).at_length(0, 3), DataError);
}
