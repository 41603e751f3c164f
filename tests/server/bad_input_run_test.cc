// Bad input, continued (the fixture: bad_input_fixture.h):
// pushes and ApplySteps from outside the run, a second stream disagreeing
// with the first, retries, message order, uninitialised and wrong servers,
// manifests without init rules or classes, ranks reaching outside their
// partition, and the cap on buffered gradients.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "common/layout.h"
#include "wire/proto_convert.h"
#include "gtest/gtest.h"
#include "tests/server/bad_input_fixture.h"
#include "tests/server/server_test_util.h"

namespace zeroshard {
namespace {

using testing::BadInputTest;
using testing::Fp32Piece;
using testing::Header;
using testing::Inspect;
using testing::Piece;
using testing::Push;
using testing::Snapshot;

// A push that names another run (or none), or comes from a rank that is not
// a worker of the run, is refused at its header: PERMISSION_DENIED, counted,
// nothing buffered or applied. The run's worker then pushes as usual.
TEST_F(BadInputTest, PushFromOutsideTheRunIsPermissionDenied) {
  auto denied = [&] {
    const v1::InspectResponse info = Inspect(*t_.stub);
    auto it = info.counters().errors().find("PERMISSION_DENIED");
    return it == info.counters().errors().end() ? uint64_t{0} : it->second;
  };
  const uint64_t denied_before = denied();
  const std::vector<Piece> pieces = {Fp32Piece(owned_.begin, Grad(128))};
  for (bool prepare : {false, true}) {
    SCOPED_TRACE(prepare ? "prepare" : "plain commit");
    ExpectRejected(
        [&] {
          v1::PushGradHeader h = Header(0);
          h.set_run_id("another-run");
          return Push(*t_.stub, h, pieces, 1.0, false, nullptr, prepare);
        },
        grpc::StatusCode::PERMISSION_DENIED, "names run 'another-run'");
    ExpectRejected(
        [&] {
          v1::PushGradHeader h = Header(0);
          h.clear_run_id();
          return Push(*t_.stub, h, pieces, 1.0, false, nullptr, prepare);
        },
        grpc::StatusCode::PERMISSION_DENIED, "serves run 'test-run'");
    // Ranks 1 and up: this run has one worker.
    for (uint32_t rank : {1u, 7u}) {
      ExpectRejected(
          [&] {
            return Push(*t_.stub, Header(0, rank), pieces, 1.0, false,
                        nullptr, prepare);
          },
          grpc::StatusCode::PERMISSION_DENIED, "is not a member of this run");
    }
  }
  // A header whose coefficient is known (pieces apply as they arrive) is
  // refused before any piece.
  ExpectRejected(
      [&] {
        v1::PushGradHeader h = Header(0, 1);
        h.set_coefficient_known(true);
        h.set_coefficient(1.0);
        return Push(*t_.stub, h, pieces, 1.0, false);
      },
      grpc::StatusCode::PERMISSION_DENIED, "is not a member of this run");
  EXPECT_EQ(denied() - denied_before, 2u * 4 + 1);
  FullStep(0);
  EXPECT_EQ(Inspect(*t_.stub).min_version(), 1u);
}

// The run has one worker; its second stream of the step must agree with its
// first (the coefficient is the step's, whichever stream brings it).
TEST_F(BadInputTest, DifferingCoefficientWithinAStep) {
  const uint64_t half = owned_.size() / 2;
  ASSERT_TRUE(Push(*t_.stub, Header(0, 0),
                   {Fp32Piece(owned_.begin, Grad(half))}, 0.5, false)
                  .ok());
  ExpectRejected(
      [&] {
        return Push(*t_.stub, Header(0, 0),
                    {Fp32Piece(owned_.begin + half,
                               Grad(owned_.size() - half))},
                    0.25, false);
      },
      grpc::StatusCode::INVALID_ARGUMENT, "earlier push of the same step");
  ExpectRejected(
      [&] {
        return Push(*t_.stub, Header(0, 0),
                    {Fp32Piece(owned_.begin + half,
                               Grad(owned_.size() - half))},
                    0.5, true);
      },
      grpc::StatusCode::INVALID_ARGUMENT, "skip");
}

// A rejected commit gives its buffered bytes back before the client sees the
// status: the very next Inspect finds none pending (a race once: the buffers
// were freed when the stream object went away, after Finish).
TEST_F(BadInputTest, RejectedCommitLeavesNothingPendingWhenItReturns) {
  const uint64_t half = owned_.size() / 2;
  ASSERT_TRUE(Push(*t_.stub, Header(0, 0),
                   {Fp32Piece(owned_.begin, Grad(half))}, 0.5, false)
                  .ok());
  for (int i = 0; i < 40; ++i) {
    const grpc::Status s =
        Push(*t_.stub, Header(0, 0),
             {Fp32Piece(owned_.begin + half, Grad(owned_.size() - half))},
             0.25 + i, false);
    ASSERT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    ASSERT_EQ(Inspect(*t_.stub).pending_grad_bytes(), 0u) << "attempt " << i;
  }
}

TEST_F(BadInputTest, PartialRetryAndRetriedDuplicates) {
  ASSERT_TRUE(Push(*t_.stub, Header(0), {Fp32Piece(owned_.begin, Grad(128))},
                   1.0, false)
                  .ok());
  ExpectRejected(
      [&] {
        return Push(*t_.stub, Header(0),
                    {Fp32Piece(owned_.begin + 64, Grad(128))}, 1.0, false);
      },
      grpc::StatusCode::INVALID_ARGUMENT, "partially overlaps");
  const Snapshot before = Take();
  v1::PushGradResponse r;
  ASSERT_TRUE(Push(*t_.stub, Header(0), {Fp32Piece(owned_.begin, Grad(128))},
                   1.0, false, &r)
                  .ok());
  EXPECT_EQ(r.duplicate_elems(), 128u);
  EXPECT_EQ(r.applied_elems(), 0u);
  EXPECT_TRUE(Take() == before);
}

TEST_F(BadInputTest, MessageOrder) {
  auto raw = [&](std::vector<v1::PushGradMessage> msgs) {
    grpc::ClientContext c;
    testing::SetDeadline(c, 20000);
    v1::PushGradResponse resp;
    auto w = t_.stub->PushGrad(&c, &resp);
    for (auto& m : msgs) {
      if (!w->Write(m)) break;
    }
    w->WritesDone();
    return w->Finish();
  };
  v1::PushGradMessage header, piece, commit, empty;
  *header.mutable_header() = Header(0);
  piece.mutable_piece()->set_offset(owned_.begin);
  piece.mutable_piece()->set_dtype(v1::DTYPE_FP32);
  piece.mutable_piece()->set_data(std::string(256, '\0'));
  commit.mutable_commit()->set_coefficient(1.0);
  ExpectRejected([&] { return raw({piece, commit}); },
                 grpc::StatusCode::INVALID_ARGUMENT, "before the header");
  ExpectRejected([&] { return raw({header, header, piece, commit}); },
                 grpc::StatusCode::INVALID_ARGUMENT, "second header");
  ExpectRejected([&] { return raw({header, empty}); },
                 grpc::StatusCode::INVALID_ARGUMENT, "no header, piece or commit");
  v1::PushGradMessage known = header;
  known.mutable_header()->set_coefficient_known(true);
  known.mutable_header()->set_coefficient(1.0);
  ExpectRejected([&] { return raw({known, commit}); },
                 grpc::StatusCode::INVALID_ARGUMENT, "coefficient_known");
}

TEST_F(BadInputTest, NotInitialisedAndWrongServer) {
  testing::TestServer fresh = testing::StartServer(1, 2);
  const grpc::Status s = Push(*fresh.stub, Header(0),
                              {Fp32Piece(0, Grad(8))}, 1.0, false);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(s.error_message().find("Init"), std::string::npos);
  // An Init meant for server 0 reaching server 1.
  const grpc::Status wrong = testing::InitServer(
      *fresh.stub, testing::MakeInit(manifest_, 2, 0, 5, 1024));
  EXPECT_EQ(wrong.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(wrong.error_message().find("--server_index"), std::string::npos);
  EXPECT_FALSE(Inspect(*fresh.stub).initialized());
  const v1::InspectResponse info = Inspect(*fresh.stub);
  EXPECT_EQ(info.counters().errors().at("FAILED_PRECONDITION"), 2u);
}

// The servers match no tensor names: a manifest must state each tensor's
// init rule and parameter class, and one that leaves either unspecified, or
// gives a divisor that is not finite and positive, is refused naming the
// tensor, and the server stays uninitialised.
TEST_F(BadInputTest, AManifestWithoutInitRulesOrClassesIsRefused) {
  testing::TestServer fresh = testing::StartServer(0, 2);
  struct Case {
    const char* what;
    std::function<void(v1::TensorSpec*)> spoil;
    const char* message;
  };
  const Case cases[] = {
      {"no init rule", [](v1::TensorSpec* t) { t->clear_init(); },
       "has no init rule"},
      {"zero divisor",
       [](v1::TensorSpec* t) { t->mutable_init()->set_std_divisor(0); },
       "std_divisor"},
      {"NaN divisor",
       [](v1::TensorSpec* t) {
         t->mutable_init()->set_std_divisor(std::nan(""));
       },
       "std_divisor"},
      {"unknown init kind",
       [](v1::TensorSpec* t) {
         t->mutable_init()->set_kind(static_cast<v1::InitRule::Kind>(9));
       },
       "has no init rule"},
      {"no class",
       [](v1::TensorSpec* t) { t->set_param_class(v1::PARAM_CLASS_UNSPECIFIED); },
       "has no parameter class"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    v1::InitRequest req = testing::MakeInit(manifest_, 2, 0, 5, 1024);
    // The second block's attention matrix (a NORMAL tensor).
    v1::TensorSpec* t = req.mutable_manifest()->mutable_units(2)->mutable_tensors(2);
    ASSERT_EQ(t->init().kind(), v1::InitRule::NORMAL);
    c.spoil(t);
    const grpc::Status s = testing::InitServer(*fresh.stub, req);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(s.error_message().find(c.message), std::string::npos)
        << s.error_message();
    EXPECT_NE(s.error_message().find("h.1.attn.c_attn.weight"),
              std::string::npos)
        << s.error_message();
    EXPECT_FALSE(Inspect(*fresh.stub).initialized());
  }
  // The same manifest whole is served.
  EXPECT_TRUE(testing::InitServer(*fresh.stub,
                                  testing::MakeInit(manifest_, 2, 0, 5, 1024))
                  .ok());
}

// ApplyStep must name the run too: another run's (or none) is
// PERMISSION_DENIED and the prepared push stays held, unapplied; the run's
// own ApplyStep then applies it.
TEST_F(BadInputTest, ApplyStepNamingAnotherRunIsPermissionDenied) {
  ASSERT_TRUE(Push(*t_.stub, Header(0),
                   {Fp32Piece(owned_.begin, Grad(owned_.size()))}, 1.0, false,
                   nullptr, /*prepare=*/true)
                  .ok());
  ASSERT_EQ(Inspect(*t_.stub).prepared_elems(), owned_.size());
  auto apply = [&](const std::string& run_id) {
    grpc::ClientContext context;
    testing::SetDeadline(context, 20000);
    v1::ApplyStepRequest request;
    request.set_step(0);
    request.set_run_id(run_id);
    v1::ApplyStepResponse response;
    return t_.stub->ApplyStep(&context, request, &response);
  };
  ExpectRejected([&] { return apply("another-run"); },
                 grpc::StatusCode::PERMISSION_DENIED,
                 "names run 'another-run'");
  ExpectRejected([&] { return apply(""); },
                 grpc::StatusCode::PERMISSION_DENIED, "serves run 'test-run'");
  const grpc::Status s = apply(testing::kTestRunId);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(Inspect(*t_.stub).min_version(), 1u);
}

// A run of two workers (manifest partition_count 2, num_workers 0 → 2):
// worker r may push only its own part of each unit (FlatLayout::
// WorkerUnitRange). A piece reaching into another rank's part, or across a
// unit boundary into the next unit's part of another rank, is
// PERMISSION_DENIED and fails the whole stream: pieces it had already
// buffered are released, nothing applies.
class TwoWorkerBadInputTest : public BadInputTest {
 protected:
  uint32_t Workers() const override { return 2; }
};

TEST_F(TwoWorkerBadInputTest, RangeOutsideTheRanksPartitionIsPermissionDenied) {
  absl::StatusOr<FlatLayout> layout =
      FlatLayout::Create(FromProto(manifest_), 2, 2);
  ASSERT_TRUE(layout.ok()) << layout.status();
  ASSERT_EQ(Inspect(*t_.stub).num_workers(), 2u);
  // The embedding and the start of block_0 lie on this server.
  const FlatRange w0 = layout->WorkerUnitRange(0, 0);
  const FlatRange w1 = layout->WorkerUnitRange(1, 0);
  const FlatRange next0 = layout->WorkerUnitRange(0, 1);
  ASSERT_EQ(w0.end, w1.begin);
  ASSERT_EQ(w1.end, next0.begin);
  ASSERT_LE(next0.begin + 64, owned_.end);
  ExpectRejected(
      [&] {
        return Push(*t_.stub, Header(0, 1), {Fp32Piece(w0.begin, Grad(64))},
                    1.0, false);
      },
      grpc::StatusCode::PERMISSION_DENIED, "is not worker rank 1's to push");
  ExpectRejected(
      [&] {
        return Push(*t_.stub, Header(0, 0),
                    {Fp32Piece(w0.end - 32, Grad(64))}, 1.0, false);
      },
      grpc::StatusCode::PERMISSION_DENIED, "is not worker rank 0's to push");
  // Rank 1's part of the embedding and on into block_0, which starts with
  // rank 0's part.
  ExpectRejected(
      [&] {
        return Push(*t_.stub, Header(0, 1),
                    {Fp32Piece(w1.begin, Grad(w1.size() + 64))}, 1.0, false);
      },
      grpc::StatusCode::PERMISSION_DENIED, "unit 'block_0'");
  // A good piece first, then a bad one, in one prepared stream.
  ExpectRejected(
      [&] {
        return Push(*t_.stub, Header(0, 1),
                    {Fp32Piece(w1.begin, Grad(w1.size())),
                     Fp32Piece(w0.begin, Grad(w0.size()))},
                    1.0, false, nullptr, /*prepare=*/true);
      },
      grpc::StatusCode::PERMISSION_DENIED, "is not worker rank 1's to push");
  // Each rank pushing its own parts of the owned range completes the step.
  for (uint32_t w = 0; w < 2; ++w) {
    std::vector<Piece> mine;
    for (const FlatRange& part : layout->WorkerRanges(w)) {
      const uint64_t b = std::max(part.begin, owned_.begin);
      const uint64_t e = std::min(part.end, owned_.end);
      if (b < e) mine.push_back(Fp32Piece(b, Grad(e - b)));
    }
    ASSERT_FALSE(mine.empty());
    const grpc::Status s = Push(*t_.stub, Header(0, w), mine, 1.0, false);
    ASSERT_TRUE(s.ok()) << w << ": " << s.error_message();
  }
  EXPECT_EQ(Inspect(*t_.stub).min_version(), 1u);
}

// An Init for the same run with another worker count conflicts too.
TEST_F(TwoWorkerBadInputTest, InitWithAnotherWorkerCountConflicts) {
  ExpectRejected(
      [&] {
        v1::InitRequest req = testing::MakeInit(manifest_, 2, 0, 5, 1024);
        req.set_num_workers(1);
        return testing::InitServer(*t_.stub, req);
      },
      grpc::StatusCode::FAILED_PRECONDITION, "num_workers");
  // num_workers 2 is what 0 meant: the same Init, accepted.
  v1::InitRequest same = testing::MakeInit(manifest_, 2, 0, 5, 1024);
  same.set_num_workers(2);
  const grpc::Status s = testing::InitServer(*t_.stub, same);
  EXPECT_TRUE(s.ok()) << s.error_message();
}

// Gradients buffered for a later commit are capped over all streams: a piece
// that would go over the cap fails its stream with RESOURCE_EXHAUSTED, frees
// what the stream held and applies nothing; other streams are unaffected.
TEST(PendingGradLimitTest, BufferingOverTheCapIsRefusedAndChangesNothing) {
  const v1::ModelManifest manifest = testing::SmallManifest(1);
  // Starts a 1-server cluster with the given cap and initialises it; an
  // empty range on failure.
  auto start = [&](uint64_t cap, testing::TestServer* server) -> FlatRange {
    *server = testing::StartServer(0, 1, "", cap);
    if (server->stub == nullptr) return {};
    v1::InitResponse init;
    if (!testing::InitServer(*server->stub,
                             testing::MakeInit(manifest, 1, 0, 5, 1024), &init)
             .ok()) {
      return {};
    }
    return {init.owned_begin(), init.owned_end()};
  };
  // The default: twice one step's FP32 gradients plus 64 MiB.
  uint64_t owned_elems = 0;
  {
    testing::TestServer d;
    owned_elems = start(0, &d).size();
    ASSERT_GT(owned_elems, 4096u);
    EXPECT_EQ(Inspect(*d.stub).pending_grad_limit_bytes(),
              2 * owned_elems * 4 + (64u << 20));
  }
  // Here: half of one step's FP32 gradients.
  const uint64_t limit = owned_elems * 4 / 2;
  testing::TestServer t;
  const FlatRange owned = start(limit, &t);
  ASSERT_EQ(owned.size(), owned_elems);
  EXPECT_EQ(Inspect(*t.stub).pending_grad_limit_bytes(), limit);
  auto master = [&] {
    std::string out;
    EXPECT_TRUE(testing::GatherBytes(*t.stub, {owned}, v1::DTYPE_FP32, -1,
                                     20000, &out)
                    .ok());
    return out;
  };
  const std::string before = master();
  const uint64_t quarter = owned.size() / 4;

  // One stream holding a quarter of the range, not yet committed.
  grpc::ClientContext held_ctx;
  testing::SetDeadline(held_ctx, 20000);
  v1::PushGradResponse held_resp;
  auto held = testing::OpenHeldPush(*t.stub, &held_ctx, &held_resp,
                                    Header(0, 0), owned.begin,
                                    std::vector<float>(quarter, 0.5f),
                                    quarter * 4);
  ASSERT_NE(held, nullptr);

  // A second stream (of the run's one worker) wanting the other three
  // quarters goes over the cap.
  const uint64_t rest = owned.size() - quarter;
  const grpc::Status over =
      Push(*t.stub, Header(0, 0),
           {testing::Fp32Piece(owned.begin + quarter,
                               std::vector<float>(rest, 0.5f))},
           1.0, false);
  EXPECT_EQ(over.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << over.error_message();
  EXPECT_NE(over.error_message().find("--max_pending_grad_mib"),
            std::string::npos)
      << over.error_message();
  EXPECT_EQ(Inspect(*t.stub).pending_grad_bytes(), quarter * 4);
  EXPECT_EQ(master(), before);

  // The held stream still commits; then the rest fits (applied as pieces
  // arrive when the coefficient comes first: nothing is buffered).
  v1::PushGradMessage m;
  m.mutable_commit()->set_coefficient(1.0);
  ASSERT_TRUE(held->Write(m));
  ASSERT_TRUE(held->WritesDone());
  ASSERT_TRUE(held->Finish().ok());
  EXPECT_EQ(held_resp.applied_elems(), quarter);
  v1::PushGradHeader known = Header(0, 0);
  known.set_coefficient_known(true);
  known.set_coefficient(1.0);
  ASSERT_TRUE(Push(*t.stub, known,
                   {testing::Fp32Piece(owned.begin + quarter,
                                       std::vector<float>(rest, 0.5f))},
                   1.0, false)
                  .ok());
  const v1::InspectResponse after = Inspect(*t.stub);
  EXPECT_EQ(after.pending_grad_bytes(), 0u);
  EXPECT_EQ(after.min_version(), 1u);
  EXPECT_NE(master(), before);
}

}  // namespace
}  // namespace zeroshard
