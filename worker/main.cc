// zeroshard-worker: one training worker (one per GPU, or a CPU process).
//
//   zeroshard-worker --rank=0 --world_size=2 --servers=h:p,h:p
//       --config=out/main/config.resolved.json [--run_id=ID]
//       [--init_from=MODEL.safetensors] [--device=auto|cpu|cuda|cuda:K]
//
// The config is the resolved configuration (common/resolved_config.h) that
// zeroshard-train or `zeroshard-ctl config` wrote; its worker and server
// counts must match --world_size and --servers (empty: the config's
// zeroshard.servers list).
//
// Pod mode (Kubernetes, or by hand on several hosts; docs/DESIGN.md, "Pod
// mode"): --attempt=auto, --role=auto and --hostname empty let every worker
// be started, and restarted alone, with the same flags.
//
// Rank 0 initialises the servers (idempotent), every rank joins the Gloo
// group through server 0's key-value store, checks that all workers hold the
// same config, and trains from the servers' current step to `steps`. Rank 0
// prints one JSON line per step on stdout (the launcher's progress feed);
// errors go to stderr and the exit code is non-zero. Every log line names the
// process ("worker R").
//
// With --metrics_listen=HOST:PORT every rank serves Prometheus metrics at
// http://HOST:PORT/metrics (port 0: a free one, logged and written to
// --metrics_port_file): zeroshard_steps_total, zeroshard_skipped_steps_total,
// zeroshard_loss_scale, zeroshard_loss, zeroshard_step_duration_seconds,
// zeroshard_step_phase_seconds_total{phase}, zeroshard_tokens_total, and the
// process's (common/process_metrics.h).
#include <omp.h>
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "client/copy_audit.h"
#include "client/live_run.h"
#include "client/kv_client.h"
#include "client/shard_cluster.h"
#include "common/command_line.h"
#include "common/param_groups.h"
#include "common/config.h"
#include "common/atomic_file.h"
#include "model/gpt_manifest.h"
#include "common/logging.h"
#include "common/malloc_tuning.h"
#include "common/metrics.h"
#include "common/metrics_http.h"
#include "common/process_flags.h"
#include "common/process_metrics.h"
#include "common/progress_event.h"
#include "common/resolved_config.h"
#include "common/status_macros.h"
#include "comm/advertised_address.h"
#include "comm/collectives.h"
#include "worker/compute_device.h"
#include "data/batch_sampler.h"
#include "data/dataset.h"
#include "worker/engine/auto_attempt.h"
#include "worker/engine/checkpoint_coordinator.h"
#include "worker/engine/init_from.h"
#include "worker/engine/precision.h"
#include "worker/engine/replica_revival.h"
#include "worker/engine/resume.h"
#include "worker/engine/server_init.h"
#include "worker/engine/step_engine.h"
#include "worker/engine/validation.h"
#include "model/arch.h"

ABSL_FLAG(int, rank, 0, "this worker's rank in [0, world_size)");
ABSL_FLAG(int, world_size, 1, "number of workers N");
ABSL_FLAG(std::string, servers, "", "shard servers HOST:PORT,... in index order");
ABSL_FLAG(std::string, config, "",
          "the resolved configuration (written by zeroshard-train or "
          "zeroshard-ctl config)");
ABSL_FLAG(std::string, run_id, "run",
          "the run this worker belongs to (1 to 128 printable ASCII "
          "characters): names its keys in server 0's KV store, with "
          "--attempt");
ABSL_FLAG(std::string, role, "worker",
          "the role this worker authenticates as: worker, or admin for the "
          "rank that initialises, checkpoints and restores the servers; "
          "auto: admin for rank 0, worker otherwise");
ABSL_FLAG(std::string, init_from, "",
          "a Hugging Face GPT-2 .safetensors file: rank 0 sets the servers' "
          "starting weights from it while they are at version 0");
ABSL_FLAG(std::string, hostname, "",
          "address this worker listens on for Gloo and advertises to its "
          "peers; empty: the local address of this host's route to server 0 "
          "(loopback exactly when the servers are)");
ABSL_FLAG(std::string, comm, "gloo",
          "collectives backend among workers: gloo (TCP) or nccl (GPUs; the "
          "engine's host buffers are staged through the device)");
ABSL_FLAG(std::string, device, "auto",
          "where the model computes: auto (a CUDA device when there is one "
          "and the run is bf16/fp32, else the CPU), cpu, cuda, cuda:K");
ABSL_FLAG(std::string, attention, "probs",
          "the CUDA model's attention: probs (saves the T x T probabilities; "
          "products on cuBLASLt), online (online softmax: saves the row "
          "log-sum-exp, memory linear in T, for long contexts; FP32 SIMT) or "
          "flash (the online softmax with tensor-core products; bf16 only)");
ABSL_FLAG(int, threads, 0,
          "compute threads (OpenMP / oneDNN); 0: OMP_NUM_THREADS or all cores. "
          "Several workers on one host should split the cores between them");
ABSL_FLAG(std::string, resume, "",
          "a checkpoint directory: when any server is fresh (version 0: a "
          "new cluster, or a server restarted mid-run), rank 0 restores "
          "every server from its newest complete checkpoint");
ABSL_FLAG(std::string, attempt, "0",
          "this worker group's incarnation: a number (the launcher's restart "
          "count; servers refuse pushes of an older one), or auto: agreed "
          "through server 0's key-value store, a restarted worker starting a "
          "new attempt that its peers join (worker/engine/auto_attempt.h)");
ABSL_FLAG(int64_t, inject_partial_apply_at_step, -1,
          "testing (rank 0): apply this step on server 0 only, then fail");
ABSL_FLAG(int64_t, inject_overflow_at_step, -1,
          "testing: make this worker's gradient non-finite at this step");

namespace zeroshard {
namespace {

// This worker's training metrics, in the registry --metrics_listen serves.
class WorkerMetrics {
 public:
  explicit WorkerMetrics(MetricsRegistry* r)
      : steps_(r->counter("zeroshard_steps_total",
                          "Training steps this worker has finished.")),
        skipped_(r->counter("zeroshard_skipped_steps_total",
                            "Steps skipped for a non-finite gradient (FP16 "
                            "overflow): no update.")),
        tokens_(r->counter("zeroshard_tokens_total",
                           "Tokens of the global batches of finished steps.")),
        loss_scale_(r->gauge("zeroshard_loss_scale",
                             "The loss scale the last step's backward used.")),
        loss_(r->gauge("zeroshard_loss",
                       "Mean loss of the last step's global batch.")),
        step_(r->histogram("zeroshard_step_duration_seconds",
                           "Duration of one training step.",
                           LatencyBuckets())) {
    const char* help =
        "Seconds this worker spent per step phase: fetch (gathering "
        "parameters), compute, comm_wait, commit.";
    for (const char* phase : {"fetch", "compute", "comm_wait", "commit"}) {
      phases_.push_back(&r->counter("zeroshard_step_phase_seconds_total", help,
                                    {{"phase", phase}}));
    }
  }

  void Record(const StepResult& r) {
    steps_.Increment();
    if (r.skipped) skipped_.Increment();
    tokens_.Increment(static_cast<double>(r.tokens));
    loss_scale_.Set(r.loss_scale);
    loss_.Set(r.loss);
    step_.Observe(r.seconds);
    phases_[0]->Increment(r.fetch_seconds);
    phases_[1]->Increment(r.compute_seconds);
    phases_[2]->Increment(r.comm_wait_seconds);
    phases_[3]->Increment(r.commit_seconds);
  }

 private:
  Counter& steps_;
  Counter& skipped_;
  Counter& tokens_;
  Gauge& loss_scale_;
  Gauge& loss_;
  Histogram& step_;
  std::vector<Counter*> phases_;
};

// One line of the launcher's progress feed (common/progress_event.h).
void PrintEvent(const WorkerEvent& event) {
  std::printf("%s\n", FormatWorkerEvent(event).c_str());
  std::fflush(stdout);
}

// What a worker holds once it has joined its group.
struct Joined {
  uint64_t attempt = 0;
  std::unique_ptr<ShardCluster> client;
  std::unique_ptr<KvClient> kv;
  std::unique_ptr<WorkerGroup> group;
};

// Chooses the attempt (--attempt), connects to the servers and joins the
// worker group. With --attempt=auto, an attempt that a peer's restart
// replaced while this rank was joining (ABORTED from the store) is left for
// the newer one, a bounded number of times.
// The WorkerGroup backend for --comm: with the CUDA model, NCCL on the
// device buffers where the engine keeps its units and gradients; with the
// CPU model they are host memory, and NCCL runs on them staged through the
// device (comm/nccl_host_group.h).
std::string CommBackend(const ComputeChoice& compute) {
  const std::string comm = absl::GetFlag(FLAGS_comm);
  if (comm != "nccl") return comm;
  return compute.cuda_device >= 0 ? "nccl" : "nccl-host";
}

absl::StatusOr<Joined> Join(const TrainingConfig& cfg, int rank, int world,
                            const std::vector<std::string>& servers,
                            const FlatLayout& layout,
                            const ComputeChoice& compute,
                            ShardClientOptions client_options) {
  const std::string attempt_flag = absl::GetFlag(FLAGS_attempt);
  const bool auto_attempt = attempt_flag == "auto";
  uint64_t attempt = 0;
  if (!auto_attempt && !absl::SimpleAtoi(attempt_flag, &attempt)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--attempt must be a number or auto, not '", attempt_flag, "'"));
  }
  ASSIGN_OR_RETURN(const std::string hostname,
                   ChooseAdvertisedAddress(absl::GetFlag(FLAGS_hostname),
                                           servers[0],
                                           client_options.control_timeout));
  ASSIGN_OR_RETURN(std::unique_ptr<KvClient> kv,
                   KvClient::Connect(KvHolders(servers, cfg.cluster.replicas),
                                     {absl::GetFlag(FLAGS_run_id), attempt},
                                     client_options.control_timeout,
                                     client_options.security));
  ASSIGN_OR_RETURN(std::unique_ptr<ShardCluster> probe,
                   ShardCluster::Connect(servers, client_options));
  const std::string token = ProcessToken();
  const absl::Time deadline = absl::Now() + client_options.control_timeout;
  constexpr int kTries = 8;
  absl::Status last;
  for (int i = 0; i < kTries && absl::Now() < deadline; ++i) {
    if (auto_attempt) {
      ASSIGN_OR_RETURN(attempt,
                       JoinAutoAttempt(*kv, *probe, rank, token,
                                       deadline - absl::Now()));
    }
    Joined j;
    j.attempt = attempt;
    client_options.attempt = attempt;
    ASSIGN_OR_RETURN(j.client,
                     ShardCluster::Connect(servers, client_options, layout));
    j.kv = kv->WithAttempt(attempt);
    GroupOptions group_options;
    group_options.group = absl::GetFlag(FLAGS_run_id) + "/workers";
    // A peer may be failing over a silent server first (replicas).
    group_options.timeout =
        client_options.call_timeout + FailoverAllowance(client_options);
    // A restarted rank waits for its peers to be restarted too (the old ones
    // first notice the death, within a step timeout, then exit and start
    // again): joining is start-up, bounded by the start-up timeout.
    group_options.rendezvous_timeout =
        std::max(client_options.control_timeout, client_options.call_timeout);
    group_options.hostname = hostname;
    group_options.cuda_device = compute.cuda_device;
    absl::StatusOr<std::unique_ptr<WorkerGroup>> group =
        CreateWorkerGroup(CommBackend(compute), rank, world, j.kv.get(),
                          group_options);
    absl::Status s = group.status();
    if (s.ok()) {
      j.group = *std::move(group);
      s = j.group->AgreeOn("config", ConfigFingerprint(cfg));
    }
    if (s.ok()) return j;
    if (!auto_attempt || !absl::IsAborted(s)) return s;
    ZS_LOG(WARNING) << "attempt " << attempt << " was replaced while rank "
                    << rank << " joined it (" << s.message()
                    << "); joining the newer one";
    last = s;
  }
  return last.ok() ? absl::DeadlineExceededError(
                         "no attempt joined within the startup timeout")
                   : last;
}

absl::Status Run() {
  const int rank = absl::GetFlag(FLAGS_rank);
  const int world = absl::GetFlag(FLAGS_world_size);
  if (world < 1 || rank < 0 || rank >= world) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--rank (", rank, ") must be in [0, --world_size (", world, "))"));
  }
  MetricsRegistry registry;
  WorkerMetrics metrics(&registry);
  if (MetricsRequested()) AddProcessMetrics(&registry);
  ASSIGN_OR_RETURN(std::unique_ptr<MetricsHttpServer> metrics_http,
                   ServeMetricsFromFlags(&registry));
  if (absl::GetFlag(FLAGS_threads) > 0) {
    omp_set_num_threads(absl::GetFlag(FLAGS_threads));
  }
  if (absl::GetFlag(FLAGS_config).empty()) {
    return absl::InvalidArgumentError("--config is required");
  }
  ASSIGN_OR_RETURN(const TrainingConfig cfg,
                   LoadResolvedConfig(absl::GetFlag(FLAGS_config)));
  // Decided before joining, so that a bad --device fails fast.
  ASSIGN_OR_RETURN(DeviceRequest device_request,
                   ParseDeviceFlag(absl::GetFlag(FLAGS_device)));
  RETURN_IF_ERROR(
      ParseAttentionFlag(absl::GetFlag(FLAGS_attention), &device_request));
  ASSIGN_OR_RETURN(const ComputeChoice compute,
                   ChooseCompute(device_request, rank,
                                 ParamDTypeFor(cfg.precision),
                                 cfg.cluster.model.arch));
  ZS_LOG(INFO) << compute.description;
  if (absl::Status usable = CheckBackendUsable(CommBackend(compute));
      !usable.ok()) {
    return absl::Status(usable.code(),
                        absl::StrCat("--comm=", absl::GetFlag(FLAGS_comm),
                                     ": ", usable.message()));
  }
  std::vector<std::string> servers = cfg.cluster.server_addresses;
  if (!absl::GetFlag(FLAGS_servers).empty() || servers.empty()) {
    ASSIGN_OR_RETURN(servers, ParseServerList(absl::GetFlag(FLAGS_servers)));
  }
  if (cfg.cluster.workers != world ||
      cfg.cluster.servers != static_cast<int>(servers.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        absl::GetFlag(FLAGS_config), " was resolved for ", cfg.cluster.workers,
        " workers and ", cfg.cluster.servers, " servers; this worker has "
        "--world_size=", world, " and ", servers.size(), " in --servers"));
  }
  ASSIGN_OR_RETURN(const model::ModelArch* arch,
                   model::ArchForShape(cfg.cluster.model));
  ASSIGN_OR_RETURN(ModelManifest manifest,
                   arch->Manifest(cfg.cluster.model, world));
  MarkWholeTensors(cfg.param_groups, &manifest);
  ASSIGN_OR_RETURN(FlatLayout layout,
                   FlatLayout::Create(manifest, servers.size(), world));
  const absl::Duration step_timeout = absl::Seconds(cfg.cluster.step_timeout_s);
  ShardClientOptions client_options;
  client_options.call_timeout = step_timeout;
  client_options.control_timeout = absl::Seconds(cfg.cluster.startup_timeout_s);
  client_options.run_id = absl::GetFlag(FLAGS_run_id);
  client_options.replicas = cfg.cluster.replicas;
  std::string role = absl::GetFlag(FLAGS_role);
  if (role == "auto") role = rank == 0 ? "admin" : "worker";
  ASSIGN_OR_RETURN(client_options.security,
                   LoadClientCredentials(absl::GetFlag(FLAGS_credentials),
                                         role));
  ASSIGN_OR_RETURN(Joined joined,
                   Join(cfg, rank, world, servers, layout, compute,
                        client_options));
  ShardCluster* const client = joined.client.get();
  KvClient* const kv = joined.kv.get();
  WorkerGroup* const group = joined.group.get();
  // A holder of the key-value store this client's failover left is not
  // waited on (with replicas; Joined drops kv before client).
  kv->FollowFailover(
      [client](size_t k) { return client->ServerGone(static_cast<int>(k)); });

  RETURN_IF_ERROR(InitializeServers(cfg, rank, client, group));
  if (!absl::GetFlag(FLAGS_init_from).empty()) {
    RETURN_IF_ERROR(InitWeightsFromFile(absl::GetFlag(FLAGS_init_from), cfg,
                                        rank, client, group));
  }
  const std::string resume_dir = absl::GetFlag(FLAGS_resume);
  RETURN_IF_ERROR(
      ResumeServers(cfg, rank, resume_dir, client, group));

  ASSIGN_OR_RETURN(Dataset data,
                   Dataset::Load(cfg.cluster.data, cfg.cluster.model.vocab));
  if (rank == 0) {
    ZS_LOG(INFO) << data.Describe();
  }
  ASSIGN_OR_RETURN(BatchSampler sampler,
                   BatchSampler::Create(data, DataSplit::kTrain,
                                        cfg.cluster.model.context,
                                        cfg.cluster.data.seed));
  ASSIGN_OR_RETURN(const Validation validation, Validation::Create(cfg, data));
  ASSIGN_OR_RETURN(std::unique_ptr<StepEngine> engine,
                   StepEngine::Create(cfg, &layout, rank, client,
                                      group, &sampler, compute.make_model));
  if (compute.cuda_device >= 0) {
    ZS_LOG(INFO) << (engine->units_in_model_memory()
                         ? absl::StrCat("engine: units and gradients in ",
                                        compute.name, " memory, collectives "
                                        "over ", group->backend())
                         : absl::StrCat("engine: units and gradients in host "
                                        "memory, copied to ", compute.name,
                                        " per call (the '", group->backend(),
                                        "' group takes host buffers; "
                                        "--comm=nccl keeps them on the "
                                        "device)"));
  }
  if (absl::GetFlag(FLAGS_inject_partial_apply_at_step) >= 0) {
    engine->InjectPartialApplyAt(static_cast<uint64_t>(
        absl::GetFlag(FLAGS_inject_partial_apply_at_step)));
  }
  if (absl::GetFlag(FLAGS_inject_overflow_at_step) >= 0) {
    engine->InjectOverflowAt(
        static_cast<uint64_t>(absl::GetFlag(FLAGS_inject_overflow_at_step)));
  }
  ASSIGN_OR_RETURN(uint64_t step, engine->StartStep());
  ASSIGN_OR_RETURN(std::optional<LossScalerState> scaler,
                   FindLossScalerState(step, resume_dir, kv));
  if (scaler.has_value()) RETURN_IF_ERROR(engine->RestoreLossScaler(*scaler));
  // Rank 0 coordinates checkpoints and leaves the scaler's state for a
  // successor (FP16's dynamic scale is the only worker-side state).
  // With replicas, rank 0 compares the copies while a step computes, every
  // zeroshard.replica_check_every_steps, and hears the verdict before it
  // applies the step (client/copy_audit.h).
  CopyAudit audit(client, cfg.cluster.replica_check_every_steps);
  if (rank == 0) {
    const bool fp16 = cfg.precision == Precision::kFp16;
    // The scaler's record is written before each step is applied, so that
    // whichever step the servers stand at after a crash, its record is
    // there.
    engine->SetBeforeApply(
        [kv, fp16, &audit](uint64_t next, const LossScalerState& state) {
          RETURN_IF_ERROR(audit.Finish());
          if (!fp16) return absl::OkStatus();
          return kv->Set(LossScalerKvKey(next), LossScalerRecord(next, state));
        });
  }
  CheckpointCoordinator checkpoints(cfg, &layout, client, step);
  if (rank == 0) {
    WorkerEvent start;
    start.kind = WorkerEvent::Kind::kStart;
    start.step = step;
    start.total_steps = cfg.cluster.steps;
    start.params = layout.param_elems();
    start.workers = static_cast<uint64_t>(world);
    start.servers = servers.size();
    PrintEvent(start);
  }
  // How long a failed step waits for an unreachable server to answer again
  // before it names it: the time a server is given to start.
  const absl::Duration server_wait =
      absl::Seconds(cfg.cluster.startup_timeout_s);
  const uint64_t every = cfg.cluster.checkpoint.every_steps;
  ReplicaRevival revival(cfg, rank, client, group, &checkpoints);
  for (; step < cfg.cluster.steps; ++step) {
    if (rank == 0) {
      // With replicas, the copies are compared where checkpoints fall
      // (and after the last step): rank 0 is between steps, nothing is
      // being applied.
      if (every > 0 && step > 0 && step % every == 0) {
        RETURN_IF_ERROR(client->CheckCopiesAgree());
      }
      RETURN_IF_ERROR(
          checkpoints.BeforeStep(step, engine->loss_scaler().state()));
    }
    // With replicas: a replacement server takes its copies back.
    RETURN_IF_ERROR(revival.BeforeStep(step, engine->loss_scaler().state()));
    if (rank == 0 && !(every > 0 && step > 0 && step % every == 0)) {
      audit.Start(step);  // not where the checkpoint's comparison just ran
    }
    absl::StatusOr<StepResult> stepped = engine->Step(step);
    if (!stepped.ok()) {
      return ExplainServerRestart(*client, step, stepped.status(),
                                  server_wait);
    }
    const StepResult& r = *stepped;
    metrics.Record(r);
    double val_loss = std::numeric_limits<double>::quiet_NaN();
    if (validation.Due(step + 1, cfg.cluster.steps)) {
      absl::StatusOr<double> v = validation.Run(engine.get(), step + 1);
      if (!v.ok()) {
        return ExplainServerRestart(*client, step + 1, v.status(),
                                    server_wait);
      }
      val_loss = *v;
    }
    if (rank == 0) {
      WorkerEvent e;
      e.kind = WorkerEvent::Kind::kStep;
      e.step = r.step;
      StepRecord& rec = e.record;
      rec.step = r.step;
      rec.loss = r.loss;
      rec.tokens_per_s = r.seconds > 0 ? r.tokens / r.seconds : 0.0;
      rec.loss_scale = r.loss_scale;
      rec.grad_norm = r.grad_norm;
      rec.lr = r.lr;
      rec.skipped = r.skipped;
      rec.seconds = r.seconds;
      rec.fetch_s = r.fetch_seconds;
      rec.compute_s = r.compute_seconds;
      rec.comm_wait_s = r.comm_wait_seconds;
      rec.commit_s = r.commit_seconds;
      rec.model_state_bytes = engine->memory().total_peak();
      rec.activation_peak_bytes = engine->model().memory().peak();
      rec.val_loss = val_loss;
      PrintEvent(e);
    }
  }
  if (rank == 0) {
    RETURN_IF_ERROR(audit.Finish());
    RETURN_IF_ERROR(client->CheckCopiesAgree());
    if (audit.compared() > 0) {
      ZS_LOG(INFO) << "replicas: every slot's two copies agreed at the "
                   << audit.compared() << " steps compared while they ran"
                   << " (every " << cfg.cluster.replica_check_every_steps
                   << "), and after the last";
    }
    RETURN_IF_ERROR(checkpoints.Final(step, engine->loss_scaler().state()));
  }
  RETURN_IF_ERROR(group->Barrier());
  if (rank == 0) {
    // Every rank is past its last step: the run is no longer live for the
    // ctl commands and a second training on these servers (client/live_run.h).
    if (absl::Status s = MarkRunEnded(*client, client->options().run_id,
                                      client->options().attempt, step);
        !s.ok()) {
      ZS_LOG(WARNING) << "could not mark the run's end on server 0: " << s;
    }
    WorkerEvent done;
    done.kind = WorkerEvent::Kind::kDone;
    done.step = step;
    PrintEvent(done);
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace zeroshard

int main(int argc, char** argv) {
  // Gloo writes to its peers' sockets with writev, which raises SIGPIPE when
  // a peer has died; ignored, the write fails with EPIPE and the collective
  // returns an error naming the peer instead of the process being killed.
  // (GlooWorkerGroup::Create does the same for any host; this covers the
  // worker's other sockets too.)
  signal(SIGPIPE, SIG_IGN);
  const zeroshard::CommandLine cl = zeroshard::ParseProgramFlags(
      argc, argv, "zeroshard-worker",
      "zeroshard-worker --config=RESOLVED.json --servers=H:P,... --rank=R "
      "--world_size=N --credentials=DIR [--device=auto|cpu|cuda] "
      "[--comm=gloo|nccl]\n"
      "A training worker: zeroshard-train starts one per rank (and the "
      "Kubernetes manifests one per pod); run by hand only to debug.");
  if (cl.exit_code.has_value()) return *cl.exit_code;
  zeroshard::SetLogIdentity(
      absl::StrCat("worker ", absl::GetFlag(FLAGS_rank)));
  zeroshard::TuneMallocForLargeBuffers();
  absl::Status s = zeroshard::Run();
  if (!s.ok()) {
    std::fprintf(stderr, "zeroshard-worker rank %d: error: %s\n",
                 absl::GetFlag(FLAGS_rank), s.ToString().c_str());
    return 1;
  }
  return 0;
}
