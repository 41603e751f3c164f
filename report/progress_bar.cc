#include "report/progress_bar.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"

namespace zeroshard {
namespace {
constexpr int kBarWidth = 24;
constexpr size_t kEtaWindow = 20;
}  // namespace

std::string FormatEta(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const int64_t s = static_cast<int64_t>(std::llround(seconds));
  if (s >= 3600) return absl::StrFormat("%dh%02dm", s / 3600, s % 3600 / 60);
  if (s >= 60) return absl::StrFormat("%dm%02ds", s / 60, s % 60);
  return absl::StrFormat("%ds", s);
}

ProgressBar::ProgressBar(std::FILE* out, uint64_t first_step,
                         uint64_t total_steps, int every, bool tty)
    : out_(out),
      first_step_(first_step),
      total_steps_(std::max(total_steps, first_step)),
      every_(std::max(every, 1)),
      tty_(tty) {}

std::string ProgressBar::Line(const StepRecord& r) const {
  const uint64_t done = r.step + 1;
  const uint64_t span = total_steps_ - first_step_;
  const double frac =
      span == 0 ? 1.0
                : std::clamp(static_cast<double>(done - first_step_) / span,
                             0.0, 1.0);
  const int filled = static_cast<int>(frac * kBarWidth);
  std::string bar(filled, '#');
  bar.append(kBarWidth - filled, '-');
  double mean = 0;
  for (double s : recent_seconds_) mean += s / recent_seconds_.size();
  const double eta =
      done >= total_steps_ ? 0 : mean * static_cast<double>(total_steps_ - done);
  // The latest validation loss (Update keeps it between evaluations).
  const double val = std::isfinite(r.val_loss) ? r.val_loss : last_val_loss_;
  return absl::StrFormat("[%s] %u/%u  loss %.4f%s  %.1fk tok/s  scale %g%s  ETA %s",
                         bar, done, total_steps_, r.loss,
                         std::isfinite(val) ? absl::StrFormat("  val %.4f", val)
                                            : std::string(),
                         r.tokens_per_s / 1000, r.loss_scale,
                         r.skipped ? "  (skipped)" : "", FormatEta(eta));
}

void ProgressBar::Update(const StepRecord& r) {
  recent_seconds_.push_back(r.seconds);
  if (std::isfinite(r.val_loss)) last_val_loss_ = r.val_loss;
  if (recent_seconds_.size() > kEtaWindow) recent_seconds_.pop_front();
  const uint64_t done = r.step + 1;
  if (tty_) {
    std::fprintf(out_, "\r%s\033[K", Line(r).c_str());
    drawn_ = true;
  } else if (done % every_ == 0 || done >= total_steps_ || r.skipped ||
             done == first_step_ + 1) {
    std::fprintf(out_, "%s\n", Line(r).c_str());
  }
  std::fflush(out_);
}

void ProgressBar::Finish() {
  if (tty_ && drawn_) {
    std::fprintf(out_, "\n");
    std::fflush(out_);
  }
  drawn_ = false;
}

}  // namespace zeroshard
