// The loss-curve picture of a training run.
//
//   RETURN_IF_ERROR(WriteLossPlot(records, "out/loss.svg", "gpt-small"));
//
// Contracts:
// - ".svg": written here (no external program): the per-step loss as a thin
//   line (an SVG path), its moving mean over 10 steps as a thick one, skipped steps
//   marked, axes with ticks, and the validation loss (records with a finite
//   val_loss) as a second line with dots. Works for 1 or more records.
// - ".png": drawn by gnuplot (Debian gnuplot-nox) from a data file written
//   next to the picture (<plot>.dat: step, loss, skipped, val_loss or "?"),
//   the validation loss as a second line; when gnuplot is missing or fails, the
//   SVG is written instead at the same path with ".svg" and the returned
//   string says so. The gnuplot run is bounded (30 s).
// - Any other extension is INVALID_ARGUMENT (checked by ValidatePlotPath
//   before a run starts).
// - Returns the path actually written.
#ifndef ZEROSHARD_REPORT_LOSS_PLOT_H_
#define ZEROSHARD_REPORT_LOSS_PLOT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/progress_event.h"

namespace zeroshard {

absl::Status ValidatePlotPath(const std::string& path);

// The SVG document for `records` (exposed for tests).
std::string RenderLossSvg(const std::vector<StepRecord>& records,
                          const std::string& title);

absl::StatusOr<std::string> WriteLossPlot(
    const std::vector<StepRecord>& records, const std::string& path,
    const std::string& title);

}  // namespace zeroshard

#endif  // ZEROSHARD_REPORT_LOSS_PLOT_H_
