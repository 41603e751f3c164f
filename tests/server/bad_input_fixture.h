// The fixture of the bad-input tests (bad_input_test.cc: malformed and
// out-of-range requests; bad_input_run_test.cc: requests from outside the
// run, bad manifests, the buffering cap): a server initialised as server 0
// of 2, a snapshot of everything a refusal must leave unchanged, and
// ExpectRejected, which checks the code, the message and that nothing
// changed.
#ifndef ZEROSHARD_TESTS_SERVER_BAD_INPUT_FIXTURE_H_
#define ZEROSHARD_TESTS_SERVER_BAD_INPUT_FIXTURE_H_

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/layout.h"
#include "gtest/gtest.h"
#include "tests/server/server_test_util.h"

namespace zeroshard::testing {

// What must not change: every byte of master and mirror, versions, Adam
// step, the norm of every optimizer state slot, buffered bytes, prepared
// elements, partly applied chunks, the highest attempt seen.
struct Snapshot {
  std::string master, mirror;
  uint64_t min_version, max_version, adam_step, pending, prepared,
      partial_chunks, attempt;
  std::map<std::string, double> state_norms;
  bool operator==(const Snapshot&) const = default;
};

class BadInputTest : public ::testing::Test {
 protected:
  // The manifest's partition count, and so the run's number of workers
  // (InitRequest.num_workers 0).
  virtual uint32_t Workers() const { return 1; }

  void SetUp() override {
    manifest_ = testing::SmallManifest(Workers());
    // Server 0 of 2: the upper half of the flat space belongs to server 1.
    t_ = testing::StartServer(0, 2);
    ASSERT_NE(t_.stub, nullptr);
    v1::InitResponse init;
    const grpc::Status s = testing::InitServer(
        *t_.stub, testing::MakeInit(manifest_, 2, 0, 5, 1024), &init);
    ASSERT_TRUE(s.ok()) << s.error_message();
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
    s.prepared = info.prepared_elems();
    s.partial_chunks = info.partial_chunks();
    s.attempt = info.attempt();
    s.state_norms = {info.norms().state().begin(), info.norms().state().end()};
    EXPECT_EQ(s.state_norms.size(),
              static_cast<size_t>(info.state_slots_size()));
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


}  // namespace zeroshard::testing

#endif  // ZEROSHARD_TESTS_SERVER_BAD_INPUT_FIXTURE_H_
