// data/tasks.cpp - the built-in synthetic tasks, their registry and ExampleStream.
#include "data/tasks.h"

#include <algorithm>
#include <map>

#include "data/error.h"
#include "data/arithmetic_tasks.h"
#include "data/literature_tasks.h"
#include "data/multi_addition.h"

namespace pelab::data {

// ---------------------------------------------------------------- Task

std::string Task::length_problem(int64_t length) const {
  return length >= 1 ? std::string() : "must be >= 1";
}

std::vector<int64_t> Task::valid_lengths(int64_t min_len, int64_t max_len) const {
  std::vector<int64_t> out;
  for (int64_t n = min_len; n <= max_len; ++n)
    if (length_problem(n).empty()) out.push_back(n);
  return out;
}

// The length of example k and the generator positioned after drawing it (shared by example_at and
// length_at): uniform over valid_lengths(min_len, max_len).
int64_t Task::draw_length(Rng& rng, int64_t k, int64_t min_len, int64_t max_len) const {
  PELAB_DATA_CHECK(k >= 0, "task '", name(), "': example index ", k, " must be >= 0");
  PELAB_DATA_CHECK(min_len >= 1 && min_len <= max_len, "task '", name(),
                   "': invalid length range [", min_len, ", ", max_len, "] (need 1 <= min <= max)");
  const std::vector<int64_t> lengths = valid_lengths(min_len, max_len);
  if (lengths.empty()) {
    if (min_len == max_len)
      data_fail("task '", name(), "': length ", min_len, " ", length_problem(min_len));
    data_fail("task '", name(), "': no length in [", min_len, ", ", max_len,
              "] the task can generate (length ", min_len, " ", length_problem(min_len), ")");
  }
  // Same draw as uniform_int(min_len, max_len) when every length of the range is valid.
  return lengths[static_cast<size_t>(rng.uniform_int(0, static_cast<int64_t>(lengths.size()) - 1))];
}

Example Task::example_at(uint64_t seed, int64_t k, int64_t min_len, int64_t max_len) const {
  Rng rng = Rng::for_index(seed, static_cast<uint64_t>(std::max<int64_t>(k, 0)));
  const int64_t length = draw_length(rng, k, min_len, max_len);
  return sample(rng, length);
}

int64_t Task::length_at(uint64_t seed, int64_t k, int64_t min_len, int64_t max_len) const {
  Rng rng = Rng::for_index(seed, static_cast<uint64_t>(std::max<int64_t>(k, 0)));
  return draw_length(rng, k, min_len, max_len);  // the first draw of example_at
}

Example Task::example_of_length(uint64_t seed, int64_t k, int64_t length, int64_t /*min_len*/,
                                int64_t /*max_len*/) const {
  return example_at(seed, k, length, length);
}

std::vector<DataChange> Task::data_changes(bool /*one_length_batches*/) const { return {}; }

void Task::add_digits() {
  PELAB_DATA_CHECK(spec_.num_symbols >= 2 && spec_.num_symbols <= 10, "task '", spec_.name,
                   "': num_symbols (the number base) = ", spec_.num_symbols, " must be in [2, 10]");
  for (int64_t i = 0; i < spec_.num_symbols; ++i) vocab_.add(std::to_string(i));
}

int Task::data_revision(bool one_length_batches) const {
  return 1 + static_cast<int>(data_changes(one_length_batches).size());
}

std::vector<Example> Task::make_split(uint64_t seed, int64_t count, int64_t min_len,
                                      int64_t max_len) const {
  PELAB_DATA_CHECK(count >= 0, "task '", name(), "': split size ", count, " must be >= 0");
  std::vector<Example> out;
  out.reserve(static_cast<size_t>(count));
  for (int64_t k = 0; k < count; ++k) out.push_back(example_at(seed, k, min_len, max_len));
  return out;
}

std::string Task::render(const std::vector<int64_t>& ids) const {
  bool single = true;
  for (int64_t i = Vocab::kNumSpecial; i < vocab_.size(); ++i)
    single = single && vocab_.symbol(i).size() == 1;
  return vocab_.decode(ids, single ? "" : " ");
}

int64_t Task::top_position(const Example& ex) const {
  int64_t top = 0;
  for (int64_t v : ex.src_pos) top = std::max(top, v);
  for (int64_t v : ex.tgt_pos) top = std::max(top, v);
  for (int64_t v : ex.src_pos2) top = std::max(top, v);
  for (int64_t v : ex.tgt_pos2) top = std::max(top, v);
  return top;
}

void Task::shift_positions(Example& ex, int64_t offset) const {
  PELAB_DATA_CHECK(offset >= 0, "task '", name(), "': position offset ", offset, " must be >= 0");
  for (auto* ids : {&ex.src_pos, &ex.tgt_pos, &ex.src_pos2, &ex.tgt_pos2})
    for (int64_t& v : *ids)
      if (v >= 1) v += offset;
}

void check_length(const Task& t, int64_t length) {
  const std::string problem = t.length_problem(length);
  PELAB_DATA_CHECK(problem.empty(), "task '", t.name(), "': length ", length, " ", problem);
}

namespace {

// copy / reverse / sort / duplicate / odds_first over symbols "0".."N-1" (ids increase with the
// symbol's number). odds_first (Deletang et al. 2023): the symbols at odd positions (1st, 3rd, ...)
// then those at even positions (2nd, 4th, ...).
class SymbolTask : public Task {
 public:
  enum class Kind { Copy, Reverse, Sort, Duplicate, OddsFirst };
  SymbolTask(const TaskSpec& spec, Kind kind) : Task(spec), kind_(kind) {
    PELAB_DATA_CHECK(spec.num_symbols >= 1 && spec.num_symbols <= 1000000, "task '", spec.name,
                     "': num_symbols = ", spec.num_symbols, " must be in [1, 1000000]");
    for (int64_t i = 0; i < spec.num_symbols; ++i) vocab_.add(std::to_string(i));
  }
  Example sample(Rng& rng, int64_t length) const override {
    check_length(*this, length);
    Example ex;
    ex.src.resize(static_cast<size_t>(length));
    for (auto& s : ex.src) s = Vocab::kNumSpecial + rng.uniform_int(0, spec_.num_symbols - 1);
    ex.tgt = ex.src;
    switch (kind_) {
      case Kind::Copy:
        break;
      case Kind::Reverse:
        std::reverse(ex.tgt.begin(), ex.tgt.end());
        break;
      case Kind::Sort:
        std::sort(ex.tgt.begin(), ex.tgt.end());
        break;
      case Kind::Duplicate:
        ex.tgt.insert(ex.tgt.end(), ex.src.begin(), ex.src.end());
        break;
      case Kind::OddsFirst:
        ex.tgt.clear();
        for (size_t start : {size_t{0}, size_t{1}})
          for (size_t i = start; i < ex.src.size(); i += 2) ex.tgt.push_back(ex.src[i]);
        break;
    }
    return ex;
  }
  int64_t max_target_len(int64_t length) const override {
    return kind_ == Kind::Duplicate ? 2 * length : length;
  }

 private:
  Kind kind_;
};

// Multi-digit addition in base B = num_symbols (2..10): src = digits(a) "+" digits(b), tgt =
// digits(a + b), most significant digit first. Operands have exactly `length` digits (no leading
// zero unless length == 1).
class AdditionTask : public Task {
 public:
  explicit AdditionTask(const TaskSpec& spec) : Task(spec) {
    add_digits();
    plus_ = vocab_.add("+");
  }
  Example sample(Rng& rng, int64_t length) const override {
    check_length(*this, length);
    const int64_t base = spec_.num_symbols;
    auto number = [&]() {  // digits, most significant first
      std::vector<int64_t> d(static_cast<size_t>(length));
      for (int64_t i = 0; i < length; ++i)
        d[static_cast<size_t>(i)] = rng.uniform_int(i == 0 && length > 1 ? 1 : 0, base - 1);
      return d;
    };
    const std::vector<int64_t> a = number(), b = number();
    std::vector<int64_t> sum;  // least significant first
    int64_t carry = 0;
    for (int64_t i = length - 1; i >= 0; --i) {
      const int64_t s = a[static_cast<size_t>(i)] + b[static_cast<size_t>(i)] + carry;
      sum.push_back(s % base);
      carry = s / base;
    }
    if (carry) sum.push_back(carry);
    Example ex;
    for (int64_t d : a) ex.src.push_back(Vocab::kNumSpecial + d);
    ex.src.push_back(plus_);
    for (int64_t d : b) ex.src.push_back(Vocab::kNumSpecial + d);
    for (auto it = sum.rbegin(); it != sum.rend(); ++it) ex.tgt.push_back(Vocab::kNumSpecial + *it);
    return ex;
  }
  int64_t max_target_len(int64_t length) const override { return length + 1; }
  int64_t max_source_len(int64_t length) const override { return 2 * length + 1; }

 private:
  int64_t plus_ = 0;
};

// a^n -> b^n.
class CountTask : public Task {
 public:
  explicit CountTask(const TaskSpec& spec) : Task(spec) {
    a_ = vocab_.add("a");
    b_ = vocab_.add("b");
  }
  Example sample(Rng&, int64_t length) const override {
    check_length(*this, length);
    return Example{std::vector<int64_t>(static_cast<size_t>(length), a_),
                   std::vector<int64_t>(static_cast<size_t>(length), b_), {}, {}};
  }
  int64_t max_target_len(int64_t length) const override { return length; }

 private:
  int64_t a_ = 0, b_ = 0;
};

template <SymbolTask::Kind K>
std::unique_ptr<Task> make_symbol_task(const TaskSpec& s) {
  return std::make_unique<SymbolTask>(s, K);
}
template <class T>
std::unique_ptr<Task> make_plain(const TaskSpec& s) {
  return std::make_unique<T>(s);
}

std::map<std::string, TaskFactory>& registry() {
  static std::map<std::string, TaskFactory> r = {
      {"copy", make_symbol_task<SymbolTask::Kind::Copy>},
      {"reverse", make_symbol_task<SymbolTask::Kind::Reverse>},
      {"sort", make_symbol_task<SymbolTask::Kind::Sort>},
      {"duplicate", make_symbol_task<SymbolTask::Kind::Duplicate>},
      {"odds_first", make_symbol_task<SymbolTask::Kind::OddsFirst>},
      {"addition", make_plain<AdditionTask>},
      {"count", make_plain<CountTask>},
  };
  static const bool literature = (add_literature_tasks(r), add_arithmetic_tasks(r),
                                     add_multi_addition_task(r), true);
  (void)literature;
  return r;
}

}  // namespace

std::vector<std::string> task_names() {
  std::vector<std::string> names;
  for (const auto& kv : registry()) names.push_back(kv.first);
  return names;
}

void register_task(const std::string& name, TaskFactory factory) {
  PELAB_DATA_CHECK(!name.empty() && factory, "register_task: empty name or factory");
  registry()[name] = std::move(factory);
}

namespace {
// The tasks that define position IDs and index hints (for the error of a task without them).
std::string join_tasks_with_positions() {
  std::string out;
  for (const auto& n : arithmetic_task_names()) out += (out.empty() ? "" : ", ") + n;
  return out + ", " + kMultiAdditionTask;
}
}  // namespace

std::unique_ptr<Task> make_task(const TaskSpec& spec) {
  auto it = registry().find(spec.name);
  if (it == registry().end()) {
    std::string known;
    for (const auto& n : task_names()) known += (known.empty() ? "" : ", ") + n;
    data_fail("task: unknown task '", spec.name, "' (known: ", known, ")");
  }
  PELAB_DATA_CHECK(spec.train_min_len >= 1, "task '", spec.name,
                   "': train_min_len = ", spec.train_min_len, " must be >= 1");
  PELAB_DATA_CHECK(spec.train_max_len >= spec.train_min_len, "task '", spec.name,
                   "': train_max_len = ", spec.train_max_len,
                   " must be >= train_min_len = ", spec.train_min_len);
  PELAB_DATA_CHECK(spec.position_ids == "sequential" || spec.position_ids == "coupled" ||
                       spec.position_ids == "abacus",
                   "task '", spec.name, "': position_ids '", spec.position_ids,
                   "' is not one of sequential, coupled, abacus");
  PELAB_DATA_CHECK(spec.index_hints >= 0 && spec.index_hints <= kMaxIndexHints, "task '",
                   spec.name, "': index_hints = ", spec.index_hints, " must be in [0, ",
                   kMaxIndexHints, "]");
  PELAB_DATA_CHECK(spec.train_min_operands >= 1 &&
                       spec.train_max_operands >= spec.train_min_operands,
                   "task '", spec.name, "': train_min_operands = ", spec.train_min_operands,
                   " and train_max_operands = ", spec.train_max_operands,
                   " must satisfy 1 <= min <= max");
  for (int64_t m : spec.test_operands)
    PELAB_DATA_CHECK(m >= 1, "task '", spec.name, "': test_operands entry ", m, " must be >= 1");
  std::unique_ptr<Task> task = it->second(spec);
  if (!task->takes_operand_counts() &&
      (spec.train_min_operands != 2 || spec.train_max_operands != 2 || !spec.test_operands.empty()))
    data_fail("task '", spec.name, "' takes no operand count (task.train_min_operands, "
              "train_max_operands and test_operands are for ", kMultiAdditionTask, ")");
  if (spec.position_ids != "sequential" && !task->provides_position_ids())
    data_fail("task '", spec.name, "' defines no ", spec.position_ids,
              " position IDs (tasks with them: ", join_tasks_with_positions(), ")");
  if (spec.index_hints > 0 && !task->provides_index_hints())
    data_fail("task '", spec.name, "' has no index hints (tasks with them: ",
              join_tasks_with_positions(), ")");
  // The first valid length is enough (listing them all would take a pass over a range of 1e8
  // lengths on every config load).
  bool any = false;
  for (int64_t n = spec.train_min_len; n <= spec.train_max_len && !any; ++n)
    any = task->length_problem(n).empty();
  PELAB_DATA_CHECK(any, "task '",
                   spec.name, "': no training length in [", spec.train_min_len, ", ",
                   spec.train_max_len, "] the task can generate (length ", spec.train_min_len,
                   " ", task->length_problem(spec.train_min_len), ")");
  return task;
}

// ---------------------------------------------------------------- ExampleStream

std::vector<int64_t> permutation(int64_t n, Rng& rng) {
  std::vector<int64_t> p(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) p[static_cast<size_t>(i)] = i;
  for (int64_t i = n - 1; i > 0; --i)
    std::swap(p[static_cast<size_t>(i)], p[static_cast<size_t>(rng.uniform_int(0, i))]);
  return p;
}

ExampleStream::ExampleStream(const Task& task, uint64_t seed, int64_t position)
    : task_(&task), seed_(seed) {
  set_position(position);
}

ExampleStream::ExampleStream(const std::vector<Example>& dataset, uint64_t seed, int64_t position)
    : dataset_(&dataset), seed_(seed) {
  PELAB_DATA_CHECK(!dataset.empty(), "ExampleStream: the dataset is empty");
  set_position(position);
}

void ExampleStream::set_position(int64_t position) {
  PELAB_DATA_CHECK(position >= 0, "ExampleStream: position ", position, " must be >= 0");
  position_ = position;
}

Example ExampleStream::at(int64_t k) const {
  PELAB_DATA_CHECK(k >= 0, "ExampleStream: index ", k, " must be >= 0");
  if (task_)
    return task_->example_at(seed_, k, task_->spec().train_min_len, task_->spec().train_max_len);
  const int64_t n = static_cast<int64_t>(dataset_->size());
  const int64_t epoch = k / n;
  if (epoch != cached_epoch_) {
    Rng rng = Rng::for_index(seed_, static_cast<uint64_t>(epoch));
    perm_ = permutation(n, rng);
    cached_epoch_ = epoch;
  }
  return (*dataset_)[static_cast<size_t>(perm_[static_cast<size_t>(k % n)])];
}

Example ExampleStream::at_length(int64_t k, int64_t length) const {
  PELAB_DATA_CHECK(task_, "ExampleStream::at_length: a dataset's examples have the lengths they "
                   "have (one-length batches need a task)");
  PELAB_DATA_CHECK(k >= 0, "ExampleStream: index ", k, " must be >= 0");
  return task_->example_of_length(seed_, k, length, task_->spec().train_min_len,
                                  task_->spec().train_max_len);
}

int64_t ExampleStream::batch_length(int64_t j) const {
  PELAB_DATA_CHECK(task_, "ExampleStream::batch_length: one-length batches need a task");
  return task_->length_at(derive_seed(seed_, "batch_length"), j, task_->spec().train_min_len,
                          task_->spec().train_max_len);
}

std::vector<Example> ExampleStream::next_batch(int64_t n) {
  PELAB_DATA_CHECK(n >= 0, "ExampleStream: batch size ", n, " must be >= 0");
  std::vector<Example> out;
  out.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out.push_back(next());
  return out;
}

}  // namespace pelab::data
