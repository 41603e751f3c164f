// The servers against a hostile or broken client that holds valid
// certificates (mutual TLS, real zeroshard-server processes): every bad call
// is refused with its code and a message naming what was wrong, and changes
// nothing — master bytes, the BF16 mirror, m and v (their norms at once, and
// bit for bit at the end against a cluster that never saw the bad calls),
// the attempt, the versions, the pending and prepared bytes — while the run's
// own workers, mid-step when the calls come, go on and finish their steps.
// And a client limited to TLS 1.2 gets no session.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "common/layout.h"
#include "gtest/gtest.h"
#include "proto/zeroshard/v1/shard.grpc.pb.h"
#include "tests/integration/local_cluster.h"
#include "tests/server/server_test_util.h"
#include "wire/credentials.h"
#include "wire/grpc_tuning.h"
#include "wire/proto_convert.h"

namespace zeroshard::testing {
namespace {

constexpr char kScript[] = "scripts/make-dev-credentials.sh";
constexpr uint32_t kServers = 2;
constexpr uint32_t kWorkers = 2;
constexpr uint64_t kAttempt = 1;  // the run's workers'

// What must not change, per server.
struct State {
  std::string master, mirror;
  uint64_t attempt, min_version, max_version, adam_step, pending, prepared,
      partial;
  double m_norm, v_norm;
  bool operator==(const State&) const = default;
};

std::string Describe(const State& s) {
  return absl::StrCat("attempt ", s.attempt, ", versions ", s.min_version,
                      "..", s.max_version, ", adam step ", s.adam_step,
                      ", pending ", s.pending, " B, prepared ", s.prepared,
                      ", partial chunks ", s.partial, ", |m| ", s.m_norm,
                      ", |v| ", s.v_norm);
}

// A cluster of kServers real servers with TLS and tokens, initialised for
// kWorkers workers, with worker and admin stubs to each.
class Cluster {
 public:
  explicit Cluster(const std::string& creds) : creds_(creds) {}

  void Start() {
    auto c = LocalCluster::Start(kServers, {"--credentials=" + creds_});
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = *std::move(c);
    for (const char* role : {"worker", "admin"}) {
      auto security = ClientSecurity::Load(
          creds_, std::string(role) == "worker" ? Role::kWorker : Role::kAdmin);
      ASSERT_TRUE(security.ok()) << security.status();
      for (uint32_t k = 0; k < kServers; ++k) {
        auto stub = v1::ShardService::NewStub(CreateClientChannel(
            cluster_->addresses()[k], TunedChannelArguments(), *security));
        (std::string(role) == "worker" ? workers_ : admins_)
            .push_back(std::move(stub));
      }
    }
    manifest_ = SmallManifest(kWorkers);
    for (uint32_t k = 0; k < kServers; ++k) {
      v1::InitResponse r;
      const grpc::Status s = InitServer(
          *admins_[k], MakeInit(manifest_, kServers, k, 21, 256), &r);
      ASSERT_TRUE(s.ok()) << s.error_message();
      owned_.push_back({r.owned_begin(), r.owned_end()});
    }
    auto layout =
        FlatLayout::Create(FromProto(manifest_), kServers, kWorkers);
    ASSERT_TRUE(layout.ok()) << layout.status();
    layout_ = std::make_unique<FlatLayout>(*std::move(layout));
  }

  v1::ShardService::Stub& worker(uint32_t k) { return *workers_[k]; }
  v1::ShardService::Stub& admin(uint32_t k) { return *admins_[k]; }
  FlatRange owned(uint32_t k) const { return owned_[k]; }
  const FlatLayout& layout() const { return *layout_; }
  const std::string& address(uint32_t k) const {
    return cluster_->addresses()[k];
  }

  // Worker w's gradient for `step` on server k: its own part of every
  // unit there, FP32, a fixed function of (step, element).
  std::vector<Piece> Grad(uint64_t step, uint32_t w, uint32_t k) const {
    std::vector<Piece> pieces;
    for (const FlatRange& r : layout_->WorkerRanges(w)) {
      const FlatRange mine = Intersect(r, owned_[k]);
      if (mine.empty()) continue;
      std::vector<float> g(mine.size());
      for (uint64_t i = 0; i < g.size(); ++i) {
        g[i] = std::sin(0.37 * (mine.begin + i) + 1.3 * step) * 0.01f;
      }
      pieces.push_back(Fp32Piece(mine.begin, g));
    }
    return pieces;
  }

  // Worker w prepares its gradient of `step` on every server.
  void Prepare(uint64_t step, uint32_t w) {
    for (uint32_t k = 0; k < kServers; ++k) {
      v1::PushGradHeader h = Header(step, w);
      h.set_attempt(kAttempt);
      v1::PushGradResponse r;
      const grpc::Status s =
          Push(*workers_[k], h, Grad(step, w, k), 0.5, false, &r, true);
      ASSERT_TRUE(s.ok()) << "step " << step << " worker " << w << " server "
                          << k << ": " << s.error_message();
    }
  }
  // Rank 0's ApplyStep on every server.
  void Apply(uint64_t step) {
    for (uint32_t k = 0; k < kServers; ++k) {
      v1::ApplyStepResponse r;
      const grpc::Status s = ApplyStep(*workers_[k], step, kAttempt, &r);
      ASSERT_TRUE(s.ok()) << "step " << step << " server " << k << ": "
                          << s.error_message();
    }
  }
  void Step(uint64_t step) {
    for (uint32_t w = 0; w < kWorkers; ++w) {
      ASSERT_NO_FATAL_FAILURE(Prepare(step, w));
    }
    ASSERT_NO_FATAL_FAILURE(Apply(step));
  }

  static grpc::Status ApplyStep(v1::ShardService::Stub& stub, uint64_t step,
                                uint64_t attempt,
                                v1::ApplyStepResponse* response) {
    grpc::ClientContext context;
    SetDeadline(context, 20000);
    v1::ApplyStepRequest request;
    request.set_step(step);
    request.set_attempt(attempt);
    request.set_run_id(kTestRunId);
    return stub.ApplyStep(&context, request, response);
  }

  State Take(uint32_t k) {
    State s;
    EXPECT_TRUE(GatherBytes(*workers_[k], {owned_[k]}, v1::DTYPE_FP32, -1,
                            20000, &s.master)
                    .ok());
    EXPECT_TRUE(GatherBytes(*workers_[k], {owned_[k]}, v1::DTYPE_BF16, -1,
                            20000, &s.mirror)
                    .ok());
    const v1::InspectResponse i = Inspect(*workers_[k]);
    s.attempt = i.attempt();
    s.min_version = i.min_version();
    s.max_version = i.max_version();
    s.adam_step = i.adam_step();
    s.pending = i.pending_grad_bytes();
    s.prepared = i.prepared_elems();
    s.partial = i.partial_chunks();
    s.m_norm = i.norms().exp_avg();
    s.v_norm = i.norms().exp_avg_sq();
    return s;
  }
  std::vector<State> TakeAll() {
    std::vector<State> all;
    for (uint32_t k = 0; k < kServers; ++k) all.push_back(Take(k));
    return all;
  }

  // Master, m and v of server k at version `step`, from an in-memory
  // snapshot (Checkpoint with no directory, then ReadSnapshot).
  std::vector<std::string> Exact(uint32_t k, uint64_t step) {
    {
      grpc::ClientContext c;
      SetDeadline(c, 60000);
      v1::CheckpointRequest req;
      req.set_step(step);
      req.set_wait(true);
      v1::CheckpointResponse resp;
      const grpc::Status s = admins_[k]->Checkpoint(&c, req, &resp);
      EXPECT_TRUE(s.ok()) << s.error_message();
    }
    std::vector<std::string> arrays;
    for (auto a : {v1::ReadSnapshotRequest::MASTER,
                   v1::ReadSnapshotRequest::EXP_AVG,
                   v1::ReadSnapshotRequest::EXP_AVG_SQ}) {
      grpc::ClientContext c;
      SetDeadline(c, 60000);
      v1::ReadSnapshotRequest req;
      req.set_step(step);
      req.set_array(a);
      req.add_ranges()->set_offset(owned_[k].begin);
      req.mutable_ranges(0)->set_length(owned_[k].size());
      auto reader = admins_[k]->ReadSnapshot(&c, req);
      std::string bytes;
      v1::GatherChunk chunk;
      while (reader->Read(&chunk)) bytes += chunk.data();
      const grpc::Status s = reader->Finish();
      EXPECT_TRUE(s.ok()) << s.error_message();
      arrays.push_back(std::move(bytes));
    }
    return arrays;
  }

 private:
  std::string creds_;
  std::unique_ptr<LocalCluster> cluster_;
  std::vector<std::unique_ptr<v1::ShardService::Stub>> workers_, admins_;
  v1::ModelManifest manifest_;
  std::vector<FlatRange> owned_;
  std::unique_ptr<FlatLayout> layout_;
};

class HostileClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(kScript)) {
      GTEST_SKIP() << "run from the source tree (CTest does)";
    }
    creds_ = MakeTempDir("zs_hostile_creds_");
    ASSERT_EQ(std::system(absl::StrCat("bash ", kScript, " '", creds_,
                                       "' >/dev/null")
                              .c_str()),
              0);
  }

  // Runs `bad`; expects `code` and every one of `words` in its message,
  // and every server's state as it was.
  void ExpectRefused(Cluster& c, const std::string& what,
                     const std::function<grpc::Status()>& bad,
                     grpc::StatusCode code,
                     const std::vector<std::string>& words) {
    SCOPED_TRACE(what);
    const std::vector<State> before = c.TakeAll();
    const grpc::Status s = bad();
    EXPECT_EQ(s.error_code(), code) << s.error_message();
    for (const std::string& w : words) {
      EXPECT_NE(s.error_message().find(w), std::string::npos)
          << "'" << s.error_message() << "' does not say '" << w << "'";
    }
    const std::vector<State> after = c.TakeAll();
    for (uint32_t k = 0; k < kServers; ++k) {
      EXPECT_TRUE(after[k] == before[k])
          << "server " << k << " changed: was " << Describe(before[k])
          << (after[k].master == before[k].master ? "" : " (master bytes)")
          << "; now " << Describe(after[k]);
    }
  }

  std::string creds_;
};

TEST_F(HostileClientTest, RefusedCallsChangeNothingAndTheRunGoesOn) {
  Cluster run(creds_), reference(creds_);
  ASSERT_NO_FATAL_FAILURE(run.Start());
  ASSERT_NO_FATAL_FAILURE(reference.Start());
  ASSERT_NO_FATAL_FAILURE(run.Step(0));
  // Step 1 is in flight: worker 0 has prepared, worker 1 not yet.
  ASSERT_NO_FATAL_FAILURE(run.Prepare(1, 0));
  const uint32_t k = 1;  // the server most calls go to
  auto& stub = run.worker(k);

  // Another rank's range, with the next attempt.
  ExpectRefused(run, "another rank's range, attempt + 1", [&] {
    v1::PushGradHeader h = Header(1, 0);
    h.set_attempt(kAttempt + 1);
    return Push(stub, h, run.Grad(1, 1, k), 0.5, false, nullptr, true);
  }, grpc::StatusCode::PERMISSION_DENIED, {"is not worker rank 0's"});
  // ApplyStep of the next attempt, which prepared nothing.
  ExpectRefused(run, "ApplyStep, attempt + 1, nothing prepared", [&] {
    v1::ApplyStepResponse r;
    return Cluster::ApplyStep(stub, 1, kAttempt + 1, &r);
  }, grpc::StatusCode::FAILED_PRECONDITION, {"a worker has not prepared"});
  // ApplyStep of a future step with attempt + 5.
  ExpectRefused(run, "ApplyStep of a future step, attempt + 5", [&] {
    v1::ApplyStepResponse r;
    return Cluster::ApplyStep(stub, 7, kAttempt + 5, &r);
  }, grpc::StatusCode::ABORTED, {"ahead"});
  // Non-finite gradients, not skipped: prepared (FP32 NaN, BF16 Inf) and
  // applied as they arrive (Inf, coefficient at the header).
  std::vector<Piece> nan_grad = run.Grad(1, 1, k);
  ASSERT_FALSE(nan_grad.empty());
  // In a tensor (the last pieces of a unit are its padding).
  ASSERT_GT(nan_grad.front().data.size(), 4 * sizeof(float));
  const uint64_t bad_at = nan_grad.front().offset + 3;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(nan_grad.front().data.data() + 3 * sizeof(float), &nan, 4);
  const std::string where = absl::StrCat("(flat offset ", bad_at, ")");
  ExpectRefused(run, "NaN, prepared", [&] {
    v1::PushGradHeader h = Header(1, 1);
    h.set_attempt(kAttempt);
    return Push(stub, h, nan_grad, 0.5, false, nullptr, true);
  }, grpc::StatusCode::INVALID_ARGUMENT, {"NaN or Inf", "of tensor '", where});
  std::vector<uint16_t> bf16(64, FloatToBf16(0.01f));
  bf16[10] = FloatToBf16(std::numeric_limits<float>::infinity());
  const uint64_t w1_begin = run.Grad(1, 1, k).front().offset;
  ExpectRefused(run, "Inf in BF16, prepared", [&] {
    v1::PushGradHeader h = Header(1, 1);
    h.set_attempt(kAttempt);
    return Push(stub, h, {Bf16Piece(w1_begin, bf16)}, 0.5, false, nullptr,
                true);
  }, grpc::StatusCode::INVALID_ARGUMENT, {"NaN or Inf"});
  ExpectRefused(run, "Inf applied as it arrives, attempt + 1", [&] {
    v1::PushGradHeader h = Header(1, 1);
    h.set_attempt(kAttempt + 1);
    h.set_coefficient_known(true);
    h.set_coefficient(0.5);
    return Push(stub, h, {Bf16Piece(w1_begin, bf16)}, 0, false);
  }, grpc::StatusCode::INVALID_ARGUMENT, {"NaN or Inf"});
  // A prepare of the step already applied: acknowledged as a duplicate and
  // held by no one (pending bytes as before).
  {
    const std::vector<State> before = run.TakeAll();
    v1::PushGradHeader h = Header(0, 1);
    h.set_attempt(kAttempt);
    v1::PushGradResponse r;
    const grpc::Status s =
        Push(stub, h, run.Grad(0, 1, k), 0.5, false, &r, true);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_GT(r.duplicate_elems(), 0u);
    EXPECT_TRUE(run.Take(k) == before[k]) << Describe(run.Take(k));
  }
  // One element past the owned range.
  ExpectRefused(run, "one element past the owned end", [&] {
    v1::PushGradHeader h = Header(1, 1);
    h.set_attempt(kAttempt);
    return Push(stub, h,
                {Fp32Piece(run.owned(k).end - 1, std::vector<float>(2, 0.f))},
                0.5, false, nullptr, true);
  }, grpc::StatusCode::INVALID_ARGUMENT, {"outside this server's owned range"});
  // NaN weights, even from an admin.
  ExpectRefused(run, "SetWeights with NaN", [&] {
    grpc::ClientContext c;
    SetDeadline(c, 20000);
    v1::SetWeightsResponse resp;
    auto writer = run.admin(k).SetWeights(&c, &resp);
    v1::WeightPiece piece;
    piece.set_offset(run.owned(k).begin);
    piece.set_dtype(v1::DTYPE_FP32);
    std::vector<float> w(8, 0.5f);
    w[5] = nan;
    piece.set_data(std::string(reinterpret_cast<const char*>(w.data()), 32));
    writer->Write(piece);
    writer->WritesDone();
    return writer->Finish();
  }, grpc::StatusCode::INVALID_ARGUMENT, {"NaN or Inf", "nothing is written"});

  // The run's workers go on: worker 1 prepares step 1, rank 0 applies it
  // (worker 0's prepared push survived every call above), and step 2 runs.
  ASSERT_NO_FATAL_FAILURE(run.Prepare(1, 1));
  ASSERT_NO_FATAL_FAILURE(run.Apply(1));
  ASSERT_NO_FATAL_FAILURE(run.Step(2));
  // The same steps on a cluster that saw no bad call: the same state, bit
  // for bit, and nothing left pending on either.
  for (uint64_t step = 0; step < 3; ++step) {
    ASSERT_NO_FATAL_FAILURE(reference.Step(step));
  }
  for (uint32_t s = 0; s < kServers; ++s) {
    SCOPED_TRACE(absl::StrCat("server ", s));
    const State got = run.Take(s), want = reference.Take(s);
    EXPECT_EQ(got.attempt, kAttempt);
    EXPECT_EQ(got.min_version, 3u);
    EXPECT_EQ(got.pending, 0u);
    EXPECT_EQ(got.prepared, 0u);
    EXPECT_TRUE(got == want) << Describe(got) << " vs " << Describe(want);
    const auto a = run.Exact(s, 3), b = reference.Exact(s, 3);
    ASSERT_EQ(a.size(), 3u);
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(a[i].size(), run.owned(s).size() * 4);
      EXPECT_TRUE(a[i] == b[i]) << "array " << i << " differs";
    }
  }
}

// A client limited to TLS 1.2, with a valid certificate, gets no session
// from a real server process; TLS 1.3 is served.
TEST_F(HostileClientTest, ARealServerRefusesTls12) {
  Cluster c(creds_);
  ASSERT_NO_FATAL_FAILURE(c.Start());
  const std::string out = MakeTempDir("zs_hostile_tls_") + "/out";
  auto handshake = [&](const std::string& version) {
    const std::string cmd = absl::StrCat(
        "echo | timeout 20 openssl s_client -connect ", c.address(0), " ",
        version, " -alpn h2 -CAfile '", creds_, "/ca.pem' -cert '", creds_,
        "/worker.pem' -key '", creds_, "/worker.key' >'", out, "' 2>&1");
    (void)std::system(cmd.c_str());
    return ReadFile(out);
  };
  const std::string v12 = handshake("-tls1_2");
  EXPECT_NE(v12.find("Cipher is (NONE)"), std::string::npos) << v12;
  EXPECT_EQ(v12.find("New, TLSv1.2, Cipher is ECDHE"), std::string::npos)
      << v12;
  const std::string v13 = handshake("-tls1_3");
  EXPECT_NE(v13.find("New, TLSv1.3, Cipher is TLS_"), std::string::npos)
      << v13;
}

}  // namespace
}  // namespace zeroshard::testing
