// PushReceiver's message-order and agreement rules without gRPC: a message
// after the commit, a commit before the header, a stream that ends without
// its commit or without a header, a coefficient at the header that
// conflicts with an earlier push of the step, an invalid coefficient, and an
// attempt older than one seen. Each is INVALID_ARGUMENT (ABORTED for the
// attempt) naming the rule, and leaves the shard's state and its pending
// gradient bytes exactly as they were.
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

TEST_F(PushReceiverOrderTest, OlderAttemptIsAbortedAtTheHeader) {
  PushReceiver newer(shard_);
  ASSERT_TRUE(Feed(newer, Header(0, /*attempt=*/2)).ok());
  PushReceiver older(shard_);
  ExpectRejected(Feed(older, Header(0, /*attempt=*/1)),
                 absl::StatusCode::kAborted, "attempt 1 refused");
  PushReceiver same(shard_);
  EXPECT_TRUE(Feed(same, Header(0, /*attempt=*/2)).ok());
}

}  // namespace
}  // namespace zeroshard
