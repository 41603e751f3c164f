// ModelShard's two-phase step commit (Prepare, ApplyPrepared): several
// workers prepare random disjoint FP32 / BF16 pieces that cover the owned
// range, nothing changes until ApplyPrepared, which then leaves exactly the
// state of a reference shard that got the same pieces in one plain
// ApplyPush, bit for bit. Missing coverage, a repeated or late ApplyPrepared,
// newer attempts and steps, a re-prepare by the same worker, disagreeing
// coefficients and a snapshot armed over two-phase steps are checked, with
// the pending gradient bytes after each.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/dtype.h"
#include "gtest/gtest.h"
#include "server/model_shard.h"
#include "tests/server/shard_state_util.h"

namespace zeroshard {
namespace {

using testing::Diff;
using testing::RandomBytes;
using testing::ReadState;
using State = testing::ShardState;

// One worker's gradient for a step: disjoint pieces, each FP32 or BF16,
// with their bytes.
struct WorkerGrad {
  std::vector<FlatRange> ranges;
  std::vector<DType> dtypes;
  std::vector<std::shared_ptr<std::vector<char>>> bytes;

  std::vector<GradPiece> Pieces() const {
    std::vector<GradPiece> out;
    for (size_t i = 0; i < ranges.size(); ++i) {
      out.push_back({ranges[i], dtypes[i], bytes[i]->data()});
    }
    return out;
  }
  int64_t Bytes() const {
    int64_t n = 0;
    for (const auto& b : bytes) n += static_cast<int64_t>(b->size());
    return n;
  }
  uint64_t Elems() const {
    uint64_t n = 0;
    for (const FlatRange& r : ranges) n += r.size();
    return n;
  }
};

// `workers` gradients whose pieces tile `owned` exactly once, cut anywhere
// (across chunk boundaries too); every worker gets at least one piece.
std::vector<WorkerGrad> MakeStepGrads(std::mt19937_64& rng, FlatRange owned,
                                      int workers) {
  std::vector<FlatRange> pieces = testing::RandomTiling(
      rng, owned, workers + 10 + static_cast<int>(rng() % 30));
  std::shuffle(pieces.begin(), pieces.end(), rng);
  std::vector<WorkerGrad> out(workers);
  for (size_t i = 0; i < pieces.size(); ++i) {
    WorkerGrad& w = out[i < static_cast<size_t>(workers) ? i : rng() % workers];
    const DType dtype = rng() % 2 ? DType::kBf16 : DType::kFp32;
    w.ranges.push_back(pieces[i]);
    w.dtypes.push_back(dtype);
    w.bytes.push_back(RandomBytes(rng, pieces[i], dtype));
  }
  return out;
}

// What PushReceiver hands over for a prepare: the pieces, their owner and
// their bytes counted as pending in the store.
PreparedPush MakePrepared(ModelShard& shard, const WorkerGrad& g,
                          uint64_t step, uint64_t attempt, uint32_t worker,
                          StepParams params) {
  PreparedPush p;
  p.step = step;
  p.attempt = attempt;
  p.worker = worker;
  p.params = params;
  p.pieces = g.Pieces();
  p.holder = std::make_shared<WorkerGrad>(g);
  p.pending_bytes = g.Bytes();
  shard.store().AddPendingGradBytes(p.pending_bytes);
  return p;
}

// Every worker's pieces in one plain ApplyPush.
void ApplyPlain(ModelShard& ref, const std::vector<WorkerGrad>& grads,
                uint64_t step, StepParams params) {
  std::vector<GradPiece> all;
  for (const WorkerGrad& g : grads) {
    const auto p = g.Pieces();
    all.insert(all.end(), p.begin(), p.end());
  }
  auto r = ref.ApplyPush(step, params, all);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->applied_elems, ref.owned().size());
}

// Each worker prepares on a thread of its own; "" or the first error.
std::string PrepareConcurrently(ModelShard& shard,
                                const std::vector<WorkerGrad>& grads,
                                uint64_t step, uint64_t attempt,
                                StepParams params,
                                const std::vector<uint32_t>& workers) {
  std::vector<std::string> errors(workers.size());
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  for (size_t i = 0; i < workers.size(); ++i) {
    threads.emplace_back([&, i] {
      while (!go.load()) std::this_thread::yield();
      const uint32_t w = workers[i];
      absl::Status s =
          shard.Prepare(MakePrepared(shard, grads[w], step, attempt, w, params))
              .status();
      if (!s.ok()) errors[i] = absl::StrCat("worker ", w, ": ", s.ToString());
    });
  }
  go = true;
  for (auto& t : threads) t.join();
  for (const std::string& e : errors) {
    if (!e.empty()) return e;
  }
  return "";
}

std::vector<uint32_t> AllWorkers(size_t n) {
  std::vector<uint32_t> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<uint32_t>(i);
  return out;
}

StepParams RandomParams(std::mt19937_64& rng) {
  return {std::uniform_real_distribution<double>(0.05, 2)(rng), false};
}

class PrepareTest : public ::testing::Test {
 protected:
  void SetUp() override {
    seed_ = std::random_device{}();
    rng_.seed(seed_);
    shard_ = testing::MakeTestShard(seed_ % 1000);
    ref_ = testing::MakeTestShard(seed_ % 1000);
    ASSERT_NE(shard_, nullptr);
    ASSERT_NE(ref_, nullptr);
    ASSERT_GT(shard_->store().num_chunks(), 8u);
    workers_ = 2 + static_cast<int>(rng_() % 4);
  }
  // Every worker of `grads` prepares on a thread of its own; "" or the
  // first error.
  std::string PrepareAll(const std::vector<WorkerGrad>& grads, uint64_t step,
                         uint64_t attempt, StepParams params) {
    return PrepareConcurrently(*shard_, grads, step, attempt, params,
                               AllWorkers(grads.size()));
  }
  // Records the seed on failure.
  std::string Trace() const {
    return absl::StrCat("seed ", seed_, ", ", workers_, " workers");
  }

  uint64_t seed_ = 0;
  std::mt19937_64 rng_;
  std::unique_ptr<ModelShard> shard_, ref_;
  int workers_ = 0;
};

TEST_F(PrepareTest, NothingAppliesUntilApplyPreparedThenEqualsPlainPush) {
  SCOPED_TRACE(Trace());
  constexpr uint64_t kSteps = 3;
  for (uint64_t step = 0; step < kSteps; ++step) {
    SCOPED_TRACE(absl::StrCat("step ", step));
    const StepParams params = RandomParams(rng_);
    const auto grads = MakeStepGrads(rng_, shard_->owned(), workers_);
    int64_t bytes = 0;
    for (const auto& g : grads) bytes += g.Bytes();
    const State before = ReadState(*shard_);
    ASSERT_EQ(PrepareAll(grads, step, 0, params), "");
    // Prepared, nothing applied.
    EXPECT_EQ(Diff(ReadState(*shard_), before), "");
    EXPECT_EQ(shard_->store().pending_grad_bytes(),
              static_cast<uint64_t>(bytes));
    const ModelShard::PreparedSummary prepared = shard_->prepared();
    EXPECT_EQ(prepared.elems, shard_->owned().size());
    EXPECT_EQ(prepared.step, step);
    EXPECT_EQ(prepared.attempt, 0u);
    EXPECT_EQ(shard_->tracker().Summarize().partial_chunks, 0u);

    auto r = shard_->ApplyPrepared(step, 0);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->applied_elems, shard_->owned().size());
    EXPECT_EQ(r->duplicate_elems, 0u);
    EXPECT_EQ(r->chunks_completed, shard_->store().num_chunks());
    EXPECT_EQ(r->pushes, static_cast<uint32_t>(workers_));
    ASSERT_NO_FATAL_FAILURE(ApplyPlain(*ref_, grads, step, params));
    EXPECT_EQ(Diff(ReadState(*shard_), ReadState(*ref_)), "");
    EXPECT_EQ(shard_->store().pending_grad_bytes(), 0u);
    EXPECT_EQ(shard_->prepared().elems, 0u);
    EXPECT_EQ(shard_->tracker().Summarize().min_version, step + 1);
  }
}

TEST_F(PrepareTest, MissingWorkerIsFailedPreconditionAndChangesNothing) {
  SCOPED_TRACE(Trace());
  const StepParams params = RandomParams(rng_);
  const auto grads = MakeStepGrads(rng_, shard_->owned(), workers_);
  const uint32_t missing = rng_() % workers_;
  std::vector<uint32_t> present;
  uint64_t covered = 0;
  int64_t bytes = 0;
  for (uint32_t w = 0; w < static_cast<uint32_t>(workers_); ++w) {
    if (w == missing) continue;
    present.push_back(w);
    covered += grads[w].Elems();
    bytes += grads[w].Bytes();
  }
  ASSERT_EQ(PrepareConcurrently(*shard_, grads, 0, 0, params, present), "");
  const State before = ReadState(*shard_);
  for (int round = 0; round < 2; ++round) {
    auto r = shard_->ApplyPrepared(0, 0);
    ASSERT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition)
        << r.status();
    EXPECT_NE(r.status().message().find(absl::StrCat(
                  "hold ", covered, " of the ", shard_->owned().size(),
                  " elements")),
              std::string::npos)
        << r.status();
    EXPECT_EQ(Diff(ReadState(*shard_), before), "");
    // The prepared pushes are still there, still counted.
    EXPECT_EQ(shard_->prepared().elems, covered);
    EXPECT_EQ(shard_->store().pending_grad_bytes(),
              static_cast<uint64_t>(bytes));
  }
  // The missing worker prepares late: the step applies whole.
  ASSERT_TRUE(shard_->Prepare(MakePrepared(*shard_, grads[missing], 0, 0,
                                           missing, params))
                  .ok());
  auto r = shard_->ApplyPrepared(0, 0);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->applied_elems, shard_->owned().size());
  ASSERT_NO_FATAL_FAILURE(ApplyPlain(*ref_, grads, 0, params));
  EXPECT_EQ(Diff(ReadState(*shard_), ReadState(*ref_)), "");
  EXPECT_EQ(shard_->store().pending_grad_bytes(), 0u);
}

TEST_F(PrepareTest, RepeatedOrLateApplyPreparedIsOkWithNothingApplied) {
  SCOPED_TRACE(Trace());
  const StepParams params = RandomParams(rng_);
  const auto grads = MakeStepGrads(rng_, shard_->owned(), workers_);
  ASSERT_EQ(PrepareAll(grads, 0, 0, params), "");
  ASSERT_TRUE(shard_->ApplyPrepared(0, 0).ok());
  ASSERT_NO_FATAL_FAILURE(ApplyPlain(*ref_, grads, 0, params));
  const State applied = ReadState(*shard_);
  ASSERT_EQ(Diff(applied, ReadState(*ref_)), "");
  // Again (the launcher finishing a step rank 0 applied already).
  auto again = shard_->ApplyPrepared(0, 0);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->applied_elems, 0u);
  EXPECT_EQ(again->pushes, 0u);
  EXPECT_EQ(Diff(ReadState(*shard_), applied), "");
  // Step 1 by plain pushes: step 0's chunks are two steps past.
  const StepParams p1 = RandomParams(rng_);
  const auto g1 = MakeStepGrads(rng_, shard_->owned(), workers_);
  ASSERT_NO_FATAL_FAILURE(ApplyPlain(*shard_, g1, 1, p1));
  ASSERT_NO_FATAL_FAILURE(ApplyPlain(*ref_, g1, 1, p1));
  for (uint64_t old : {uint64_t{0}, uint64_t{1}}) {
    auto late = shard_->ApplyPrepared(old, 0);
    ASSERT_TRUE(late.ok()) << old << ": " << late.status();
    EXPECT_EQ(late->applied_elems, 0u);
  }
  // A step no chunk has reached yet is not "applied already".
  auto ahead = shard_->ApplyPrepared(5, 0);
  EXPECT_EQ(ahead.status().code(), absl::StatusCode::kAborted) << ahead.status();
  EXPECT_EQ(Diff(ReadState(*shard_), ReadState(*ref_)), "");
  EXPECT_EQ(shard_->store().pending_grad_bytes(), 0u);
}

// Two callers (a retried ApplyStep, or rank 0 and the launcher) at once:
// both are answered OK and the step applies exactly once.
TEST_F(PrepareTest, ConcurrentApplyPreparedAppliesOnceAndBothAreOk) {
  SCOPED_TRACE(Trace());
  constexpr uint64_t kSteps = 20;
  for (uint64_t step = 0; step < kSteps; ++step) {
    SCOPED_TRACE(absl::StrCat("step ", step));
    const StepParams params = RandomParams(rng_);
    const auto grads = MakeStepGrads(rng_, shard_->owned(), workers_);
    ASSERT_EQ(PrepareAll(grads, step, 0, params), "");
    absl::StatusOr<ApplyResult> results[2];
    std::atomic<int> ready{0};
    std::vector<std::thread> threads;
    for (int i = 0; i < 2; ++i) {
      threads.emplace_back([&, i] {
        ++ready;
        while (ready.load() < 2) {
        }
        results[i] = shard_->ApplyPrepared(step, 0);
      });
    }
    for (auto& t : threads) t.join();
    uint64_t applied = 0;
    for (const auto& r : results) {
      ASSERT_TRUE(r.ok()) << r.status();
      applied += r->applied_elems;
    }
    EXPECT_EQ(applied, shard_->owned().size());
    ASSERT_NO_FATAL_FAILURE(ApplyPlain(*ref_, grads, step, params));
    ASSERT_EQ(Diff(ReadState(*shard_), ReadState(*ref_)), "");
  }
  EXPECT_EQ(shard_->store().pending_grad_bytes(), 0u);
}

TEST_F(PrepareTest, NewerAttemptDropsOlderAndOlderIsAborted) {
  SCOPED_TRACE(Trace());
  const uint64_t a = rng_() % 5;
  const StepParams params = RandomParams(rng_);
  const auto old_grads = MakeStepGrads(rng_, shard_->owned(), workers_);
  ASSERT_EQ(PrepareAll(old_grads, 0, a, params), "");
  const State before = ReadState(*shard_);
  // Attempt a+1 (new workers, new gradients) prepares one worker's push:
  // every push of attempt a goes, with its bytes.
  const auto grads = MakeStepGrads(rng_, shard_->owned(), workers_);
  const uint32_t first = rng_() % workers_;
  ASSERT_TRUE(shard_->Prepare(MakePrepared(*shard_, grads[first], 0, a + 1,
                                           first, params))
                  .ok());
  EXPECT_EQ(shard_->store().pending_grad_bytes(),
            static_cast<uint64_t>(grads[first].Bytes()));
  EXPECT_EQ(shard_->prepared().elems, grads[first].Elems());
  EXPECT_EQ(shard_->prepared().attempt, a + 1);
  // The old attempt can neither apply nor prepare any more.
  auto old_apply = shard_->ApplyPrepared(0, a);
  EXPECT_EQ(old_apply.status().code(), absl::StatusCode::kAborted)
      << old_apply.status();
  const uint32_t late = (first + 1) % workers_;
  absl::Status old_prepare =
      shard_->Prepare(MakePrepared(*shard_, old_grads[late], 0, a, late, params))
          .status();
  EXPECT_EQ(old_prepare.code(), absl::StatusCode::kAborted) << old_prepare;
  EXPECT_EQ(shard_->store().pending_grad_bytes(),
            static_cast<uint64_t>(grads[first].Bytes()))
      << "a refused prepare keeps its bytes counted";
  EXPECT_EQ(Diff(ReadState(*shard_), before), "");
  // The rest of attempt a+1 prepares; the step is its gradients alone.
  std::vector<uint32_t> rest;
  for (uint32_t w = 0; w < static_cast<uint32_t>(workers_); ++w) {
    if (w != first) rest.push_back(w);
  }
  ASSERT_EQ(PrepareConcurrently(*shard_, grads, 0, a + 1, params, rest), "");
  auto r = shard_->ApplyPrepared(0, a + 1);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->applied_elems, shard_->owned().size());
  EXPECT_EQ(r->pushes, static_cast<uint32_t>(workers_));
  ASSERT_NO_FATAL_FAILURE(ApplyPlain(*ref_, grads, 0, params));
  EXPECT_EQ(Diff(ReadState(*shard_), ReadState(*ref_)), "");
  EXPECT_EQ(shard_->store().pending_grad_bytes(), 0u);

  // A prepare that arrives after its step was applied (a retried stream)
  // is acknowledged as a duplicate and held by no one: its bytes go at once.
  const StepParams p1 = RandomParams(rng_);
  const auto g1 = MakeStepGrads(rng_, shard_->owned(), workers_);
  auto late_prepare =
      shard_->Prepare(MakePrepared(*shard_, grads[0], 0, a + 1, 0, params));
  ASSERT_TRUE(late_prepare.ok()) << late_prepare.status();
  EXPECT_EQ(*late_prepare, grads[0].Elems());
  EXPECT_EQ(shard_->store().pending_grad_bytes(), 0u);
  EXPECT_EQ(shard_->prepared().elems, 0u);
  ASSERT_EQ(PrepareAll(g1, 1, a + 1, p1), "");
  int64_t b1 = 0;
  for (const auto& g : g1) b1 += g.Bytes();
  EXPECT_EQ(shard_->store().pending_grad_bytes(), static_cast<uint64_t>(b1));
  EXPECT_EQ(shard_->prepared().elems, shard_->owned().size());
  ASSERT_TRUE(shard_->ApplyPrepared(1, a + 1).ok());
  ASSERT_NO_FATAL_FAILURE(ApplyPlain(*ref_, g1, 1, p1));
  EXPECT_EQ(Diff(ReadState(*shard_), ReadState(*ref_)), "");
  EXPECT_EQ(shard_->store().pending_grad_bytes(), 0u);
}

TEST_F(PrepareTest, RePrepareBySameWorkerReplaces) {
  SCOPED_TRACE(Trace());
  const StepParams params = RandomParams(rng_);
  const auto grads = MakeStepGrads(rng_, shard_->owned(), workers_);
  ASSERT_EQ(PrepareAll(grads, 0, 0, params), "");
  int64_t bytes = 0;
  for (const auto& g : grads) bytes += g.Bytes();
  // Worker w's stream is retried: the same ranges, twice, the second time
  // with other values (and dtypes): the last copy stands.
  auto final_grads = grads;
  const uint32_t w = rng_() % workers_;
  for (int retry = 0; retry < 2; ++retry) {
    WorkerGrad& g = final_grads[w];
    bytes -= g.Bytes();
    for (size_t i = 0; i < g.ranges.size(); ++i) {
      g.dtypes[i] = rng_() % 2 ? DType::kBf16 : DType::kFp32;
      g.bytes[i] = RandomBytes(rng_, g.ranges[i], g.dtypes[i]);
    }
    bytes += g.Bytes();
    ASSERT_TRUE(
        shard_->Prepare(MakePrepared(*shard_, g, 0, 0, w, params)).ok());
    EXPECT_EQ(shard_->store().pending_grad_bytes(),
              static_cast<uint64_t>(bytes));
    EXPECT_EQ(shard_->prepared().elems, shard_->owned().size());
  }
  auto r = shard_->ApplyPrepared(0, 0);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->applied_elems, shard_->owned().size());
  EXPECT_EQ(r->duplicate_elems, 0u);
  EXPECT_EQ(r->pushes, static_cast<uint32_t>(workers_));
  ASSERT_NO_FATAL_FAILURE(ApplyPlain(*ref_, final_grads, 0, params));
  EXPECT_EQ(Diff(ReadState(*shard_), ReadState(*ref_)), "");
  EXPECT_EQ(shard_->store().pending_grad_bytes(), 0u);
}

TEST_F(PrepareTest, DifferentCoefficientsAreInvalidArgumentNothingChanges) {
  SCOPED_TRACE(Trace());
  const auto grads = MakeStepGrads(rng_, shard_->owned(), workers_);
  const StepParams params = RandomParams(rng_);
  const uint32_t odd = 1 + rng_() % (workers_ - 1);  // not the first
  StepParams other = params;
  other.coefficient *= 1.5;
  const State before = ReadState(*shard_);
  int64_t held = 0;
  for (uint32_t w = 0; w < static_cast<uint32_t>(workers_); ++w) {
    auto r = shard_->Prepare(
        MakePrepared(*shard_, grads[w], 0, 0, w, w == odd ? other : params));
    if (w != odd) {
      ASSERT_TRUE(r.ok()) << r.status();
      held += grads[w].Bytes();
      continue;
    }
    // Refused at once, naming both workers; its bytes are released and the
    // others' pushes stay.
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument)
        << r.status();
    EXPECT_NE(r.status().message().find(absl::StrCat("from worker ", odd)),
              std::string::npos)
        << r.status();
    EXPECT_NE(r.status().message().find("but worker 0 prepared"),
              std::string::npos)
        << r.status();
  }
  EXPECT_EQ(shard_->store().pending_grad_bytes(), static_cast<uint64_t>(held));
  // The step cannot apply without the refused worker...
  auto r = shard_->ApplyPrepared(0, 0);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition)
      << r.status();
  EXPECT_EQ(Diff(ReadState(*shard_), before), "");
  EXPECT_EQ(shard_->tracker().Summarize().partial_chunks, 0u);
  // ... and applies whole once it prepares with the agreed coefficient.
  ASSERT_TRUE(
      shard_->Prepare(MakePrepared(*shard_, grads[odd], 0, 0, odd, params))
          .ok());
  ASSERT_TRUE(shard_->ApplyPrepared(0, 0).ok());
  ASSERT_NO_FATAL_FAILURE(ApplyPlain(*ref_, grads, 0, params));
  EXPECT_EQ(Diff(ReadState(*shard_), ReadState(*ref_)), "");
  EXPECT_EQ(shard_->store().pending_grad_bytes(), 0u);
}

// Pending bytes return to zero whenever no step is in flight: after a
// prepare for an applied step, after a plain commit that completes a
// prepared step, and after refused ApplySteps, which drop nothing and
// record no attempt.
TEST_F(PrepareTest, PendingBytesReturnToZeroAndRefusedApplyStepsChangeNothing) {
  SCOPED_TRACE(Trace());
  const StepParams params = RandomParams(rng_);
  const auto grads = MakeStepGrads(rng_, shard_->owned(), workers_);
  ASSERT_EQ(PrepareAll(grads, 0, 0, params), "");
  int64_t bytes = 0;
  for (const auto& g : grads) bytes += g.Bytes();
  const State before = ReadState(*shard_);
  // Refused ApplySteps: a future step with a newer attempt (ABORTED), and
  // the right step with a newer attempt that prepared nothing
  // (FAILED_PRECONDITION). Neither drops the prepared pushes or raises the
  // attempt.
  auto ahead = shard_->ApplyPrepared(7, 5);
  EXPECT_EQ(ahead.status().code(), absl::StatusCode::kAborted)
      << ahead.status();
  auto empty = shard_->ApplyPrepared(0, 1);
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kFailedPrecondition)
      << empty.status();
  EXPECT_EQ(shard_->tracker().attempt(), 0u);
  EXPECT_EQ(shard_->store().pending_grad_bytes(), static_cast<uint64_t>(bytes));
  EXPECT_EQ(shard_->prepared().elems, shard_->owned().size());
  EXPECT_EQ(Diff(ReadState(*shard_), before), "");
  // A plain commit of the same step (another client's) completes every
  // chunk: the prepared pushes can never apply, and their bytes go.
  ASSERT_NO_FATAL_FAILURE(ApplyPlain(*shard_, grads, 0, params));
  EXPECT_EQ(shard_->store().pending_grad_bytes(), 0u);
  EXPECT_EQ(shard_->prepared().elems, 0u);
  // A prepare for a step two behind is stale; one for a step ahead of the
  // chunks is refused too; both release their bytes.
  ASSERT_NO_FATAL_FAILURE(ApplyPlain(*shard_, grads, 1, params));
  for (uint64_t step : {uint64_t{0}, uint64_t{5}}) {
    auto r = shard_->Prepare(MakePrepared(*shard_, grads[0], step, 0, 0, params));
    EXPECT_EQ(r.status().code(), absl::StatusCode::kAborted)
        << step << ": " << r.status();
    EXPECT_NE(r.status().message().find(step == 0 ? "stale" : "ahead"),
              std::string::npos)
        << r.status();
    EXPECT_EQ(shard_->store().pending_grad_bytes(), 0u);
  }
  // A prepare for the step just applied is a duplicate.
  auto dup = shard_->Prepare(MakePrepared(*shard_, grads[0], 1, 0, 0, params));
  ASSERT_TRUE(dup.ok()) << dup.status();
  EXPECT_EQ(*dup, grads[0].Elems());
  EXPECT_EQ(shard_->store().pending_grad_bytes(), 0u);
  EXPECT_EQ(shard_->prepared().elems, 0u);
}

// A snapshot's copy as a State (versions and Adam steps from its header).
std::string SnapshotDiff(ShardSnapshot& snap, const State& want) {
  absl::StatusOr<SnapshotResult> r = testing::WaitForSnapshot(snap);
  if (!r.ok()) return r.status().ToString();
  State got;
  for (int a = 0; a < 3; ++a) {
    got.arrays[a].assign(snap.array(a), snap.array(a) + want.arrays[a].size());
  }
  for (int c = 0; c < snap.header().chunk_versions_size(); ++c) {
    got.versions.push_back(snap.header().chunk_versions(c));
    got.adam_t.push_back(snap.header().chunk_adam_steps(c));
  }
  return Diff(got, want);
}

TEST_F(PrepareTest, SnapshotOverTwoPhaseStepsIsExactlyItsVersion) {
  SCOPED_TRACE(Trace());
  constexpr uint64_t kSteps = 5;
  // Armed before the run (copied on ApplyPrepared's apply path), and armed
  // at a step whose pushes are prepared but not yet applied (chunks at the
  // step, untouched: copied on the snapshot's thread, racing the apply).
  const uint64_t s_early = 1 + rng_() % (kSteps - 1);
  uint64_t s_prepared = 1 + rng_() % (kSteps - 1);
  auto early = shard_->ArmSnapshot(s_early, "");
  ASSERT_TRUE(early.ok()) << early.status();
  std::shared_ptr<ShardSnapshot> prepared;
  std::vector<State> ref_states = {ReadState(*ref_)};
  for (uint64_t step = 0; step < kSteps; ++step) {
    const StepParams params = RandomParams(rng_);
    const auto grads = MakeStepGrads(rng_, shard_->owned(), workers_);
    ASSERT_EQ(PrepareAll(grads, step, 0, params), "");
    if (step == s_prepared && step != s_early) {
      auto snap = shard_->ArmSnapshot(step, "");
      ASSERT_TRUE(snap.ok()) << snap.status();
      prepared = *snap;
    }
    auto r = shard_->ApplyPrepared(step, 0);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_NO_FATAL_FAILURE(ApplyPlain(*ref_, grads, step, params));
    ref_states.push_back(ReadState(*ref_));
  }
  EXPECT_EQ(SnapshotDiff(**early, ref_states[s_early]), "")
      << "armed before the run at " << s_early;
  if (prepared != nullptr) {
    EXPECT_EQ(SnapshotDiff(*prepared, ref_states[s_prepared]), "")
        << "armed with step " << s_prepared << " prepared";
  }
  EXPECT_EQ(Diff(ReadState(*shard_), ref_states.back()), "");
  EXPECT_FALSE(shard_->SnapshotInProgress());
}

}  // namespace
}  // namespace zeroshard
