#include "bench/engine_rig.h"

#include <atomic>
#include <memory>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client/shard_cluster.h"
#include "common/rendezvous.h"
#include "common/status_macros.h"
#include "server/shard_server.h"
#include "comm/collectives.h"
#include "data/corpus.h"
#include "worker/engine/server_init.h"

namespace zeroshard::bench {
namespace {

absl::Status RunRank(int rank, const TrainingConfig& cfg,
                     const std::vector<std::string>& servers,
                     RendezvousStore* store, const std::string& group_name,
                     const BatchSampler& sampler, RigRun* out,
                     EngineMemory* memory, const RigStepHook& before_step,
                     const ModelFactory& make_model) {
  ASSIGN_OR_RETURN(ModelManifest manifest,
                   MakeGptManifest(cfg.cluster.model, cfg.cluster.workers));
  ASSIGN_OR_RETURN(FlatLayout layout,
                   FlatLayout::Create(manifest, servers.size(),
                                      cfg.cluster.workers));
  ShardClientOptions co;
  co.call_timeout = absl::Seconds(cfg.cluster.step_timeout_s);
  co.control_timeout = absl::Seconds(cfg.cluster.startup_timeout_s);
  // The servers serve one run; Init refuses an empty run id.
  co.run_id = "bench";
  ASSIGN_OR_RETURN(std::unique_ptr<ShardCluster> client,
                   ShardCluster::Connect(servers, co, layout));
  // The hook's last call, however the run ends, while `client` still lives:
  // a hook may have left work on it (a checkpoint wait) to finish here.
  bool ended = false;
  absl::Cleanup end_hook = [&] {
    if (rank == 0 && before_step && !ended) {
      before_step(cfg.cluster.steps, *client).IgnoreError();
    }
  };
  GroupOptions go;
  go.group = group_name;
  go.timeout = co.call_timeout;
  ASSIGN_OR_RETURN(std::unique_ptr<WorkerGroup> group,
                   CreateWorkerGroup("gloo", rank, cfg.cluster.workers, store,
                                     go));
  RETURN_IF_ERROR(group->AgreeOn("config", ConfigFingerprint(cfg)));
  RETURN_IF_ERROR(InitializeServers(cfg, rank, client.get(), group.get()));
  ASSIGN_OR_RETURN(std::unique_ptr<StepEngine> engine,
                   StepEngine::Create(cfg, &layout, rank, client.get(),
                                      group.get(), &sampler, make_model));
  ASSIGN_OR_RETURN(uint64_t step, engine->StartStep());
  for (; step < cfg.cluster.steps; ++step) {
    if (rank == 0 && before_step) {
      RETURN_IF_ERROR(before_step(step, *client));
    }
    ASSIGN_OR_RETURN(StepResult r, engine->Step(step));
    if (rank == 0) out->steps.push_back(r);
  }
  if (rank == 0 && before_step) {
    ended = true;
    RETURN_IF_ERROR(before_step(cfg.cluster.steps, *client));
  }
  *memory = engine->memory();
  return group->Barrier();
}

}  // namespace

absl::StatusOr<TrainingConfig> BenchConfig(const GptShape& shape,
                                           const std::string& precision,
                                           int stage, int servers, int workers,
                                           int batch, uint64_t steps) {
  std::string prec;
  if (precision == "bf16") prec = R"("bf16": {"enabled": true},)";
  if (precision == "fp16") prec = R"("fp16": {"enabled": true},)";
  const std::string json = absl::StrCat(
      "{", R"("train_micro_batch_size_per_gpu": )", batch,
      R"(, "gradient_accumulation_steps": 1, )", prec,
      R"("optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
         "zero_optimization": {"stage": )",
      stage, R"(}, "zeroshard": {"model": {"layers": )", shape.layers,
      R"(, "heads": )", shape.heads, R"(, "width": )", shape.width,
      R"(, "vocab": )", shape.vocab, R"(, "context": )", shape.context,
      R"(}, "seed": 7, "timeouts": {"step_seconds": 600}}})");
  ConfigOverrides ov;
  ov.servers = servers;
  ov.workers = workers;
  ov.steps = steps;
  ASSIGN_OR_RETURN(ParsedConfig parsed, ParseTrainingConfig(json, ov));
  return parsed.config;
}

absl::StatusOr<BatchSampler> BenchSampler(const TrainingConfig& config) {
  absl::StatusOr<Corpus> corpus = Corpus::Load(config.cluster.data);
  if (!corpus.ok()) {
    std::string text(1 << 20, ' ');
    uint64_t x = 88172645463325252ull;
    for (char& c : text) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      c = static_cast<char>('a' + x % 27);
    }
    corpus = Corpus::FromBytes(std::move(text), 0.05);
  }
  if (!corpus.ok()) return corpus.status();
  return BatchSampler::Create(*corpus, DataSplit::kTrain,
                              config.cluster.model.context,
                              config.cluster.data.seed);
}

absl::StatusOr<RigRun> RunEngineRig(const TrainingConfig& config,
                                    const BatchSampler& sampler,
                                    const RigStepHook& before_step,
                                    const ModelFactory& make_model) {
  static std::atomic<int> counter{0};
  std::vector<std::unique_ptr<ShardServer>> servers;
  std::vector<std::string> addresses;
  for (int k = 0; k < config.cluster.servers; ++k) {
    ShardServer::Options o;
    o.server_index = k;
    o.num_servers = config.cluster.servers;
    o.placement = config.cluster.placement;
    ASSIGN_OR_RETURN(std::unique_ptr<ShardServer> s, ShardServer::Start(o));
    addresses.push_back(absl::StrCat("127.0.0.1:", s->port()));
    servers.push_back(std::move(s));
  }
  InMemoryRendezvousStore store;
  const std::string group = absl::StrCat("bench-", counter.fetch_add(1));
  const int world = config.cluster.workers;
  RigRun run;
  std::vector<absl::Status> status(world);
  std::vector<EngineMemory> memory(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      status[r] = RunRank(r, config, addresses, &store, group, sampler, &run,
                          &memory[r], before_step, make_model);
    });
  }
  for (auto& t : threads) t.join();
  for (auto& s : servers) s->Shutdown(absl::Seconds(1));
  for (int r = 0; r < world; ++r) {
    if (!status[r].ok()) {
      return absl::Status(status[r].code(), absl::StrCat("rank ", r, ": ",
                                                         status[r].message()));
    }
    if (memory[r].total_peak() >= run.max_memory.total_peak()) {
      run.max_memory = memory[r];
    }
  }
  return run;
}

double StepMatmulFlops(const GptShape& shape, int T, double tokens) {
  const double C = shape.width;
  const double per_token = shape.layers * (24.0 * C * C + 4.0 * T * C) +
                           2.0 * C * shape.vocab;
  return 3.0 * tokens * per_token;
}

}  // namespace zeroshard::bench
