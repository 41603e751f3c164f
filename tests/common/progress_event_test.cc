// The worker's progress events: the one format the worker writes and the
// launcher reads, format and parse together.
#include "common/progress_event.h"

#include <cmath>
#include <limits>
#include <random>
#include <string>

#include "gtest/gtest.h"
#include "tests/support/test_seed.h"

namespace zeroshard {
namespace {

TEST(ProgressEventTest, ParsesTheWorkersStepLine) {
  auto e = ParseWorkerEvent(
      R"({"event":"step","step":4,"loss":3.25,"tokens_per_s":1234.5,)"
      R"("loss_scale":65536,"grad_norm":0.5,"lr":0.001,"skipped":true,)"
      R"("seconds":0.25,"fetch_s":0.01,"model_state_bytes":4096})");
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->kind, WorkerEvent::Kind::kStep);
  EXPECT_EQ(e->record.step, 4u);
  EXPECT_DOUBLE_EQ(e->record.loss, 3.25);
  EXPECT_DOUBLE_EQ(e->record.loss_scale, 65536);
  EXPECT_TRUE(e->record.skipped);
  EXPECT_DOUBLE_EQ(e->record.fetch_s, 0.01);
  EXPECT_EQ(e->record.model_state_bytes, 4096u);
  EXPECT_DOUBLE_EQ(e->record.compute_s, 0);  // optional, absent
}

TEST(ProgressEventTest, AcceptsPrintfsNonFiniteNumbers) {
  auto e = ParseWorkerEvent(
      R"({"event":"step","step":2,"loss":nan,"tokens_per_s":1,)"
      R"("loss_scale":256,"grad_norm":inf,"lr":0.001,"skipped":true,)"
      R"("seconds":-inf,"note":"inf stays a string"})");
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_TRUE(std::isnan(e->record.loss));
  EXPECT_TRUE(std::isinf(e->record.grad_norm) && e->record.grad_norm > 0);
  EXPECT_TRUE(std::isinf(e->record.seconds) && e->record.seconds < 0);
  // Quoted non-finite spellings are not numbers where a count is expected.
  EXPECT_FALSE(ParseWorkerEvent(R"({"event":"done","step":inf})").ok());
}

TEST(ProgressEventTest, NullMeansNotFinite) {
  // What zeroshard-worker prints for an overflow step's gradient norm.
  auto e = ParseWorkerEvent(
      R"({"event":"step","step":2,"loss":5.1,"tokens_per_s":1,)"
      R"("loss_scale":256,"grad_norm":null,"lr":0.001,"skipped":true,)"
      R"("seconds":0.5})");
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_TRUE(std::isnan(e->record.grad_norm));
  EXPECT_DOUBLE_EQ(e->record.loss, 5.1);
  EXPECT_TRUE(e->record.skipped);
}

TEST(ProgressEventTest, StartDoneAndUnknownEvents) {
  auto s = ParseWorkerEvent(R"({"event":"start","step":2,"steps":9})");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->kind, WorkerEvent::Kind::kStart);
  EXPECT_EQ(s->step, 2u);
  EXPECT_EQ(s->total_steps, 9u);
  auto d = ParseWorkerEvent(R"({"event":"done","step":9})");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->kind, WorkerEvent::Kind::kDone);
  auto o = ParseWorkerEvent(R"({"event":"checkpoint"})");
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->kind, WorkerEvent::Kind::kOther);
}

TEST(ProgressEventTest, RejectsBadLinesNamingTheProblem) {
  EXPECT_FALSE(ParseWorkerEvent("loss went down").ok());
  EXPECT_FALSE(ParseWorkerEvent("[1,2]").ok());
  auto missing = ParseWorkerEvent(
      R"({"event":"step","step":1,"tokens_per_s":1,"loss_scale":1,)"
      R"("grad_norm":1,"lr":1,"skipped":false,"seconds":1})");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("\"loss\""), std::string::npos);
  auto wrong = ParseWorkerEvent(
      R"({"event":"step","step":1,"loss":"low","tokens_per_s":1,)"
      R"("loss_scale":1,"grad_norm":1,"lr":1,"skipped":false,"seconds":1})");
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("\"loss\" is not a number"),
            std::string::npos);
  EXPECT_FALSE(ParseWorkerEvent(R"({"event":"start","step":-1,"steps":3})")
                   .ok());
}

// What FormatWorkerEvent writes, ParseWorkerEvent reads back: every field,
// to the precision the line carries, for random values.
TEST(ProgressEventTest, FormattedEventsParseBack) {
  const uint64_t seed = ::zeroshard::testing::TestSeed();
  SCOPED_TRACE(::zeroshard::testing::SeedTrace(seed));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  for (int trial = 0; trial < 200; ++trial) {
    WorkerEvent step;
    step.kind = WorkerEvent::Kind::kStep;
    StepRecord& r = step.record;
    r.step = rng() >> 20;
    r.loss = trial % 7 == 0 ? std::numeric_limits<double>::quiet_NaN()
                            : 11 * u(rng);
    r.tokens_per_s = 1e6 * u(rng);
    r.loss_scale = std::ldexp(1.0, static_cast<int>(rng() % 32));
    r.grad_norm = trial % 5 == 0 ? std::numeric_limits<double>::infinity()
                                 : 100 * u(rng);
    r.lr = 1e-3 * u(rng);
    r.skipped = rng() % 2;
    r.seconds = 10 * u(rng);
    r.fetch_s = u(rng);
    r.compute_s = u(rng);
    r.comm_wait_s = u(rng);
    r.commit_s = u(rng);
    r.model_state_bytes = rng() >> 16;
    r.activation_peak_bytes = rng() >> 16;
    const std::string line = FormatWorkerEvent(step);
    EXPECT_EQ(line.find('\n'), std::string::npos);
    auto back = ParseWorkerEvent(line);
    ASSERT_TRUE(back.ok()) << back.status() << " " << line;
    ASSERT_EQ(back->kind, WorkerEvent::Kind::kStep);
    const StepRecord& b = back->record;
    EXPECT_EQ(back->step, r.step);
    EXPECT_EQ(b.step, r.step);
    if (std::isfinite(r.loss)) {
      EXPECT_NEAR(b.loss, r.loss, 1e-6);
    } else {
      EXPECT_TRUE(std::isnan(b.loss));
    }
    if (std::isfinite(r.grad_norm)) {
      EXPECT_NEAR(b.grad_norm, r.grad_norm, 1e-6);
    } else if (std::isnan(r.grad_norm)) {
      EXPECT_TRUE(std::isnan(b.grad_norm));
    } else {
      // An overflow's norm stays inf (metrics.csv writes "inf").
      EXPECT_EQ(b.grad_norm, r.grad_norm);
    }
    EXPECT_NEAR(b.tokens_per_s, r.tokens_per_s, 0.05);
    EXPECT_EQ(b.loss_scale, r.loss_scale);
    EXPECT_NEAR(b.lr, r.lr, 5e-6 * r.lr);  // six significant digits
    EXPECT_EQ(b.skipped, r.skipped);
    EXPECT_NEAR(b.seconds, r.seconds, 5e-5);
    EXPECT_NEAR(b.fetch_s, r.fetch_s, 5e-5);
    EXPECT_NEAR(b.compute_s, r.compute_s, 5e-5);
    EXPECT_NEAR(b.comm_wait_s, r.comm_wait_s, 5e-5);
    EXPECT_NEAR(b.commit_s, r.commit_s, 5e-5);
    EXPECT_EQ(b.model_state_bytes, r.model_state_bytes);
    EXPECT_EQ(b.activation_peak_bytes, r.activation_peak_bytes);
  }
  WorkerEvent start;
  start.kind = WorkerEvent::Kind::kStart;
  start.step = 7;
  start.total_steps = 300;
  start.params = 842240;
  start.workers = 2;
  start.servers = 3;
  auto s = ParseWorkerEvent(FormatWorkerEvent(start));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->kind, WorkerEvent::Kind::kStart);
  EXPECT_EQ(s->step, 7u);
  EXPECT_EQ(s->total_steps, 300u);
  EXPECT_EQ(s->params, 842240u);
  EXPECT_EQ(s->workers, 2u);
  EXPECT_EQ(s->servers, 3u);
  WorkerEvent done;
  done.kind = WorkerEvent::Kind::kDone;
  done.step = 300;
  EXPECT_EQ(FormatWorkerEvent(done), R"({"event":"done","step":300})");
  auto d = ParseWorkerEvent(FormatWorkerEvent(done));
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->kind, WorkerEvent::Kind::kDone);
  EXPECT_EQ(d->step, 300u);
}

}  // namespace
}  // namespace zeroshard
