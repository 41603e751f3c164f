// An in-process training cluster for the step-engine tests: S ShardServers
// on 127.0.0.1 port 0 and N worker threads, each wired as zeroshard-worker
// wires itself (worker/main.cc): its own ShardCluster, a Gloo group over one
// InMemoryRendezvousStore (a fresh group name per run), AgreeOn the config,
// rank 0 Init, Barrier, then its own StepEngine training steps 0..K-1.
//
//   TinyKnobs knobs;                      // 2 blocks, width 128, fp32
//   knobs.stage = 2;
//   ASSERT_OK_AND_ASSIGN(TrainingConfig cfg, TinyConfig(knobs, 2, 2));
//   ASSERT_OK_AND_ASSIGN(ClusterResult r, RunCluster(cfg));
//   r.weights;                            // FP32, the whole flat space
//
// Every wait is bounded: the group timeout, the client's call deadlines, and
// the servers' shutdown grace. Data: Corpus::FromBytes(TestCorpusText()).
#ifndef ZEROSHARD_TESTS_WORKER_ENGINE_ENGINE_CLUSTER_H_
#define ZEROSHARD_TESTS_WORKER_ENGINE_ENGINE_CLUSTER_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/config.h"
#include "proto/zeroshard/v1/shard.pb.h"
#include "server/shard_server.h"
#include "data/batch_sampler.h"
#include "worker/engine/step_engine.h"

// gtest helpers for StatusOr.
#define ZS_ENGINE_CONCAT_INNER_(a, b) a##b
#define ZS_ENGINE_CONCAT_(a, b) ZS_ENGINE_CONCAT_INNER_(a, b)
#define ASSERT_OK_AND_ASSIGN(lhs, expr) \
  ASSERT_OK_AND_ASSIGN_IMPL_(ZS_ENGINE_CONCAT_(_sor_, __LINE__), lhs, expr)
#define ASSERT_OK_AND_ASSIGN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  ASSERT_TRUE(tmp.ok()) << tmp.status();           \
  lhs = *std::move(tmp)

namespace zeroshard::testing {

// What the tests vary; everything else is fixed. Rendered as a DeepSpeed-
// style JSON document (TinyConfigJson) and parsed by ParseTrainingConfig.
struct TinyKnobs {
  std::string precision = "fp32";  // fp32 | bf16 | fp16
  int stage = 3;
  int train_batch_size = 8;
  int micro_batch_size = 0;         // 0: "auto"
  int gradient_accumulation_steps = 0;  // 0: "auto"
  double gradient_clipping = 0;
  std::string checkpointing = "none";  // none | every_block | every_k
  int checkpoint_k = 1;
  int layers = 2, heads = 2, width = 128, context = 16;
  // "llama": its kv_heads and mlp_width too (model/llama_manifest.h).
  std::string arch = "gpt2";
  int kv_heads = 1, mlp_width = 192;
  double lr = 1e-3;
  bool warmup_cosine = false;       // WarmupCosineLR over the steps
  int hysteresis = 2;               // fp16
  int initial_scale_power = 16;     // fp16
  double init_std = 0.02;           // zeroshard.init_std
  uint64_t steps = 3;
  double step_timeout_s = 30;
};

std::string TinyConfigJson(const TinyKnobs& knobs);
// The manifest of the config's architecture for its workers.
absl::StatusOr<ModelManifest> ManifestFor(const TrainingConfig& cfg);
absl::StatusOr<TrainingConfig> TinyConfig(const TinyKnobs& knobs, int servers,
                                          int workers);

// A deterministic, English-like text of ~64 KiB (no files read).
const std::string& TestCorpusText();
absl::StatusOr<BatchSampler> TestSampler(const TrainingConfig& config);

// S in-process shard servers.
class EngineCluster {
 public:
  static absl::StatusOr<std::unique_ptr<EngineCluster>> Start(int servers);
  ~EngineCluster();
  const std::vector<std::string>& addresses() const { return addresses_; }
  // Stops server k (cancels its calls at once). Thread-safe.
  void StopServer(int k);

 private:
  EngineCluster() = default;
  std::vector<std::unique_ptr<ShardServer>> servers_;
  std::vector<std::string> addresses_;
};

struct TrainOptions {
  // One config per rank; empty: `config` for every rank. Lets a test give
  // the workers configs that differ.
  std::vector<TrainingConfig> per_rank;
  absl::Duration group_timeout = absl::Seconds(30);
  // Client call deadline (the step timeout of the config otherwise).
  absl::Duration call_timeout = absl::Seconds(30);
  int64_t inject_overflow_step = -1;
  int inject_overflow_rank = 0;
  // Each rank stops before this step (as if its process were killed between
  // steps); -1: trains to config.cluster.steps. A later TrainWorkers on the
  // same cluster resumes from the servers' version.
  int64_t stop_before_step = -1;
  // Makes each rank's model (the CPU model by default); model_for_rank,
  // when set, gives each rank its own factory (a device per rank).
  ModelFactory make_model = MakeCpuModel;
  std::function<ModelFactory(int rank)> model_for_rank;
  // The worker group's backend; "nccl" puts rank r on CUDA device r.
  std::string backend = "gloo";
  // Runs on each rank's thread after each successful step.
  std::function<void(int rank, const StepEngine& engine, const StepResult& r)>
      on_step;
};

struct RankRun {
  absl::Status status;            // OK, or the first error of this rank
  std::vector<StepResult> steps;  // the steps that finished
  EngineMemory memory;
};

// Trains config.cluster.steps steps with config.cluster.workers threads
// against `cluster`. Returns when every thread has finished. As
// zeroshard-worker does (worker/main.cc), each rank starts at the servers'
// version (StepEngine::StartStep) with the loss-scaler state found for that
// step (FindLossScalerState; no checkpoint directory), and for fp16 rank 0
// leaves the scaler's state in server 0's key-value store before each step
// is applied.
std::vector<RankRun> TrainWorkers(EngineCluster& cluster,
                                  const TrainingConfig& config,
                                  const TrainOptions& options = {});

// The FP32 weights of the whole flat space at version >= `version`, and
// every server's Inspect.
absl::StatusOr<std::vector<float>> GatherWeights(EngineCluster& cluster,
                                                 const TrainingConfig& config,
                                                 uint64_t version);
absl::StatusOr<std::vector<v1::InspectResponse>> InspectServers(
    EngineCluster& cluster, const TrainingConfig& config);

struct ClusterResult {
  std::vector<RankRun> ranks;
  std::vector<float> weights;
  std::vector<v1::InspectResponse> inspect;
};

// Start(S) + TrainWorkers + GatherWeights + InspectServers; an error if any
// rank failed.
absl::StatusOr<ClusterResult> RunCluster(const TrainingConfig& config,
                                         const TrainOptions& options = {});

}  // namespace zeroshard::testing

#endif  // ZEROSHARD_TESTS_WORKER_ENGINE_ENGINE_CLUSTER_H_
