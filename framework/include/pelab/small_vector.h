// pelab — SmallVector<T, N>: a vector of trivially copyable values that keeps up to N of them
// inline and moves to the heap only beyond N. Shapes and strides are such vectors (tensor.h):
// almost every tensor has at most 6 dims, so views, op outputs and autograd nodes no longer pay
// one heap block per shape and per stride vector. The interface is the part of std::vector the
// code uses (iterators are plain pointers); comparisons are element-wise like std::vector's.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <new>
#include <type_traits>
#include <utility>

namespace pelab {

template <class T, size_t N>
class SmallVector {
  static_assert(std::is_trivially_copyable_v<T>, "SmallVector holds trivially copyable values");
  static_assert(N > 0, "SmallVector needs an inline capacity");

 public:
  using value_type = T;
  using size_type = size_t;
  using difference_type = std::ptrdiff_t;
  using reference = T&;
  using const_reference = const T&;
  using pointer = T*;
  using const_pointer = const T*;
  using iterator = T*;
  using const_iterator = const T*;
  using reverse_iterator = std::reverse_iterator<iterator>;
  using const_reverse_iterator = std::reverse_iterator<const_iterator>;

  static constexpr size_t inline_capacity = N;

  SmallVector() noexcept : data_(buf_) {}
  explicit SmallVector(size_t n) : SmallVector() { resize(n); }
  SmallVector(size_t n, const T& value) : SmallVector() { assign(n, value); }
  SmallVector(std::initializer_list<T> init) : SmallVector() { assign(init.begin(), init.end()); }
  template <class It, class = typename std::iterator_traits<It>::iterator_category>
  SmallVector(It first, It last) : SmallVector() {
    assign(first, last);
  }
  SmallVector(const SmallVector& o) : SmallVector() { assign(o.begin(), o.end()); }
  SmallVector(SmallVector&& o) noexcept : SmallVector() { steal(o); }
  ~SmallVector() { release(); }

  SmallVector& operator=(const SmallVector& o) {
    if (this != &o) assign(o.begin(), o.end());
    return *this;
  }
  SmallVector& operator=(SmallVector&& o) noexcept {
    if (this != &o) {
      release();
      data_ = buf_;
      size_ = 0;
      cap_ = N;
      steal(o);
    }
    return *this;
  }
  SmallVector& operator=(std::initializer_list<T> init) {
    assign(init.begin(), init.end());
    return *this;
  }

  void assign(size_t n, const T& value) {
    const T v = value;  // value may live in this vector
    size_ = 0;
    reserve(n);
    std::fill_n(data_, n, v);
    size_ = n;
  }
  template <class It, class = typename std::iterator_traits<It>::iterator_category>
  void assign(It first, It last) {
    const size_t n = static_cast<size_t>(std::distance(first, last));
    size_ = 0;
    reserve(n);  // callers never assign from a range of this same vector
    std::copy(first, last, data_);
    size_ = n;
  }

  size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  size_t capacity() const noexcept { return cap_; }
  // True while the elements live in the inline buffer (no heap block).
  bool is_inline() const noexcept { return data_ == buf_; }

  T* data() noexcept { return data_; }
  const T* data() const noexcept { return data_; }
  T& operator[](size_t i) noexcept { return data_[i]; }
  const T& operator[](size_t i) const noexcept { return data_[i]; }
  T& front() noexcept { return data_[0]; }
  const T& front() const noexcept { return data_[0]; }
  T& back() noexcept { return data_[size_ - 1]; }
  const T& back() const noexcept { return data_[size_ - 1]; }

  iterator begin() noexcept { return data_; }
  iterator end() noexcept { return data_ + size_; }
  const_iterator begin() const noexcept { return data_; }
  const_iterator end() const noexcept { return data_ + size_; }
  const_iterator cbegin() const noexcept { return data_; }
  const_iterator cend() const noexcept { return data_ + size_; }
  reverse_iterator rbegin() noexcept { return reverse_iterator(end()); }
  reverse_iterator rend() noexcept { return reverse_iterator(begin()); }
  const_reverse_iterator rbegin() const noexcept { return const_reverse_iterator(end()); }
  const_reverse_iterator rend() const noexcept { return const_reverse_iterator(begin()); }

  void reserve(size_t n) {
    if (n <= cap_) return;
    const size_t cap = std::max(n, 2 * cap_);
    T* p = static_cast<T*>(::operator new(cap * sizeof(T)));
    if (size_) std::memcpy(p, data_, size_ * sizeof(T));
    release();
    data_ = p;
    cap_ = cap;
  }
  void resize(size_t n) { resize(n, T()); }
  void resize(size_t n, const T& value) {
    if (n > size_) {
      const T v = value;
      reserve(n);
      std::fill(data_ + size_, data_ + n, v);
    }
    size_ = n;
  }
  void clear() noexcept { size_ = 0; }

  void push_back(const T& value) {
    const T v = value;  // value may live in this vector
    if (size_ == cap_) reserve(size_ + 1);
    data_[size_++] = v;
  }
  template <class... Args>
  T& emplace_back(Args&&... args) {
    push_back(T(std::forward<Args>(args)...));
    return back();
  }
  void pop_back() noexcept { --size_; }

  iterator insert(const_iterator pos, const T& value) { return insert(pos, size_t{1}, value); }
  iterator insert(const_iterator pos, size_t n, const T& value) {
    const size_t at = static_cast<size_t>(pos - data_);
    const T v = value;
    open_gap(at, n);
    std::fill_n(data_ + at, n, v);
    return data_ + at;
  }
  template <class It, class = typename std::iterator_traits<It>::iterator_category>
  iterator insert(const_iterator pos, It first, It last) {
    const size_t at = static_cast<size_t>(pos - data_);
    const size_t n = static_cast<size_t>(std::distance(first, last));
    open_gap(at, n);  // callers never insert a range of this same vector
    std::copy(first, last, data_ + at);
    return data_ + at;
  }
  iterator insert(const_iterator pos, std::initializer_list<T> init) {
    return insert(pos, init.begin(), init.end());
  }
  iterator erase(const_iterator pos) { return erase(pos, pos + 1); }
  iterator erase(const_iterator first, const_iterator last) {
    const size_t at = static_cast<size_t>(first - data_);
    const size_t n = static_cast<size_t>(last - first);
    std::memmove(data_ + at, data_ + at + n, (size_ - at - n) * sizeof(T));
    size_ -= n;
    return data_ + at;
  }

  friend bool operator==(const SmallVector& a, const SmallVector& b) {
    return a.size_ == b.size_ && std::equal(a.begin(), a.end(), b.begin());
  }
  friend bool operator!=(const SmallVector& a, const SmallVector& b) { return !(a == b); }
  friend bool operator<(const SmallVector& a, const SmallVector& b) {
    return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end());
  }

 private:
  void release() noexcept {
    if (data_ != buf_) ::operator delete(data_);
  }
  // Takes o's elements, leaving o empty: its heap block if it has one, else a copy of its buffer.
  void steal(SmallVector& o) noexcept {
    if (o.data_ == o.buf_) {
      std::memcpy(buf_, o.buf_, o.size_ * sizeof(T));
      size_ = o.size_;
    } else {
      data_ = o.data_;
      size_ = o.size_;
      cap_ = o.cap_;
      o.data_ = o.buf_;
      o.cap_ = N;
    }
    o.size_ = 0;
  }
  // Makes room for n elements at index `at`, shifting the tail right.
  void open_gap(size_t at, size_t n) {
    reserve(size_ + n);
    std::memmove(data_ + at + n, data_ + at, (size_ - at) * sizeof(T));
    size_ += n;
  }

  T* data_;
  size_t size_ = 0;
  size_t cap_ = N;
  T buf_[N];
};

}  // namespace pelab
