// Every kind of bad input gets the right status code, a message naming what
// was wrong, changes nothing, and the server keeps serving.
#include <cmath>
#include <cstring>
#include <limits>
#include <thread>

#include "absl/time/clock.h"
#include "wire/proto_convert.h"
#include "gtest/gtest.h"
#include "tests/server/server_test_util.h"

namespace zeroshard {
namespace {

using testing::Fp32Piece;
using testing::Header;
using testing::Inspect;
using testing::Piece;
using testing::Push;

// What must not change: every byte of master and mirror, versions, Adam
// step, norms of m and v, buffered bytes.
struct Snapshot {
  std::string master, mirror;
  uint64_t min_version, max_version, adam_step, pending;
  double m_norm, v_norm;
  bool operator==(const Snapshot&) const = default;
};

class BadInputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    manifest_ = testing::SmallManifest(1);
    // Server 0 of 2: the upper half of the flat space belongs to server 1.
    t_ = testing::StartServer(0, 2);
    ASSERT_NE(t_.stub, nullptr);
    v1::InitResponse init;
    ASSERT_TRUE(testing::InitServer(
                    *t_.stub, testing::MakeInit(manifest_, 2, 0, 5, 1024), &init)
                    .ok());
    owned_ = {init.owned_begin(), init.owned_end()};
    total_ = init.total_elems();
    ASSERT_GT(owned_.size(), 3000u);
  }

  Snapshot Take() {
    Snapshot s;
    EXPECT_TRUE(testing::GatherBytes(*t_.stub, {owned_}, v1::DTYPE_FP32, -1,
                                     20000, &s.master)
                    .ok());
    EXPECT_TRUE(testing::GatherBytes(*t_.stub, {owned_}, v1::DTYPE_BF16, -1,
                                     20000, &s.mirror)
                    .ok());
    const v1::InspectResponse info = Inspect(*t_.stub);
    s.min_version = info.min_version();
    s.max_version = info.max_version();
    s.adam_step = info.adam_step();
    s.pending = info.pending_grad_bytes();
    s.m_norm = info.norms().exp_avg();
    s.v_norm = info.norms().exp_avg_sq();
    return s;
  }

  // Runs `bad`, expects `code` and `needle` in the message, no change, and
  // a server that still serves (a good push afterwards on a fresh range is
  // not needed: Take() itself gathers and inspects).
  void ExpectRejected(const std::function<grpc::Status()>& bad,
                      grpc::StatusCode code, const std::string& needle) {
    const Snapshot before = Take();
    const grpc::Status s = bad();
    EXPECT_EQ(s.error_code(), code) << s.error_message();
    EXPECT_NE(s.error_message().find(needle), std::string::npos)
        << "message '" << s.error_message() << "' does not name '" << needle
        << "'";
    EXPECT_TRUE(Take() == before) << "state changed";
  }

  std::vector<float> Grad(size_t n, float value = 0.25f) {
    return std::vector<float>(n, value);
  }
  // A complete step over the owned range.
  void FullStep(uint64_t step) {
    ASSERT_TRUE(Push(*t_.stub, Header(step),
                     {Fp32Piece(owned_.begin, Grad(owned_.size()))}, 1.0,
                     false)
                    .ok());
  }

  v1::ModelManifest manifest_;
  testing::TestServer t_;
  FlatRange owned_;
  uint64_t total_ = 0;
};

TEST_F(BadInputTest, RangeOutsideTheOwnedSlice) {
  ExpectRejected(
      [&] {
        return Push(*t_.stub, Header(0), {Fp32Piece(owned_.end - 2, Grad(4))},
                    1.0, false);
      },
      grpc::StatusCode::INVALID_ARGUMENT, "outside this server's owned range");
  ExpectRejected(
      [&] {
        std::string out;
        return testing::GatherBytes(*t_.stub, {{owned_.end, owned_.end + 64}},
                                    v1::DTYPE_BF16, -1, 20000, &out);
      },
      grpc::StatusCode::INVALID_ARGUMENT, "outside");
}

TEST_F(BadInputTest, OverlappingRangesInOnePush) {
  ExpectRejected(
      [&] {
        return Push(*t_.stub, Header(0),
                    {Fp32Piece(owned_.begin, Grad(100)),
                     Fp32Piece(owned_.begin + 50, Grad(100))},
                    1.0, false);
      },
      grpc::StatusCode::INVALID_ARGUMENT, "overlaps another piece");
  ExpectRejected(
      [&] {
        std::string out;
        return testing::GatherBytes(
            *t_.stub, {{owned_.begin, owned_.begin + 10}, {owned_.begin + 5, owned_.begin + 20}},
            v1::DTYPE_BF16, -1, 20000, &out);
      },
      grpc::StatusCode::INVALID_ARGUMENT, "overlap");
}

TEST_F(BadInputTest, WrongDtype) {
  ExpectRejected(
      [&] {
        Piece p = Fp32Piece(owned_.begin, Grad(8));
        p.dtype = v1::DTYPE_FP16;
        return Push(*t_.stub, Header(0), {p}, 1.0, false);
      },
      grpc::StatusCode::INVALID_ARGUMENT, "DTYPE_FP16");
  ExpectRejected(
      [&] {
        Piece p = Fp32Piece(owned_.begin, Grad(8));
        p.dtype = v1::DTYPE_UNSPECIFIED;
        return Push(*t_.stub, Header(0), {p}, 1.0, false);
      },
      grpc::StatusCode::INVALID_ARGUMENT, "dtype");
  ExpectRejected(
      [&] {
        std::string out;
        return testing::GatherBytes(*t_.stub, {{owned_.begin, owned_.begin + 8}},
                                    v1::DTYPE_FP16, -1, 20000, &out);
      },
      grpc::StatusCode::INVALID_ARGUMENT, "dtype");
}

TEST_F(BadInputTest, WrongLength) {
  ExpectRejected(
      [&] {
        Piece p = Fp32Piece(owned_.begin, Grad(8));
        p.data.resize(30);  // 7.5 FP32 elements
        return Push(*t_.stub, Header(0), {p}, 1.0, false);
      },
      grpc::StatusCode::INVALID_ARGUMENT, "not a positive multiple of 4");
}

TEST_F(BadInputTest, NonFiniteOrNegativeCoefficient) {
  for (double c : {std::nan(""), std::numeric_limits<double>::infinity(),
                   -1.0, 1e300}) {
    ExpectRejected(
        [&] {
          return Push(*t_.stub, Header(0),
                      {Fp32Piece(owned_.begin, Grad(owned_.size()))}, c,
                      false);
        },
        grpc::StatusCode::INVALID_ARGUMENT, "coefficient");
  }
  ExpectRejected(
      [&] {
        v1::PushGradHeader h = Header(0);
        h.set_coefficient_known(true);
        h.set_coefficient(std::nan(""));
        return Push(*t_.stub, h, {Fp32Piece(owned_.begin, Grad(64))}, 0,
                    false);
      },
      grpc::StatusCode::INVALID_ARGUMENT, "coefficient");
}

TEST_F(BadInputTest, StaleAndFutureSteps) {
  FullStep(0);
  FullStep(1);
  ExpectRejected(
      [&] {
        return Push(*t_.stub, Header(0),
                    {Fp32Piece(owned_.begin, Grad(owned_.size()))}, 1.0,
                    false);
      },
      grpc::StatusCode::ABORTED, "step 0 is stale");
  ExpectRejected(
      [&] {
        return Push(*t_.stub, Header(7), {Fp32Piece(owned_.begin, Grad(64))},
                    1.0, false);
      },
      grpc::StatusCode::ABORTED, "step 7 is ahead");
}

TEST_F(BadInputTest, OversizedMessage) {
  const size_t n = (size_t{4} << 20) / 4 + 1;  // 4 bytes over the limit
  ExpectRejected(
      [&] {
        return Push(*t_.stub, Header(0), {Fp32Piece(owned_.begin, Grad(n))},
                    1.0, false);
      },
      grpc::StatusCode::INVALID_ARGUMENT, "more than the limit");
  // Far over it: gRPC refuses the message (server limit 8 MiB) before it is
  // buffered or parsed.
  const size_t huge = (size_t{9} << 20) / 4;
  ExpectRejected(
      [&] {
        return Push(*t_.stub, Header(0), {Fp32Piece(owned_.begin, Grad(huge))},
                    1.0, false);
      },
      grpc::StatusCode::RESOURCE_EXHAUSTED, "larger than max");
}

TEST_F(BadInputTest, StreamCutOffBeforeCommitAppliesNothing) {
  const Snapshot before = Take();
  {
    grpc::ClientContext c;
    testing::SetDeadline(c, 20000);
    v1::PushGradResponse resp;
    const std::vector<float> g = Grad(owned_.size());
    // Held until the server has buffered the piece: otherwise the wait below
    // could see 0 pending before it is buffered, and Take() catch it.
    auto w = testing::OpenHeldPush(*t_.stub, &c, &resp, Header(0),
                                   owned_.begin, g, g.size() * 4);
    ASSERT_NE(w, nullptr);
    c.TryCancel();
    EXPECT_EQ(w->Finish().error_code(), grpc::StatusCode::CANCELLED);
  }
  // The server learns of the cancel asynchronously: wait (bounded) for the
  // buffers to be freed.
  const absl::Time limit = absl::Now() + absl::Seconds(20);
  while (Inspect(*t_.stub).pending_grad_bytes() != 0 && absl::Now() < limit) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_TRUE(Take() == before);
  // Half-closing without the commit applies nothing either.
  grpc::ClientContext c;
  testing::SetDeadline(c, 20000);
  v1::PushGradResponse resp;
  auto w = t_.stub->PushGrad(&c, &resp);
  v1::PushGradMessage m;
  *m.mutable_header() = Header(0);
  ASSERT_TRUE(w->Write(m));
  w->WritesDone();
  const grpc::Status s = w->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("ended before its commit"), std::string::npos);
  EXPECT_TRUE(Take() == before);
  // And the same step then goes through.
  FullStep(0);
  EXPECT_EQ(Inspect(*t_.stub).min_version(), 1u);
}

TEST_F(BadInputTest, InitConflictingWithExistingState) {
  ExpectRejected(
      [&] {
        return testing::InitServer(*t_.stub,
                                   testing::MakeInit(manifest_, 2, 0, 6, 1024));
      },
      grpc::StatusCode::FAILED_PRECONDITION, "init differs");
  ExpectRejected(
      [&] {
        v1::InitRequest req = testing::MakeInit(manifest_, 2, 0, 5, 1024);
        req.mutable_optimizer()->set_lr(0.5);
        return testing::InitServer(*t_.stub, req);
      },
      grpc::StatusCode::FAILED_PRECONDITION, "optimizer differs");
}

TEST_F(BadInputTest, DifferingCoefficientWithinAStep) {
  const uint64_t half = owned_.size() / 2;
  ASSERT_TRUE(Push(*t_.stub, Header(0, 0),
                   {Fp32Piece(owned_.begin, Grad(half))}, 0.5, false)
                  .ok());
  ExpectRejected(
      [&] {
        return Push(*t_.stub, Header(0, 1),
                    {Fp32Piece(owned_.begin + half,
                               Grad(owned_.size() - half))},
                    0.25, false);
      },
      grpc::StatusCode::INVALID_ARGUMENT, "earlier push of the same step");
  ExpectRejected(
      [&] {
        return Push(*t_.stub, Header(0, 1),
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
        Push(*t_.stub, Header(0, 1),
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

  // A second stream wanting the other three quarters goes over the cap.
  const uint64_t rest = owned.size() - quarter;
  const grpc::Status over =
      Push(*t.stub, Header(0, 1),
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
  v1::PushGradHeader known = Header(0, 1);
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
