#include "report/metrics_writer.h"

#include <errno.h>
#include <string.h>

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace zeroshard {

std::string MetricsCsvHeader() {
  return "step,loss,tokens_per_s,loss_scale,grad_norm,lr,skipped,seconds,"
         "fetch_s,compute_s,comm_wait_s,commit_s,model_state_bytes,"
         "activation_peak_bytes,val_loss";
}

std::string FormatMetricsRow(const StepRecord& r, MetricsFormat format) {
  const char* skipped = r.skipped ? "true" : "false";
  if (format == MetricsFormat::kCsv) {
    return absl::StrFormat("%u,%.6f,%.1f,%g,%.6g,%.6g,%s,%.4f,%.4f,%.4f,%.4f,"
                           "%.4f,%u,%u,%s",
                           r.step, r.loss, r.tokens_per_s, r.loss_scale,
                           r.grad_norm, r.lr, skipped, r.seconds, r.fetch_s,
                           r.compute_s, r.comm_wait_s, r.commit_s,
                           r.model_state_bytes, r.activation_peak_bytes,
                           std::isfinite(r.val_loss)
                               ? absl::StrFormat("%.6f", r.val_loss)
                               : std::string());
  }
  // JSON has no inf / nan: those become null.
  auto num = [](const char* fmt, double x) -> std::string {
    if (!std::isfinite(x)) return "null";
    char buf[64];
    std::snprintf(buf, sizeof(buf), fmt, x);
    return std::string(buf);
  };
  return absl::StrCat(
      "{\"step\":", r.step, ",\"loss\":", num("%.6f", r.loss),
      ",\"tokens_per_s\":", num("%.1f", r.tokens_per_s),
      ",\"loss_scale\":", num("%g", r.loss_scale),
      ",\"grad_norm\":", num("%.6g", r.grad_norm), ",\"lr\":",
      num("%.6g", r.lr), ",\"skipped\":", skipped, ",\"seconds\":",
      num("%.4f", r.seconds), ",\"fetch_s\":", num("%.4f", r.fetch_s),
      ",\"compute_s\":", num("%.4f", r.compute_s), ",\"comm_wait_s\":",
      num("%.4f", r.comm_wait_s), ",\"commit_s\":", num("%.4f", r.commit_s),
      ",\"model_state_bytes\":", r.model_state_bytes,
      ",\"activation_peak_bytes\":", r.activation_peak_bytes,
      ",\"val_loss\":", num("%.6f", r.val_loss), "}");
}

absl::StatusOr<std::unique_ptr<MetricsWriter>> MetricsWriter::Open(
    const std::string& path, MetricsFormat format) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    return absl::PermissionDeniedError(absl::StrCat(
        "cannot create metrics file ", path, ": ", strerror(errno)));
  }
  std::unique_ptr<MetricsWriter> w(new MetricsWriter(f, path, format));
  if (format == MetricsFormat::kCsv) {
    std::fprintf(f, "%s\n", MetricsCsvHeader().c_str());
    std::fflush(f);
  }
  return w;
}

MetricsWriter::~MetricsWriter() { std::fclose(file_); }

absl::Status MetricsWriter::Append(const StepRecord& r) {
  const std::string row = FormatMetricsRow(r, format_);
  if (std::fprintf(file_, "%s\n", row.c_str()) < 0 || std::fflush(file_) != 0) {
    return absl::DataLossError(
        absl::StrCat("cannot write metrics file ", path_, ": ", strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace zeroshard
