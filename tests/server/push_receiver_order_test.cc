// PushReceiver's message-order and agreement rules without gRPC: a message
// after the commit, a commit before the header, a stream that ends without
// its commit or without a header, a coefficient at the header that
// conflicts with an earlier push of the step, an invalid coefficient, an
// attempt older than one accepted, and gradients that are not finite. Each
// is INVALID_ARGUMENT (ABORTED for the attempt) naming the rule, and leaves
// the shard's state, its attempt and its pending gradient bytes exactly as
// they were.
#include "server/push_receiver.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/server/server_test_util.h"
#include "tests/server/shard_state_util.h"

namespace zeroshard {
namespace {

class PushReceiverOrderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // One worker, so that worker 0 may push any part of the owned range:
    // the pieces here cut it without regard to the workers' partitions.
    v1::InitRequest init = testing::MakeInit(
        testing::SmallManifest(2), testing::kTestServers, testing::kTestServer,
        /*seed=*/3, testing::kTestChunkElems);
    init.set_num_workers(1);
    auto shard = ModelShard::Create(
        init, {testing::kTestServer, testing::kTestServers}, Placement::kHost);
    ASSERT_TRUE(shard.ok()) << shard.status();
    shard_ = *std::move(shard);
    owned_ = shard_->owned();
    grad_.assign(owned_.size(), 0.125f);
  }

  static v1::PushGradMessage Header(uint64_t step, uint64_t attempt = 0) {
    v1::PushGradMessage m;
    m.mutable_header()->set_step(step);
    m.mutable_header()->set_worker(0);
    m.mutable_header()->set_run_id(testing::kTestRunId);
    m.mutable_header()->set_attempt(attempt);
    return m;
  }
  static v1::PushGradMessage KnownHeader(uint64_t step, double coefficient,
                                         bool skip) {
    v1::PushGradMessage m = Header(step);
    m.mutable_header()->set_coefficient_known(true);
    m.mutable_header()->set_coefficient(coefficient);
    m.mutable_header()->set_skip(skip);
    return m;
  }
  v1::PushGradMessage Piece(FlatRange r) const {
    v1::PushGradMessage m;
    m.mutable_piece()->set_offset(r.begin);
    m.mutable_piece()->set_dtype(v1::DTYPE_FP32);
    m.mutable_piece()->set_data(grad_.data() + (r.begin - owned_.begin),
                                r.size() * sizeof(float));
    return m;
  }
  static v1::PushGradMessage Commit(double coefficient, bool skip = false) {
    v1::PushGradMessage m;
    m.mutable_commit()->set_coefficient(coefficient);
    m.mutable_commit()->set_skip(skip);
    return m;
  }
  // Feeds `m` (a copy: OnMessage moves the payload out).
  static absl::Status Feed(PushReceiver& r, v1::PushGradMessage m) {
    return r.OnMessage(m);
  }
  FlatRange FirstHalf() const {
    return {owned_.begin, owned_.begin + owned_.size() / 2};
  }
  FlatRange SecondHalf() const {
    return {owned_.begin + owned_.size() / 2, owned_.end};
  }
  static void ExpectRejected(const absl::Status& s, absl::StatusCode code,
                             const std::string& words) {
    EXPECT_EQ(s.code(), code) << s;
    EXPECT_NE(s.message().find(words), std::string::npos) << s;
  }

  std::shared_ptr<ModelShard> shard_;
  FlatRange owned_;
  std::vector<float> grad_;
};

TEST_F(PushReceiverOrderTest, AMessageAfterTheCommitIsRefusedAndChangesNothing) {
  PushReceiver r(shard_);
  ASSERT_TRUE(Feed(r, Header(0)).ok());
  ASSERT_TRUE(Feed(r, Piece(FirstHalf())).ok());
  ASSERT_TRUE(Feed(r, Commit(0.5)).ok());
  ASSERT_TRUE(r.finished());
  EXPECT_EQ(r.response().applied_elems(), FirstHalf().size());
  const testing::ShardState after_commit = testing::ReadState(*shard_);
  // A late piece (of elements not yet applied), a second commit, a header.
  ExpectRejected(Feed(r, Piece(SecondHalf())),
                 absl::StatusCode::kInvalidArgument, "after the commit");
  ExpectRejected(Feed(r, Commit(0.5)), absl::StatusCode::kInvalidArgument,
                 "after the commit");
  ExpectRejected(Feed(r, Header(0)), absl::StatusCode::kInvalidArgument,
                 "after the commit");
  // The decoded-piece path refuses it too.
  PushGradPieceInput in;
  auto bytes = std::make_shared<std::vector<float>>(SecondHalf().size(), 1.0f);
  in.offset = SecondHalf().begin;
  in.dtype = v1::DTYPE_FP32;
  in.bytes = bytes->size() * sizeof(float);
  in.segments.emplace_back(reinterpret_cast<const uint8_t*>(bytes->data()),
                           in.bytes);
  in.owner = bytes;
  ExpectRejected(r.OnPiece(std::move(in)), absl::StatusCode::kInvalidArgument,
                 "after the commit");
  EXPECT_EQ(testing::Diff(testing::ReadState(*shard_), after_commit), "");
  EXPECT_EQ(r.response().applied_elems(), FirstHalf().size());
  EXPECT_EQ(shard_->store().pending_grad_bytes(), 0u);
  EXPECT_TRUE(r.OnEndOfStream().ok());  // the stream was complete
}

TEST_F(PushReceiverOrderTest, CommitOrPieceBeforeTheHeaderIsRefused) {
  const testing::ShardState before = testing::ReadState(*shard_);
  {
    PushReceiver r(shard_);
    ExpectRejected(Feed(r, Commit(1.0)), absl::StatusCode::kInvalidArgument,
                   "commit arrived before the header");
    EXPECT_FALSE(r.finished());
  }
  {
    PushReceiver r(shard_);
    ExpectRejected(Feed(r, Piece(FirstHalf())),
                   absl::StatusCode::kInvalidArgument, "before the header");
  }
  {
    PushReceiver r(shard_);
    ExpectRejected(r.OnEndOfStream(), absl::StatusCode::kInvalidArgument,
                   "without a header");
  }
  EXPECT_EQ(testing::Diff(testing::ReadState(*shard_), before), "");
  EXPECT_EQ(shard_->store().pending_grad_bytes(), 0u);
}

TEST_F(PushReceiverOrderTest, StreamEndingBeforeItsCommitAppliesNothing) {
  const testing::ShardState before = testing::ReadState(*shard_);
  PushReceiver r(shard_);
  ASSERT_TRUE(Feed(r, Header(0)).ok());
  ASSERT_TRUE(Feed(r, Piece(FirstHalf())).ok());
  EXPECT_EQ(shard_->store().pending_grad_bytes(),
            FirstHalf().size() * sizeof(float));
  ExpectRejected(r.OnEndOfStream(), absl::StatusCode::kInvalidArgument,
                 "ended before its commit");
  EXPECT_FALSE(r.finished());
  EXPECT_EQ(shard_->store().pending_grad_bytes(), 0u);
  EXPECT_EQ(testing::Diff(testing::ReadState(*shard_), before), "");
}

// The header carries the coefficient (pieces apply as they arrive): one
// that disagrees with an earlier push of the same step is refused at the
// header, before any piece could apply.
TEST_F(PushReceiverOrderTest, CoefficientConflictAtTheHeaderIsRefused) {
  {
    PushReceiver first(shard_);
    ASSERT_TRUE(Feed(first, Header(0)).ok());
    ASSERT_TRUE(Feed(first, Piece(FirstHalf())).ok());
    ASSERT_TRUE(Feed(first, Commit(0.5)).ok());
  }
  const testing::ShardState before = testing::ReadState(*shard_);
  for (const auto& [coefficient, skip] :
       {std::pair{0.25, false}, std::pair{0.5, true}}) {
    SCOPED_TRACE(::testing::Message() << coefficient << " skip " << skip);
    PushReceiver r(shard_);
    ExpectRejected(Feed(r, KnownHeader(0, coefficient, skip)),
                   absl::StatusCode::kInvalidArgument,
                   "earlier push of the same step");
    // Nothing was accepted: a piece is still "before the header".
    ExpectRejected(Feed(r, Piece(SecondHalf())),
                   absl::StatusCode::kInvalidArgument, "before the header");
  }
  EXPECT_EQ(testing::Diff(testing::ReadState(*shard_), before), "");
  // The agreeing coefficient at the header applies the rest at once.
  PushReceiver agree(shard_);
  ASSERT_TRUE(Feed(agree, KnownHeader(0, 0.5, false)).ok());
  ASSERT_TRUE(Feed(agree, Piece(SecondHalf())).ok());
  EXPECT_EQ(agree.response().applied_elems(), SecondHalf().size());
  EXPECT_TRUE(agree.OnEndOfStream().ok());
  EXPECT_EQ(shard_->tracker().Summarize().min_version, 1u);
}

TEST_F(PushReceiverOrderTest, InvalidCoefficientIsRefusedAtHeaderAndCommit) {
  const testing::ShardState before = testing::ReadState(*shard_);
  for (double bad : {std::numeric_limits<double>::quiet_NaN(),
                     std::numeric_limits<double>::infinity(), -1.0}) {
    SCOPED_TRACE(bad);
    PushReceiver known(shard_);
    EXPECT_EQ(Feed(known, KnownHeader(0, bad, false)).code(),
              absl::StatusCode::kInvalidArgument);
    PushReceiver later(shard_);
    ASSERT_TRUE(Feed(later, Header(0)).ok());
    ASSERT_TRUE(Feed(later, Piece(FirstHalf())).ok());
    EXPECT_EQ(Feed(later, Commit(bad)).code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_FALSE(later.finished());
  }
  EXPECT_EQ(testing::Diff(testing::ReadState(*shard_), before), "");
  EXPECT_EQ(shard_->store().pending_grad_bytes(), 0u);
}

TEST_F(PushReceiverOrderTest, OlderAttemptIsAbortedOnceANewerOneWasAccepted) {
  // A newer attempt's header alone records nothing: its stream may still be
  // refused.
  PushReceiver header_only(shard_);
  ASSERT_TRUE(Feed(header_only, Header(0, /*attempt=*/2)).ok());
  EXPECT_EQ(shard_->tracker().attempt(), 0u);
  // Its accepted commit does.
  PushReceiver newer(shard_);
  ASSERT_TRUE(Feed(newer, Header(0, /*attempt=*/2)).ok());
  ASSERT_TRUE(Feed(newer, Piece(FirstHalf())).ok());
  ASSERT_TRUE(Feed(newer, Commit(0.5)).ok());
  EXPECT_EQ(shard_->tracker().attempt(), 2u);
  PushReceiver older(shard_);
  ExpectRejected(Feed(older, Header(0, /*attempt=*/1)),
                 absl::StatusCode::kAborted, "attempt 1 refused");
  PushReceiver same(shard_);
  EXPECT_TRUE(Feed(same, Header(0, /*attempt=*/2)).ok());
}

TEST_F(PushReceiverOrderTest, ARefusedStreamOfANewerAttemptKeepsTheAttempt) {
  const testing::ShardState before = testing::ReadState(*shard_);
  // A piece outside the owned range, a step ahead of the chunks: each
  // refused after a header of attempt 5.
  PushReceiver outside(shard_);
  ASSERT_TRUE(Feed(outside, Header(0, /*attempt=*/5)).ok());
  v1::PushGradMessage past;  // two elements, the second past the end
  past.mutable_piece()->set_offset(owned_.end - 1);
  past.mutable_piece()->set_dtype(v1::DTYPE_FP32);
  past.mutable_piece()->set_data(std::string(2 * sizeof(float), '\0'));
  ExpectRejected(Feed(outside, past), absl::StatusCode::kInvalidArgument,
                 "outside");
  PushReceiver ahead(shard_);
  ASSERT_TRUE(Feed(ahead, Header(3, /*attempt=*/5)).ok());
  ASSERT_TRUE(Feed(ahead, Piece(FirstHalf())).ok());
  ExpectRejected(Feed(ahead, Commit(0.5)), absl::StatusCode::kAborted,
                 "ahead");
  ahead.Discard();
  EXPECT_EQ(shard_->tracker().attempt(), 0u);
  EXPECT_EQ(testing::Diff(testing::ReadState(*shard_), before), "");
  EXPECT_EQ(shard_->store().pending_grad_bytes(), 0u);
  // The run's own attempt goes on.
  PushReceiver real(shard_);
  ASSERT_TRUE(Feed(real, Header(0)).ok());
  ASSERT_TRUE(Feed(real, Piece(FirstHalf())).ok());
  EXPECT_TRUE(Feed(real, Commit(0.5)).ok());
}

// A gradient that would make the state non-finite is refused whole,
// naming the tensor and element, unless the step is skipped: NaN and Inf
// in FP32 and BF16, buffered (commit, prepare) or applied as it arrives
// (coefficient at the header), and a finite value that the coefficient
// scales past the bound.
TEST_F(PushReceiverOrderTest, NonFiniteGradientsAreRefusedUnlessSkipped) {
  const testing::ShardState before = testing::ReadState(*shard_);
  const float bad[] = {std::numeric_limits<float>::quiet_NaN(),
                       std::numeric_limits<float>::infinity(),
                       -std::numeric_limits<float>::infinity()};
  const uint64_t at = owned_.begin + owned_.size() / 2 + 7;  // second half
  float& g = grad_[at - owned_.begin];
  // Buffered for a commit, or for a prepare: refused whole at the commit.
  for (int mode = 0; mode < 2; ++mode) {
    for (float v : bad) {
      SCOPED_TRACE(::testing::Message() << "value " << v << " mode " << mode);
      g = v;
      PushReceiver r(shard_);
      ASSERT_TRUE(Feed(r, Header(0)).ok());
      ASSERT_TRUE(Feed(r, Piece(FirstHalf())).ok());
      ASSERT_TRUE(Feed(r, Piece(SecondHalf())).ok());
      v1::PushGradMessage commit = Commit(0.5);
      commit.mutable_commit()->set_prepare(mode == 1);
      const absl::Status s = Feed(r, commit);
      ExpectRejected(s, absl::StatusCode::kInvalidArgument, "NaN or Inf");
      EXPECT_NE(s.message().find(shard_->DescribeElement(at)),
                std::string::npos)
          << s;
      EXPECT_NE(s.message().find("of tensor '"), std::string::npos) << s;
      r.Discard();
      EXPECT_EQ(testing::Diff(testing::ReadState(*shard_), before), "");
      EXPECT_EQ(shard_->store().pending_grad_bytes(), 0u);
      EXPECT_EQ(shard_->prepared().elems, 0u);
    }
  }
  // Finite, but too large once scaled: |g| = 2^40 with coefficient 2^21.
  g = std::ldexp(1.0f, 40);
  PushReceiver large(shard_);
  ASSERT_TRUE(Feed(large, Header(0)).ok());
  ASSERT_TRUE(Feed(large, Piece(FirstHalf())).ok());
  ASSERT_TRUE(Feed(large, Piece(SecondHalf())).ok());
  ExpectRejected(Feed(large, Commit(std::ldexp(1.0, 21))),
                 absl::StatusCode::kInvalidArgument, "past 2^60");
  large.Discard();
  EXPECT_EQ(testing::Diff(testing::ReadState(*shard_), before), "");
  // ... and accepted with a coefficient that keeps it in bounds.
  PushReceiver fine(shard_);
  ASSERT_TRUE(Feed(fine, Header(0)).ok());
  ASSERT_TRUE(Feed(fine, Piece(FirstHalf())).ok());
  ASSERT_TRUE(Feed(fine, Piece(SecondHalf())).ok());
  ASSERT_TRUE(Feed(fine, Commit(std::ldexp(1.0, 19))).ok());
  const testing::ShardState after_fine = testing::ReadState(*shard_);
  // Skipped (step 1), NaN is fine: nothing of it applies.
  g = std::numeric_limits<float>::quiet_NaN();
  PushReceiver skipped(shard_);
  ASSERT_TRUE(Feed(skipped, Header(1)).ok());
  ASSERT_TRUE(Feed(skipped, Piece(FirstHalf())).ok());
  ASSERT_TRUE(Feed(skipped, Piece(SecondHalf())).ok());
  ASSERT_TRUE(Feed(skipped, Commit(0, /*skip=*/true)).ok());
  for (int a = 0; a < 3; ++a) {
    EXPECT_EQ(testing::FirstDifference(testing::ReadState(*shard_).arrays[a],
                                       after_fine.arrays[a]),
              SIZE_MAX)
        << testing::kArrayNames[a];
  }
  // Applied as they arrive (coefficient at the header, step 2): the finite
  // piece applies, the one with NaN or Inf is refused.
  for (float v : bad) {
    g = v;
    PushReceiver r(shard_);
    ASSERT_TRUE(Feed(r, KnownHeader(2, 0.5, false)).ok());
    ASSERT_TRUE(Feed(r, Piece(FirstHalf())).ok());
    const testing::ShardState first_half = testing::ReadState(*shard_);
    ExpectRejected(Feed(r, Piece(SecondHalf())),
                   absl::StatusCode::kInvalidArgument, "NaN or Inf");
    r.Discard();
    EXPECT_EQ(testing::Diff(testing::ReadState(*shard_), first_half), "");
  }
  EXPECT_EQ(shard_->store().pending_grad_bytes(), 0u);
}

}  // namespace
}  // namespace zeroshard
