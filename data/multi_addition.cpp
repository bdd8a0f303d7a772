// data/multi_addition.cpp - multi_addition (multi_addition.h; format in docs/tasks.md).
//
// m operands of up to n digits, each zero-padded to the width W of the largest possible sum
// (the digits of m x (B^n - 1)), joined by '+'; the answer is the scratchpad of running sums
// S_0 = 0, S_1 = a_1, ..., S_m = a_1 + ... + a_m, each zero-padded to W and written least
// significant digit first, joined by '>':
//   bos  a_1 + a_2 + ... + a_m  sep  S_0 > S_1 > ... > S_m  eos
// Two-level coupled IDs (task.position_ids coupled): a digit of significance i (0 = units) has
// digit ID i + 2 wherever it stands; '+', '>' and sep have digit ID 1; operand a_j's digits and the
// '+' after it have operand ID j; sep and S_0 have operand ID 1; '>' before S_k and S_k's digits
// have operand ID k + 1; bos has 0 and 0. So the digit S_k[i] is produced from a_k[i] and
// S_{k-1}[i], which share its digit ID and whose operand ID is one below its own.
#include "data/multi_addition.h"

#include <algorithm>

#include "data/error.h"
#include "data/literature_tasks.h"  // check_length

namespace pelab::data {

namespace {

size_t sz(int64_t v) { return static_cast<size_t>(v); }

class MultiAdditionTask : public Task {
 public:
  explicit MultiAdditionTask(const TaskSpec& spec) : Task(spec) {
    add_digits();
    PELAB_DATA_CHECK(spec.position_ids != "abacus", "task '", spec.name,
                     "' defines no abacus position IDs (only coupled: two-level digit and "
                     "operand IDs)");
    plus_ = vocab_.add("+");
    next_ = vocab_.add(">");
    max_operands_ = spec.train_max_operands;
    for (int64_t m : spec.test_operands) max_operands_ = std::max(max_operands_, m);
  }
  bool provides_position_ids() const override { return true; }
  int64_t position_channels() const override { return coupled() ? 2 : 1; }
  bool takes_operand_counts() const override { return true; }

  // Operand count uniform in the training range, each operand's digits uniform in [min_len,
  // max_len] independently; task length = the longest operand's digits.
  Example example_at(uint64_t seed, int64_t k, int64_t min_len, int64_t max_len) const override {
    Rng rng = Rng::for_index(seed, static_cast<uint64_t>(std::max<int64_t>(k, 0)));
    const std::vector<int64_t> lens = draw_lengths(rng, k, min_len, max_len);
    return make(rng, lens);
  }
  int64_t length_at(uint64_t seed, int64_t k, int64_t min_len, int64_t max_len) const override {
    Rng rng = Rng::for_index(seed, static_cast<uint64_t>(std::max<int64_t>(k, 0)));
    const std::vector<int64_t> lens = draw_lengths(rng, k, min_len, max_len);
    return *std::max_element(lens.begin(), lens.end());
  }
  // As example_at draws, given that the longest operand has `length` digits (rejection).
  Example example_of_length(uint64_t seed, int64_t k, int64_t length, int64_t min_len,
                            int64_t max_len) const override {
    PELAB_DATA_CHECK(length >= min_len && length <= max_len, "task '", name(), "': length ",
                     length, " is outside the range [", min_len, ", ", max_len, "]");
    check_length(*this, length);
    Rng rng = Rng::for_index(seed, static_cast<uint64_t>(std::max<int64_t>(k, 0)));
    for (;;) {
      const std::vector<int64_t> lens = draw_lengths(rng, k, min_len, length);
      if (*std::max_element(lens.begin(), lens.end()) == length) return make(rng, lens);
    }
  }
  Example sample(Rng& rng, int64_t length) const override {
    check_length(*this, length);
    const int64_t m = rng.uniform_int(spec_.train_min_operands, spec_.train_max_operands);
    return make(rng, std::vector<int64_t>(sz(m), length));
  }
  int64_t max_target_len(int64_t length) const override {
    const int64_t M = max_operands_, W = multi_addition_width(length, M, base());
    return (M + 1) * W + M;
  }
  int64_t max_source_len(int64_t length) const override {
    const int64_t M = max_operands_;
    return M * multi_addition_width(length, M, base()) + M - 1;
  }
  int64_t max_position_id(int64_t length) const override {
    if (!coupled()) return 0;
    return std::max(multi_addition_width(length, max_operands_, base()) + 1, max_operands_ + 1);
  }

 private:
  bool coupled() const { return spec_.position_ids == "coupled"; }
  int64_t base() const { return spec_.num_symbols; }

  std::vector<int64_t> draw_lengths(Rng& rng, int64_t k, int64_t min_len, int64_t max_len) const {
    const int64_t m = rng.uniform_int(spec_.train_min_operands, spec_.train_max_operands);
    std::vector<int64_t> lens(sz(m));
    for (auto& l : lens) l = draw_length(rng, k, min_len, max_len);
    return lens;
  }

  // Operands of the given digit counts, uniform over the d-digit numbers (no leading zero unless
  // d = 1, as Cho et al. sample them), in the layout above.
  Example make(Rng& rng, const std::vector<int64_t>& lens) const {
    check_length(*this, *std::max_element(lens.begin(), lens.end()));
    std::vector<std::vector<int64_t>> operands;
    for (int64_t d : lens) {
      std::vector<int64_t> a(sz(d));
      for (int64_t p = 0; p < d; ++p) a[sz(p)] = rng.uniform_int(p == 0 && d > 1 ? 1 : 0, base() - 1);
      operands.push_back(std::move(a));
    }
    return multi_addition_layout(operands, base(), coupled(), plus_, next_);
  }

  int64_t plus_ = 0, next_ = 0, max_operands_ = 2;
};

}  // namespace

int64_t multi_addition_width(int64_t digits, int64_t operands, int64_t base) {
  int64_t carry = 0;  // m x (B^n - 1) digit by digit, units first: only the carry is needed
  for (int64_t i = 0; i < digits; ++i) carry = ((base - 1) * operands + carry) / base;
  int64_t w = digits;
  for (; carry > 0; carry /= base) ++w;
  return std::max<int64_t>(w, 1);
}

Example multi_addition_layout(const std::vector<std::vector<int64_t>>& operands, int64_t base,
                              bool coupled, int64_t plus, int64_t next) {
  PELAB_DATA_CHECK(!operands.empty() && base >= 2, "multi_addition: no operands or base ", base);
  const int64_t m = static_cast<int64_t>(operands.size());
  int64_t n = 0;
  for (const auto& a : operands) n = std::max<int64_t>(n, static_cast<int64_t>(a.size()));
  const int64_t W = multi_addition_width(n, m, base);
  // digit[j][i]: operand j's digit of significance i (units first), zero-padded to W
  std::vector<std::vector<int64_t>> digit(sz(m), std::vector<int64_t>(sz(W), 0));
  for (int64_t j = 0; j < m; ++j) {
    const auto& a = operands[sz(j)];
    const int64_t d = static_cast<int64_t>(a.size());
    for (int64_t p = 0; p < d; ++p) {
      PELAB_DATA_CHECK(a[sz(p)] >= 0 && a[sz(p)] < base, "multi_addition: digit ", a[sz(p)],
                       " is not a base-", base, " digit");
      digit[sz(j)][sz(d - 1 - p)] = a[sz(p)];
    }
  }
  Example ex;
  ex.src_pos = {0};  // bos
  ex.src_pos2 = {0};
  for (int64_t j = 0; j < m; ++j) {
    if (j > 0) {  // the '+' after operand j (counting from 1)
      ex.src.push_back(plus);
      ex.src_pos.push_back(1);
      ex.src_pos2.push_back(j);
    }
    for (int64_t i = W - 1; i >= 0; --i) {
      ex.src.push_back(Vocab::kNumSpecial + digit[sz(j)][sz(i)]);
      ex.src_pos.push_back(i + 2);
      ex.src_pos2.push_back(j + 1);
    }
  }
  ex.src_pos.push_back(1);  // sep, the papers' '='
  ex.src_pos2.push_back(1);
  std::vector<int64_t> sum(sz(W), 0);  // S_k, units first
  for (int64_t k = 0; k <= m; ++k) {
    if (k > 0) {
      int64_t carry = 0;
      for (int64_t i = 0; i < W; ++i) {
        const int64_t s = sum[sz(i)] + digit[sz(k - 1)][sz(i)] + carry;
        sum[sz(i)] = s % base;
        carry = s / base;
      }
      PELAB_DATA_CHECK(carry == 0, "multi_addition: a sum overflowed its width ", W);
      ex.tgt.push_back(next);
      ex.tgt_pos.push_back(1);
      ex.tgt_pos2.push_back(k + 1);
    }
    for (int64_t i = 0; i < W; ++i) {
      ex.tgt.push_back(Vocab::kNumSpecial + sum[sz(i)]);
      ex.tgt_pos.push_back(i + 2);
      ex.tgt_pos2.push_back(k + 1);
    }
  }
  if (!coupled) ex.src_pos.clear(), ex.tgt_pos.clear(), ex.src_pos2.clear(), ex.tgt_pos2.clear();
  return ex;
}

void add_multi_addition_task(std::map<std::string, TaskFactory>& registry) {
  registry[kMultiAdditionTask] = [](const TaskSpec& s) -> std::unique_ptr<Task> {
    return std::make_unique<MultiAdditionTask>(s);
  };
}

}  // namespace pelab::data
