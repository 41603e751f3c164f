// zeroshard-bench device-adam / device-nccl (CUDA builds; on a GPU machine).
//
// device-adam: the device AdamW (optim/adam_device.h) on 256M parameters
// against this device's own copy bandwidth, measured in the same run
// (cudaMemcpy device to device of 1 GiB: a copy reads and writes each byte,
// so its rate is 2 x bytes / time). One update reads master, m, v (12 B) and
// the FP32 gradient (4 B) and writes master, m, v (12 B) and the BF16
// mirror (2 B): 30 B per parameter. Ratio: update bytes/s over copy bytes/s
// (target >= 0.7).
//
// device-nccl: the NCCL backend of the worker collectives on a group of one
// (loopback communicator on one GPU): reduce-scatter and in-place all-gather
// for 1 MiB .. 1 GiB, time per call and bytes/s against the device copy.
// On one GPU NCCL only copies; the sweep shows the per-call overhead and
// that the backend runs, not the interconnect's speed.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <string>
#include <vector>

#include "bench/bench.h"
#include "common/optimizer_config.h"
#include "common/rendezvous.h"
#include "optim/adam_device.h"
#include "optim/optimizer.h"
#include "comm/collectives.h"

namespace zeroshard::bench {
namespace {

bool HaveDevice() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n <= 0) {
    std::printf("no CUDA device (%s): nothing measured\n",
                e == cudaSuccess ? "0 devices" : cudaGetErrorString(e));
    return false;
  }
  cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, 0);
  std::printf("device: %s, %.1f GiB\n", prop.name,
              prop.totalGlobalMem / double(1 << 30));
  return true;
}

// Seconds per call of fn, best of `reps` after one warm-up, timed by events.
template <typename Fn>
double TimeOnDevice(Fn fn, int reps) {
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  fn();
  cudaDeviceSynchronize();
  float best_ms = 1e30f;
  for (int r = 0; r < reps; ++r) {
    cudaEventRecord(start);
    fn();
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    if (ms < best_ms) best_ms = ms;
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return best_ms / 1e3;
}

// Bytes/s of a device-to-device copy of `bytes` (counting read + write).
double CopyBandwidth(size_t bytes) {
  void *a = nullptr, *b = nullptr;
  if (cudaMalloc(&a, bytes) != cudaSuccess ||
      cudaMalloc(&b, bytes) != cudaSuccess) {
    return 0;
  }
  cudaMemset(a, 1, bytes);
  const double s = TimeOnDevice(
      [&] { cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice); }, 10);
  cudaFree(a);
  cudaFree(b);
  return 2.0 * bytes / s;
}

int DeviceAdam(const std::vector<std::string>& args) {
  if (!HaveDevice()) return NoDeviceExitCode();
  const size_t n = size_t{256} << 20;
  const double copy = CopyBandwidth(size_t{1} << 30);
  float *master, *m, *v, *g;
  uint16_t* mirror;
  for (float** p : {&master, &m, &v, &g}) {
    if (cudaMalloc(reinterpret_cast<void**>(p), n * 4) != cudaSuccess) {
      std::printf("device-adam: cannot allocate %zu MiB\n", n * 4 >> 20);
      return 1;
    }
    cudaMemset(*p, 0, n * 4);
  }
  if (cudaMalloc(reinterpret_cast<void**>(&mirror), n * 2) != cudaSuccess) return 1;
  OptimizerConfig config;
  config.lr = 3e-4;
  config.weight_decay = 0.1;
  const AdamStep step = MakeAdamStep(config, 1, 1.0f);
  absl::Status status;
  const double s = TimeOnDevice(
      [&] {
        status = AdamUpdateDevice(step, GradView::Fp32(g),
                                  {master, m, v, mirror, n}, nullptr);
      },
      10);
  if (!status.ok()) {
    std::printf("device-adam: %s\n", status.ToString().c_str());
    return 1;
  }
  const double rate = 30.0 * n / s;
  std::printf("copy bandwidth (1 GiB device to device, read + write): %.0f GB/s\n",
              copy / 1e9);
  std::printf("AdamW: %zu params in %.3f ms: %.2f G params/s, %.0f GB/s at 30 B/param\n",
              n, s * 1e3, n / s / 1e9, rate / 1e9);
  std::printf("device-adam ratio=%.2f target=0.70\n", rate / copy);
  for (void* p : {static_cast<void*>(master), static_cast<void*>(m),
                  static_cast<void*>(v), static_cast<void*>(g),
                  static_cast<void*>(mirror)}) {
    cudaFree(p);
  }
  return 0;
}

int DeviceNccl(const std::vector<std::string>& args) {
  if (!HaveDevice()) return NoDeviceExitCode();
  InMemoryRendezvousStore store;
  GroupOptions options;
  options.group = "device-bench";
  auto group = CreateWorkerGroup("nccl", 0, 1, &store, options);
  if (!group.ok()) {
    std::printf("device-nccl: %s\n", group.status().ToString().c_str());
    return 1;
  }
  const double copy = CopyBandwidth(size_t{1} << 30);
  std::printf("copy bandwidth: %.0f GB/s\n", copy / 1e9);
  std::printf("%10s %22s %16s\n", "bytes", "reduce-scatter (% copy)",
              "all-gather");
  double last_ratio = 0;
  for (size_t bytes = size_t{1} << 20; bytes <= size_t{1} << 30; bytes <<= 2) {
    float *in = nullptr, *out = nullptr;
    if (cudaMalloc(reinterpret_cast<void**>(&in), bytes) != cudaSuccess ||
        cudaMalloc(reinterpret_cast<void**>(&out), bytes) != cudaSuccess) {
      return 1;
    }
    const size_t n = bytes / 4;
    absl::Status st;
    const double rs = TimeOnDevice(
        [&] {
          st = (*group)->ReduceScatter({in, n}, {out, n}, 1.0f);
          if (st.ok()) st = (*group)->Synchronize();
        },
        5);
    const double ag = TimeOnDevice(
        [&] {
          st = (*group)->AllGatherInPlace(
              {reinterpret_cast<uint8_t*>(in), bytes});
          if (st.ok()) st = (*group)->Synchronize();
        },
        5);
    cudaFree(in);
    cudaFree(out);
    if (!st.ok()) {
      std::printf("device-nccl: %s\n", st.ToString().c_str());
      return 1;
    }
    last_ratio = (2.0 * bytes / rs) / copy;
    std::printf("%10zu %14.1f us (%3.0f%%) %13.1f us\n", bytes, rs * 1e6,
                100.0 * last_ratio, ag * 1e6);
  }
  // A group of one copies in to out: its rate at 1 GiB against the copy.
  std::printf("device-nccl ratio=%.2f target=0.70 (1 GiB reduce-scatter on a "
              "group of one vs a device copy; no interconnect measured)\n",
              last_ratio);
  return 0;
}

ZS_REGISTER_BENCH("device-adam",
                  "device AdamW bytes/s vs the device's copy bandwidth (GPU)",
                  DeviceAdam);
ZS_REGISTER_BENCH("device-nccl",
                  "NCCL reduce-scatter / all-gather size sweep, 1 GPU (GPU)",
                  DeviceNccl);

}  // namespace
}  // namespace zeroshard::bench
