// Real zeroshard-server processes, several concurrent ShardClients (one per
// simulated worker), many steps: the final weights equal a single-process
// reference (FillInitialValues + AdamUpdateReference) bit for bit. And a
// server killed mid-run gives a clear UNAVAILABLE, never a hang.
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "client/shard_client.h"
#include "model/gpt_manifest.h"
#include "common/init_values.h"
#include "gtest/gtest.h"
#include "optim/optimizer.h"
#include "tests/integration/local_cluster.h"

namespace zeroshard {
namespace {

constexpr uint64_t kSeed = 17;
constexpr int kSteps = 20;
constexpr uint64_t kSkipStep = 6;  // an overflow step: versions move, t not

// The gradient element at a flat offset for a step; BF16 on every third
// step, FP32 otherwise.
float GradValue(uint64_t step, uint64_t offset) {
  return 0.01f * CounterNormal(1000 + step, offset);
}
DType GradDType(uint64_t step) {
  return step % 3 == 2 ? DType::kBf16 : DType::kFp32;
}
// Exactly representable coefficients; known up front on odd steps.
StepCommit CommitFor(uint64_t step) {
  return {step % 2 == 0 ? 0.5 : 1.0, step == kSkipStep};
}

OptimizerConfig Config() {
  OptimizerConfig c;
  c.lr = 1e-2;
  c.weight_decay = 0.1;
  return c;
}

ShardClientOptions FastRetries() {
  ShardClientOptions o;
  o.call_timeout = absl::Seconds(30);
  o.max_message_bytes = 64 << 10;  // many pieces per stream
  o.retry.max_attempts = 3;
  o.retry.initial_backoff = absl::Milliseconds(20);
  o.retry.max_backoff = absl::Milliseconds(100);
  o.retry.max_total = absl::Seconds(5);
  // Every client of a test names the run its Init fixed.
  o.run_id = "cluster-test";
  return o;
}

// One simulated worker: push its partition's gradients unit by unit through
// a session, then gather its partition at the next version.
absl::Status WorkerStep(ShardClient& client, uint32_t worker, uint64_t step) {
  const FlatLayout& L = client.layout();
  const DType dtype = GradDType(step);
  const StepCommit commit = CommitFor(step);
  auto session = client.OpenPush(
      step, worker,
      step % 2 == 1 ? std::optional<StepCommit>(commit) : std::nullopt);
  if (!session.ok()) return session.status();
  std::vector<std::vector<uint8_t>> buffers;  // alive until Commit
  for (const FlatRange& r : L.WorkerRanges(worker)) {
    buffers.emplace_back(r.size() * DTypeSize(dtype));
    for (uint64_t i = 0; i < r.size(); ++i) {
      const float g = GradValue(step, r.begin + i);
      if (dtype == DType::kBf16) {
        const uint16_t h = FloatToBf16(g);
        std::memcpy(buffers.back().data() + 2 * i, &h, 2);
      } else {
        std::memcpy(buffers.back().data() + 4 * i, &g, 4);
      }
    }
    if (absl::Status s = (*session)->Add(r, dtype, buffers.back().data());
        !s.ok()) {
      return s;
    }
  }
  auto pushed = (*session)->Commit(commit);
  if (!pushed.ok()) return pushed.status();
  uint64_t elems = 0;
  for (const FlatRange& r : L.WorkerRanges(worker)) elems += r.size();
  if (pushed->applied_elems + pushed->duplicate_elems != elems) {
    return absl::InternalError(absl::StrCat("applied ", pushed->applied_elems,
                                            " of ", elems));
  }
  std::vector<uint16_t> params(elems);
  auto gathered = client.Gather(L.WorkerRanges(worker), DType::kBf16, step + 1,
                                params.data(), params.size() * 2);
  if (!gathered.ok()) return gathered.status();
  if (gathered->min_version < step + 1) {
    return absl::InternalError(absl::StrCat("gathered version ",
                                            gathered->min_version));
  }
  return absl::OkStatus();
}

// Runs one step of every worker concurrently (worker w on clients[w % size]).
std::vector<absl::Status> RunStep(
    const std::vector<std::unique_ptr<ShardClient>>& clients, int workers,
    uint64_t step) {
  std::vector<absl::Status> st(workers);
  std::vector<std::thread> threads;
  for (int w = 0; w < workers; ++w) {
    threads.emplace_back([&, w] {
      st[w] = WorkerStep(*clients[w % clients.size()], w, step);
    });
  }
  for (auto& t : threads) t.join();
  return st;
}

TEST(ClusterTest, ConcurrentWorkersMatchTheSingleProcessReference) {
  constexpr int kServers = 3, kWorkers = 3;
  auto cluster = testing::LocalCluster::Start(kServers);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  GptShape shape{.layers = 2, .heads = 2, .width = 64, .vocab = 96,
                 .context = 32};
  ModelManifest manifest = *MakeGptManifest(shape, kWorkers);
  FlatLayout layout = *FlatLayout::Create(manifest, kServers, kWorkers);

  std::vector<std::unique_ptr<ShardClient>> clients;
  for (int w = 0; w < kWorkers; ++w) {
    clients.push_back(
        *ShardClient::Create((*cluster)->addresses(), layout, FastRetries()));
  }
  InitOptions init;
  // The reference below is torch's single group.
  init.param_groups = ParamGroups::Single();
  init.optimizer = Config();
  init.seed = kSeed;
  init.chunk_elems = 4096;  // many chunks per server
  auto inited = clients[0]->Init(init);
  ASSERT_TRUE(inited.ok()) << inited.status();

  for (uint64_t step = 0; step < kSteps; ++step) {
    std::vector<absl::Status> st = RunStep(clients, kWorkers, step);
    for (int w = 0; w < kWorkers; ++w) {
      ASSERT_TRUE(st[w].ok()) << "step " << step << " worker " << w << ": "
                              << st[w];
    }
  }

  // The reference: one process, the whole flat space, the same gradients.
  const uint64_t T = layout.total_elems();
  std::vector<float> w(T), m(T, 0.0f), v(T, 0.0f), g(T);
  std::vector<uint16_t> mirror(T), g16(T);
  FillInitialValues(layout, kSeed, 0.02, {0, T}, w.data());
  uint64_t t = 0;
  for (uint64_t step = 0; step < kSteps; ++step) {
    const StepCommit c = CommitFor(step);
    if (c.skip) continue;
    ++t;
    for (uint64_t i = 0; i < T; ++i) {
      g[i] = GradValue(step, i);
      g16[i] = FloatToBf16(g[i]);
    }
    const GradView grad = GradDType(step) == DType::kBf16
                              ? GradView::Bf16(g16.data())
                              : GradView::Fp32(g.data());
    AdamUpdateReference(
        MakeAdamStep(Config(), t, static_cast<float>(c.coefficient)), grad,
        {w.data(), m.data(), v.data(), mirror.data(), T});
  }

  std::vector<float> got(T);
  auto res = clients[1]->Gather({{FlatRange{0, T}}}, DType::kFp32, kSteps,
                                got.data(), 4 * T);
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_EQ(res->min_version, static_cast<uint64_t>(kSteps));
  EXPECT_EQ(res->max_version, static_cast<uint64_t>(kSteps));
  uint64_t mismatches = 0;
  for (uint64_t i = 0; i < T; ++i) {
    if (FloatBits(got[i]) != FloatBits(w[i]) && mismatches++ < 5) {
      ADD_FAILURE() << "element " << i << ": server " << got[i]
                    << " reference " << w[i];
    }
  }
  EXPECT_EQ(mismatches, 0u) << "of " << T;
  std::vector<uint16_t> got16(T);
  ASSERT_TRUE(clients[2]->Gather({{FlatRange{0, T}}}, DType::kBf16, kSteps,
                                 got16.data(), 2 * T).ok());
  EXPECT_EQ(got16, mirror);

  // Every server's Adam step count skipped the overflow step.
  for (int k = 0; k < kServers; ++k) {
    auto ins = clients[0]->channels().Inspect(k);
    ASSERT_TRUE(ins.ok()) << ins.status();
    EXPECT_EQ(ins->adam_step(), t);
    EXPECT_EQ(ins->min_version(), static_cast<uint64_t>(kSteps));
  }
}

TEST(ClusterTest, AStepOutOfOrderIsAbortedNotRetried) {
  auto cluster = testing::LocalCluster::Start(2);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ModelManifest manifest = *MakeGptManifest(
      {.layers = 1, .heads = 2, .width = 32, .vocab = 64, .context = 16}, 1);
  FlatLayout layout = *FlatLayout::Create(manifest, 2, 1);
  auto client = *ShardClient::Create((*cluster)->addresses(), layout,
                                     FastRetries());
  ASSERT_TRUE(client->Init(InitOptions()).ok());
  ASSERT_TRUE(WorkerStep(*client, 0, 0).ok());
  const uint64_t T = layout.total_elems();
  std::vector<float> g(T, 0.1f);
  auto res = client->PushGrad(5, 0, {{{0, T}, DType::kFp32, g.data()}},
                              {1.0, false}, false);  // a future step
  EXPECT_EQ(res.status().code(), absl::StatusCode::kAborted) << res.status();
}

TEST(ClusterTest, KilledServerGivesUnavailableWithinBoundedTime) {
  auto cluster = testing::LocalCluster::Start(2);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ModelManifest manifest = *MakeGptManifest(
      {.layers = 2, .heads = 2, .width = 32, .vocab = 64, .context = 16}, 2);
  FlatLayout layout = *FlatLayout::Create(manifest, 2, 2);
  std::vector<std::unique_ptr<ShardClient>> clients;
  clients.push_back(
      *ShardClient::Create((*cluster)->addresses(), layout, FastRetries()));
  ShardClient* client = clients[0].get();
  ASSERT_TRUE(client->Init(InitOptions()).ok());
  for (uint64_t step = 0; step < 3; ++step) {
    for (const absl::Status& s : RunStep(clients, 2, step)) {
      ASSERT_TRUE(s.ok()) << s;
    }
  }
  (*cluster)->Kill(1);
  const std::string dead = (*cluster)->addresses()[1];
  absl::Status s = WorkerStep(*client, 0, 3);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_NE(s.message().find(dead), std::string::npos) << s;
  const uint64_t T = layout.total_elems();
  std::vector<float> out(T);
  auto g = client->Gather({{FlatRange{0, T}}}, DType::kFp32, -1, out.data(),
                          4 * T);
  EXPECT_EQ(g.status().code(), absl::StatusCode::kUnavailable) << g.status();
  // The surviving server still answers.
  EXPECT_TRUE(client->channels().Inspect(0).ok());
  auto health = client->channels().Health(1);
  EXPECT_EQ(health.status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace zeroshard
