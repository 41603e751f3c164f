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
#ifndef ZEROSHARD_WORKER_KERNELS_CPU_THREADING_H_
#define ZEROSHARD_WORKER_KERNELS_CPU_THREADING_H_

#include <cstdint>

#include <omp.h>

namespace zeroshard::kernels::cpu {

// Whether `work` (elements touched, or multiply-adds) justifies a parallel
// region: about 2^18, i.e. tens of microseconds of work per region.
inline bool ParallelWorth(int64_t work) { return work >= (int64_t{1} << 18); }

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

#endif  // ZEROSHARD_WORKER_KERNELS_CPU_THREADING_H_
