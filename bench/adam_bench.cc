// zeroshard-bench adam: params/s of AdamUpdate (the SIMD, multi-threaded
// path) on >= 100M parameters against this machine's memory bound measured in
// the same run: triad bandwidth on all cores divided by the bytes one update
// moves per parameter.
//
// Byte counting, stated in the output too. STREAM counts the triad
// a = b + s*c as 24 B/element, but the store to `a` first reads the line
// (write-allocate), so DRAM moves 32 B/element. The update reads master, m, v
// (12 B) and the gradient (2 B BF16 / 4 B FP32) and writes master, m, v
// (12 B) and the mirror (2 B): 28 / 30 B. Master, m and v are read before
// they are written, so their stores allocate nothing extra; the mirror's
// stores would (+2 B), but the AVX-512 kernel streams them (non-temporal), so
// the bound uses the minimum, 28 / 30 B. The ratio compares like with like:
// params/s / (triad STREAM bytes/s * 32/24 / update bytes).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "bench/bench.h"
#include "common/dtype.h"
#include "common/optimizer_config.h"
#include "optim/grad_scan.h"
#include "optim/optimizer.h"

namespace zeroshard::bench {
namespace {

// Runs body(lo, hi) over [0, n) split evenly over `threads` threads.
template <typename Body>
void SplitOverThreads(size_t n, int threads, Body body) {
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] { body(n * t / threads, n * (t + 1) / threads); });
  }
  for (auto& th : pool) th.join();
}

int RunAdam(const std::vector<std::string>& args) {
  uint64_t n = Smoke() ? 1'000'000 : 100'000'000;
  bool bf16 = true;
  int reps = Smoke() ? 1 : 5;
  uint64_t piece_kib = 1024;
  const size_t triad_bytes = Smoke() ? size_t{8} << 20 : size_t{512} << 20;
  for (const std::string& a : args) {
    if (absl::StartsWith(a, "--n=") && absl::SimpleAtoi(a.substr(4), &n) && n > 0) {
    } else if (absl::StartsWith(a, "--piece_kib=") &&
               absl::SimpleAtoi(a.substr(12), &piece_kib) && piece_kib > 0) {
    } else if (a == "--grad=bf16") {
      bf16 = true;
    } else if (a == "--grad=fp32") {
      bf16 = false;
    } else if (absl::StartsWith(a, "--reps=") &&
               absl::SimpleAtoi(a.substr(7), &reps) && reps > 0) {
    } else {
      std::fprintf(stderr,
                   "usage: zeroshard-bench adam [--n=100000000] "
                   "[--grad=bf16|fp32] [--reps=5] [--piece_kib=1024]\n  bad argument: "
                   "%s\n",
                   a.c_str());
      return 2;
    }
  }
  const int threads = std::max(1u, std::thread::hardware_concurrency());

  float* master = AllocHugeArray<float>(n, "adam");
  float* m = AllocHugeArray<float>(n, "adam");
  float* v = AllocHugeArray<float>(n, "adam");
  uint16_t* mirror = AllocHugeArray<uint16_t>(n, "adam");
  float* g32 = bf16 ? nullptr : AllocHugeArray<float>(n, "adam");
  uint16_t* g16 = bf16 ? AllocHugeArray<uint16_t>(n, "adam") : nullptr;
  SplitOverThreads(n, threads, [&](size_t lo, size_t hi) {
    for (size_t i = lo; i < hi; ++i) {
      const float x = static_cast<float>((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
      master[i] = x;
      m[i] = 0.0f;
      v[i] = 0.0f;
      mirror[i] = 0;
      if (bf16) g16[i] = FloatToBf16(x * 1e-2f); else g32[i] = x * 1e-2f;
    }
  });

  OptimizerConfig config;
  const AdamSlice slice{master, m, v, mirror, n};
  const GradView grad = bf16 ? GradView::Bf16(g16) : GradView::Fp32(g32);
  AdamUpdate(MakeAdamStep(config, 1, 1.0f), grad, slice);  // warm-up
  // Triad and update alternate, so that both see the same neighbours on a
  // shared machine; each keeps its best.
  double best = 1e30, triad_stream = 0;
  uint64_t t = 2;
  for (int r = 0; r < reps; ++r) {
    triad_stream = std::max(
        triad_stream, MeasureTriadBytesPerSecond(triad_bytes, threads, 2));
    for (int k = 0; k < 2; ++k) {
      const AdamStep step = MakeAdamStep(config, t++, 1.0f);
      const auto t0 = std::chrono::steady_clock::now();
      AdamUpdate(step, grad, slice);
      best = std::min(best, std::chrono::duration<double>(
                                std::chrono::steady_clock::now() - t0).count());
    }
  }
  // The servers' check of every received gradient (optim/grad_scan.h), as
  // they run it: one piece at a time right after it arrived, its bytes still
  // in cache from the receive (here a copy into a receive buffer stands for
  // it), on one thread; and, for comparison, over the whole gradient from
  // memory. Against the update's time for the same elements.
  const size_t esize = bf16 ? 2 : 4;
  const size_t piece_elems = (piece_kib << 10) / esize;  // as pushed
  std::vector<char> received(piece_elems * esize);
  double scan_hot = 0;
  uint32_t seen = 0;
  for (size_t at = 0; at < n; at += piece_elems) {
    const size_t k = std::min<size_t>(piece_elems, n - at);
    std::memcpy(received.data(), static_cast<const char*>(grad.data) + at * esize,
                k * esize);
    const auto t0 = std::chrono::steady_clock::now();
    seen = std::max(seen, ScanGrad({received.data(), bf16}, k).max_abs_bits);
    scan_hot += std::chrono::duration<double>(
                    std::chrono::steady_clock::now() - t0).count();
  }
  double scan_cold = 1e30;
  for (int r = 0; r < 2; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    seen = std::max(seen, ScanGrad(grad, n).max_abs_bits);
    scan_cold = std::min(scan_cold, std::chrono::duration<double>(
                                        std::chrono::steady_clock::now() - t0)
                                        .count());
  }
  if (!GradScan{seen, bf16}.finite()) std::printf("(the gradient is not finite)\n");
  const double triad_dram = triad_stream * 32.0 / 24.0;
  const double params_per_s = n / best;
  const double grad_bytes = bf16 ? 2 : 4;
  // Only the AVX-512 kernel streams the mirror; otherwise count its
  // write-allocate.
  const bool streams_mirror = AdamKernelName() == "avx512";
  const double update_bytes = 12 + grad_bytes + 14 + (streams_mirror ? 0 : 2);
  const double bound = triad_dram / update_bytes;
  const double ratio = params_per_s / bound;

  std::printf("adam: kernel=%s threads=%d n=%llu grad=%s reps=%d (best of "
              "triad/update rounds, interleaved)\n",
              std::string(AdamKernelName()).c_str(), threads,
              static_cast<unsigned long long>(n), bf16 ? "bf16" : "fp32", reps);
  std::printf("triad (all %d cores, 3 x 512 MiB): %.1f GB/s STREAM-counted "
              "(24 B/elem), %.1f GB/s with write-allocate (32 B/elem)\n",
              threads, triad_stream / 1e9, triad_dram / 1e9);
  std::printf("update bytes/param: %.0f (reads 12+%.0f, writes 14, %s)\n",
              update_bytes, grad_bytes,
              streams_mirror ? "mirror stored non-temporally: no write-allocate"
                             : "+2 write-allocate for the mirror");
  std::printf("bound: %.3f G params/s (triad %.1f GB/s / %.0f B); with "
              "STREAM counting (triad 24 B/elem) it would be %.3f\n",
              bound / 1e9, triad_dram / 1e9, update_bytes,
              triad_stream / update_bytes / 1e9);
  std::printf("AdamUpdate: %.3f G params/s (%.1f ms per step, %.1f GB/s moved)\n",
              params_per_s / 1e9, best * 1e3, params_per_s * update_bytes / 1e9);
  // The update's CPU time: it runs on every core.
  const double update_cpu = best * threads;
  std::printf("gradient scan (%s kernel): %.2f ms over %llu KiB pieces just "
              "received, one thread = %.1f%% of the update's CPU time "
              "(%.2f ms x %d threads); over the whole gradient from memory "
              "%.2f ms = %.1f%%\n",
              std::string(AvailableGradScanKernels().front().name).c_str(),
              scan_hot * 1e3, static_cast<unsigned long long>(piece_kib), 100 * scan_hot / update_cpu, best * 1e3, threads,
              scan_cold * 1e3, 100 * scan_cold / update_cpu);
  std::printf("adam scan_ratio=%.3f target=0.03\n", scan_hot / update_cpu);
  std::printf("adam ratio=%.2f target=0.8\n", ratio);
  return 0;
}

}  // namespace

ZS_REGISTER_BENCH("adam",
                  "AdamUpdate params/s vs triad bandwidth / bytes per param "
                  "[--n=100000000] [--grad=bf16|fp32] [--reps=5]",
                  RunAdam);

}  // namespace zeroshard::bench
