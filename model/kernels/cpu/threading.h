// When the CPU kernels use their OpenMP threads.
//
// Fork/join of an OpenMP region costs microseconds on an idle machine but
// whole scheduler time slices on a busy one (a spinning partner thread that
// was descheduled holds up the barrier), so kernels only go parallel when the
// work is large enough to amortise that. Small products and loops run on the
// calling thread.
//
//   #pragma omp parallel for if (ParallelWorth(n * c))
//   { ScopedSerialIf serial(!ParallelWorth(m * n * k)); Gemm(...); }
#ifndef ZEROSHARD_MODEL_KERNELS_CPU_THREADING_H_
#define ZEROSHARD_MODEL_KERNELS_CPU_THREADING_H_

#include <algorithm>
#include <cstdint>

#include <omp.h>

namespace zeroshard::kernels::cpu {

// Whether `work` (elements touched, or multiply-adds) justifies a parallel
// region: about 2^18, i.e. tens of microseconds of work per region.
inline bool ParallelWorth(int64_t work) { return work >= (int64_t{1} << 18); }

// Runs fn(begin, end) over [0, n) in chunks of 16384 on the OpenMP threads
// when ParallelWorth(n), else fn(0, n) on the calling thread.
template <typename Fn>
void ParallelChunks(int64_t n, Fn fn) {
  if (!ParallelWorth(n)) {
    fn(int64_t{0}, n);
    return;
  }
  constexpr int64_t kChunk = int64_t{1} << 14;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    fn(c * kChunk, std::min(n, (c + 1) * kChunk));
  }
}

// Runs the enclosed OpenMP regions (including oneDNN's) on one thread while
// alive when `serial` is true.
class ScopedSerialIf {
 public:
  explicit ScopedSerialIf(bool serial) : serial_(serial) {
    if (serial_) {
      prev_ = omp_get_max_threads();
      omp_set_num_threads(1);
    }
  }
  ~ScopedSerialIf() {
    if (serial_) omp_set_num_threads(prev_);
  }
  ScopedSerialIf(const ScopedSerialIf&) = delete;
  ScopedSerialIf& operator=(const ScopedSerialIf&) = delete;

 private:
  bool serial_;
  int prev_ = 1;
};

}  // namespace zeroshard::kernels::cpu

#endif  // ZEROSHARD_MODEL_KERNELS_CPU_THREADING_H_
