// zeroshard-bench rules: params/s of each registered element-wise rule
// (common/optimizer_rules.h; its UpdateRule::Update, the dispatched kernel
// split over the optimizer pool, as the servers run it) on >= 100M
// parameters, against this machine's memory bound measured in the same
// run, as `adam` and `lion` do. A rule added to the registry is measured
// here with no change.
//
// Bytes per parameter: the update reads master and each FP32 slot (4 B
// each) and the gradient (2 B BF16 / 4 B FP32), writes master and the
// slots (their lines already read) and the BF16 mirror (2 B, plus 2 B for
// the read its store allocates); SGD and Adagrad, one slot each: 22 / 24 B.
// The bound is triad STREAM bytes/s * 32/24 (write-allocate counted) /
// those bytes.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "bench/bench.h"
#include "common/dtype.h"
#include "common/optimizer_rules.h"
#include "optim/update_rule.h"

namespace zeroshard::bench {
namespace {

int RunRules(const std::vector<std::string>& args) {
  std::string only;
  std::vector<std::string> rest;
  for (const std::string& a : args) {
    if (absl::StartsWith(a, "--rule=")) {
      only = a.substr(7);
    } else {
      rest.push_back(a);
    }
  }
  if (!only.empty() && (FindRule(only) == nullptr ||
                        FindRule(only)->kind != OptimizerKind::kRule)) {
    std::fprintf(stderr, "rules: --rule=%s is not one of %s (adamw, lion and "
                 "adamw8bit have benches of their own)\n",
                 only.c_str(), RegisteredRuleNames(true).c_str());
    return 2;
  }
  UpdateArgs parsed;
  if (!ParseUpdateArgs(rest, "rules", &parsed)) return 2;
  const uint64_t n = parsed.n;
  const bool bf16 = parsed.bf16;
  const size_t triad_bytes = Smoke() ? size_t{8} << 20 : size_t{512} << 20;
  const int threads = std::max(1u, std::thread::hardware_concurrency());
  double worst = 1e30;
  for (const RuleInfo& info : RegisteredRules()) {
    // The rules with a kind are benched by `adam`, `lion`, `adam8bit`; the
    // rules for whole tensors are not element-wise.
    if (info.kind != OptimizerKind::kRule || !info.element_wise()) continue;
    if (!only.empty() && info.name != only) continue;
    std::map<std::string, double> params;
    if (std::isnan(info.FindParam("lr")->default_value)) {
      params["lr"] = 1e-2;  // required: a value
    }
    absl::StatusOr<OptimizerConfig> config = MakeRuleConfig(info, params);
    if (!config.ok()) {
      std::fprintf(stderr, "rules: %s\n", std::string(config.status().message()).c_str());
      return 1;
    }
    absl::StatusOr<const UpdateRule*> found = UpdateRuleFor(*config);
    if (!found.ok()) {
      std::fprintf(stderr, "rules: %s\n", std::string(found.status().message()).c_str());
      return 1;
    }
    const UpdateRule& rule = **found;
    const size_t slots = rule.slots().size();
    float* master = AllocHugeArray<float>(n, "rules");
    std::vector<float*> state(slots);
    for (float*& s : state) s = AllocHugeArray<float>(n, "rules");
    uint16_t* mirror = AllocHugeArray<uint16_t>(n, "rules");
    float* g32 = bf16 ? nullptr : AllocHugeArray<float>(n, "rules");
    uint16_t* g16 = bf16 ? AllocHugeArray<uint16_t>(n, "rules") : nullptr;
    for (size_t i = 0; i < n; ++i) {
      const float x = static_cast<float>((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
      master[i] = x;
      for (float* s : state) s[i] = 0.0f;
      mirror[i] = 0;
      if (bf16) g16[i] = FloatToBf16(x * 1e-2f); else g32[i] = x * 1e-2f;
    }
    StateSlice slice{.master = master, .mirror = mirror, .n = n};
    for (size_t k = 0; k < slots; ++k) slice.slots[k] = state[k];
    const GradView grad = bf16 ? GradView::Bf16(g16) : GradView::Fp32(g32);
    bool ok = rule.Update(rule.MakeStep(*config, 1, 1.0f, 0.0, 1.0), grad, slice).ok();
    double best = 1e30, triad_stream = 0;
    uint64_t t = 2;
    for (int r = 0; r < parsed.reps; ++r) {
      triad_stream = std::max(
          triad_stream, MeasureTriadBytesPerSecond(triad_bytes, threads, 2));
      for (int k = 0; k < 2; ++k) {
        const AdamStep step = rule.MakeStep(*config, t++, 1.0f, 0.0, 1.0);
        const auto t0 = std::chrono::steady_clock::now();
        ok = rule.Update(step, grad, slice).ok() && ok;
        best = std::min(best, std::chrono::duration<double>(
                                  std::chrono::steady_clock::now() - t0).count());
      }
    }
    // AllocHugeBytes' memory is aligned_alloc's: free() takes it back before
    // the next rule's arrays.
    for (float* s : state) std::free(s);
    std::free(master);
    std::free(mirror);
    std::free(g32);
    std::free(g16);
    if (!ok) {
      std::fprintf(stderr, "rules: an update of %s failed\n", info.name.c_str());
      return 1;
    }
    const double bytes = 8.0 * (1 + slots) + (bf16 ? 2.0 : 4.0) + 4.0;
    const double dram = triad_stream * 32.0 / 24.0;
    const double rate = static_cast<double>(n) / best;
    const double bound = dram / bytes;
    std::printf("rules %s: %llu params, %s gradient, kernel %s, %d threads: "
                "%.2f G params/s (%.1f ms a step, %.1f GB/s moved at %.0f B "
                "per param); triad %.1f GB/s (%.1f with write-allocate) -> "
                "bound %.2f G params/s; ratio %.2f\n",
                info.name.c_str(), static_cast<unsigned long long>(n),
                bf16 ? "BF16" : "FP32", std::string(rule.KernelName()).c_str(),
                threads, rate / 1e9, best * 1e3, rate * bytes / 1e9, bytes,
                triad_stream / 1e9, dram / 1e9, bound / 1e9, rate / bound);
    worst = std::min(worst, rate / bound);
  }
  std::printf("rules ratio=%.2f target=0.8\n", worst);
  return 0;
}

}  // namespace

ZS_REGISTER_BENCH("rules",
                  "each registered rule's update params/s vs triad bandwidth / "
                  "bytes per param (the lowest ratio) [--rule=NAME] "
                  "[--n=100000000] [--grad=bf16|fp32] [--reps=5]",
                  RunRules);

}  // namespace zeroshard::bench
