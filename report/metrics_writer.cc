#include "report/metrics_writer.h"

#include <errno.h>
#include <string.h>

#include <cmath>
#include <fstream>
#include <iterator>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/atomic_file.h"
#include "common/status_macros.h"

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

namespace {

// A number of a kept row, or NaN when empty or null.
double ParseNumber(absl::string_view text) {
  double v = 0;
  if (text.empty() || text == "null" || !absl::SimpleAtod(text, &v)) {
    return std::numeric_limits<double>::quiet_NaN();
  }
  return v;
}

// JSON Lines: the value of "key" in one of FormatMetricsRow's rows (flat,
// numbers, true/false and null only).
absl::string_view JsonField(absl::string_view row, absl::string_view key) {
  const std::string want = absl::StrCat("\"", key, "\":");
  const size_t at = row.find(want);
  if (at == absl::string_view::npos) return "";
  absl::string_view rest = row.substr(at + want.size());
  return rest.substr(0, rest.find_first_of(",}"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsWriter>> MetricsWriter::Continue(
    const std::string& path, MetricsFormat format, uint64_t first_step,
    std::vector<StepRecord>* kept) {
  std::ifstream in(path);
  if (!in) return Open(path, format);
  std::string text((std::istreambuf_iterator<char>(in)),
                   std::istreambuf_iterator<char>());
  std::vector<absl::string_view> lines =
      absl::StrSplit(text, '\n', absl::SkipEmpty());
  const bool csv = format == MetricsFormat::kCsv;
  if (csv && (lines.empty() || lines[0] != MetricsCsvHeader())) {
    return absl::FailedPreconditionError(absl::StrCat(
        "metrics file ", path, " is not this version's CSV (its first line "
        "is not the header): move it away to resume into this --out"));
  }
  std::string out = csv ? absl::StrCat(MetricsCsvHeader(), "\n") : "";
  for (size_t i = csv ? 1 : 0; i < lines.size(); ++i) {
    const absl::string_view row = lines[i];
    if (!csv && (row.empty() || row[0] != '{')) {
      return absl::FailedPreconditionError(absl::StrCat(
          "metrics file ", path, " is not JSON Lines (line ", i + 1,
          "): move it away to resume into this --out"));
    }
    std::vector<absl::string_view> cells;
    if (csv) cells = absl::StrSplit(row, ',');
    const absl::string_view step_text = csv ? cells[0] : JsonField(row, "step");
    uint64_t step = 0;
    if (!absl::SimpleAtoi(step_text, &step)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "metrics file ", path, " line ", i + 1, " has no step: move it away "
          "to resume into this --out"));
    }
    if (step >= first_step) continue;  // made again by this run
    StepRecord r;
    r.step = step;
    r.loss = ParseNumber(csv ? cells[1] : JsonField(row, "loss"));
    r.val_loss = ParseNumber(csv ? (cells.size() > 14 ? cells[14] : "")
                                 : JsonField(row, "val_loss"));
    if (kept != nullptr) kept->push_back(r);
    absl::StrAppend(&out, row, "\n");
  }
  RETURN_IF_ERROR(WriteFileAtomically(path, out));
  std::FILE* f = std::fopen(path.c_str(), "a");
  if (f == nullptr) {
    return absl::PermissionDeniedError(absl::StrCat(
        "cannot append to metrics file ", path, ": ", strerror(errno)));
  }
  return std::unique_ptr<MetricsWriter>(new MetricsWriter(f, path, format));
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
