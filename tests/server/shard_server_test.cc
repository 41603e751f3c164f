// The shard server over real gRPC: Init / Inspect, Gather of the seeded
// init, several steps pushed by concurrent workers compared bit for bit with
// a single-process reference, retries, skips, Gather waits, the KV store,
// admin calls and placement errors.
#include <cstring>
#include <random>
#include <thread>

#include "common/dtype.h"
#include "common/init_values.h"
#include "common/optimizer_config.h"
#include "wire/proto_convert.h"
#include "gtest/gtest.h"
#include "optim/optimizer.h"
#include "proto/grpc/health/v1/health.grpc.pb.h"
#include "server/placement.h"
#include "tests/server/server_test_util.h"

namespace zeroshard {
namespace {

using testing::GatherBytes;
using testing::GatherFp32;
using testing::Header;
using testing::Inspect;
using testing::InitServer;
using testing::MakeInit;
using testing::Piece;
using testing::Push;
using testing::SmallManifest;
using testing::StartServer;
using testing::TestServer;

FlatLayout Layout(const v1::ModelManifest& manifest, uint32_t servers) {
  absl::StatusOr<FlatLayout> layout =
      FlatLayout::Create(FromProto(manifest), servers, 1);
  EXPECT_TRUE(layout.ok()) << layout.status();
  return *std::move(layout);
}

// Init with replace: a new model of the same run replaces the state
// (identical or not: it starts again from its own values); another run's
// is refused and changes nothing; without replace a different model is a
// conflict, as before.
TEST(ShardServerTest, InitWithReplaceTakesANewModelOfTheSameRunOnly) {
  TestServer t = StartServer(0, 1);
  ASSERT_NE(t.stub, nullptr);
  ASSERT_TRUE(InitServer(*t.stub, MakeInit(SmallManifest(1), 1, 0, 3, 4096)).ok());
  const double first = Inspect(*t.stub).norms().master();
  v1::InitRequest other = MakeInit(SmallManifest(2), 1, 0, 9, 2048);
  grpc::Status s = InitServer(*t.stub, other);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION)
      << s.error_message();
  EXPECT_NE(s.error_message().find("conflicts with the existing state"),
            std::string::npos) << s.error_message();
  other.set_replace(true);
  other.set_run_id("another-run");
  s = InitServer(*t.stub, other);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION)
      << s.error_message();
  EXPECT_NE(s.error_message().find("serves run 'test-run'"),
            std::string::npos) << s.error_message();
  EXPECT_EQ(Inspect(*t.stub).norms().master(), first);   // nothing changed
  other.set_run_id(testing::kTestRunId);
  v1::InitResponse init;
  ASSERT_TRUE(InitServer(*t.stub, other, &init).ok());
  EXPECT_FALSE(init.already_initialized());
  const v1::InspectResponse info = Inspect(*t.stub);
  EXPECT_EQ(info.chunk_elems(), 2048u);
  EXPECT_NE(info.norms().master(), first);
  // The same request again with replace: a fresh state all the same.
  ASSERT_TRUE(InitServer(*t.stub, other, &init).ok());
  EXPECT_FALSE(init.already_initialized());
}

TEST(ShardServerTest, InitInspectAndGatherMatchTheSeededInit) {
  const v1::ModelManifest manifest = SmallManifest(2);
  const FlatLayout layout = Layout(manifest, 2);
  for (uint32_t k = 0; k < 2; ++k) {
    TestServer t = StartServer(k, 2);
    ASSERT_NE(t.stub, nullptr);
    EXPECT_FALSE(Inspect(*t.stub).initialized());
    v1::InitResponse init;
    ASSERT_TRUE(InitServer(*t.stub, MakeInit(manifest, 2, k, 42, 2048), &init)
                    .ok());
    const FlatRange owned = layout.ServerRange(k);
    EXPECT_EQ(init.owned_begin(), owned.begin);
    EXPECT_EQ(init.owned_end(), owned.end);
    EXPECT_EQ(init.total_elems(), layout.total_elems());
    EXPECT_FALSE(init.already_initialized());
    // Identical Init: idempotent.
    ASSERT_TRUE(InitServer(*t.stub, MakeInit(manifest, 2, k, 42, 2048), &init)
                    .ok());
    EXPECT_TRUE(init.already_initialized());

    const v1::InspectResponse info = Inspect(*t.stub);
    EXPECT_TRUE(info.initialized());
    EXPECT_EQ(info.server_index(), k);
    EXPECT_EQ(info.owned_begin(), owned.begin);
    EXPECT_EQ(info.chunk_elems(), 2048u);
    EXPECT_EQ(info.num_chunks(), (owned.size() + 2047) / 2048);
    EXPECT_EQ(info.max_version(), 0u);
    EXPECT_EQ(info.adam_step(), 0u);
    EXPECT_EQ(info.placement(), "host");
    EXPECT_EQ(info.bytes_by_kind().at("master"), 4 * owned.size());
    EXPECT_EQ(info.bytes_by_kind().at("mirror"), 2 * owned.size());
    EXPECT_EQ(info.bytes_by_kind().at("pending_grads"), 0u);
    EXPECT_EQ(info.counters().calls().at("Init"), 2u);
    EXPECT_EQ(info.manifest().units_size(), manifest.units_size());

    std::vector<float> expect(owned.size());
    FillInitialValues(layout, 42, 0.02, owned, expect.data());
    double norm = 0;
    for (float x : expect) norm += static_cast<double>(x) * x;
    EXPECT_NEAR(info.norms().master(), std::sqrt(norm), 1e-9 * std::sqrt(norm));
    EXPECT_EQ(info.norms().exp_avg(), 0.0);

    const std::vector<float> fp32 = GatherFp32(*t.stub, owned);
    ASSERT_EQ(fp32.size(), owned.size());
    EXPECT_EQ(std::memcmp(fp32.data(), expect.data(), 4 * owned.size()), 0);
    std::string bf16;
    std::vector<uint64_t> versions;
    // Small messages: many per chunk, none spanning two chunks.
    ASSERT_TRUE(GatherBytes(*t.stub, {owned}, v1::DTYPE_BF16, 0, 20000, &bf16,
                            &versions)
                    .ok());
    ASSERT_EQ(bf16.size(), 2 * owned.size());
    for (size_t i = 0; i < owned.size(); ++i) {
      uint16_t h;
      std::memcpy(&h, bf16.data() + 2 * i, 2);
      ASSERT_EQ(h, FloatToBf16(expect[i])) << i;
    }
    for (uint64_t v : versions) EXPECT_EQ(v, 0u);
    const uint64_t bytes_out = Inspect(*t.stub).counters().bytes_out();
    EXPECT_EQ(bytes_out, 6 * owned.size());
  }
}

// One step's gradient as each worker pushes it, and as the reference sees it.
struct StepPlan {
  double coefficient = 1;
  bool skip = false;
  bool coefficient_known = false;
  std::vector<float> grad;  // what the server applies (BF16 pieces rounded)
  // pushes[worker][server]: the pieces of that stream.
  std::vector<std::vector<std::vector<Piece>>> pushes;
};

StepPlan MakeStep(const FlatLayout& layout, uint32_t workers,
                  std::mt19937& rng, double coefficient, bool skip,
                  bool known) {
  StepPlan plan;
  plan.coefficient = coefficient;
  plan.skip = skip;
  plan.coefficient_known = known;
  std::normal_distribution<float> normal(0.f, 1.f);
  plan.grad.resize(layout.total_elems());
  for (float& g : plan.grad) g = normal(rng);
  plan.pushes.assign(workers,
                     std::vector<std::vector<Piece>>(layout.num_servers()));
  int counter = 0;
  for (uint32_t r = 0; r < workers; ++r) {
    // The layout was made for one worker; a worker's partition of each unit
    // is computed here the way docs/DESIGN.md ("The flat layout") defines
    // it.
    for (const UnitInfo& unit : layout.units()) {
      const FlatRange part{unit.offset + r * unit.padded / workers,
                           unit.offset + (r + 1) * unit.padded / workers};
      for (const ServerSlice& s : layout.SplitByServer(part)) {
        for (uint64_t b = s.range.begin; b < s.range.end; b += 700) {
          const uint64_t e = std::min<uint64_t>(s.range.end, b + 700);
          if (++counter % 2) {
            plan.pushes[r][s.server].push_back(testing::Fp32Piece(
                b, {plan.grad.begin() + b, plan.grad.begin() + e}));
          } else {
            std::vector<uint16_t> h(e - b);
            for (uint64_t i = b; i < e; ++i) {
              h[i - b] = FloatToBf16(plan.grad[i]);
              plan.grad[i] = Bf16ToFloat(h[i - b]);
            }
            plan.pushes[r][s.server].push_back(testing::Bf16Piece(b, h));
          }
        }
      }
    }
  }
  return plan;
}

TEST(ShardServerTest, ConcurrentWorkersMatchASingleProcessReference) {
  constexpr uint32_t kServers = 2, kWorkers = 3;
  const v1::ModelManifest manifest = SmallManifest(kWorkers);
  const FlatLayout layout = Layout(manifest, kServers);
  std::vector<TestServer> servers;
  for (uint32_t k = 0; k < kServers; ++k) {
    servers.push_back(StartServer(k, kServers));
    ASSERT_NE(servers.back().stub, nullptr);
    ASSERT_TRUE(InitServer(*servers.back().stub,
                           MakeInit(manifest, kServers, k, 7, 1024))
                    .ok());
  }
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "grad seed " << seed);
  std::mt19937 rng(seed);
  std::vector<StepPlan> steps;
  steps.push_back(MakeStep(layout, kWorkers, rng, 0.5, false, false));
  steps.push_back(MakeStep(layout, kWorkers, rng, 1.0, true, false));
  steps.push_back(MakeStep(layout, kWorkers, rng, 0.25, false, false));
  steps.push_back(MakeStep(layout, kWorkers, rng, 1.0, false, true));

  // The reference: one process, one optimizer, the same gradients.
  const size_t n = layout.total_elems();
  std::vector<float> master(n), m(n, 0.f), v(n, 0.f);
  std::vector<uint16_t> mirror(n);
  FillInitialValues(layout, 7, 0.02, {0, n}, master.data());
  const OptimizerConfig config =
      *FromProto(MakeInit(manifest, kServers, 0, 7, 1024).optimizer());
  uint64_t t = 0;
  for (const StepPlan& s : steps) {
    if (s.skip) continue;
    AdamUpdate(MakeAdamStep(config, ++t, static_cast<float>(s.coefficient)),
               GradView::Fp32(s.grad.data()),
               {master.data(), m.data(), v.data(), mirror.data(), n});
  }

  std::vector<std::string> failures(kWorkers);
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < kWorkers; ++r) {
    threads.emplace_back([&, r] {
      std::vector<std::unique_ptr<v1::ShardService::Stub>> stubs;
      for (const TestServer& s : servers) {
        stubs.push_back(testing::Connect(s.server->port()));
      }
      for (size_t step = 0; step < steps.size(); ++step) {
        const StepPlan& plan = steps[step];
        for (uint32_t k = 0; k < kServers; ++k) {
          // Fetch what this worker will push for, at this step's version.
          std::vector<FlatRange> ranges;
          for (const Piece& p : plan.pushes[r][k]) {
            ranges.push_back({p.offset, p.offset + p.data.size() /
                                            (p.dtype == v1::DTYPE_FP32 ? 4 : 2)});
          }
          std::string bytes;
          grpc::Status g = GatherBytes(*stubs[k], ranges, v1::DTYPE_BF16,
                                       static_cast<int64_t>(step), 20000,
                                       &bytes);
          if (!g.ok()) failures[r] += "gather: " + g.error_message() + "\n";
          v1::PushGradHeader header = Header(step, r);
          header.set_coefficient_known(plan.coefficient_known);
          if (plan.coefficient_known) {
            header.set_coefficient(plan.coefficient);
            header.set_skip(plan.skip);
          }
          v1::PushGradResponse response;
          grpc::Status p = Push(*stubs[k], header, plan.pushes[r][k],
                                plan.coefficient, plan.skip, &response);
          if (!p.ok()) failures[r] += "push: " + p.error_message() + "\n";
          if (step == 0 && r == 0) {
            // A retry of the same stream: acknowledged, not re-applied.
            v1::PushGradResponse again;
            p = Push(*stubs[k], header, plan.pushes[r][k], plan.coefficient,
                     plan.skip, &again);
            if (!p.ok() || again.applied_elems() != 0 ||
                again.duplicate_elems() != response.applied_elems()) {
              failures[r] += "retry was not a pure duplicate\n";
            }
          }
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (uint32_t r = 0; r < kWorkers; ++r) EXPECT_EQ(failures[r], "") << r;

  for (uint32_t k = 0; k < kServers; ++k) {
    const FlatRange owned = layout.ServerRange(k);
    std::string bytes;
    std::vector<uint64_t> versions;
    ASSERT_TRUE(GatherBytes(*servers[k].stub, {owned}, v1::DTYPE_FP32,
                            steps.size(), 20000, &bytes, &versions)
                    .ok());
    ASSERT_EQ(bytes.size(), 4 * owned.size());
    EXPECT_EQ(std::memcmp(bytes.data(), master.data() + owned.begin,
                          bytes.size()),
              0)
        << "server " << k << " differs from the reference";
    for (uint64_t ver : versions) EXPECT_EQ(ver, steps.size());
    std::string bf16;
    ASSERT_TRUE(GatherBytes(*servers[k].stub, {owned}, v1::DTYPE_BF16, -1,
                            20000, &bf16)
                    .ok());
    EXPECT_EQ(std::memcmp(bf16.data(), mirror.data() + owned.begin,
                          bf16.size()),
              0);
    const v1::InspectResponse info = Inspect(*servers[k].stub);
    EXPECT_EQ(info.min_version(), steps.size());
    EXPECT_EQ(info.max_version(), steps.size());
    EXPECT_EQ(info.adam_step(), t);
    EXPECT_EQ(info.pending_grad_bytes(), 0u);
    EXPECT_EQ(info.counters().errors_size(), 0);
  }
}

TEST(ShardServerTest, GatherWaitsForAVersionAndTimesOutCleanly) {
  const v1::ModelManifest manifest = SmallManifest(1);
  const FlatLayout layout = Layout(manifest, 1);
  TestServer t = StartServer(0, 1);
  ASSERT_TRUE(InitServer(*t.stub, MakeInit(manifest, 1, 0, 3, 4096)).ok());
  const FlatRange all{0, layout.total_elems()};

  std::string early;
  grpc::Status timed_out =
      GatherBytes(*t.stub, {all}, v1::DTYPE_BF16, 1, 300, &early);
  EXPECT_EQ(timed_out.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);

  std::string waited;
  std::vector<uint64_t> versions;
  grpc::Status waited_status;
  std::thread waiter([&] {
    waited_status = GatherBytes(*t.stub, {all}, v1::DTYPE_BF16, 1, 20000,
                                &waited, &versions);
  });
  std::vector<float> grad(all.size(), 0.5f);
  ASSERT_TRUE(Push(*t.stub, Header(0), {testing::Fp32Piece(0, grad)}, 1.0,
                   false)
                  .ok());
  waiter.join();
  ASSERT_TRUE(waited_status.ok()) << waited_status.error_message();
  EXPECT_EQ(waited.size(), 2 * all.size());
  for (uint64_t v : versions) EXPECT_GE(v, 1u);
  // Still serving, and the cancelled waiters left nothing behind.
  EXPECT_EQ(Inspect(*t.stub).min_version(), 1u);
  EXPECT_EQ(GatherFp32(*t.stub, all).size(), all.size());
}

TEST(ShardServerTest, SkippedStepAdvancesVersionButNotAdamStep) {
  const v1::ModelManifest manifest = SmallManifest(1);
  const FlatLayout layout = Layout(manifest, 1);
  TestServer t = StartServer(0, 1);
  ASSERT_TRUE(InitServer(*t.stub, MakeInit(manifest, 1, 0, 3, 4096)).ok());
  const FlatRange all{0, layout.total_elems()};
  const std::vector<float> before = GatherFp32(*t.stub, all);
  std::vector<float> grad(all.size(), 1.0f);
  v1::PushGradResponse response;
  ASSERT_TRUE(Push(*t.stub, Header(0), {testing::Fp32Piece(0, grad)}, 1.0,
                   /*skip=*/true, &response)
                  .ok());
  EXPECT_EQ(response.chunks_completed(), Inspect(*t.stub).num_chunks());
  v1::InspectResponse info = Inspect(*t.stub);
  EXPECT_EQ(info.min_version(), 1u);
  EXPECT_EQ(info.adam_step(), 0u);
  EXPECT_EQ(info.norms().exp_avg(), 0.0);
  EXPECT_EQ(GatherFp32(*t.stub, all), before);
  ASSERT_TRUE(
      Push(*t.stub, Header(1), {testing::Fp32Piece(0, grad)}, 1.0, false).ok());
  info = Inspect(*t.stub);
  EXPECT_EQ(info.min_version(), 2u);
  EXPECT_EQ(info.adam_step(), 1u);
  EXPECT_NE(GatherFp32(*t.stub, all), before);
}

TEST(ShardServerTest, KvSetGetWaitAndTimeout) {
  TestServer t = StartServer(0, 1);
  auto set = [&](const std::string& k, const std::string& v) {
    grpc::ClientContext c;
    testing::SetDeadline(c, 20000);
    v1::KvSetRequest req;
    req.set_key(k);
    req.set_value(v);
    req.set_run_id("run");
    v1::KvSetResponse resp;
    return t.stub->KvSet(&c, req, &resp);
  };
  auto wait = [&](std::vector<std::string> keys, int ms) {
    grpc::ClientContext c;
    testing::SetDeadline(c, ms);
    v1::KvWaitRequest req;
    for (auto& k : keys) req.add_keys(k);
    req.set_run_id("run");
    v1::KvWaitResponse resp;
    return t.stub->KvWait(&c, req, &resp);
  };
  auto get = [&](const std::string& key, v1::KvGetResponse* resp) {
    grpc::ClientContext c;
    testing::SetDeadline(c, 20000);
    v1::KvGetRequest req;
    req.set_key(key);
    req.set_run_id("run");
    return t.stub->KvGet(&c, req, resp);
  };
  ASSERT_TRUE(set("gloo/0", "addr0").ok());
  {
    v1::KvGetResponse resp;
    ASSERT_TRUE(get("gloo/0", &resp).ok());
    EXPECT_TRUE(resp.found());
    EXPECT_EQ(resp.value(), "addr0");
  }
  {
    v1::KvGetResponse resp;
    ASSERT_TRUE(get("nope", &resp).ok());
    EXPECT_FALSE(resp.found());
  }
  EXPECT_TRUE(wait({"gloo/0"}, 20000).ok());
  const grpc::Status late = wait({"gloo/0", "gloo/1"}, 300);
  EXPECT_EQ(late.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  grpc::Status waited;
  std::thread waiter([&] { waited = wait({"gloo/1", "gloo/2"}, 20000); });
  ASSERT_TRUE(set("gloo/1", "a").ok());
  ASSERT_TRUE(set("gloo/2", "b").ok());
  waiter.join();
  EXPECT_TRUE(waited.ok()) << waited.error_message();
  EXPECT_EQ(set("", "x").error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

// A lost state (what a device error records; injected here on the host
// placement) poisons the shard: health says NOT_SERVING, every state call
// fails with the fault, and nothing is served from the unknown state.
TEST(ShardServerTest, LostStateIsNotServingAndRefusesEveryCall) {
  auto server = ShardServer::Start({});
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = testing::Connect((*server)->port());
  ASSERT_TRUE(InitServer(*stub, MakeInit(SmallManifest(1), 1, 0, 3, 4096)).ok());
  auto health = grpc::health::v1::Health::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", (*server)->port()),
      grpc::InsecureChannelCredentials()));
  auto serving = [&] {
    grpc::ClientContext ctx;
    grpc::health::v1::HealthCheckResponse r;
    EXPECT_TRUE(health->Check(&ctx, {}, &r).ok());
    return r.status();
  };
  EXPECT_EQ(serving(), grpc::health::v1::HealthCheckResponse::SERVING);
  auto state = (*server)->StateForTesting();
  ASSERT_TRUE(state.ok()) << state.status();
  (*state)->store().RecordFaultForTesting(
      absl::InternalError("cudaMemcpyAsync: cudaErrorECCUncorrectable"));
  EXPECT_EQ(serving(), grpc::health::v1::HealthCheckResponse::NOT_SERVING);
  const absl::Status fault = (*state)->store().fault();
  EXPECT_EQ(fault.code(), absl::StatusCode::kInternal);
  EXPECT_NE(fault.message().find("device state is lost"), std::string::npos);
  std::vector<float> out(64);
  EXPECT_EQ((*state)->store().Read({0, 64}, DType::kFp32, out.data()).code(),
            absl::StatusCode::kInternal);
  EXPECT_FALSE((*state)->store().Norms().ok());
  // Over the wire: Inspect, which reads the state's norms, fails with it.
  grpc::ClientContext ctx;
  v1::InspectRequest req;
  v1::InspectResponse resp;
  EXPECT_EQ(stub->Inspect(&ctx, req, &resp).error_code(),
            grpc::StatusCode::INTERNAL);
}

class GpuPlacementTest : public ::testing::TestWithParam<Placement> {};

TEST_P(GpuPlacementTest, WorksWithAGpuAndIsAClearErrorWithout) {
  const Placement placement = GetParam();
  const std::string name(PlacementName(placement));
  const absl::Status available = CheckPlacementAvailable(placement);
  ShardServer::Options options;
  options.placement = placement;
  absl::StatusOr<std::unique_ptr<ShardServer>> server =
      ShardServer::Start(options);
  if (available.ok()) {
    // A machine with a CUDA device: the placement must work end to end,
    // and its state must equal a host server's.
    ASSERT_TRUE(server.ok()) << server.status();
    auto stub = testing::Connect((*server)->port());
    ASSERT_TRUE(InitServer(*stub, MakeInit(SmallManifest(1), 1, 0, 3, 4096))
                    .ok());
    const v1::InspectResponse info = Inspect(*stub);
    EXPECT_EQ(info.placement(), name);
    ShardServer::Options host_options;
    auto host = ShardServer::Start(host_options);
    ASSERT_TRUE(host.ok()) << host.status();
    auto host_stub = testing::Connect((*host)->port());
    ASSERT_TRUE(
        InitServer(*host_stub, MakeInit(SmallManifest(1), 1, 0, 3, 4096)).ok());
    EXPECT_EQ(info.norms().master(), Inspect(*host_stub).norms().master());
    return;
  }
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(server.status().message().find("--placement=" + name),
            std::string::npos)
      << server.status();
}

INSTANTIATE_TEST_SUITE_P(PinnedAndDevice, GpuPlacementTest,
                         ::testing::Values(Placement::kPinned,
                                           Placement::kDevice),
                         [](const auto& info) {
                           return std::string(PlacementName(info.param));
                         });

}  // namespace
}  // namespace zeroshard
