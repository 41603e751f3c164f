// zeroshard._zeroshard.RunRecorder: what a zeroshard-train run shows and
// leaves behind, for a Python training loop: the progress bar on stderr,
// <out>/metrics.csv (or .jsonl) row by row, and the loss plot at the end,
// through the launcher's own writers (report/progress_bar.h,
// metrics_writer.h, loss_plot.h), so both kinds of run read the same.
#include "python/run_outputs.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/progress_event.h"
#include "report/loss_plot.h"
#include "report/metrics_writer.h"
#include "report/progress_bar.h"

namespace py = pybind11;

namespace zeroshard {
namespace {

class RunRecorder {
 public:
  RunRecorder(const std::string& out_dir, uint64_t total_steps,
              uint64_t first_step, const std::string& title, int every,
              bool quiet, const std::string& metrics, const std::string& plot)
      : title_(title) {
    if (total_steps == 0 || first_step > total_steps) {
      throw std::invalid_argument(absl::StrCat(
          "RunRecorder: total_steps ", total_steps, " and first_step ",
          first_step, ": need 0 <= first_step <= total_steps, total_steps > 0"));
    }
    if (every < 1) {
      throw std::invalid_argument(
          absl::StrCat("RunRecorder: every=", every, ": need >= 1"));
    }
    std::error_code ec;
    std::filesystem::create_directories(out_dir, ec);
    if (ec) {
      throw std::runtime_error(
          absl::StrCat("RunRecorder: cannot create ", out_dir, ": ", ec.message()));
    }
    if (!plot.empty()) {
      plot_path_ = absl::StrCat(out_dir, "/", plot);
      if (absl::Status s = ValidatePlotPath(plot_path_); !s.ok()) {
        throw std::invalid_argument(absl::StrCat("RunRecorder: ", s.message()));
      }
    }
    if (!metrics.empty()) {
      const bool jsonl = metrics.size() > 6 &&
                         metrics.compare(metrics.size() - 6, 6, ".jsonl") == 0;
      const MetricsFormat format =
          jsonl ? MetricsFormat::kJsonl : MetricsFormat::kCsv;
      const std::string path = absl::StrCat(out_dir, "/", metrics);
      // A resumed run (first_step > 0) continues the history its --out
      // holds, as zeroshard-train's does; the plot draws it all.
      auto w = first_step > 0
                   ? MetricsWriter::Continue(path, format, first_step, &records_)
                   : MetricsWriter::Open(path, format);
      if (!w.ok()) {
        throw std::runtime_error(absl::StrCat("RunRecorder: ", w.status().message()));
      }
      metrics_ = *std::move(w);
      earlier_ = records_.size();
    }
    if (!quiet) {
      bar_ = std::make_unique<ProgressBar>(stderr, first_step, total_steps,
                                           every, isatty(2) != 0);
    }
  }

  // One optimizer step; `step` is 0-based, as zeroshard-train's records.
  void Record(uint64_t step, double loss, double seconds, double tokens_per_s,
              double loss_scale, double grad_norm, double lr, bool skipped,
              double val_loss) {
    StepRecord r;
    r.step = step;
    r.loss = loss;
    r.seconds = seconds;
    r.tokens_per_s = tokens_per_s;
    r.loss_scale = loss_scale;
    r.grad_norm = grad_norm;
    r.lr = lr;
    r.skipped = skipped;
    r.val_loss = val_loss;
    r.compute_s = seconds;
    if (metrics_ != nullptr) {
      if (absl::Status s = metrics_->Append(r); !s.ok()) {
        throw std::runtime_error(absl::StrCat("RunRecorder: ", s.message()));
      }
    }
    if (bar_ != nullptr) bar_->Update(r);
    records_.push_back(r);
  }

  // Ends the progress line and draws the loss plot; returns its path ("" when
  // there is none or no step was recorded).
  std::string Finish() {
    if (bar_ != nullptr) bar_->Finish();
    if (plot_path_.empty() || records_.size() == earlier_) return "";
    auto written = WriteLossPlot(records_, plot_path_, title_);
    if (!written.ok()) {
      throw std::runtime_error(absl::StrCat("RunRecorder: ", written.status().message()));
    }
    return *written;
  }

  std::string metrics_path() const {
    return metrics_ == nullptr ? "" : metrics_->path();
  }

 private:
  const std::string title_;
  size_t earlier_ = 0;  // records_ that an earlier run's metrics file held
  std::string plot_path_;
  std::unique_ptr<MetricsWriter> metrics_;
  std::unique_ptr<ProgressBar> bar_;
  std::vector<StepRecord> records_;
};

}  // namespace

void BindRunOutputs(py::module_& m) {
  constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  py::class_<RunRecorder>(m, "RunRecorder",
                          "zeroshard-train's progress bar, metrics file and "
                          "loss plot for a Python training loop.")
      .def(py::init<const std::string&, uint64_t, uint64_t, const std::string&,
                    int, bool, const std::string&, const std::string&>(),
           py::arg("out_dir"), py::arg("total_steps"), py::arg("first_step") = 0,
           py::arg("title") = "", py::arg("every") = 10, py::arg("quiet") = false,
           py::arg("metrics") = "metrics.csv", py::arg("plot") = "loss.svg")
      .def("record", &RunRecorder::Record, py::arg("step"), py::arg("loss"),
           py::arg("seconds"), py::arg("tokens_per_s") = 0.0,
           py::arg("loss_scale") = 1.0, py::arg("grad_norm") = kNaN,
           py::arg("lr") = 0.0, py::arg("skipped") = false,
           py::arg("val_loss") = kNaN)
      .def("finish", &RunRecorder::Finish)
      .def_property_readonly("metrics_path", &RunRecorder::metrics_path);
}

}  // namespace zeroshard
