#include "report/loss_plot.h"

#include <algorithm>
#include <cmath>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/logging.h"
#include "common/subprocess.h"

namespace zeroshard {
namespace {

constexpr int kWidth = 800, kHeight = 480;
constexpr int kLeft = 70, kRight = 20, kTop = 40, kBottom = 50;
constexpr int kSmoothWindow = 10;

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

// A "nice" tick step (1, 2 or 5 times a power of ten) giving ~`n` ticks.
double TickStep(double span, int n) {
  if (!(span > 0)) return 1;
  const double raw = span / n;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0}) {
    if (m * p >= raw) return m * p;
  }
  return 10 * p;
}

absl::Status WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  out.close();
  if (!out) return absl::PermissionDeniedError("cannot write " + path);
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidatePlotPath(const std::string& path) {
  if (path.empty() || absl::EndsWithIgnoreCase(path, ".svg") ||
      absl::EndsWithIgnoreCase(path, ".png")) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "config key \"zeroshard.plot\": '", path,
      "' must end in .svg or .png"));
}

std::string RenderLossSvg(const std::vector<StepRecord>& records,
                          const std::string& title) {
  double x0 = 0, x1 = 1, y0 = 0, y1 = 1;
  bool any = false;
  for (const StepRecord& r : records) {
    const double x = static_cast<double>(r.step);
    for (double y : {r.loss, r.val_loss}) {
      if (!std::isfinite(y)) continue;
      if (!any) { x0 = x1 = x; y0 = y1 = y; any = true; }
      x0 = std::min(x0, x); x1 = std::max(x1, x);
      y0 = std::min(y0, y); y1 = std::max(y1, y);
    }
  }
  if (x1 <= x0) x1 = x0 + 1;
  if (y1 <= y0) { y0 -= 0.5; y1 += 0.5; }
  const double pad = 0.05 * (y1 - y0);
  y0 -= pad; y1 += pad;
  const double pw = kWidth - kLeft - kRight, ph = kHeight - kTop - kBottom;
  auto X = [&](double x) { return kLeft + (x - x0) / (x1 - x0) * pw; };
  auto Y = [&](double y) { return kTop + (y1 - y) / (y1 - y0) * ph; };

  std::string svg = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
      "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
      "<text x=\"%d\" y=\"24\" font-size=\"15\">%s</text>\n",
      kWidth, kHeight, kWidth, kHeight, kLeft, Escape(title));
  // Axes and ticks.
  absl::StrAppendFormat(&svg,
                        "<rect x=\"%d\" y=\"%d\" width=\"%g\" height=\"%g\" "
                        "fill=\"none\" stroke=\"black\"/>\n",
                        kLeft, kTop, pw, ph);
  const double ys = TickStep(y1 - y0, 6);
  for (double y = std::ceil(y0 / ys) * ys; y <= y1 + 1e-12; y += ys) {
    absl::StrAppendFormat(
        &svg,
        "<line x1=\"%d\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
        "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n",
        kLeft, Y(y), kLeft + pw, Y(y), kLeft - 6, Y(y) + 4,
        std::round(y / ys) * ys);
  }
  const double xs = std::max(1.0, TickStep(x1 - x0, 8));
  for (double x = std::ceil(x0 / xs) * xs; x <= x1 + 1e-9; x += xs) {
    absl::StrAppendFormat(
        &svg,
        "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
        "stroke=\"black\"/><text x=\"%.1f\" y=\"%.1f\" "
        "text-anchor=\"middle\">%g</text>\n",
        X(x), kTop + ph, X(x), kTop + ph + 5, X(x), kTop + ph + 19, x);
  }
  absl::StrAppendFormat(&svg,
                        "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">"
                        "step</text>\n<text x=\"16\" y=\"%.1f\" "
                        "transform=\"rotate(-90 16 %.1f)\" "
                        "text-anchor=\"middle\">loss</text>\n",
                        kLeft + pw / 2, kHeight - 8, kTop + ph / 2,
                        kTop + ph / 2);
  // Raw loss, its moving mean, skipped steps.
  std::string raw, smooth, marks, val, val_dots;
  double sum = 0;
  std::vector<double> window;
  for (const StepRecord& r : records) {
    if (std::isfinite(r.val_loss)) {
      absl::StrAppendFormat(&val, "%s%.1f,%.1f ", val.empty() ? "M" : "L",
                            X(r.step), Y(r.val_loss));
      absl::StrAppendFormat(&val_dots,
                            "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" "
                            "fill=\"#e6550d\"/>\n",
                            X(r.step), Y(r.val_loss));
    }
    if (!std::isfinite(r.loss)) continue;
    absl::StrAppendFormat(&raw, "%s%.1f,%.1f ", raw.empty() ? "M" : "L",
                          X(r.step), Y(r.loss));
    window.push_back(r.loss);
    sum += r.loss;
    if (window.size() > kSmoothWindow) {
      sum -= window[window.size() - kSmoothWindow - 1];
    }
    const size_t n = std::min<size_t>(window.size(), kSmoothWindow);
    absl::StrAppendFormat(&smooth, "%s%.1f,%.1f ", smooth.empty() ? "M" : "L",
                          X(r.step), Y(sum / n));
    if (r.skipped) {
      absl::StrAppendFormat(&marks,
                            "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\" "
                            "fill=\"none\" stroke=\"#d62728\"/>\n",
                            X(r.step), Y(r.loss));
    }
  }
  absl::StrAppendFormat(&svg,
                        "<path fill=\"none\" stroke-linejoin=\"round\" stroke=\"#9ecae1\" "
                        "stroke-width=\"1\" d=\"%s\"/>\n"
                        "<path fill=\"none\" stroke-linejoin=\"round\" "
                        "stroke-linecap=\"round\" stroke=\"#08519c\" "
                        "stroke-width=\"2.5\" d=\"%s\"/>\n%s",
                        raw, smooth, marks);
  if (!val.empty()) {
    absl::StrAppendFormat(&svg,
                          "<path fill=\"none\" stroke-linejoin=\"round\" "
                          "stroke=\"#e6550d\" stroke-width=\"2\" d=\"%s\"/>\n%s"
                          "<text x=\"%.1f\" y=\"%d\" text-anchor=\"end\" "
                          "fill=\"#e6550d\">validation loss</text>\n",
                          val, val_dots, kLeft + pw - 6, kTop + 32);
  }
  absl::StrAppendFormat(&svg,
                        "<text x=\"%.1f\" y=\"%d\" text-anchor=\"end\" "
                        "fill=\"#08519c\">loss (mean of %d steps)</text>\n"
                        "</svg>\n",
                        kLeft + pw - 6, kTop + 16, kSmoothWindow);
  return svg;
}

absl::StatusOr<std::string> WriteLossPlot(
    const std::vector<StepRecord>& records, const std::string& path,
    const std::string& title) {
  if (absl::Status s = ValidatePlotPath(path); !s.ok()) return s;
  if (absl::EndsWithIgnoreCase(path, ".svg")) {
    if (absl::Status s = WriteText(path, RenderLossSvg(records, title));
        !s.ok()) {
      return s;
    }
    return path;
  }
  // PNG through gnuplot.
  const std::string data = path + ".dat";
  std::string rows;
  bool any_val = false;
  for (const StepRecord& r : records) {
    any_val = any_val || std::isfinite(r.val_loss);
    absl::StrAppendFormat(&rows, "%u %.6f %d %s\n", r.step, r.loss,
                          r.skipped ? 1 : 0,
                          std::isfinite(r.val_loss)
                              ? absl::StrFormat("%.6f", r.val_loss)
                              : std::string("?"));
  }
  std::string why;
  if (absl::Status s = WriteText(data, rows); !s.ok()) {
    why = s.ToString();
  } else {
    auto quoted = [](std::string s) {  // gnuplot single-quoted string
      std::string out;
      for (char c : s) out += c == '\'' ? std::string("''") : std::string(1, c);
      return out;
    };
    const std::string script = absl::StrFormat(
        "set terminal pngcairo size %d,%d; set output '%s'; "
        "set title '%s'; set xlabel 'step'; set ylabel 'loss'; set grid; "
        "set datafile missing '?'; "
        "plot '%s' using 1:2 with lines lw 2 title 'loss'%s",
        kWidth, kHeight, quoted(path), quoted(title), quoted(data),
        any_val ? absl::StrFormat(", '%s' using 1:4 with linespoints lw 2 "
                                  "pt 7 title 'validation loss'",
                                  quoted(data))
                : std::string());
    SubprocessOptions o;
    o.argv = {"gnuplot", "-e", script};
    o.stdout_mode = SubprocessOptions::Output::kDiscard;
    o.stderr_mode = SubprocessOptions::Output::kFile;
    o.stderr_path = path + ".gnuplot.log";
    auto p = Subprocess::Start(o);
    if (!p.ok()) {
      why = p.status().ToString();
    } else {
      auto st = (*p)->Wait(absl::Seconds(30));
      if (!st.ok()) {
        why = "gnuplot did not finish within 30 s";
      } else if (!st->success()) {
        why = absl::StrCat("gnuplot ", st->ToString(), " (see ", o.stderr_path,
                           ")");
      }
    }
  }
  if (why.empty()) return path;
  const std::string svg = path.substr(0, path.size() - 4) + ".svg";
  ZS_LOG(WARNING) << "cannot draw " << path << " (" << why
                  << "); writing " << svg << " instead";
  if (absl::Status s = WriteText(svg, RenderLossSvg(records, title)); !s.ok()) {
    return s;
  }
  return svg;
}

}  // namespace zeroshard
