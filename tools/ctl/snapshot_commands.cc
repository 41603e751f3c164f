// zeroshard-ctl export and inspect --tensor: a consistent copy of the
// servers' state at one step, read while training goes on
// (client/snapshot_reader.h).
#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "tools/ctl/commands.h"
#include "tools/ctl/npy.h"
#include "client/shard_cluster.h"
#include "common/atomic_file.h"
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
    if (s.ok()) s = (*found)->ShapeOfLayout(layout, /*heads=*/1).status();
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
  // that rule's own state, not the element-wise slots: those rows read
  // zeros the rule never wrote, so they say so instead.
  const ResolvedGroup* whole = nullptr;
  if (!view->servers.empty()) {
    for (const ResolvedGroup& g : view->servers[0].param_groups) {
      for (const FlatRange& r : g.ranges) {
        if (g.rule.active() && r.begin <= t.offset && t.offset < r.end) whole = &g;
      }
    }
  }
  std::vector<std::vector<std::string>> rows = {
      {"state", "l2_norm", "min", "max", "mean"}};
  std::vector<std::string> not_kept;
  for (size_t a = 0; a < arrays.size(); ++a) {
    if (whole != nullptr && arrays[a] != "master") {
      rows.push_back({arrays[a], "-", "-", "-", "-"});
      not_kept.push_back(arrays[a]);
      continue;
    }
    const std::vector<float>& v = snap->arrays[a];
    double sq = 0, sum = 0;
    float lo = v.empty() ? 0 : v[0], hi = lo;
    for (float x : v) {
      sq += static_cast<double>(x) * x;
      sum += x;
      lo = std::min(lo, x);
      hi = std::max(hi, x);
    }
    const double mean = v.empty() ? 0 : sum / static_cast<double>(v.size());
    rows.push_back({arrays[a],
                    absl::StrFormat("%.9g", std::sqrt(sq)),
                    absl::StrFormat("%.9g", lo), absl::StrFormat("%.9g", hi),
                    absl::StrFormat("%.9g", mean)});
  }
  PrintTable(rows);
  if (!not_kept.empty()) {
    std::printf("%s: not kept for this tensor: group '%s' is updated whole "
                "by %s, which keeps its own state per tensor\n",
                absl::StrJoin(not_kept, ", ").c_str(), whole->name.c_str(),
                std::string(NameOf(kTensorRuleKindNames, whole->rule.kind)).c_str());
  }
  if (!flags.out.empty() && flags.out != "-") {
    if (!not_kept.empty() && not_kept.front() == arrays[0]) {
      std::fprintf(stderr, "inspect: --out: %s is not kept for this tensor; "
                   "nothing written\n", arrays[0].c_str());
      return 2;
    }
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
