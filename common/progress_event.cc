#include "common/progress_event.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace zeroshard {
namespace {

using nlohmann::json;

absl::Status Bad(std::string_view line, std::string_view why) {
  constexpr size_t kQuote = 200;
  return absl::InvalidArgumentError(absl::StrCat(
      "worker progress line: ", std::string(why), ": '",
      std::string(line.substr(0, std::min(line.size(), kQuote))),
      line.size() > kQuote ? "...'" : "'"));
}

// printf writes non-finite doubles as inf / -inf / nan / -nan, which JSON
// has no spelling for. Quote such bare tokens (outside strings) so that the
// line parses; Number() below reads them back.
std::string QuoteNonFinite(std::string_view line) {
  std::string out;
  bool in_string = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (in_string) {
      out += c;
      if (c == '\\' && i + 1 < line.size()) {
        out += line[++i];
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') in_string = true;
    bool matched = false;
    for (std::string_view token : {"-inf", "inf", "-nan", "nan"}) {
      if (line.substr(i, token.size()) == token) {
        out += '"';
        out += token;
        out += '"';
        i += token.size() - 1;
        matched = true;
        break;
      }
    }
    if (!matched) out += c;
  }
  return out;
}

// Reads a number field; `required` fields must be present.
template <typename T>
absl::Status Number(const json& j, const char* key, bool required,
                    std::string_view line, T* out) {
  auto it = j.find(key);
  if (it == j.end()) {
    return required ? Bad(line, absl::StrCat("missing \"", key, "\""))
                    : absl::OkStatus();
  }
  if constexpr (std::is_same_v<T, double>) {
    if (it->is_null()) {  // the worker writes non-finite values as null
      *out = std::numeric_limits<double>::quiet_NaN();
      return absl::OkStatus();
    }
    if (it->is_string()) {  // from QuoteNonFinite
      const std::string v = it->get<std::string>();
      if (v == "inf" || v == "-inf" || v == "nan" || v == "-nan") {
        *out = v == "inf"    ? std::numeric_limits<double>::infinity()
               : v == "-inf" ? -std::numeric_limits<double>::infinity()
                             : std::numeric_limits<double>::quiet_NaN();
        return absl::OkStatus();
      }
    }
  }
  if (!it->is_number()) {
    return Bad(line, absl::StrCat("\"", key, "\" is not a number"));
  }
  if constexpr (std::is_same_v<T, uint64_t>) {
    if (it->is_number_float() || it->get<double>() < 0) {
      return Bad(line, absl::StrCat("\"", key, "\" is not a count"));
    }
  }
  *out = it->get<T>();
  return absl::OkStatus();
}

// A JSON number; a value that is not finite as printf spells it (inf,
// -inf, nan), which ParseWorkerEvent reads back (QuoteNonFinite): an
// overflow step's gradient norm stays inf all the way to metrics.csv.
std::string JsonNumber(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return absl::StrFormat("%.6f", v);
}

}  // namespace

std::string FormatWorkerEvent(const WorkerEvent& e) {
  switch (e.kind) {
    case WorkerEvent::Kind::kStart:
      return absl::StrFormat(
          "{\"event\":\"start\",\"step\":%u,\"steps\":%u,\"params\":%u,"
          "\"workers\":%u,\"servers\":%u}",
          e.step, e.total_steps, e.params, e.workers, e.servers);
    case WorkerEvent::Kind::kStep: {
      const StepRecord& r = e.record;
      std::string line = absl::StrFormat(
          "{\"event\":\"step\",\"step\":%u,\"loss\":%s,"
          "\"tokens_per_s\":%.1f,\"loss_scale\":%.17g,\"grad_norm\":%s,"
          "\"lr\":%.6g,\"skipped\":%s,\"seconds\":%.4f,\"fetch_s\":%.4f,"
          "\"compute_s\":%.4f,\"comm_wait_s\":%.4f,\"commit_s\":%.4f,"
          "\"model_state_bytes\":%u,\"activation_peak_bytes\":%u}",
          r.step, JsonNumber(r.loss), r.tokens_per_s, r.loss_scale,
          JsonNumber(r.grad_norm), r.lr, r.skipped ? "true" : "false",
          r.seconds, r.fetch_s, r.compute_s, r.comm_wait_s, r.commit_s,
          r.model_state_bytes, r.activation_peak_bytes);
      if (std::isfinite(r.val_loss)) {
        line.pop_back();  // the closing brace
        absl::StrAppend(&line, ",\"val_loss\":", JsonNumber(r.val_loss), "}");
      }
      return line;
    }
    case WorkerEvent::Kind::kDone:
      return absl::StrFormat("{\"event\":\"done\",\"step\":%u}", e.step);
    case WorkerEvent::Kind::kOther:
      break;
  }
  return "{\"event\":\"other\"}";
}

absl::StatusOr<WorkerEvent> ParseWorkerEvent(std::string_view line) {
  const std::string text = QuoteNonFinite(line);
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Bad(line, "not a JSON object");
  auto ev = j.find("event");
  if (ev == j.end() || !ev->is_string()) return Bad(line, "no \"event\"");
  const std::string name = ev->get<std::string>();
  WorkerEvent e;
  absl::Status s;
  if (name == "start") {
    e.kind = WorkerEvent::Kind::kStart;
    if (!(s = Number(j, "step", true, line, &e.step)).ok()) return s;
    if (!(s = Number(j, "steps", true, line, &e.total_steps)).ok()) return s;
    if (!(s = Number(j, "params", false, line, &e.params)).ok()) return s;
    if (!(s = Number(j, "workers", false, line, &e.workers)).ok()) return s;
    if (!(s = Number(j, "servers", false, line, &e.servers)).ok()) return s;
  } else if (name == "done") {
    e.kind = WorkerEvent::Kind::kDone;
    if (!(s = Number(j, "step", true, line, &e.step)).ok()) return s;
  } else if (name == "step") {
    e.kind = WorkerEvent::Kind::kStep;
    StepRecord& r = e.record;
    for (auto [key, out] : {std::pair{"loss", &r.loss},
                            {"tokens_per_s", &r.tokens_per_s},
                            {"loss_scale", &r.loss_scale},
                            {"grad_norm", &r.grad_norm},
                            {"lr", &r.lr},
                            {"seconds", &r.seconds}}) {
      if (!(s = Number(j, key, true, line, out)).ok()) return s;
    }
    for (auto [key, out] : {std::pair{"fetch_s", &r.fetch_s},
                            {"compute_s", &r.compute_s},
                            {"comm_wait_s", &r.comm_wait_s},
                            {"commit_s", &r.commit_s},
                            {"val_loss", &r.val_loss}}) {
      if (!(s = Number(j, key, false, line, out)).ok()) return s;
    }
    if (!(s = Number(j, "step", true, line, &r.step)).ok()) return s;
    if (!(s = Number(j, "model_state_bytes", false, line,
                     &r.model_state_bytes)).ok()) {
      return s;
    }
    if (!(s = Number(j, "activation_peak_bytes", false, line,
                     &r.activation_peak_bytes)).ok()) {
      return s;
    }
    auto sk = j.find("skipped");
    if (sk == j.end() || !sk->is_boolean()) {
      return Bad(line, "\"skipped\" is missing or not a boolean");
    }
    r.skipped = sk->get<bool>();
    e.step = r.step;
  }
  return e;
}

}  // namespace zeroshard
