#include "tests/worker/engine/engine_cluster.h"

#include <atomic>
#include <thread>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "client/shard_client.h"
#include "client/shard_cluster.h"
#include "model/arch.h"
#include "model/gpt_manifest.h"
#include "common/param_groups.h"
#include "common/layout.h"
#include "common/rendezvous.h"
#include "common/status_macros.h"
#include "comm/collectives.h"
#include "data/corpus.h"
#include "client/kv_client.h"
#include "worker/engine/resume.h"
#include "worker/engine/server_init.h"

namespace zeroshard::testing {
namespace {

std::string AutoOr(int v) { return v > 0 ? absl::StrCat(v) : "\"auto\""; }

constexpr char kEngineRunId[] = "engine-test";

ShardClientOptions ClientOptions(absl::Duration call_timeout) {
  ShardClientOptions o;
  o.call_timeout = call_timeout;
  o.control_timeout = absl::Seconds(10);
  o.retry.max_total = std::min(call_timeout, absl::Seconds(5));
  o.retry.max_backoff = absl::Milliseconds(500);
  o.run_id = kEngineRunId;
  return o;
}

absl::StatusOr<FlatLayout> LayoutFor(const TrainingConfig& cfg) {
  ASSIGN_OR_RETURN(ModelManifest manifest, ManifestFor(cfg));
  MarkWholeTensors(cfg.param_groups, &manifest);
  return FlatLayout::Create(manifest, cfg.cluster.servers, cfg.cluster.workers);
}

absl::Status RunRank(int rank, const TrainingConfig& cfg,
                     const std::vector<std::string>& servers,
                     RendezvousStore* store, const std::string& group_name,
                     const TrainOptions& o, RankRun* out) {
  const int world = cfg.cluster.workers;
  ASSIGN_OR_RETURN(FlatLayout layout, LayoutFor(cfg));
  ASSIGN_OR_RETURN(std::unique_ptr<ShardCluster> client,
                   ShardCluster::Connect(servers, ClientOptions(o.call_timeout),
                                         layout));
  GroupOptions go;
  go.group = group_name;
  go.timeout = o.group_timeout;
  if (o.backend == "nccl") go.cuda_device = rank;
  ASSIGN_OR_RETURN(std::unique_ptr<WorkerGroup> group,
                   CreateWorkerGroup(o.backend, rank, world, store, go));
  RETURN_IF_ERROR(group->AgreeOn("config", ConfigFingerprint(cfg)));
  RETURN_IF_ERROR(InitializeServers(cfg, rank, client.get(), group.get()));
  ASSIGN_OR_RETURN(BatchSampler sampler, TestSampler(cfg));
  ASSIGN_OR_RETURN(std::unique_ptr<StepEngine> engine,
                   StepEngine::Create(cfg, &layout, rank, client.get(),
                                      group.get(), &sampler,
                                      o.model_for_rank ? o.model_for_rank(rank)
                                                       : o.make_model));
  if (o.inject_overflow_step >= 0 && rank == o.inject_overflow_rank) {
    engine->InjectOverflowAt(static_cast<uint64_t>(o.inject_overflow_step));
  }
  ASSIGN_OR_RETURN(uint64_t step, engine->StartStep());
  // The loss scaler's record, as worker/main.cc keeps and finds it.
  ASSIGN_OR_RETURN(std::unique_ptr<KvClient> kv,
                   KvClient::Connect(servers[0], {kEngineRunId, 0},
                                     absl::Seconds(10)));
  ASSIGN_OR_RETURN(std::optional<LossScalerState> scaler,
                   FindLossScalerState(step, "", kv.get()));
  if (scaler.has_value()) RETURN_IF_ERROR(engine->RestoreLossScaler(*scaler));
  if (rank == 0 && cfg.precision == Precision::kFp16) {
    engine->SetBeforeApply(
        [kv = kv.get()](uint64_t next, const LossScalerState& state) {
          return kv->Set(LossScalerKvKey(next), LossScalerRecord(next, state));
        });
  }
  const uint64_t end =
      o.stop_before_step >= 0
          ? std::min<uint64_t>(cfg.cluster.steps, o.stop_before_step)
          : cfg.cluster.steps;
  for (; step < end; ++step) {
    absl::StatusOr<StepResult> r = engine->Step(step);
    out->memory = engine->memory();
    if (!r.ok()) return r.status();
    out->steps.push_back(*r);
    if (o.on_step) o.on_step(rank, *engine, *r);
  }
  return group->Barrier();
}

}  // namespace

absl::StatusOr<ModelManifest> ManifestFor(const TrainingConfig& cfg) {
  ASSIGN_OR_RETURN(const model::ModelArch* arch, model::ArchForShape(cfg.cluster.model));
  return arch->Manifest(cfg.cluster.model, cfg.cluster.workers);
}

std::string TinyConfigJson(const TinyKnobs& k) {
  std::string precision;
  if (k.precision == "bf16") {
    precision = R"("bf16": {"enabled": true},)";
  } else if (k.precision == "fp16") {
    precision = absl::StrFormat(
        R"("fp16": {"enabled": true, "loss_scale": 0, "initial_scale_power": %d,
            "loss_scale_window": 1000, "hysteresis": %d, "min_loss_scale": 1},)",
        k.initial_scale_power, k.hysteresis);
  }
  const std::string scheduler =
      k.warmup_cosine
          ? R"("scheduler": {"type": "WarmupCosineLR", "params": {
                 "warmup_num_steps": 2, "warmup_type": "linear",
                 "total_num_steps": "auto", "cos_min_ratio": 0.1}},)"
          : "";
  return absl::StrCat(
      "{\n", R"("train_batch_size": )", k.train_batch_size, ",\n",
      R"("train_micro_batch_size_per_gpu": )", AutoOr(k.micro_batch_size),
      ",\n", R"("gradient_accumulation_steps": )",
      AutoOr(k.gradient_accumulation_steps), ",\n",
      R"("gradient_clipping": )", absl::StrFormat("%.17g", k.gradient_clipping),
      ",\n", precision, "\n", scheduler, "\n",
      R"("optimizer": {"type": "AdamW", "params": {"lr": )",
      absl::StrFormat("%.17g", k.lr),
      R"(, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.01}},
"zero_optimization": {"stage": )",
      k.stage, R"(},
"zeroshard": {
  "model": {"layers": )",
      k.layers, R"(, "heads": )", k.heads, R"(, "width": )", k.width,
      R"(, "vocab": 256, "context": )", k.context,
      k.arch == "gpt2" ? std::string()
                       : absl::StrCat(R"(, "arch": ")", k.arch, R"(", "kv_heads": )",
                                      k.kv_heads, R"(, "mlp_width": )", k.mlp_width),
      R"(},
  "steps": )",
      k.steps, R"(, "seed": 7, "init_std": )",
      absl::StrFormat("%.17g", k.init_std), R"(,
  "activation_checkpointing": {"policy": ")",
      k.checkpointing, R"(", "k": )", k.checkpoint_k, R"(},
  "timeouts": {"step_seconds": )",
      absl::StrFormat("%.17g", k.step_timeout_s),
      R"(, "startup_seconds": 10}
}
})");
}

absl::StatusOr<TrainingConfig> TinyConfig(const TinyKnobs& knobs, int servers,
                                          int workers) {
  ConfigOverrides ov;
  ov.servers = servers;
  ov.workers = workers;
  ov.steps = knobs.steps;
  ASSIGN_OR_RETURN(ParsedConfig parsed,
                   ParseTrainingConfig(TinyConfigJson(knobs), ov));
  if (!parsed.warnings.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("test config has unknown keys: ", parsed.warnings[0]));
  }
  return parsed.config;
}

const std::string& TestCorpusText() {
  static const std::string* text = [] {
    static const char* kWords[] = {
        "the",    "server", "holds", "a",      "shard",   "of",    "weights",
        "and",    "every",  "worker", "streams", "its",   "gradient", "to",
        "owner",  "while",  "backward", "runs", "model",  "learns", "from",
        "text",   "in",     "small", "steps", "with",    "adam",   "state",
        "memory", "is",     "split", "across", "many",   "machines", "so",
        "that",   "no",     "one",   "needs",  "all",     "bytes",  "at",
        "once",   "it",     "trains", "well"};
    constexpr int kNumWords = sizeof(kWords) / sizeof(kWords[0]);
    auto* s = new std::string;
    uint64_t x = 0x2545F4914F6CDD1Dull;
    int in_sentence = 0;
    while (s->size() < (64u << 10)) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      std::string w = kWords[x % kNumWords];
      if (in_sentence == 0) w[0] = static_cast<char>(w[0] - 'a' + 'A');
      s->append(w);
      if (++in_sentence >= 6 + static_cast<int>((x >> 20) % 7)) {
        s->append((x >> 30) % 5 == 0 ? ".\n" : ". ");
        in_sentence = 0;
      } else {
        s->append((x >> 40) % 9 == 0 ? ", " : " ");
      }
    }
    return s;
  }();
  return *text;
}

absl::StatusOr<BatchSampler> TestSampler(const TrainingConfig& config) {
  ASSIGN_OR_RETURN(Corpus corpus, Corpus::FromBytes(TestCorpusText(), 0.05));
  return BatchSampler::Create(corpus, DataSplit::kTrain,
                              config.cluster.model.context,
                              config.cluster.data.seed);
}

absl::StatusOr<std::unique_ptr<EngineCluster>> EngineCluster::Start(
    int servers) {
  std::unique_ptr<EngineCluster> c(new EngineCluster);
  for (int k = 0; k < servers; ++k) {
    ShardServer::Options o;
    o.listen_address = "127.0.0.1:0";
    o.server_index = k;
    o.num_servers = servers;
    ASSIGN_OR_RETURN(std::unique_ptr<ShardServer> s, ShardServer::Start(o));
    c->addresses_.push_back(absl::StrCat("127.0.0.1:", s->port()));
    c->servers_.push_back(std::move(s));
  }
  return c;
}

EngineCluster::~EngineCluster() {
  for (auto& s : servers_) s->Shutdown(absl::Seconds(1));
}

void EngineCluster::StopServer(int k) {
  servers_[k]->Shutdown(absl::ZeroDuration());
}

std::vector<RankRun> TrainWorkers(EngineCluster& cluster,
                                  const TrainingConfig& config,
                                  const TrainOptions& options) {
  static std::atomic<int> run_counter{0};
  const std::string group_name =
      absl::StrCat("engine-test-", getpid(), "-", run_counter.fetch_add(1));
  const int world = config.cluster.workers;
  InMemoryRendezvousStore store;
  std::vector<RankRun> runs(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      const TrainingConfig& cfg =
          options.per_rank.empty() ? config : options.per_rank[r];
      runs[r].status = RunRank(r, cfg, cluster.addresses(), &store,
                               group_name, options, &runs[r]);
    });
  }
  for (auto& t : threads) t.join();
  return runs;
}

absl::StatusOr<std::vector<float>> GatherWeights(EngineCluster& cluster,
                                                 const TrainingConfig& config,
                                                 uint64_t version) {
  ASSIGN_OR_RETURN(FlatLayout layout, LayoutFor(config));
  ASSIGN_OR_RETURN(std::unique_ptr<ShardClient> client,
                   ShardClient::Create(cluster.addresses(), layout,
                                       ClientOptions(absl::Seconds(30))));
  std::vector<float> w(layout.total_elems());
  const FlatRange all{0, layout.total_elems()};
  RETURN_IF_ERROR(client
                      ->Gather(absl::MakeConstSpan(&all, 1), DType::kFp32,
                               static_cast<int64_t>(version), w.data(),
                               w.size() * sizeof(float))
                      .status());
  return w;
}

absl::StatusOr<std::vector<v1::InspectResponse>> InspectServers(
    EngineCluster& cluster, const TrainingConfig& config) {
  ASSIGN_OR_RETURN(FlatLayout layout, LayoutFor(config));
  ASSIGN_OR_RETURN(std::unique_ptr<ShardClient> client,
                   ShardClient::Create(cluster.addresses(), layout,
                                       ClientOptions(absl::Seconds(30))));
  std::vector<v1::InspectResponse> out;
  for (auto& r : client->channels().InspectAll()) {
    if (!r.ok()) return r.status();
    out.push_back(*std::move(r));
  }
  return out;
}

absl::StatusOr<ClusterResult> RunCluster(const TrainingConfig& config,
                                         const TrainOptions& options) {
  ASSIGN_OR_RETURN(std::unique_ptr<EngineCluster> cluster,
                   EngineCluster::Start(config.cluster.servers));
  ClusterResult result;
  result.ranks = TrainWorkers(*cluster, config, options);
  for (size_t r = 0; r < result.ranks.size(); ++r) {
    if (!result.ranks[r].status.ok()) {
      return absl::Status(result.ranks[r].status.code(),
                          absl::StrCat("rank ", r, ": ",
                                       result.ranks[r].status.message()));
    }
  }
  ASSIGN_OR_RETURN(result.weights,
                   GatherWeights(*cluster, config, config.cluster.steps));
  ASSIGN_OR_RETURN(result.inspect, InspectServers(*cluster, config));
  return result;
}

}  // namespace zeroshard::testing
