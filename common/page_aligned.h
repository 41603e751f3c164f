// PageAlignedVector<T>: a std::vector whose buffer starts on a page and owns
// whole pages. Host buffers that are page-locked for device copies
// (cudaHostRegister, through model/model_memory.h's PinHost) are
// kept in these: registration works on whole pages, so two heap buffers
// that shared a page could not both be registered (the second would fail
// as already registered and its copies would run pageable).
//
//   PageAlignedVector<float> shard(n);
//   RETURN_IF_ERROR(memory->PinHost(shard.data(), shard.size() * 4));
#ifndef ZEROSHARD_COMMON_PAGE_ALIGNED_H_
#define ZEROSHARD_COMMON_PAGE_ALIGNED_H_

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <vector>

namespace zeroshard {

// This machine's page size (sysconf), read once.
inline size_t HostPageBytes() {
  static const size_t page = [] {
    const long p = sysconf(_SC_PAGESIZE);
    return p > 0 ? static_cast<size_t>(p) : size_t{4096};
  }();
  return page;
}

template <typename T>
struct PageAlignedAllocator {
  using value_type = T;
  PageAlignedAllocator() = default;
  template <typename U>
  PageAlignedAllocator(const PageAlignedAllocator<U>&) {}  // NOLINT

  T* allocate(size_t n) {
    const size_t page = HostPageBytes();
    if (n > (SIZE_MAX - page) / sizeof(T)) throw std::bad_alloc();
    const size_t bytes = (n * sizeof(T) + page - 1) / page * page;
    void* p = std::aligned_alloc(page, bytes == 0 ? page : bytes);
    if (p == nullptr) throw std::bad_alloc();
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t) { std::free(p); }

  template <typename U>
  bool operator==(const PageAlignedAllocator<U>&) const {
    return true;
  }
  template <typename U>
  bool operator!=(const PageAlignedAllocator<U>&) const {
    return false;
  }
};

template <typename T>
using PageAlignedVector = std::vector<T, PageAlignedAllocator<T>>;

}  // namespace zeroshard

#endif  // ZEROSHARD_COMMON_PAGE_ALIGNED_H_
