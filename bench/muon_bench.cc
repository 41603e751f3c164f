// zeroshard-bench muon: Muon's Newton–Schulz iteration (optim/newton_schulz.h)
// at GPT-2's matrix shapes against the rate of its own matrix product
// (Fp32MatMul, oneDNN) alone at the products' shapes, measured in the same
// run, and the orthogonalization time of one optimizer step for the model's
// matrices over S servers.
//
// Per matrix (rows x cols, s = min, l = max) the iteration runs 5 times the
// products s x l . l x s (A = X X^T), s x s . s x s (A A) and s x s . s x l
// (B X), with element-wise passes between them. The peer: Fp32MatMul on the
// same three shapes, each timed alone (best of the runs); the ratio is the
// iteration's FLOP rate over the peer's rate for the same FLOPs. --bf16:
// the BF16 iteration against Bf16MatMul (its roundings and conversions are
// the element-wise passes).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "bench/bench.h"
#include "optim/newton_schulz.h"

namespace zeroshard::bench {
namespace {

using MuonClock = std::chrono::steady_clock;

double MuonSeconds(MuonClock::time_point t0) {
  return std::chrono::duration<double>(MuonClock::now() - t0).count();
}

// Best time of Fp32MatMul (Bf16MatMul with `bf16`) C (m x n) = A (m x k)
// op(B); 0 on failure.
double MuonBestGemm(int64_t m, int64_t n, int64_t k, bool bt, int reps,
                    bool bf16) {
  std::vector<float> a(m * k, 0.01f), b(k * n, 0.02f), c(m * n);
  std::vector<uint16_t> ah(a.size(), 0x3c24), bh(b.size(), 0x3ca4);
  double best = 1e30;
  for (int r = 0; r < reps + 1; ++r) {  // the first run warms up
    const auto t0 = MuonClock::now();
    const absl::Status s =
        bf16 ? Bf16MatMul(ah.data(), bh.data(), bt, m, n, k, c.data())
             : Fp32MatMul(a.data(), b.data(), bt, m, n, k, c.data());
    if (!s.ok()) return 0;
    if (r > 0) best = std::min(best, MuonSeconds(t0));
  }
  return best;
}

int RunMuonShapes(int64_t width, int layers, int reps, bool bf16);

int RunMuon(const std::vector<std::string>& args) {
  int64_t width = Smoke() ? 64 : 768;
  int layers = 12;
  int reps = Smoke() ? 1 : 3;
  bool bf16 = false;
  for (const std::string& a : args) {
    if (a == "--bf16") {
      bf16 = true;
    } else if (absl::StartsWith(a, "--width=") &&
        absl::SimpleAtoi(a.substr(8), &width) && width >= 8) {
    } else if (absl::StartsWith(a, "--layers=") &&
               absl::SimpleAtoi(a.substr(9), &layers) && layers > 0) {
    } else if (absl::StartsWith(a, "--reps=") &&
               absl::SimpleAtoi(a.substr(7), &reps) && reps > 0) {
    } else {
      std::fprintf(stderr,
                   "usage: zeroshard-bench muon [--width=768] [--layers=12] "
                   "[--reps=3] [--bf16]\n  bad argument: %s\n",
                   a.c_str());
      return 2;
    }
  }
  // The smoke run takes both paths, BF16 first (its ratio line is "muon
  // bf16 ratio=").
  std::vector<bool> runs = {bf16};
  if (Smoke() && !bf16) runs = {true, false};
  for (const bool run_bf16 : runs) {
    if (const int rc = RunMuonShapes(width, layers, reps, run_bf16); rc != 0) {
      return rc;
    }
  }
  return 0;
}

int RunMuonShapes(int64_t width, int layers, int reps, bool bf16) {
  // A GPT-2 block's matrices as stored (Conv1D: in x out).
  struct Shape {
    const char* name;
    int64_t rows, cols;
  };
  const Shape shapes[] = {{"attn.c_attn", width, 3 * width},
                          {"attn.c_proj", width, width},
                          {"mlp.c_fc", width, 4 * width},
                          {"mlp.c_proj", 4 * width, width}};
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  NewtonSchulzScratch scratch;
  double block_seconds = 0, total_flops = 0, total_peer = 0;
  for (const Shape& sh : shapes) {
    std::vector<float> g(sh.rows * sh.cols), out(g.size());
    for (float& x : g) x = normal(rng);
    double best = 1e30;
    for (int r = 0; r < reps + 1; ++r) {
      const auto t0 = MuonClock::now();
      if (!NewtonSchulz5(g.data(), sh.rows, sh.cols, out.data(), scratch,
                         bf16 ? NsPrecision::kBf16 : NsPrecision::kFp32)
               .ok()) {
        std::fprintf(stderr, "muon: Newton-Schulz failed on %s\n", sh.name);
        return 1;
      }
      if (r > 0) best = std::min(best, MuonSeconds(t0));
    }
    const int64_t s = std::min(sh.rows, sh.cols), l = std::max(sh.rows, sh.cols);
    const double peer =
        kNewtonSchulzSteps * (MuonBestGemm(s, s, l, true, reps, bf16) +
                              MuonBestGemm(s, s, s, false, reps, bf16) +
                              MuonBestGemm(s, l, s, false, reps, bf16));
    const double flops = NewtonSchulzFlops(sh.rows, sh.cols);
    std::printf("muon: %-12s %5lld x %-5lld Newton-Schulz (%s) %.2f ms, "
                "%.1f GFLOP/s; its matmul alone at its shapes %.1f GFLOP/s\n",
                sh.name, static_cast<long long>(sh.rows),
                static_cast<long long>(sh.cols), bf16 ? "BF16" : "FP32",
                best * 1e3,
                flops / best / 1e9, flops / peer / 1e9);
    block_seconds += best;
    total_flops += flops;
    total_peer += peer;
  }
  const double step = block_seconds * layers;
  std::printf("muon: one step orthogonalizes %d x 4 matrices: %.0f ms on one "
              "server; %.0f / %.0f / %.0f ms on 2 / 4 / 8 balanced servers\n",
              layers, step * 1e3, step * 1e3 / 2, step * 1e3 / 4,
              step * 1e3 / 8);
  std::printf("muon%s ratio=%.2f target=0.6\n", bf16 ? " bf16" : "",
              (total_flops / block_seconds) / (total_flops / total_peer));
  return 0;
}

}  // namespace

ZS_REGISTER_BENCH("muon",
                  "Newton-Schulz at GPT-2's matrix shapes vs its matmul's own rate "
                  "[--width=768] [--layers=12] [--reps=3] [--bf16]",
                  RunMuon);

}  // namespace zeroshard::bench
