// zeroshard-ctl export and inspect --tensor: a consistent copy of the
// servers' state at one step, read while training goes on
// (client/snapshot_reader.h).
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "tools/ctl/commands.h"
#include "tools/ctl/npy.h"
#include "client/shard_cluster.h"
#include "common/atomic_file.h"
#include "common/optimizer_rules.h"
#include "common/weights_index.h"
#include "model/arch.h"

namespace zeroshard::ctl {
namespace {

SnapshotReadOptions ReadOptions(const CtlFlags& flags) {
  SnapshotReadOptions o;
  o.timeout = flags.timeout;
  return o;
}

// Connects and inspects; prints the error and returns null on failure.
std::unique_ptr<ShardCluster> ConnectOrPrint(const CtlFlags& flags,
                                              const char* command) {
  auto channels = ShardCluster::Connect(flags.servers, ClientOptions(flags));
  if (!channels.ok()) {
    std::fprintf(stderr, "%s: %s\n", command,
                 channels.status().ToString().c_str());
    return nullptr;
  }
  return *std::move(channels);
}

}  // namespace

int RunExport(const CtlFlags& flags) {
  if (flags.format != "safetensors" && flags.format != "f32") {
    std::fprintf(stderr, "export: --format must be safetensors or f32, not "
                 "'%s'\n", flags.format.c_str());
    return 2;
  }
  if (flags.out.empty() || flags.out == "-") {
    std::fprintf(stderr, "export needs --out=FILE\n");
    return 2;
  }
  auto channels = ConnectOrPrint(flags, "export");
  if (channels == nullptr) return 2;
  auto view = channels->Discover();
  if (!view.ok()) {
    std::fprintf(stderr, "export: %s\n", view.status().ToString().c_str());
    return 1;
  }
  const FlatLayout& layout = view->layout;
  const model::ModelArch* arch = nullptr;
  if (flags.format == "safetensors") {
    // Checked before anything is read: the layout is one its architecture
    // names (the Hugging Face names are the architecture's).
    absl::StatusOr<const model::ModelArch*> found =
        model::ArchOfManifest(layout.manifest());
    absl::Status s = found.status();
    if (s.ok()) s = (*found)->ShapeOfLayout(layout, ModelShape{.heads = 1}).status();
    if (!s.ok()) {
      std::fprintf(stderr, "export: %s\n", s.ToString().c_str());
      return 1;
    }
    arch = *found;
  }
  const absl::Time t0 = absl::Now();
  auto snap = channels->ReadConsistentSnapshot(layout,
                                     {0, layout.total_elems()},
                                     {kMasterState},
                                     ReadOptions(flags));
  if (!snap.ok()) {
    std::fprintf(stderr, "export: %s\n", snap.status().ToString().c_str());
    return 1;
  }
  const std::vector<float>& flat = snap->arrays[0];
  absl::Status written;
  if (flags.format == "safetensors") {
    written = arch->WriteHfSafetensors(
        flags.out, layout, flat, {{"zeroshard_step", absl::StrCat(snap->step)}});
  } else {
    // The raw flat space and, beside it, the names and shapes to read it by
    // (as zeroshard-train --save_weights writes them).
    written = WriteFileAtomically(
        flags.out, absl::string_view(reinterpret_cast<const char*>(flat.data()),
                                     flat.size() * sizeof(float)));
    if (written.ok()) {
      written = WriteFileAtomically(
          WeightsIndexPath(flags.out),
          WeightsIndexJson(layout, static_cast<int64_t>(snap->step)));
    }
  }
  if (!written.ok()) {
    std::fprintf(stderr, "export: %s\n", written.ToString().c_str());
    return 1;
  }
  std::printf("exported step %llu: %s (%s, %llu parameters of %llu flat "
              "elements, %.2f s)\n",
              static_cast<unsigned long long>(snap->step), flags.out.c_str(),
              flags.format.c_str(),
              static_cast<unsigned long long>(layout.param_elems()),
              static_cast<unsigned long long>(layout.total_elems()),
              absl::ToDoubleSeconds(absl::Now() - t0));
  return 0;
}

int RunInspectTensor(const CtlFlags& flags) {
  if (!flags.out.empty() && flags.out != "-" && flags.state.empty()) {
    std::fprintf(stderr, "inspect: --out needs one --state (master or one "
                 "of the optimizer's state slots, e.g. exp_avg)\n");
    return 2;
  }
  auto channels = ConnectOrPrint(flags, "inspect");
  if (channels == nullptr) return 2;
  auto view = channels->Discover();
  if (!view.ok()) {
    std::fprintf(stderr, "inspect: %s\n", view.status().ToString().c_str());
    return 1;
  }
  // The servers' optimizer rule names its state (AdamW: exp_avg,
  // exp_avg_sq).
  std::vector<std::string> arrays = view->StateNames();
  if (!flags.state.empty()) {
    if (absl::Status s = view->CheckStateName(flags.state); !s.ok()) {
      std::fprintf(stderr, "inspect: --state: %s\n",
                   std::string(s.message()).c_str());
      return 2;
    }
    arrays = {flags.state};
  }
  const FlatLayout& layout = view->layout;
  auto index = layout.FindTensor(flags.tensor);
  if (!index.ok()) {
    std::fprintf(stderr, "inspect: unknown tensor '%s' (e.g. '%s')\n",
                 flags.tensor.c_str(), layout.tensors().front().name.c_str());
    return 2;
  }
  const TensorInfo& t = layout.tensors()[*index];
  auto snap = channels->ReadConsistentSnapshot(layout,
                                     {t.offset, t.offset + t.numel}, arrays,
                                     ReadOptions(flags));
  if (!snap.ok()) {
    std::fprintf(stderr, "inspect: %s\n", snap.status().ToString().c_str());
    return 1;
  }
  std::printf("tensor %s shape [%s] at flat offset %llu; step %llu, adam "
              "step %llu\n",
              t.name.c_str(), absl::StrJoin(t.shape, ", ").c_str(),
              static_cast<unsigned long long>(t.offset),
              static_cast<unsigned long long>(snap->step),
              static_cast<unsigned long long>(view->min_optimizer_step));
  // A tensor of a group with a whole-tensor rule (Muon, Adafactor) keeps
  // that rule's own state in the element-wise slots, where the rule's entry
  // places it (common/optimizer_rules.h tensor_state): its rows name that
  // state, and the slots' other values, which the rule never wrote, are
  // not shown.
  const ResolvedGroup* whole = nullptr;
  if (!view->servers.empty()) {
    for (const ResolvedGroup& g : view->servers[0].param_groups) {
      for (const FlatRange& r : g.ranges) {
        if (g.rule.active() && r.begin <= t.offset && t.offset < r.end) whole = &g;
      }
    }
  }
  const RuleInfo* whole_rule = whole != nullptr ? FindTensorRule(whole->rule.name) : nullptr;
  std::vector<std::vector<std::string>> rows = {
      {"state", "l2_norm", "min", "max", "mean"}};
  auto add_row = [&](const std::string& name, const float* v, size_t n) {
    double sq = 0, sum = 0;
    float lo = n == 0 ? 0 : v[0], hi = lo;
    for (size_t i = 0; i < n; ++i) {
      sq += static_cast<double>(v[i]) * v[i];
      sum += v[i];
      lo = std::min(lo, v[i]);
      hi = std::max(hi, v[i]);
    }
    const double mean = n == 0 ? 0 : sum / static_cast<double>(n);
    rows.push_back({name, absl::StrFormat("%.9g", std::sqrt(sq)),
                    absl::StrFormat("%.9g", lo), absl::StrFormat("%.9g", hi),
                    absl::StrFormat("%.9g", mean)});
  };
  std::vector<std::string> not_kept;
  const std::vector<std::string> slot_names = view->StateNames();
  const std::vector<int64_t> shape(t.shape.begin(), t.shape.end());
  for (size_t a = 0; a < arrays.size(); ++a) {
    const std::vector<float>& v = snap->arrays[a];
    if (whole_rule == nullptr || arrays[a] == "master") {
      add_row(arrays[a], v.data(), v.size());
      continue;
    }
    // Element slot k (StateNames: master, then the slots in order).
    const int k = static_cast<int>(
        std::find(slot_names.begin(), slot_names.end(), arrays[a]) - slot_names.begin()) - 1;
    bool any = false;
    for (const TensorSlot& ts : whole_rule->tensor_state) {
      const TensorSlotPlace place = PlaceTensorSlot(ts, whole->rule, shape);
      if (place.slot != k || place.count == 0 || place.offset + place.count > v.size()) {
        continue;
      }
      add_row(absl::StrCat(arrays[a], ": ", ts.name), v.data() + place.offset, place.count);
      any = true;
    }
    if (!any) {
      rows.push_back({arrays[a], "-", "-", "-", "-"});
      not_kept.push_back(arrays[a]);
    }
  }
  PrintTable(rows);
  if (whole_rule != nullptr) {
    std::printf("group '%s' is updated whole by %s, which keeps its own state "
                "per tensor in the slots (slot: state)%s%s\n",
                whole->name.c_str(), whole_rule->name.c_str(),
                not_kept.empty() ? "" : "; not used for this tensor: ",
                absl::StrJoin(not_kept, ", ").c_str());
  }
  if (whole_rule != nullptr && arrays[0] != "master" && !flags.out.empty() &&
      flags.out != "-") {
    std::fprintf(stderr, "inspect: --out: %s holds %s's own state for this "
                 "tensor, not an array of its shape; nothing written\n",
                 arrays[0].c_str(), whole_rule->name.c_str());
    return 2;
  }
  if (!flags.out.empty() && flags.out != "-") {
    if (absl::Status s = WriteNpyF32(flags.out, t.shape, snap->arrays[0]);
        !s.ok()) {
      std::fprintf(stderr, "inspect: %s\n", s.ToString().c_str());
      return 1;
    }
    std::printf("wrote %s\n", flags.out.c_str());
  }
  return 0;
}

}  // namespace zeroshard::ctl
