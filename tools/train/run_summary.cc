#include "tools/train/run_summary.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"

namespace zeroshard {

RunSummary Summarize(const std::vector<StepRecord>& records,
                     uint64_t tokens_per_step, double wall_seconds) {
  RunSummary s;
  s.wall_seconds = wall_seconds;
  const size_t n = records.size();
  s.steps = n;
  if (n == 0) return s;
  s.first_step = records.front().step;
  s.last_step = records.back().step;
  s.first_loss = records.front().loss;
  s.last_loss = records.back().loss;
  const size_t k = std::min<size_t>(10, n);
  for (size_t i = 0; i < k; ++i) {
    s.first10_mean += records[i].loss / k;
    s.last10_mean += records[n - k + i].loss / k;
  }
  std::vector<double> rates;
  for (const StepRecord& r : records) {
    rates.push_back(r.tokens_per_s);
    if (r.skipped) ++s.skipped_steps;
    if (std::isfinite(r.val_loss)) {
      if (s.val_evals++ == 0) {
        s.first_val_loss = r.val_loss;
        s.first_val_step = r.step;
      }
      s.last_val_loss = r.val_loss;
      s.last_val_step = r.step;
    }
  }
  std::sort(rates.begin(), rates.end());
  s.median_tokens_per_s = n % 2 == 1
                              ? rates[n / 2]
                              : 0.5 * (rates[n / 2 - 1] + rates[n / 2]);
  s.total_tokens = tokens_per_step * n;
  s.final_loss_scale = records.back().loss_scale;
  return s;
}

std::string FormatSummary(const RunSummary& s, const RunOutputs& outputs) {
  std::string out = absl::StrFormat(
      "== zeroshard-train summary\n"
      "steps          %u (step %u .. %u), %u skipped\n"
      "loss           %.4f -> %.4f (mean of first %d: %.4f, last %d: %.4f)\n"
      "tokens/s       %.0f (median), %u tokens in all\n"
      "wall time      %.1f s\n"
      "loss scale     %g (final)\n",
      s.steps, s.first_step, s.last_step, s.skipped_steps, s.first_loss,
      s.last_loss, std::min<uint64_t>(10, s.steps), s.first10_mean,
      std::min<uint64_t>(10, s.steps), s.last10_mean, s.median_tokens_per_s,
      s.total_tokens, s.wall_seconds, s.final_loss_scale);
  if (s.val_evals > 0) {
    absl::StrAppendFormat(&out,
                          "val loss       %.4f -> %.4f (after step %u .. %u, %u "
                          "evaluation%s)\n",
                          s.first_val_loss, s.last_val_loss, s.first_val_step,
                          s.last_val_step, s.val_evals, s.val_evals == 1 ? "" : "s");
  }
  auto line = [&](const char* what, const std::string& path) {
    if (!path.empty()) absl::StrAppendFormat(&out, "%-15s%s\n", what, path);
  };
  if (!s.restarts.empty()) {
    absl::StrAppendFormat(&out, "restarts       %d\n", s.restarts.size());
    for (const std::string& r : s.restarts) {
      absl::StrAppendFormat(&out, "  %s\n", r);
    }
  }
  line("metrics", outputs.metrics);
  line("loss curve", outputs.plot);
  line("weights", outputs.weights);
  line("logs", outputs.logs);
  return out;
}

}  // namespace zeroshard
