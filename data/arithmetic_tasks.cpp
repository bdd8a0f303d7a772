// data/arithmetic_tasks.cpp - addition_reversed and multiplication with task position IDs
// (arithmetic_tasks.h; formats in docs/tasks.md).
#include "data/arithmetic_tasks.h"

#include <algorithm>

#include "data/error.h"
#include "data/literature_tasks.h"

namespace pelab::data {

namespace {

size_t sz(int64_t v) { return static_cast<size_t>(v); }

// Common layout of the arithmetic tasks: operands written most significant digit first, each
// zero-padded to its width, joined by the operator token; the answer zero-padded to its width W and
// written least significant digit first (reversed). The decoder sees
//   bos  operand_1 op operand_2  sep  answer(reversed)  eos
// and, per task.position_ids, a digit of significance i (0 = units) gets
//   coupled: W - i (operands and answer alike); op and sep W + 1; bos 0   (Cho et al. 2024)
//   abacus:  i + 1 (its significance within its own number); op, sep, bos 0 (McLeish et al. 2024)
// With index hints every digit is preceded by the hint token h_{W-i} (same hint for the same
// significance, Zhou et al. 2024), which gets the ID of its digit.
class ArithmeticTask : public Task {
 public:
  ArithmeticTask(const TaskSpec& spec, const std::string& op) : Task(spec) {
    add_digits();
    op_ = vocab_.add(op);
    for (int64_t v = 1; v <= spec.index_hints; ++v) {
      const int64_t id = vocab_.add("h" + std::to_string(v));
      if (v == 1) hint1_ = id;
    }
  }
  bool provides_position_ids() const override { return true; }
  bool provides_index_hints() const override { return true; }

  std::string length_problem(int64_t length) const override {
    if (length < 1) return "must be >= 1";
    if (spec_.index_hints > 0 && width(length) > spec_.index_hints)
      return "needs index hints up to h" + std::to_string(width(length)) +
             ", more than task.index_hints = " + std::to_string(spec_.index_hints);
    return "";
  }
  int64_t max_position_id(int64_t length) const override {
    const int64_t W = width(length);
    if (spec_.position_ids == "coupled") return W + 1;
    if (spec_.position_ids == "abacus" || spec_.index_hints > 0) return W;
    return 0;
  }
  int64_t top_position(const Example& ex) const override {
    int64_t top = Task::top_position(ex);
    for (const auto* toks : {&ex.src, &ex.tgt})
      for (int64_t t : *toks)
        if (is_hint(t)) top = std::max(top, t - hint1_ + 1);
    return top;
  }
  void shift_positions(Example& ex, int64_t offset) const override {
    Task::shift_positions(ex, offset);
    for (auto* toks : {&ex.src, &ex.tgt})
      for (int64_t& t : *toks)
        if (is_hint(t)) {
          PELAB_DATA_CHECK(t - hint1_ + 1 + offset <= spec_.index_hints, "task '", name(),
                           "': offset ", offset, " moves hint h", t - hint1_ + 1,
                           " past task.index_hints = ", spec_.index_hints);
          t += offset;
        }
  }

 protected:
  // Answer width W at a length: the largest answer (zero-padded to W) has W digits.
  virtual int64_t width(int64_t length) const = 0;
  int64_t base() const { return spec_.num_symbols; }
  bool is_hint(int64_t t) const {
    return spec_.index_hints > 0 && t >= hint1_ && t < hint1_ + spec_.index_hints;
  }
  // A number of `digits` digits, most significant first: uniform over the d-digit numbers (no
  // leading zero unless d == 1), as Cho et al. sample operands.
  std::vector<int64_t> number(Rng& rng, int64_t digits) const {
    std::vector<int64_t> d(sz(digits));
    for (int64_t i = 0; i < digits; ++i)
      d[sz(i)] = rng.uniform_int(i == 0 && digits > 1 ? 1 : 0, base() - 1);
    return d;
  }
  static std::vector<int64_t> pad(std::vector<int64_t> d, int64_t width) {
    PELAB_DATA_CHECK(static_cast<int64_t>(d.size()) <= width, "arithmetic: ", d.size(),
                     " digits do not fit a width of ", width);
    d.insert(d.begin(), sz(width - static_cast<int64_t>(d.size())), 0);
    return d;
  }
  // The example of the layout above: operands and answer as digit values, most significant
  // first, already zero-padded (answer to W digits).
  Example build(const std::vector<std::vector<int64_t>>& operands,
                const std::vector<int64_t>& answer) const {
    const int64_t W = static_cast<int64_t>(answer.size());
    PELAB_DATA_CHECK(spec_.index_hints == 0 || W <= spec_.index_hints, "task '", name(),
                     "': an answer of ", W, " digits needs index hints up to h", W,
                     ", more than task.index_hints = ", spec_.index_hints);
    const bool coupled = spec_.position_ids == "coupled",
               abacus = spec_.position_ids == "abacus", ids = coupled || abacus;
    auto digit_id = [&](int64_t sig) { return coupled ? W - sig : sig + 1; };
    const int64_t op_id = coupled ? W + 1 : 0;
    Example ex;
    auto put = [&](std::vector<int64_t>& toks, std::vector<int64_t>& pos, int64_t digit,
                   int64_t sig) {
      if (spec_.index_hints > 0) {
        toks.push_back(hint1_ + (W - sig) - 1);
        pos.push_back(digit_id(sig));
      }
      toks.push_back(Vocab::kNumSpecial + digit);
      pos.push_back(digit_id(sig));
    };
    ex.src_pos.push_back(0);  // bos
    for (size_t j = 0; j < operands.size(); ++j) {
      if (j > 0) {
        ex.src.push_back(op_);
        ex.src_pos.push_back(op_id);
      }
      const int64_t n = static_cast<int64_t>(operands[j].size());
      for (int64_t p = 0; p < n; ++p) put(ex.src, ex.src_pos, operands[j][sz(p)], n - 1 - p);
    }
    ex.src_pos.push_back(op_id);  // sep, the '=' of the papers
    for (int64_t sig = 0; sig < W; ++sig) put(ex.tgt, ex.tgt_pos, answer[sz(W - 1 - sig)], sig);
    if (!ids) ex.src_pos.clear(), ex.tgt_pos.clear();
    return ex;
  }

  int64_t op_ = 0, hint1_ = 0;
};

// a + b with the answer reversed (Cho et al. 2024, also the base of McLeish et al. 2024 and Zhou et
// al. 2024): task length = digits of the longer operand. Drawn from a range [min, max], each
// operand's length is uniform in it independently (the papers' training distribution); at one
// length L (min = max, the test sets) both operands have L digits. Both operands are zero-padded to
// the longer one's width n, the sum to W = n + 1 digits.
class AdditionReversedTask : public ArithmeticTask {
 public:
  explicit AdditionReversedTask(const TaskSpec& spec) : ArithmeticTask(spec, "+") {}
  Example example_at(uint64_t seed, int64_t k, int64_t min_len, int64_t max_len) const override {
    Rng rng = Rng::for_index(seed, static_cast<uint64_t>(std::max<int64_t>(k, 0)));
    const int64_t la = draw_length(rng, k, min_len, max_len);
    const int64_t lb = draw_length(rng, k, min_len, max_len);
    return sample_pair(rng, la, lb);
  }
  int64_t length_at(uint64_t seed, int64_t k, int64_t min_len, int64_t max_len) const override {
    Rng rng = Rng::for_index(seed, static_cast<uint64_t>(std::max<int64_t>(k, 0)));
    const int64_t la = draw_length(rng, k, min_len, max_len);
    return std::max(la, draw_length(rng, k, min_len, max_len));
  }
  // Both operand lengths drawn as example_at draws them, given that the longer has `length`
  // digits (rejection: each try keeps a pair with probability >= 1/(length - min_len + 1)). Before
  // 2026-11-26 a one-length batch had both operands of `length` digits, so randomized-position
  // runs never trained on operands of different lengths, which their validation holds.
  Example example_of_length(uint64_t seed, int64_t k, int64_t length, int64_t min_len,
                            int64_t max_len) const override {
    PELAB_DATA_CHECK(length >= min_len && length <= max_len, "task '", name(), "': length ",
                     length, " is outside the range [", min_len, ", ", max_len, "]");
    PELAB_DATA_CHECK(length_problem(length).empty(), "task '", name(), "': length ", length, " ",
                     length_problem(length));
    Rng rng = Rng::for_index(seed, static_cast<uint64_t>(std::max<int64_t>(k, 0)));
    for (;;) {
      const int64_t la = draw_length(rng, k, min_len, length);
      const int64_t lb = draw_length(rng, k, min_len, length);
      if (std::max(la, lb) == length) return sample_pair(rng, la, lb);
    }
  }
  // Revision 2 of one-length batches over a range of lengths (at one training length both
  // operands have it, before and after).
  std::vector<DataChange> data_changes(bool one_length_batches) const override {
    if (!one_length_batches || spec_.train_min_len >= spec_.train_max_len) return {};
    return {{"2026-11-26", "f995bd6",
             "one-length batches draw both operands' lengths as training does (before, both "
             "operands had the batch's length)"}};
  }
  Example sample(Rng& rng, int64_t length) const override {
    return sample_pair(rng, length, length);
  }
  int64_t max_target_len(int64_t length) const override { return hinted(length + 1); }
  int64_t max_source_len(int64_t length) const override { return 2 * hinted(length) + 1; }

 protected:
  int64_t width(int64_t length) const override { return length + 1; }

 private:
  int64_t hinted(int64_t digits) const { return spec_.index_hints > 0 ? 2 * digits : digits; }
  Example sample_pair(Rng& rng, int64_t la, int64_t lb) const {
    check_length(*this, std::max(la, lb));
    const int64_t n = std::max(la, lb);
    const std::vector<int64_t> a = pad(number(rng, la), n), b = pad(number(rng, lb), n);
    std::vector<int64_t> sum(sz(n + 1), 0);  // most significant first
    int64_t carry = 0;
    for (int64_t i = n - 1; i >= 0; --i) {
      const int64_t s = a[sz(i)] + b[sz(i)] + carry;
      sum[sz(i + 1)] = s % base();
      carry = s / base();
    }
    sum[0] = carry;
    return build({a, b}, sum);
  }
};

// N x 2 multiplication (Cho et al. 2024): task length N = digits of the first operand; the second
// has exactly 2 digits (zero-padded: 07), the product is zero-padded to W = N + 2 digits.
class MultiplicationTask : public ArithmeticTask {
 public:
  explicit MultiplicationTask(const TaskSpec& spec) : ArithmeticTask(spec, "*") {}
  Example sample(Rng& rng, int64_t length) const override {
    check_length(*this, length);
    const std::vector<int64_t> a = number(rng, length);
    std::vector<int64_t> b(2);
    for (auto& d : b) d = rng.uniform_int(0, base() - 1);
    const int64_t bv = b[0] * base() + b[1];
    std::vector<int64_t> prod(sz(length + 2), 0);  // most significant first
    int64_t carry = 0;
    for (int64_t i = length - 1; i >= 0; --i) {
      const int64_t p = a[sz(i)] * bv + carry;
      prod[sz(i + 2)] = p % base();
      carry = p / base();
    }
    prod[1] = carry % base();
    prod[0] = carry / base();
    return build({a, b}, prod);
  }
  int64_t max_target_len(int64_t length) const override { return hinted(length + 2); }
  int64_t max_source_len(int64_t length) const override { return hinted(length + 2) + 1; }

 protected:
  int64_t width(int64_t length) const override { return length + 2; }

 private:
  int64_t hinted(int64_t digits) const { return spec_.index_hints > 0 ? 2 * digits : digits; }
};

template <class T>
std::unique_ptr<Task> make(const TaskSpec& s) {
  return std::make_unique<T>(s);
}

}  // namespace

void add_arithmetic_tasks(std::map<std::string, TaskFactory>& registry) {
  registry["addition_reversed"] = make<AdditionReversedTask>;
  registry["multiplication"] = make<MultiplicationTask>;
}

std::vector<std::string> arithmetic_task_names() { return {"addition_reversed", "multiplication"}; }

}  // namespace pelab::data
