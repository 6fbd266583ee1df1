// A zero-initialised, cache-line aligned, fixed-size array: the CPU backend's buffers are allocated
// and touched once, at construction, never on the hot path.
#pragma once
#include <sys/mman.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

namespace hotpath::cpu {

inline constexpr size_t kCacheLine = 64;
// x86-64's transparent huge page.
inline constexpr size_t kHugePage = size_t(2) << 20;

template <class T>
class AlignedArray {
 public:
  AlignedArray() = default;
  // huge: on a 2 MB boundary, rounded up to whole 2 MB, and madvise'd MADV_HUGEPAGE before the first
  // touch, so that the kernel backs it with a transparent huge page where THP is enabled (always or
  // madvise); elsewhere it is ordinary memory.
  explicit AlignedArray(size_t n, bool huge = false) : n_(n) {
    if (n == 0) return;
    const size_t align = huge ? kHugePage : kCacheLine;
    const size_t bytes = (n * sizeof(T) + align - 1) / align * align;
    p_ = static_cast<T*>(std::aligned_alloc(align, bytes));
    if (!p_) throw std::bad_alloc();
    if (huge) madvise(static_cast<void*>(p_), bytes, MADV_HUGEPAGE);  // advice only: failure is harmless
    std::memset(static_cast<void*>(p_), 0, bytes);  // also faults every page in now
  }
  ~AlignedArray() { std::free(p_); }
  AlignedArray(AlignedArray&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  AlignedArray& operator=(AlignedArray&& o) noexcept {
    if (this != &o) {
      std::free(p_);
      p_ = std::exchange(o.p_, nullptr);
      n_ = std::exchange(o.n_, 0);
    }
    return *this;
  }
  AlignedArray(const AlignedArray&) = delete;
  AlignedArray& operator=(const AlignedArray&) = delete;

  T* data() { return p_; }
  const T* data() const { return p_; }
  size_t size() const { return n_; }
  T& operator[](size_t i) { return p_[i]; }
  const T& operator[](size_t i) const { return p_[i]; }

 private:
  T* p_ = nullptr;
  size_t n_ = 0;
};

// Elements of T that fill whole cache lines, at least n.
template <class T>
constexpr size_t round_to_lines(size_t n) {
  constexpr size_t per = kCacheLine / sizeof(T);
  return (n + per - 1) / per * per;
}

}  // namespace hotpath::cpu
