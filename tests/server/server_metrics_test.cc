// A shard server's metrics (server/server_metrics.h), in process: every RPC
// timed by method and code through the interceptor, the state read at
// render time, one checkpoint observed once however often it is asked for,
// and nothing of the server touched after it is gone.
#include "server/server_metrics.h"

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/metrics.h"
#include "gtest/gtest.h"
#include "server/shard_server.h"
#include "tests/server/server_test_util.h"
#include "tests/support/prometheus_text.h"
#include "tests/support/test_files.h"
#include "wire/proto_convert.h"

namespace zeroshard {
namespace {

using testing::Exposition;

Exposition Render(MetricsRegistry& registry) {
  const std::string text = registry.Render();
  auto e = testing::ParseExposition(text);
  EXPECT_TRUE(e.ok()) << e.status() << "\n" << text;
  return e.ok() ? *e : Exposition();
}

double Calls(const Exposition& e, const std::string& method,
             const std::string& code) {
  return e
      .Value("zeroshard_rpc_duration_seconds_count",
             {{"method", method}, {"code", code}})
      .value_or(0);
}

grpc::Status Checkpoint(v1::ShardService::Stub& stub, uint64_t step,
                        const std::string& dir) {
  grpc::ClientContext c;
  testing::SetDeadline(c, 60000);
  v1::CheckpointRequest req;
  req.set_step(step);
  req.set_directory(dir);
  req.set_wait(true);
  v1::CheckpointResponse response;
  return stub.Checkpoint(&c, req, &response);
}

TEST(ServerMetricsTest, RpcsStateAndCheckpointsAreMeasured) {
  MetricsRegistry registry;
  ShardServer::Options options;
  options.metrics = &registry;
  auto server = ShardServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = testing::Connect((*server)->port());

  Exposition e = Render(registry);
  EXPECT_EQ(e.Value("zeroshard_initialized"), 0);

  const v1::ModelManifest manifest = testing::SmallManifest(1);
  auto layout = FlatLayout::Create(FromProto(manifest), 1, 1);
  ASSERT_TRUE(layout.ok());
  const uint64_t n = layout->total_elems();
  ASSERT_TRUE(
      testing::InitServer(*stub, testing::MakeInit(manifest, 1, 0, 7, 1024))
          .ok());
  // Step 0: one FP32 piece over the whole owned range (zeros: AdamW still
  // updates every element).
  const std::vector<float> grad(n, 0.0f);
  v1::PushGradResponse pushed;
  ASSERT_TRUE(testing::Push(*stub, testing::Header(0),
                            {testing::Fp32Piece(0, grad)}, 1.0, false, &pushed)
                  .ok());
  ASSERT_EQ(pushed.applied_elems(), n);
  const std::string dir = testing::MakeTempDir("zs_metrics_ckpt_");
  ASSERT_FALSE(dir.empty());
  ASSERT_TRUE(Checkpoint(*stub, 1, dir).ok());
  ASSERT_TRUE(Checkpoint(*stub, 1, dir).ok());  // the same snapshot again
  {
    grpc::ClientContext c;
    testing::SetDeadline(c, 20000);
    v1::ApplyStepRequest request;
    request.set_step(1);
    request.set_run_id("another-run");
    v1::ApplyStepResponse response;
    EXPECT_EQ(stub->ApplyStep(&c, request, &response).error_code(),
              grpc::StatusCode::PERMISSION_DENIED);
  }

  // The checkpoint is observed on the writer's thread: bounded wait.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  do {
    e = Render(registry);
  } while (!e.Value("zeroshard_checkpoint_write_seconds_count").has_value() &&
           absl::Now() < deadline &&
           (absl::SleepFor(absl::Milliseconds(10)), true));
  EXPECT_EQ(Calls(e, "Init", "OK"), 1);
  EXPECT_EQ(Calls(e, "PushGrad", "OK"), 1);
  EXPECT_EQ(Calls(e, "Checkpoint", "OK"), 2);
  EXPECT_EQ(Calls(e, "ApplyStep", "PERMISSION_DENIED"), 1);
  EXPECT_EQ(e.Value("zeroshard_checkpoint_write_seconds_count"), 1);
  EXPECT_EQ(e.Value("zeroshard_checkpoint_copy_seconds_count"), 1);
  EXPECT_EQ(e.Value("zeroshard_initialized"), 1);
  EXPECT_EQ(e.Value("zeroshard_adamw_updated_elements_total"),
            static_cast<double>(n));
  EXPECT_EQ(e.Value("zeroshard_chunk_version", {{"bound", "min"}}), 1);
  EXPECT_EQ(e.Value("zeroshard_chunk_version", {{"bound", "max"}}), 1);
  EXPECT_GE(*e.Value("zeroshard_state_bytes",
                     {{"placement", "host"}, {"kind", "master"}}),
            4.0 * n);
  EXPECT_GE(*e.Value("zeroshard_rpc_received_bytes_total"), 4.0 * n);

  // Gone: its collector with it; what was counted stays.
  stub.reset();
  server->reset();
  e = Render(registry);
  EXPECT_EQ(Calls(e, "Init", "OK"), 1);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

}  // namespace
}  // namespace zeroshard
