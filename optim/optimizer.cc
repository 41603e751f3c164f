// AdamUpdate: run-time kernel choice and the split of large slices over the
// optimizer thread pool.
#include <cstdlib>
#include <string>
#include <thread>

#include "absl/strings/numbers.h"
#include "common/logging.h"
#include "optim/cpu_features.h"
#include "optim/optimizer.h"
#include "optim/optimizer_kernels.h"
#include "optim/optimizer_pool.h"

namespace zeroshard {
namespace {

// Slices up to this many elements run on the caller's thread; larger ones are
// split into tiles of kTileElems (~1 MiB of traffic each, a multiple of 64
// elements so tiles start on cache lines of every array).
constexpr size_t kParallelThreshold = size_t{1} << 16;
constexpr size_t kTileElems = size_t{1} << 15;

}  // namespace

OptimizerPool& SharedOptimizerPool() {
  // Never destroyed: helper threads may still be parked at process exit.
  static OptimizerPool* pool = new OptimizerPool(OptimizerThreads());
  return *pool;
}

int OptimizerThreads() {
  const char* env = std::getenv("ZEROSHARD_OPTIMIZER_THREADS");
  if (env != nullptr && *env != '\0') {
    int threads = 0;
    if (absl::SimpleAtoi(env, &threads) && threads >= 1 && threads <= 1024) {
      return threads;
    }
    ZS_LOG(WARNING) << "ignoring ZEROSHARD_OPTIMIZER_THREADS='" << env
                    << "' (want an integer in [1, 1024])";
  }
  const unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : static_cast<int>(hw);
}


std::vector<AdamKernel> AvailableAdamKernels() {
  std::vector<AdamKernel> kernels;
#ifdef ZS_HAVE_AVX512_KERNEL
  if (CpuHasAvx512()) kernels.push_back({"avx512", &AdamUpdateAvx512});
#endif
#ifdef ZS_HAVE_AVX2_KERNEL
  if (CpuHasAvx2Fma()) kernels.push_back({"avx2", &AdamUpdateAvx2});
#endif
  kernels.push_back({"scalar", &AdamUpdateReference});
  return kernels;
}

const AdamKernel& SelectedAdamKernel() {
  static const AdamKernel kernel = [] {
    const std::vector<AdamKernel> kernels = AvailableAdamKernels();
    const char* want = std::getenv("ZEROSHARD_OPTIMIZER_KERNEL");
    if (want != nullptr && *want != '\0') {
      for (const AdamKernel& k : kernels) {
        if (k.name == want) return k;
      }
      ZS_LOG(WARNING) << "ZEROSHARD_OPTIMIZER_KERNEL='" << want
                      << "' is not available here; using "
                      << kernels.front().name;
    }
    return kernels.front();
  }();
  return kernel;
}

absl::string_view AdamKernelName() { return SelectedAdamKernel().name; }

void AdamUpdate(const AdamStep& step, GradView grad, const AdamSlice& slice) {
  const AdamKernelFn fn = SelectedAdamKernel().fn;
  if (slice.n <= kParallelThreshold) {
    fn(step, grad, slice);
    return;
  }
  const size_t elem = grad.bf16 ? sizeof(uint16_t) : sizeof(float);
  SharedOptimizerPool().ParallelFor(slice.n, kTileElems, [&](size_t lo, size_t hi) {
    const GradView g{static_cast<const char*>(grad.data) + lo * elem,
                     grad.bf16};
    fn(step, g,
       {slice.master + lo, slice.exp_avg + lo, slice.exp_avg_sq + lo,
        slice.mirror != nullptr ? slice.mirror + lo : nullptr, hi - lo});
  });
}

}  // namespace zeroshard
