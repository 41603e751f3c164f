// The two-phase step commit over gRPC: PushGrad streams whose commit carries
// `prepare` answer OK with nothing applied, Inspect shows what is held
// (prepared_elems / prepared_step / prepared_attempt, pending bytes), and
// ApplyStep applies it: the master equals an in-process reference shard
// that got the same pieces in one plain push, bit for bit. ApplyStep before
// every worker prepared, or on an uninitialised server, is
// FAILED_PRECONDITION.
#include <algorithm>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "gtest/gtest.h"
#include "server/model_shard.h"
#include "tests/server/server_test_util.h"

namespace zeroshard {
namespace {

using testing::Piece;

grpc::Status ApplyStep(v1::ShardService::Stub& stub, uint64_t step,
                       uint64_t attempt, v1::ApplyStepResponse* response) {
  grpc::ClientContext context;
  testing::SetDeadline(context, 20000);
  v1::ApplyStepRequest request;
  request.set_step(step);
  request.set_attempt(attempt);
  request.set_run_id(testing::kTestRunId);
  return stub.ApplyStep(&context, request, response);
}

// Each worker's part of every unit (layout.WorkerRanges), cut at random
// points into pieces, FP32 or BF16 at random: together they tile the flat
// space once, and worker w pushes only its own partition.
std::vector<std::vector<Piece>> MakeWorkerPieces(std::mt19937_64& rng,
                                                 const FlatLayout& layout) {
  const uint32_t workers = layout.num_workers();
  std::vector<std::vector<Piece>> out(workers);
  std::normal_distribution<float> g(0, 1);
  for (uint32_t w = 0; w < workers; ++w) {
    for (const FlatRange& part : layout.WorkerRanges(w)) {
      std::vector<uint64_t> cuts = {part.begin, part.end};
      for (int i = 0; i < 3; ++i) {
        cuts.push_back(part.begin + rng() % part.size());
      }
      std::sort(cuts.begin(), cuts.end());
      cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
      for (size_t i = 0; i + 1 < cuts.size(); ++i) {
        const uint64_t n = cuts[i + 1] - cuts[i];
        if (rng() % 2) {
          std::vector<uint16_t> v(n);
          for (auto& x : v) x = FloatToBf16(g(rng));
          out[w].push_back(testing::Bf16Piece(cuts[i], v));
        } else {
          std::vector<float> v(n);
          for (auto& x : v) x = g(rng);
          out[w].push_back(testing::Fp32Piece(cuts[i], v));
        }
      }
    }
  }
  return out;
}

std::vector<GradPiece> AsGradPieces(const std::vector<std::vector<Piece>>& w) {
  std::vector<GradPiece> out;
  for (const auto& pieces : w) {
    for (const Piece& p : pieces) {
      const bool bf16 = p.dtype == v1::DTYPE_BF16;
      const uint64_t n = p.data.size() / (bf16 ? 2 : 4);
      out.push_back({{p.offset, p.offset + n},
                     bf16 ? DType::kBf16 : DType::kFp32, p.data.data()});
    }
  }
  return out;
}

std::vector<float> RefMaster(const ModelShard& shard) {
  std::vector<float> out(shard.owned().size());
  EXPECT_TRUE(shard.store().Read(shard.owned(), DType::kFp32, out.data()).ok());
  return out;
}

TEST(ApplyStepRpcTest, PreparedPushesApplyOnApplyStepBitForBit) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937_64 rng(seed);
  testing::TestServer t = testing::StartServer(0, 1);
  ASSERT_NE(t.stub, nullptr);
  const int workers = 2 + rng() % 3;
  // One partition per worker (num_workers 0: the manifest's count).
  const v1::InitRequest init = testing::MakeInit(
      testing::SmallManifest(workers), 1, 0, seed % 1000, 512);
  ASSERT_TRUE(testing::InitServer(*t.stub, init).ok());
  auto ref = ModelShard::Create(init, {0, 1}, Placement::kHost);
  ASSERT_TRUE(ref.ok()) << ref.status();
  ASSERT_EQ((*ref)->layout().num_workers(), static_cast<uint32_t>(workers));
  const FlatRange owned = (*ref)->owned();
  const uint64_t attempt = rng() % 4;

  for (uint64_t step = 0; step < 2; ++step) {
    SCOPED_TRACE(absl::StrCat("step ", step));
    const double coef = std::uniform_real_distribution<double>(0.1, 2)(rng);
    const auto pieces = MakeWorkerPieces(rng, (*ref)->layout());
    const std::vector<float> before = testing::GatherFp32(*t.stub, owned);
    uint64_t bytes = 0;
    for (int w = 0; w < workers; ++w) {
      v1::PushGradHeader h = testing::Header(step, w);
      h.set_attempt(attempt);
      v1::PushGradResponse resp;
      grpc::Status s = testing::Push(*t.stub, h, pieces[w], coef,
                                     /*skip=*/false, &resp, /*prepare=*/true);
      ASSERT_TRUE(s.ok()) << w << ": " << s.error_message();
      EXPECT_EQ(resp.applied_elems(), 0u);
      EXPECT_EQ(resp.duplicate_elems(), 0u);
      EXPECT_EQ(resp.chunks_completed(), 0u);
      for (const Piece& p : pieces[w]) bytes += p.data.size();
      if (w + 1 < workers) {
        // Not every worker yet: nothing applies.
        v1::ApplyStepResponse early;
        grpc::Status e = ApplyStep(*t.stub, step, attempt, &early);
        EXPECT_EQ(e.error_code(), grpc::StatusCode::FAILED_PRECONDITION)
            << e.error_message();
      }
    }
    v1::InspectResponse held = testing::Inspect(*t.stub);
    EXPECT_EQ(held.prepared_elems(), owned.size());
    EXPECT_EQ(held.prepared_step(), step);
    EXPECT_EQ(held.prepared_attempt(), attempt);
    EXPECT_EQ(held.pending_grad_bytes(), bytes);
    EXPECT_EQ(held.max_version(), step);
    EXPECT_EQ(held.partial_chunks(), 0u);
    const std::vector<float> still = testing::GatherFp32(*t.stub, owned);
    EXPECT_EQ(std::memcmp(still.data(), before.data(), still.size() * 4), 0)
        << "a prepared push changed the weights";

    v1::ApplyStepResponse applied;
    grpc::Status s = ApplyStep(*t.stub, step, attempt, &applied);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(applied.applied_elems(), owned.size());
    EXPECT_EQ(applied.pushes(), static_cast<uint32_t>(workers));
    EXPECT_EQ(applied.chunks_completed(), (*ref)->store().num_chunks());
    const auto grads = AsGradPieces(pieces);
    auto r = (*ref)->ApplyPush(step, {coef, false}, grads);
    ASSERT_TRUE(r.ok()) << r.status();
    const std::vector<float> got = testing::GatherFp32(*t.stub, owned);
    const std::vector<float> want = RefMaster(**ref);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0)
        << "the master differs from the reference";
    const v1::InspectResponse after = testing::Inspect(*t.stub);
    EXPECT_EQ(after.prepared_elems(), 0u);
    EXPECT_EQ(after.pending_grad_bytes(), 0u);
    EXPECT_EQ(after.min_version(), step + 1);
    EXPECT_EQ(after.adam_step(), step + 1);
    // Again: OK, nothing applied.
    v1::ApplyStepResponse again;
    s = ApplyStep(*t.stub, step, attempt, &again);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(again.applied_elems(), 0u);
  }
  // An older attempt is refused.
  if (attempt > 0) {
    v1::ApplyStepResponse old;
    grpc::Status s = ApplyStep(*t.stub, 2, attempt - 1, &old);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::ABORTED) << s.error_message();
  }
  t.server->Shutdown();
}

TEST(ApplyStepRpcTest, UninitialisedServerIsFailedPrecondition) {
  testing::TestServer t = testing::StartServer(0, 1);
  ASSERT_NE(t.stub, nullptr);
  v1::ApplyStepResponse r;
  grpc::Status s = ApplyStep(*t.stub, 0, 0, &r);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION)
      << s.error_message();
  EXPECT_NE(s.error_message().find("Init"), std::string::npos)
      << s.error_message();
  t.server->Shutdown();
}

}  // namespace
}  // namespace zeroshard
