// Every kind of bad request gets the right status code, a message naming
// what was wrong, changes nothing, and the server keeps serving: ranges,
// dtypes, lengths, coefficients, steps, sizes, cut streams, conflicting
// Inits. (Requests from outside the run, bad manifests and the buffering
// cap: bad_input_run_test.cc.)
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

grpc::Status SetWeights(v1::ShardService::Stub& stub, uint64_t offset,
                        size_t n) {
  grpc::ClientContext c;
  testing::SetDeadline(c, 20000);
  v1::SetWeightsResponse resp;
  auto writer = stub.SetWeights(&c, &resp);
  v1::WeightPiece piece;
  piece.set_offset(offset);
  piece.set_dtype(v1::DTYPE_FP32);
  const std::vector<float> values(n, 0.5f);
  piece.set_data(std::string(reinterpret_cast<const char*>(values.data()),
                             n * sizeof(float)));
  writer->Write(piece);
  writer->WritesDone();
  return writer->Finish();
}

// Exactly one element past each end of the owned range, for a push piece,
// a gather range and a weight piece; the exact fit is served.
TEST_F(BadInputTest, ExactlyOneElementPastEitherEndIsRefused) {
  // A second server owns the upper part of the flat space, so that its
  // range has a lower end to step over.
  testing::TestServer upper = testing::StartServer(1, 2);
  ASSERT_NE(upper.stub, nullptr);
  v1::InitResponse init;
  ASSERT_TRUE(testing::InitServer(*upper.stub,
                                  testing::MakeInit(manifest_, 2, 1, 5, 1024),
                                  &init)
                  .ok());
  const FlatRange high{init.owned_begin(), init.owned_end()};
  ASSERT_EQ(high.begin, owned_.end);
  const std::string why = "outside this server's owned range";
  struct Edge {
    v1::ShardService::Stub* stub;
    uint64_t offset, n;
  };
  const Edge edges[] = {
      {t_.stub.get(), owned_.end - 3, 4},  // [end - 3, end + 1)
      {t_.stub.get(), owned_.end, 1},      // [end, end + 1)
      {upper.stub.get(), high.begin - 1, 4},  // [begin - 1, begin + 3)
      {upper.stub.get(), high.end - 3, 4},
  };
  for (const Edge& e : edges) {
    SCOPED_TRACE(::testing::Message() << "[" << e.offset << ", "
                                      << e.offset + e.n << ")");
    auto check = [&](const std::function<grpc::Status()>& bad) {
      if (e.stub == t_.stub.get()) {
        ExpectRejected(bad, grpc::StatusCode::INVALID_ARGUMENT, why);
        return;
      }
      const v1::InspectResponse was = Inspect(*e.stub);
      const grpc::Status s = bad();
      EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
          << s.error_message();
      EXPECT_NE(s.error_message().find(why), std::string::npos)
          << s.error_message();
      const v1::InspectResponse now = Inspect(*e.stub);
      EXPECT_EQ(now.norms().master(), was.norms().master());
      EXPECT_EQ(now.min_version(), was.min_version());
      EXPECT_EQ(now.pending_grad_bytes(), 0u);
    };
    check([&] {
      return Push(*e.stub, Header(0), {Fp32Piece(e.offset, Grad(e.n))}, 1.0,
                  false);
    });
    check([&] {
      std::string out;
      return testing::GatherBytes(*e.stub, {{e.offset, e.offset + e.n}},
                                  v1::DTYPE_FP32, -1, 20000, &out);
    });
    check([&] { return SetWeights(*e.stub, e.offset, e.n); });
  }
  // The exact fits at both ends of both servers are served.
  for (const auto& [stub, r] :
       {std::pair{t_.stub.get(), FlatRange{owned_.end - 4, owned_.end}},
        std::pair{upper.stub.get(), FlatRange{high.begin, high.begin + 4}},
        std::pair{upper.stub.get(), FlatRange{high.end - 4, high.end}}}) {
    std::string out;
    EXPECT_TRUE(testing::GatherBytes(*stub, {r}, v1::DTYPE_FP32, -1, 20000,
                                     &out)
                    .ok());
    EXPECT_EQ(out.size(), 16u);
    EXPECT_TRUE(SetWeights(*stub, r.begin, r.size()).ok());
  }
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
  // Another run, once this server serves one.
  ExpectRejected(
      [&] {
        v1::InitRequest req = testing::MakeInit(manifest_, 2, 0, 5, 1024);
        req.set_run_id("another-run");
        return testing::InitServer(*t_.stub, req);
      },
      grpc::StatusCode::FAILED_PRECONDITION, "run_id");
  // No run, or one that is not 1-128 printable ASCII characters.
  for (const std::string& bad :
       {std::string(), std::string(129, 'r'), std::string("run\n1")}) {
    ExpectRejected(
        [&] {
          v1::InitRequest req = testing::MakeInit(manifest_, 2, 0, 5, 1024);
          req.set_run_id(bad);
          return testing::InitServer(*t_.stub, req);
        },
        grpc::StatusCode::INVALID_ARGUMENT, "run_id");
  }
  const v1::InspectResponse info = Inspect(*t_.stub);
  EXPECT_EQ(info.run_id(), testing::kTestRunId);
  EXPECT_EQ(info.num_workers(), 1u);
}

}  // namespace
}  // namespace zeroshard
