#include "tools/train/train_run.h"

#include <unistd.h>

#include <algorithm>
#include <optional>
#include <filesystem>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "report/loss_plot.h"
#include "report/metrics_writer.h"
#include "tools/train/out_dir_lock.h"
#include "tools/train/recovery.h"
#include "report/progress_bar.h"
#include "client/run_tokens.h"
#include "tools/train/run_sample.h"
#include "tools/train/train_cluster.h"
#include "tools/train/weights_export.h"
#include "client/client_options.h"
#include "client/init_options.h"
#include "client/kv_client.h"
#include "client/live_run.h"
#include "client/shard_cluster.h"
#include "common/param_groups.h"
#include "common/atomic_file.h"
#include "common/checkpoint_files.h"
#include "common/checkpoint_manifest.h"
#include "common/config.h"
#include "common/data_files.h"
#include "data/batch_sampler.h"
#include "data/dataset.h"
#include "model/gpt_manifest.h"
#include "common/layout.h"
#include "common/loss_scaler.h"
#include "common/logging.h"
#include "common/progress_event.h"
#include "common/resolved_config.h"
#include "common/status_macros.h"
#include "model/arch.h"

namespace zeroshard {
namespace {

namespace fs = std::filesystem;

// `path` from the config, inside `out_dir` when relative; "" stays "".
std::string InOutDir(const std::string& out_dir, const std::string& path) {
  if (path.empty() || fs::path(path).is_absolute()) return path;
  return (fs::path(out_dir) / path).string();
}

// "1 server", "2 servers".
std::string Counted(uint64_t n, const char* what) {
  return absl::StrCat(n, " ", what, n == 1 ? "" : "s");
}

// What of an earlier run `out_dir` holds that this run will replace
// ("metrics.csv, logs/, ..."), or "".
std::string EarlierOutputs(const std::string& out_dir,
                           const std::vector<std::string>& files) {
  std::vector<std::string> found;
  for (const std::string& f : files) {
    std::error_code ec;
    if (f.empty() || !fs::exists(f, ec)) continue;
    const fs::path rel = fs::path(f).lexically_relative(out_dir);
    const std::string name =
        rel.empty() || rel.native().starts_with("..") ? f : rel.string();
    found.push_back(fs::is_directory(f, ec) ? name + "/" : name);
  }
  return absl::StrJoin(found, ", ");
}

// The newest checkpoint's files are there, of the manifest's sizes and
// checksum trailers (the servers hash each whole again before loading it).
// A damaged one is refused with the newest intact checkpoint named, so the
// way on is clear.
absl::Status CheckNewestIsIntact(const std::string& dir,
                                 const CheckpointManifest& newest) {
  const absl::Status s = VerifyCheckpointFiles(dir, newest, /*full=*/false);
  if (s.ok()) return s;
  ASSIGN_OR_RETURN(std::vector<CheckpointCheck> checks,
                   CheckCheckpoints(dir, /*full=*/false));
  std::string older = "no older checkpoint there is intact either";
  for (const CheckpointCheck& c : checks) {
    if (c.step < newest.step && c.status.ok()) {
      older = absl::StrCat(
          "the newest intact one is step ", c.step, ": move ", dir, "/",
          CheckpointFolderName(newest.step), " aside to resume from it (",
          "zeroshard-ctl list --dir=", dir, " checks every file of each)");
      break;
    }
  }
  return absl::DataLossError(absl::StrCat(
      "--resume=", dir, ": the newest checkpoint, step ", newest.step,
      ", is damaged (", s.message(), "); ", older));
}

// Says on the terminal what a --resume continues: the step, the writing
// run's servers and workers against this run's, and a schedule that now ends
// elsewhere (an extended run follows this run's schedule: docs/DESIGN.md,
// "Checkpoints"). A checkpoint at or past this run's last step leaves
// nothing to do: INVALID_ARGUMENT saying how to extend the run.
absl::Status SayWhatIsResumed(const std::string& dir,
                              const CheckpointManifest& newest,
                              const TrainingConfig& cfg, std::FILE* out) {
  const uint64_t to = cfg.cluster.steps;
  if (newest.step >= to) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--resume=", dir, ": its newest checkpoint is at step ", newest.step,
        " and this run trains to step ", to, ": nothing is left to do (give "
        "--steps greater than ", newest.step, " to extend the run)"));
  }
  std::fprintf(out,
               "zeroshard-train: resuming from step %llu of %s (written by "
               "%s x %s; this run: %s x %s), training to step %llu\n",
               static_cast<unsigned long long>(newest.step), dir.c_str(),
               Counted(newest.num_servers, "server").c_str(),
               Counted(newest.model.partition_count, "worker").c_str(),
               Counted(cfg.cluster.servers, "server").c_str(),
               Counted(cfg.cluster.workers, "worker").c_str(),
               static_cast<unsigned long long>(to));
  const uint64_t total = cfg.optimizer.total_steps;
  if (cfg.optimizer.schedule != LrScheduleKind::kConstant &&
      newest.schedule_total_steps != 0 &&
      newest.schedule_total_steps != total) {
    std::fprintf(out,
                 "zeroshard-train: the learning-rate schedule now ends at step "
                 "%llu (the checkpoint's run ended it at %llu); the steps "
                 "after step %llu follow this run's schedule, its warmup "
                 "included\n",
                 static_cast<unsigned long long>(total),
                 static_cast<unsigned long long>(newest.schedule_total_steps),
                 static_cast<unsigned long long>(newest.step));
  }
  std::fflush(out);
  return absl::OkStatus();
}

// The servers' addresses and a command to look at them, pasted as it is.
void SayWhereTheServersAre(const std::vector<std::string>& addresses,
                           const TrainClusterPlan& plan, std::FILE* out) {
  const std::string list = absl::StrJoin(addresses, ",");
  std::string inspect = absl::StrCat("zeroshard-ctl inspect --servers=", list);
  if (!plan.credentials_dir.empty()) {
    absl::StrAppend(&inspect, " --credentials=", plan.credentials_dir);
  }
  std::fprintf(out,
               "zeroshard-train: shard servers at %s (listed in %s/cluster.json)"
               "; to look at them:\n  %s\n  (or: zeroshard-ctl inspect "
               "--cluster=%s)\n",
               list.c_str(), plan.out_dir.c_str(), inspect.c_str(),
               plan.out_dir.c_str());
  std::fflush(out);
}

absl::Status CheckBinary(const std::string& path) {
  if (access(path.c_str(), X_OK) != 0) {
    return absl::NotFoundError(absl::StrCat(
        path, " not found or not executable (zeroshard-train looks for its "
              "sibling binaries in its own directory; build them)"));
  }
  return absl::OkStatus();
}

// Follows the cluster's progress feed until rank 0's "done"; returns the
// step reached.
absl::StatusOr<uint64_t> FollowProgress(
    TrainCluster& cluster, const TrainingConfig& cfg, const TrainOptions& o,
    MetricsWriter* metrics, std::vector<StepRecord>* records,
    std::unique_ptr<ProgressBar>* bar) {
  // With replicas, a step that meets a silent server may take its call's
  // timeout and the client's failover (client_options.h) before it goes on
  // with the other copies, then its own time.
  ShardClientOptions client;
  client.replicas = cfg.cluster.replicas;
  const absl::Duration step_timeout =
      absl::Seconds(cfg.cluster.step_timeout_s) *
          (cfg.cluster.replicas > 1 ? 2 : 1) +
      FailoverAllowance(client);
  absl::Duration timeout =
      step_timeout + absl::Seconds(cfg.cluster.startup_timeout_s);
  std::string waiting_for = "the start of training";
  while (true) {
    ASSIGN_OR_RETURN(std::string line,
                     cluster.NextProgressLine(timeout, waiting_for));
    timeout = step_timeout;
    absl::StatusOr<WorkerEvent> ev = ParseWorkerEvent(line);
    if (!ev.ok()) {
      // Not ours (a stray library print): keep it in the log, don't fail.
      ZS_LOG(WARNING) << ev.status().message();
      continue;
    }
    switch (ev->kind) {
      case WorkerEvent::Kind::kStart:
        waiting_for = absl::StrCat("step ", ev->step);
        if (!o.quiet) {
          *bar = std::make_unique<ProgressBar>(
              o.progress, ev->step, ev->total_steps, cfg.steps_per_print,
              isatty(fileno(o.progress)) != 0);
          std::fprintf(o.progress,
                       "zeroshard-train: %llu parameters, %s x %s, steps "
                       "%llu..%llu\n",
                       static_cast<unsigned long long>(ev->params),
                       Counted(cfg.cluster.servers, "server").c_str(),
                       Counted(cfg.cluster.workers, "worker").c_str(),
                       static_cast<unsigned long long>(ev->step),
                       static_cast<unsigned long long>(ev->total_steps));
        }
        break;
      case WorkerEvent::Kind::kStep:
        waiting_for = absl::StrCat("step ", ev->record.step + 1);
        // After a restore, steps since the checkpoint are run again: the
        // first run's record stands.
        if (!records->empty() && ev->record.step <= records->back().step) {
          break;
        }
        records->push_back(ev->record);
        if (metrics != nullptr) RETURN_IF_ERROR(metrics->Append(ev->record));
        if (*bar != nullptr) (*bar)->Update(ev->record);
        break;
      case WorkerEvent::Kind::kDone:
        return ev->step;
      case WorkerEvent::Kind::kOther:
        break;
    }
  }
}

// What the given servers serve: the run (and its newest attempt) when any
// is initialised. A server restarted between two runs on the same servers
// comes back uninitialised, or fresh at step 0 when an earlier try already
// initialised it again: the run cannot go on there without a restore, and
// the message says which server and what to do, instead of the workers'
// "mid-step" refusal later. `resuming`: the workers restore every server.
struct LiveRun {
  bool initialized = false;
  std::string run_id;
  uint64_t attempt = 0;
};
absl::StatusOr<LiveRun> InspectLiveRun(
    const ShardCluster& probe, const std::vector<std::string>& addresses,
    bool resuming) {
  const std::vector<absl::StatusOr<ServerStatus>> all =
      probe.InspectAll();
  auto who = [&](size_t k) {
    return absl::StrCat("server ", k, " (", addresses[k], ")");
  };
  LiveRun live;
  size_t newest = 0;
  uint64_t newest_version = 0;
  for (size_t k = 0; k < all.size(); ++k) {
    if (!all[k].ok()) {
      return absl::Status(all[k].status().code(),
                          absl::StrCat(who(k), ": Inspect: ",
                                       all[k].status().message()));
    }
    const ServerStatus& r = *all[k];
    if (!r.initialized) continue;
    if (live.initialized && r.run_id != live.run_id) {
      return absl::FailedPreconditionError(absl::StrCat(
          who(k), " serves run '", r.run_id, "' but ", who(newest),
          " serves run '", live.run_id, "': a server was restarted and "
          "initialised by another run; restart every server, or give the "
          "servers of one run"));
    }
    live.initialized = true;
    live.run_id = r.run_id;
    live.attempt = std::max({live.attempt, r.attempt, r.prepared_attempt});
    if (r.max_version >= newest_version) {
      newest_version = r.max_version;
      newest = k;
    }
  }
  // A run whose workers still push: this training (new, or a --resume,
  // which restores every server) would replace its state under it.
  std::vector<ServerStatus> statuses;  // every one answered (above)
  for (const absl::StatusOr<ServerStatus>& s : all) statuses.push_back(*s);
  ASSIGN_OR_RETURN(const std::optional<LiveRunInfo> running,
                   FindLiveRun(probe, statuses, kLiveRunWindowSeconds));
  if (running.has_value()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the given servers serve a live ", DescribeLiveRun(*running),
        ": a second training on them would end it. Stop that run first "
        "(Ctrl-C its zeroshard-train, or stop its workers); once its last "
        "push is over ", kLiveRunWindowSeconds, " s old, this command "
        "continues that run on them (--resume: from a checkpoint)"));
  }
  if (!live.initialized || resuming || newest_version == 0) return live;
  std::vector<std::string> lost;
  for (size_t k = 0; k < all.size(); ++k) {
    const ServerStatus& r = *all[k];
    if (!r.initialized) {
      lost.push_back(absl::StrCat(who(k), " is not initialised"));
    } else if (r.max_version == 0 && r.partial_chunks == 0 &&
               newest_version >= 2) {
      lost.push_back(absl::StrCat(who(k), " is fresh, at step 0"));
    }
  }
  if (lost.empty()) return live;
  return absl::FailedPreconditionError(absl::StrCat(
      absl::StrJoin(lost, "; "), ", while ", who(newest), " serves run '",
      live.run_id, "' at step ", newest_version, ": ",
      lost.size() == 1 ? "it was" : "they were",
      " restarted and lost the run's state, which cannot go on without it. "
      "Pass --resume=DIR to restore every server from the newest checkpoint "
      "in DIR, or restart every server to train from step 0"));
}

}  // namespace

absl::StatusOr<std::string> ExecutableDir() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat("cannot read /proc/self/exe: ", ec.message()));
  }
  return exe.parent_path().string();
}

absl::StatusOr<RunSummary> RunTraining(const TrainOptions& o,
                                       const std::atomic<bool>* interrupted) {
  const absl::Time t0 = absl::Now();
  if (o.config_path.empty()) {
    return absl::InvalidArgumentError("--config=FILE is required");
  }
  ConfigOverrides overrides;
  overrides.workers = o.workers;
  overrides.steps = o.steps;
  overrides.servers = o.servers;
  if (!o.server_addresses.empty()) {
    overrides.servers = static_cast<int>(o.server_addresses.size());
  }
  ASSIGN_OR_RETURN(ParsedConfig parsed,
                   LoadTrainingConfig(o.config_path, overrides));
  for (const std::string& w : parsed.warnings) ZS_LOG(WARNING) << w;
  if (!parsed.front_end_only.empty()) {
    ZS_LOG(WARNING) << "config keys zeroshard-train does not read (the PyTorch "
                       "front-end's ZeRO-3 does; this trainer's workers gather each "
                       "unit when it computes): "
                    << absl::StrJoin(parsed.front_end_only, ", ");
  }
  const TrainingConfig& cfg = parsed.config;
  RETURN_IF_ERROR(ValidatePlotPath(cfg.cluster.plot_path));
  // The data files, once, before any process starts (not once per worker
  // after all of them have).
  RETURN_IF_ERROR(CheckDataFiles(cfg.cluster.data));
  // ... and read as every worker reads them: token files' headers, sizes and
  // vocabulary, and a training split shorter than the context, are said
  // now, not by each worker once all processes have started.
  {
    const absl::StatusOr<Dataset> data =
        Dataset::Load(cfg.cluster.data, cfg.cluster.model.vocab);
    if (!data.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("zeroshard.data: ", data.status().message()));
    }
    const absl::StatusOr<BatchSampler> sampler =
        BatchSampler::Create(*data, DataSplit::kTrain, cfg.cluster.model.context,
                             cfg.cluster.data.seed);
    if (!sampler.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "zeroshard.data: ", sampler.status().message(),
          " (zeroshard.model.context is ", cfg.cluster.model.context, ")"));
    }
  }
  // The closing sample's prompt and vocabulary, checked before anything starts.
  std::optional<RunSamplePlan> sample;
  if (o.sample) {
    ASSIGN_OR_RETURN(sample, PlanRunSample(cfg));
  }
  // A placement this machine cannot give, said in the config's words before
  // any server starts (the server itself would name --cuda_device).
  if (cfg.cluster.placement != Placement::kHost &&
      cfg.cluster.server_addresses.empty() && o.server_addresses.empty()) {
#if ZS_HAVE_CUDA
    std::error_code no_gpu;
    if (!fs::exists("/dev/nvidia0", no_gpu)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "config key \"zeroshard.placement\" is \"",
          PlacementName(cfg.cluster.placement),
          "\": it needs a CUDA device, and this machine has none (no "
          "/dev/nvidia0); use \"host\""));
    }
#else
    return absl::InvalidArgumentError(absl::StrCat(
        "config key \"zeroshard.placement\" is \"",
        PlacementName(cfg.cluster.placement),
        "\": it needs CUDA, and this build has none; use \"host\""));
#endif
  }
  const int servers = cfg.cluster.servers, workers = cfg.cluster.workers;
  ASSIGN_OR_RETURN(const model::ModelArch* arch,
                   model::ArchForShape(cfg.cluster.model));
  ASSIGN_OR_RETURN(ModelManifest manifest,
                   arch->Manifest(cfg.cluster.model, workers));
  MarkWholeTensors(cfg.param_groups, &manifest);
  ASSIGN_OR_RETURN(FlatLayout layout,
                   FlatLayout::Create(manifest, servers, workers));

  // An --out this run cannot use is a bad flag value (exit 2), as a busy one.
  std::error_code ec;
  if (fs::exists(o.out_dir, ec) && !fs::is_directory(o.out_dir, ec)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--out=", o.out_dir, " is a file, not a directory: give the run a "
        "directory (it is created if missing)"));
  }
  fs::create_directories(o.out_dir, ec);
  if (ec) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot create --out=", o.out_dir, ": ", ec.message()));
  }
  // Held to the end: a second run on this --out is refused, not let loose on
  // this one's credentials and outputs.
  ASSIGN_OR_RETURN(const OutDirLock out_lock, OutDirLock::Acquire(o.out_dir));
  // What a --resume continues, said (or refused) before anything
  // of the earlier run is replaced.
  std::optional<uint64_t> resumed_step;
  if (!o.resume_dir.empty()) {
    // DIR (its newest checkpoint) or DIR/step-N (that one).
    const ResumePoint at = ParseResumePath(o.resume_dir);
    ASSIGN_OR_RETURN(std::vector<uint64_t> steps, ListCheckpoints(at.dir));
    if (steps.empty()) {
      return absl::NotFoundError(absl::StrCat(
          "--resume=", o.resume_dir, ": no complete checkpoint there"));
    }
    const uint64_t step = at.step.value_or(steps.back());
    if (std::find(steps.begin(), steps.end(), step) == steps.end()) {
      return absl::NotFoundError(absl::StrCat(
          "--resume=", o.resume_dir, ": ", at.dir, " holds no complete "
          "checkpoint at step ", step, " (it holds steps ",
          absl::StrJoin(steps, ", "), ")"));
    }
    ASSIGN_OR_RETURN(const CheckpointManifest m,
                     ReadCheckpointManifest(at.dir, step));
    if (!at.step.has_value()) {
      // The newest: a damaged one names the newest intact one.
      RETURN_IF_ERROR(CheckNewestIsIntact(at.dir, m));
    } else if (absl::Status s = VerifyCheckpointFiles(at.dir, m, /*full=*/false);
               !s.ok()) {
      return absl::DataLossError(absl::StrCat(
          "--resume=", o.resume_dir, ": that checkpoint is damaged (",
          s.message(), ")"));
    }
    // The servers' restore makes the same check; here it comes before
    // anything starts (a manifest written before the optimizer was
    // recorded in it leaves the check to them).
    if (!m.optimizer_json.empty()) {
      ASSIGN_OR_RETURN(const std::string diff,
                       OptimizerChangeSince(m.optimizer_json, layout,
                                            InitOptionsFor(cfg)));
      if (!diff.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--resume=", o.resume_dir, ": step ", step, " was trained with "
            "another optimizer configuration (checkpoint -> now: ", diff,
            "); resume with the checkpoint's values (the optimizer section "
            "and zeroshard.param_groups)"));
      }
    }
    RETURN_IF_ERROR(SayWhatIsResumed(at.dir, m, cfg, o.progress));
    resumed_step = step;
  }
  // Nothing of an earlier run in this --out is left beside this run's
  // outputs: every file a run writes there goes now, whichever of them this
  // run writes again, except the metrics history a --resume continues.
  const std::string metrics_file = InOutDir(o.out_dir, cfg.cluster.metrics_path);
  std::vector<std::string> earlier_files = {
      InOutDir(o.out_dir, cfg.cluster.plot_path), o.out_dir + "/metrics.csv",
      o.out_dir + "/metrics.jsonl", o.out_dir + "/loss.svg",
      o.out_dir + "/sample.txt", o.out_dir + "/cluster.json",
      o.out_dir + "/weights.f32", o.out_dir + "/weights.json",
      o.out_dir + "/weights.safetensors", o.out_dir + "/logs",
      o.out_dir + "/ports", metrics_file};
  std::sort(earlier_files.begin(), earlier_files.end());
  earlier_files.erase(std::unique(earlier_files.begin(), earlier_files.end()),
                      earlier_files.end());
  if (resumed_step.has_value()) {
    earlier_files.erase(std::remove(earlier_files.begin(), earlier_files.end(),
                                    metrics_file),
                        earlier_files.end());
  }
  if (const std::string earlier = EarlierOutputs(o.out_dir, earlier_files);
      !earlier.empty()) {
    for (const std::string& f : earlier_files) fs::remove_all(f, ec);
    std::fprintf(o.progress,
                 "zeroshard-train: --out=%s held an earlier run's %s: "
                 "removed, so that only this run's outputs are there%s\n",
                 o.out_dir.c_str(), earlier.c_str(),
                 resumed_step.has_value() && fs::exists(metrics_file)
                     ? " (its metrics history goes on)"
                     : "");
  }
  TrainClusterPlan plan;
  if (o.bin_dir.empty()) {
    ASSIGN_OR_RETURN(plan.bin_dir, ExecutableDir());
  } else {
    plan.bin_dir = o.bin_dir;
  }
  plan.server_addresses = o.server_addresses.empty()
                              ? cfg.cluster.server_addresses
                              : o.server_addresses;
  if (plan.server_addresses.empty()) {
    RETURN_IF_ERROR(CheckBinary(plan.bin_dir + "/zeroshard-server"));
  }
  RETURN_IF_ERROR(CheckBinary(plan.bin_dir + "/zeroshard-worker"));
  if (!o.init_from.empty()) {
    // The header alone, so a wrong file fails before any process starts;
    // rank 0 reads the data (worker/engine/init_from.h).
    if (absl::Status s = arch->CheckHfSafetensors(o.init_from, layout); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("--init_from: ", s.message()));
    }
    plan.init_from = fs::absolute(o.init_from).string();
  }
  // The one resolved configuration every worker reads
  // (common/resolved_config.h).
  plan.config_path = fs::absolute(o.out_dir + "/config.resolved.json").string();
  RETURN_IF_ERROR(
      WriteFileAtomically(plan.config_path, ResolvedConfigJson(cfg)));
  plan.out_dir = o.out_dir;
  plan.servers = servers;
  plan.workers = workers;
  plan.replicas = cfg.cluster.replicas;
  plan.placement = cfg.cluster.placement;
  if (!cfg.cluster.credentials.empty()) {
    plan.credentials_dir = fs::absolute(cfg.cluster.credentials).string();
  } else if (plan.server_addresses.empty()) {
    // A local cluster without configured credentials still gets some: one
    // random token per role, readable only by this user.
    ASSIGN_OR_RETURN(plan.credentials_dir,
                     MakeRunTokens(o.out_dir + "/credentials"));
  }
  plan.inject_overflow_at_step = o.inject_overflow_at_step;
  plan.inject_partial_apply_at_step = o.inject_partial_apply_at_step;
  ASSIGN_OR_RETURN(const std::string nonce, RandomHex(8));
  plan.run_id = absl::StrCat("train-", getpid(), "-", nonce);
  plan.startup_timeout = absl::Seconds(cfg.cluster.startup_timeout_s);

  RunOutputs outputs;
  outputs.metrics = metrics_file;
  const std::string plot_path = InOutDir(o.out_dir, cfg.cluster.plot_path);
  std::unique_ptr<MetricsWriter> metrics;
  // A resumed run's metrics continue the earlier run's file in this --out
  // (its rows before the checkpoint's step); the plot shows them all.
  std::vector<StepRecord> earlier_records;
  if (!outputs.metrics.empty()) {
    if (resumed_step.has_value()) {
      ASSIGN_OR_RETURN(metrics, MetricsWriter::Continue(
                                    outputs.metrics, cfg.cluster.metrics_format,
                                    *resumed_step, &earlier_records));
    } else {
      ASSIGN_OR_RETURN(metrics, MetricsWriter::Open(outputs.metrics,
                                                    cfg.cluster.metrics_format));
    }
  }

  plan.resume_dir = o.resume_dir;
  // Given servers that already serve a run (a run continued on live
  // servers): join it, as a newer attempt, so that the servers accept the
  // new workers and drop the earlier workers' rendezvous keys.
  if (!plan.server_addresses.empty()) {
    ASSIGN_OR_RETURN(const ShardClientOptions probe_options,
                     LauncherClientOptions(plan));
    ASSIGN_OR_RETURN(std::unique_ptr<ShardCluster> probe,
                     ShardCluster::Connect(plan.server_addresses,
                                           probe_options));
    ASSIGN_OR_RETURN(const LiveRun live,
                     InspectLiveRun(*probe, plan.server_addresses,
                                    !o.resume_dir.empty()));
    if (live.initialized) {
      plan.run_id = live.run_id;
      plan.attempt = live.attempt + 1;
      ZS_LOG(INFO) << "the given servers serve run " << plan.run_id
                   << "; joining it as attempt " << plan.attempt;
    }
  }
  const uint64_t base_attempt = plan.attempt;
  ASSIGN_OR_RETURN(const ShardClientOptions launcher_options,
                   LauncherClientOptions(plan));
  ASSIGN_OR_RETURN(std::unique_ptr<TrainCluster> cluster,
                   TrainCluster::Start(plan, interrupted));
  outputs.logs = cluster->logs_dir();
  SayWhereTheServersAre(cluster->server_addresses(), plan, o.progress);
  std::vector<StepRecord> records;
  std::unique_ptr<ProgressBar> bar;
  std::vector<std::string> restarts;
  absl::Status run;
  for (;;) {
  run = [&]() -> absl::Status {
    ASSIGN_OR_RETURN(uint64_t done_step,
                     FollowProgress(*cluster, cfg, o, metrics.get(), &records,
                                    &bar));
    const absl::Duration step_timeout =
        absl::Seconds(cfg.cluster.step_timeout_s);
    RETURN_IF_ERROR(cluster->WaitWorkers(step_timeout));
    if (o.save_weights) {
      RETURN_IF_ERROR(ExportWeights(cluster->server_addresses(), layout,
                                    static_cast<int64_t>(done_step),
                                    o.out_dir, step_timeout,
                                    o.save_safetensors
                                        ? WeightsFileFormat::kSafetensors
                                        : WeightsFileFormat::kF32,
                                    launcher_options));
      outputs.weights = o.out_dir + (o.save_safetensors
                                         ? "/weights.safetensors"
                                         : "/weights.f32");
    }
    return absl::OkStatus();
  }();
  if (run.ok() || (interrupted != nullptr && interrupted->load()) ||
      static_cast<int>(restarts.size()) >= o.max_restarts) {
    break;
  }
  // Crash recovery (docs/DESIGN.md, "Crash recovery").
  const uint64_t attempt = base_attempt + restarts.size() + 1;
  absl::StatusOr<std::string> how =
      Recover(cfg, o, attempt, interrupted, &plan, &cluster);
  restarts.push_back(absl::StrCat(
      "restart ", attempt, ": ", run.message(), " -> ",
      how.ok() ? *how : std::string(how.status().message())));
  ZS_LOG(WARNING) << restarts.back();
  if (!how.ok()) {
    run = how.status();
    break;
  }
  }
  if (bar != nullptr) bar->Finish();
  if (run.ok() && sample.has_value()) {
    PrintRunSample(*sample, cluster->server_addresses(), layout, launcher_options,
                   absl::Seconds(cfg.cluster.step_timeout_s), o.out_dir, o.progress);
  }
  cluster->StopAll(absl::Seconds(5));
  if (!plan.server_addresses.empty()) {
    // Servers this launcher did not start outlive it: its workers are gone,
    // so the run is no longer live (client/live_run.h), however it ended.
    absl::StatusOr<std::unique_ptr<ShardCluster>> servers =
        ShardCluster::Connect(plan.server_addresses, launcher_options);
    absl::Status marked = servers.status();
    if (servers.ok()) {
      marked = MarkRunEnded(**servers, plan.run_id,
                            base_attempt + restarts.size(),
                            records.empty() ? 0 : records.back().step + 1);
    }
    if (!marked.ok()) {
      ZS_LOG(WARNING) << "could not mark the run's end on server 0: " << marked;
    }
  }
  if (!run.ok()) return run;
  const double wall = absl::ToDoubleSeconds(absl::Now() - t0);

  if (!plot_path.empty()) {
    const std::string title = absl::StrFormat(
        "%s: %d layers, width %d, %s x %s",
        fs::path(o.config_path).filename().string(), cfg.cluster.model.layers,
        cfg.cluster.model.width, Counted(servers, "server"),
        Counted(workers, "worker"));
    std::vector<StepRecord> plotted = earlier_records;
    plotted.insert(plotted.end(), records.begin(), records.end());
    ASSIGN_OR_RETURN(outputs.plot, WriteLossPlot(plotted, plot_path, title));
  }
  const uint64_t tokens_per_step =
      static_cast<uint64_t>(cfg.train_batch_size) * cfg.cluster.model.context;
  RunSummary summary = Summarize(records, tokens_per_step, wall);
  summary.restarts = restarts;
  std::fputs(FormatSummary(summary, outputs).c_str(), o.progress);
  std::fflush(o.progress);
  return summary;
}

}  // namespace zeroshard
