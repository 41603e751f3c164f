#include "common/checkpoint_manifest.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>
#include <type_traits>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/atomic_file.h"
#include "common/json_integer.h"
#include "nlohmann/json.hpp"

namespace zeroshard {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr char kFolderPrefix[] = "step-";
constexpr int kStepDigits = 20;  // any uint64_t

// The step a folder name stands for, if it is one of ours.
bool ParseFolderName(const std::string& name, uint64_t* step) {
  if (name.size() != sizeof(kFolderPrefix) - 1 + kStepDigits ||
      name.rfind(kFolderPrefix, 0) != 0) {
    return false;
  }
  const std::string digits = name.substr(sizeof(kFolderPrefix) - 1);
  if (!std::all_of(digits.begin(), digits.end(),
                   [](char c) { return c >= '0' && c <= '9'; })) {
    return false;
  }
  return absl::SimpleAtoi(digits, step);
}

// Reads a required member of `j`; false (and *error set) when missing or of
// another type.
template <typename T>
bool Get(const json& j, const char* key, T* out, std::string* error) {
  auto it = j.find(key);
  if (it == j.end()) {
    *error = absl::StrCat("\"", key, "\" is missing");
    return false;
  }
  if constexpr (std::is_same_v<T, std::string>) {
    if (!it->is_string()) {
      *error = absl::StrCat("\"", key, "\" is not a string");
      return false;
    }
  } else if constexpr (std::is_floating_point_v<T>) {
    if (!it->is_number()) {
      *error = absl::StrCat("\"", key, "\" is not a number");
      return false;
    }
  } else {
    switch (ReadJsonInteger(*it, out)) {
      case JsonInteger::kOk:
        return true;
      case JsonInteger::kNotInteger:
      case JsonInteger::kNegative:
        *error = absl::StrCat("\"", key, "\" is not a count");
        return false;
      case JsonInteger::kOutOfRange:
        *error = absl::StrCat("\"", key, "\" is out of range");
        return false;
    }
    return false;
  }
  *out = it->get<T>();
  return true;
}

json ModelManifestToJson(const ModelManifest& model) {
  json units = json::array();
  for (const UnitSpec& u : model.units) {
    json tensors = json::array();
    for (const TensorSpec& t : u.tensors) {
      json tensor = {{"name", t.name}, {"shape", t.shape}};
      // Written only where set, so the boundaries of older manifests read
      // back unchanged.
      if (t.keep_whole) tensor["keep_whole"] = true;
      tensors.push_back(std::move(tensor));
    }
    units.push_back({{"name", u.name}, {"tensors", std::move(tensors)}});
  }
  return {{"partition_count", model.partition_count},
          {"units", std::move(units)}};
}

bool ModelManifestFromJson(const json& j, ModelManifest* out,
                           std::string* error) {
  *error = "\"model_manifest\" is not a manifest";
  if (!j.is_object() ||
      !Get(j, "partition_count", &out->partition_count, error)) {
    return false;
  }
  auto units = j.find("units");
  if (units == j.end() || !units->is_array()) return false;
  for (const json& u : *units) {
    UnitSpec unit;
    if (!u.is_object() || !Get(u, "name", &unit.name, error)) return false;
    auto tensors = u.find("tensors");
    if (tensors == u.end() || !tensors->is_array()) return false;
    for (const json& t : *tensors) {
      TensorSpec tensor;
      if (!t.is_object() || !Get(t, "name", &tensor.name, error)) return false;
      auto shape = t.find("shape");
      if (shape == t.end() || !shape->is_array()) return false;
      for (const json& d : *shape) {
        int64_t dim = 0;
        if (ReadJsonInteger(d, &dim) != JsonInteger::kOk || dim <= 0) {
          *error = absl::StrCat("tensor ", tensor.name, " has a bad shape");
          return false;
        }
        tensor.shape.push_back(dim);
      }
      auto whole = t.find("keep_whole");
      if (whole != t.end()) {
        if (!whole->is_boolean()) {
          *error = absl::StrCat("tensor ", tensor.name,
                                ": \"keep_whole\" is not a boolean");
          return false;
        }
        tensor.keep_whole = whole->get<bool>();
      }
      unit.tensors.push_back(std::move(tensor));
    }
    out->units.push_back(std::move(unit));
  }
  return true;
}

}  // namespace

std::string CheckpointFolderName(uint64_t step) {
  char digits[32];
  std::snprintf(digits, sizeof(digits), "%0*" PRIu64, kStepDigits, step);
  return absl::StrCat(kFolderPrefix, digits);
}

ResumePoint ParseResumePath(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  const fs::path folder(p);
  uint64_t step = 0;
  if (ParseFolderName(folder.filename().string(), &step)) {
    const std::string parent = folder.parent_path().string();
    return {parent.empty() ? "." : parent, step};
  }
  return {path, std::nullopt};
}

std::string ShardFileName(uint32_t server_index, uint32_t num_servers) {
  return absl::StrCat("shard-", server_index, "-of-", num_servers, ".bin");
}

absl::Status ValidateCheckpointManifest(const CheckpointManifest& m) {
  if (m.num_servers == 0 || m.shards.size() != m.num_servers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint manifest: ", m.shards.size(), " shards for ",
        m.num_servers, " servers"));
  }
  uint64_t next = 0;
  for (size_t k = 0; k < m.shards.size(); ++k) {
    const CheckpointShardEntry& s = m.shards[k];
    if (s.server_index != k) {
      return absl::InvalidArgumentError(absl::StrCat(
          "checkpoint manifest: shard ", k, " is server ", s.server_index));
    }
    if (s.owned.begin != next || s.owned.end < s.owned.begin) {
      return absl::InvalidArgumentError(absl::StrCat(
          "checkpoint manifest: shard ", k, " owns [", s.owned.begin, ", ",
          s.owned.end, "), expected to start at ", next));
    }
    if (s.file.empty() || s.file.find('/') != std::string::npos ||
        s.file == "." || s.file == ".." ||
        s.file == kCheckpointManifestName) {
      return absl::InvalidArgumentError(absl::StrCat(
          "checkpoint manifest: shard ", k, " names the file \"", s.file,
          "\"; it must be a plain name inside the step folder"));
    }
    next = s.owned.end;
  }
  if (next != m.total_elems) {
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint manifest: the shards cover [0, ", next, ") of ",
        m.total_elems, " elements"));
  }
  return absl::OkStatus();
}

std::string CheckpointManifestJson(const CheckpointManifest& m) {
  json shards = json::array();
  for (const CheckpointShardEntry& s : m.shards) {
    shards.push_back({{"server_index", s.server_index},
                      {"owned_begin", s.owned.begin},
                      {"owned_end", s.owned.end},
                      {"file", s.file},
                      {"checksum", s.checksum},
                      {"bytes", s.bytes}});
  }
  const LossScalerState& l = m.loss_scaler;
  json j = {
      {"zeroshard_checkpoint", kCheckpointManifestVersion},
      {"step", m.step},
      {"num_servers", m.num_servers},
      {"total_elems", m.total_elems},
      {"model_fingerprint", m.model_fingerprint},
      {"config_fingerprint", m.config_fingerprint},
      {"model_manifest", ModelManifestToJson(m.model)},
      {"loss_scaler",
       {{"scale", l.scale},
        {"hysteresis_left", l.hysteresis_left},
        {"iteration", l.iteration},
        {"last_overflow_iteration", l.last_overflow_iteration},
        {"overflows_at_min", l.overflows_at_min},
        {"skipped_steps", l.skipped_steps}}},
      {"data_position", m.data_position},
      {"schedule_total_steps", m.schedule_total_steps},
      {"shards", std::move(shards)},
  };
  if (!m.optimizer_json.empty()) {
    // Kept as a JSON object; text that is not one is stored as a string.
    json o = json::parse(m.optimizer_json, nullptr, /*allow_exceptions=*/false);
    j["optimizer"] = o.is_object() ? std::move(o) : json(m.optimizer_json);
  }
  return j.dump(2) + "\n";
}

absl::StatusOr<CheckpointManifest> ParseCheckpointManifest(
    std::string_view text) {
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  auto bad = [](absl::string_view why) {
    return absl::DataLossError(absl::StrCat("checkpoint manifest: ", why));
  };
  if (j.is_discarded() || !j.is_object()) return bad("not a JSON object");
  int version = 0;
  std::string error;
  if (!Get(j, "zeroshard_checkpoint", &version, &error) ||
      version != kCheckpointManifestVersion) {
    return bad(absl::StrCat("not a version ", kCheckpointManifestVersion,
                            " checkpoint manifest ", error));
  }
  CheckpointManifest m;
  const json* scaler = nullptr;
  const json* shards = nullptr;
  bool ok = Get(j, "step", &m.step, &error) &&
            Get(j, "num_servers", &m.num_servers, &error) &&
            Get(j, "total_elems", &m.total_elems, &error) &&
            Get(j, "model_fingerprint", &m.model_fingerprint, &error) &&
            Get(j, "config_fingerprint", &m.config_fingerprint, &error) &&
            Get(j, "data_position", &m.data_position, &error);
  if (ok) {
    auto mm = j.find("model_manifest");
    ok = mm != j.end() && ModelManifestFromJson(*mm, &m.model, &error);
    if (mm == j.end()) error = "\"model_manifest\" is missing";
  }
  if (ok) {
    auto s = j.find("loss_scaler");
    auto h = j.find("shards");
    if (s == j.end() || !s->is_object() || h == j.end() || !h->is_array()) {
      ok = false;
      error = "\"loss_scaler\" or \"shards\" is missing";
    } else {
      scaler = &*s;
      shards = &*h;
    }
  }
  if (ok) {
    LossScalerState& l = m.loss_scaler;
    ok = Get(*scaler, "scale", &l.scale, &error) &&
         Get(*scaler, "hysteresis_left", &l.hysteresis_left, &error) &&
         Get(*scaler, "iteration", &l.iteration, &error) &&
         Get(*scaler, "last_overflow_iteration", &l.last_overflow_iteration,
             &error) &&
         Get(*scaler, "overflows_at_min", &l.overflows_at_min, &error) &&
         Get(*scaler, "skipped_steps", &l.skipped_steps, &error);
  }
  // Optional: manifests written before it was recorded lack it (0).
  if (ok && j.contains("schedule_total_steps")) {
    ok = Get(j, "schedule_total_steps", &m.schedule_total_steps, &error);
  }
  // Optional too: an object, kept as its text.
  if (ok && j.contains("optimizer")) {
    const json& o = j["optimizer"];
    if (o.is_object()) {
      m.optimizer_json = o.dump();
    } else if (o.is_string()) {
      m.optimizer_json = o.get<std::string>();
    } else {
      ok = false;
      error = "\"optimizer\" is not an object";
    }
  }
  for (size_t k = 0; ok && k < shards->size(); ++k) {
    const json& e = (*shards)[k];
    CheckpointShardEntry s;
    ok = e.is_object() && Get(e, "server_index", &s.server_index, &error) &&
         Get(e, "owned_begin", &s.owned.begin, &error) &&
         Get(e, "owned_end", &s.owned.end, &error) &&
         Get(e, "file", &s.file, &error) &&
         Get(e, "checksum", &s.checksum, &error) &&
         Get(e, "bytes", &s.bytes, &error);
    if (!e.is_object()) error = absl::StrCat("shard ", k, " is not an object");
    m.shards.push_back(std::move(s));
  }
  if (!ok) return bad(error);
  if (absl::Status s = ValidateCheckpointManifest(m); !s.ok()) {
    return absl::DataLossError(s.message());
  }
  return m;
}

absl::Status WriteCheckpointManifest(const std::string& dir,
                                     const CheckpointManifest& m) {
  if (absl::Status s = ValidateCheckpointManifest(m); !s.ok()) return s;
  const fs::path folder = fs::path(dir) / CheckpointFolderName(m.step);
  std::error_code ec;
  if (!fs::is_directory(folder, ec)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint folder ", folder.string(), " does not exist"));
  }
  return WriteFileAtomically((folder / kCheckpointManifestName).string(),
                             CheckpointManifestJson(m));
}

absl::StatusOr<CheckpointManifest> ReadCheckpointManifest(
    const std::string& dir, uint64_t step) {
  const std::string path = (fs::path(dir) / CheckpointFolderName(step) /
                            kCheckpointManifestName)
                               .string();
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("no checkpoint manifest ", path));
  }
  std::ostringstream text;
  text << in.rdbuf();
  absl::StatusOr<CheckpointManifest> m = ParseCheckpointManifest(text.str());
  if (!m.ok()) {
    return absl::DataLossError(
        absl::StrCat(path, ": ", m.status().message()));
  }
  if (m->step != step) {
    return absl::DataLossError(absl::StrCat(
        path, ": the manifest is for step ", m->step, ", not ", step));
  }
  return m;
}

absl::StatusOr<std::vector<uint64_t>> ListCheckpoints(const std::string& dir) {
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec) {
    return absl::NotFoundError(absl::StrCat("cannot list checkpoint directory ",
                                            dir, ": ", ec.message()));
  }
  std::vector<uint64_t> steps;
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    if (ec) {
      return absl::DataLossError(absl::StrCat(
          "cannot list checkpoint directory ", dir, ": ", ec.message()));
    }
    const fs::directory_entry& e = *it;
    uint64_t step;
    if (!e.is_directory(ec) ||
        !ParseFolderName(e.path().filename().string(), &step)) {
      continue;
    }
    if (ReadCheckpointManifest(dir, step).ok()) steps.push_back(step);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

absl::Status PruneCheckpoints(const std::string& dir, int keep_last) {
  if (keep_last < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("keep_last must be >= 1, got ", keep_last));
  }
  absl::StatusOr<std::vector<uint64_t>> complete = ListCheckpoints(dir);
  if (!complete.ok()) return complete.status();
  // With no complete checkpoint, every folder may be one being written.
  if (complete->empty()) return absl::OkStatus();
  // Folders older than the oldest one kept go, complete or not.
  const size_t n = complete->size();
  const uint64_t oldest_kept =
      n <= static_cast<size_t>(keep_last) ? (*complete)[0]
                                          : (*complete)[n - keep_last];
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const fs::directory_entry& e = *it;
    uint64_t step;
    if (!e.is_directory(ec) ||
        !ParseFolderName(e.path().filename().string(), &step) ||
        step >= oldest_kept) {
      continue;
    }
    fs::remove_all(e.path(), ec);
    if (ec) {
      return absl::DataLossError(absl::StrCat(
          "cannot remove old checkpoint ", e.path().string(), ": ",
          ec.message()));
    }
  }
  if (ec) {
    return absl::DataLossError(absl::StrCat(
        "cannot list checkpoint directory ", dir, ": ", ec.message()));
  }
  return absl::OkStatus();
}

}  // namespace zeroshard
