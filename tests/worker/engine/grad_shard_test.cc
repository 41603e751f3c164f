// GradShard (worker/engine/grad_shard.h) on its own, against a group that
// plays every other rank: the reduce-scatter lands this rank's part of each
// unit, later micro-batches add to it in the order the engine promises,
// ZeRO-1's resident buffers are zeroed at each step, one worker on the host
// writes straight into its partition, and a step whose units did not all
// finish is refused rather than normed short.
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "model/gpt_manifest.h"
#include "worker/engine/grad_shard.h"

namespace zeroshard {
namespace {

// A group of `size` ranks seen from `rank`: every other rank contributed
// exactly what this one did, so a reduce-scatter's part is `size` times this
// rank's slice of the input (summed in float, as a real group's would be).
class MirrorGroup : public WorkerGroup {
 public:
  MirrorGroup(int rank, int size) : rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  absl::string_view backend() const override { return "mirror"; }
  absl::Status AllGather(absl::Span<const uint8_t>, absl::Span<uint8_t>) override {
    return absl::UnimplementedError("AllGather");
  }
  absl::Status AllGatherInPlace(absl::Span<uint8_t>) override {
    return absl::UnimplementedError("AllGatherInPlace");
  }
  absl::Status ReduceScatter(absl::Span<const float> in, absl::Span<float> out,
                             float scale) override {
    ++reduce_scatters;
    if (in.size() != out.size() * size_) {
      return absl::InvalidArgumentError("reduce-scatter sizes");
    }
    for (size_t i = 0; i < out.size(); ++i) {
      float sum = 0;
      for (int r = 0; r < size_; ++r) sum += in[rank_ * out.size() + i];
      out[i] = sum * scale;
    }
    return absl::OkStatus();
  }
  absl::Status Broadcast(std::string*, int) override {
    return absl::UnimplementedError("Broadcast");
  }
  absl::Status Barrier() override { return absl::OkStatus(); }
  int reduce_scatters = 0;

 protected:
  absl::Status AllReduceHost(ReduceType, void*, size_t, ReduceOp) override {
    return absl::UnimplementedError("AllReduce");
  }

 private:
  const int rank_, size_;
};

FlatLayout TinyLayout(int workers) {
  ModelShape shape;
  shape.layers = 2;
  shape.heads = 2;
  shape.width = 8;
  shape.vocab = 16;
  shape.context = 4;
  absl::StatusOr<ModelManifest> m = MakeGptManifest(shape, workers);
  EXPECT_TRUE(m.ok()) << m.status();
  absl::StatusOr<FlatLayout> layout = FlatLayout::Create(*m, 1, workers);
  EXPECT_TRUE(layout.ok()) << layout.status();
  return *std::move(layout);
}

std::vector<float> Random(size_t n, std::mt19937* rng) {
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (float& x : v) x = d(*rng);
  return v;
}

// Two micro-batches on rank 1 of 2 under ZeRO-2/3: each unit's part is
// 2 * (first) + 2 * (second), the first written in place and the second
// summed into it.
TEST(GradShardTest, ReduceScatterAndAccumulateLandThisRanksPart) {
  for (int stage : {2, 3}) {
    SCOPED_TRACE(stage);
    const FlatLayout layout = TinyLayout(2);
    MirrorGroup group(/*rank=*/1, /*size=*/2);
    CommQueue queue;
    auto grads = GradShard::Create(&layout, 1, &group, &queue, nullptr,
                                   {.stage = stage, .bf16_wire = false});
    ASSERT_TRUE(grads.ok()) << grads.status();
    GradShard& g = **grads;
    ASSERT_TRUE(g.BeginStep().ok());
    std::mt19937 rng(7);
    const int units = static_cast<int>(layout.units().size());
    std::vector<std::vector<float>> first(units), second(units);
    for (int micro = 0; micro < 2; ++micro) {
      for (int u = units - 1; u >= 0; --u) {
        absl::StatusOr<GradShard::UnitGradPtr> buf = g.Buffer(u, micro > 0);
        ASSERT_TRUE(buf.ok()) << buf.status();
        ASSERT_NE(*buf, nullptr);  // two workers: always a full-unit buffer
        absl::Span<float> span = g.Span(u, *buf);
        ASSERT_EQ(span.size(), layout.units()[u].padded);
        for (float x : span) ASSERT_EQ(x, 0.0f);  // handed out zeroed
        std::vector<float> v = Random(span.size(), &rng);
        std::copy(v.begin(), v.end(), span.begin());
        (micro == 0 ? first : second)[u] = std::move(v);
        g.QueueReduceScatter(u, *std::move(buf), micro > 0, nullptr);
      }
      ASSERT_TRUE(queue.Drain().ok());
    }
    EXPECT_EQ(group.reduce_scatters, 2 * units);
    size_t at = 0;
    for (int u = 0; u < units; ++u) {
      const FlatRange part = layout.WorkerUnitRange(1, u);
      const size_t offset = part.size();  // rank 1's slice starts here
      for (size_t i = 0; i < part.size(); ++i) {
        float want = (first[u][offset + i] + first[u][offset + i]);
        want += (second[u][offset + i] + second[u][offset + i]);
        ASSERT_EQ(g.partition()[at + i], want) << "unit " << u << " elem " << i;
      }
      at += part.size();
    }
    EXPECT_EQ(at, g.size());
    EXPECT_EQ(g.shard_bytes(), g.size() * sizeof(float));
    EXPECT_EQ(g.push_buffer_bytes(), 0u);
    // No part was pushed, so none finished: the norm is refused, not short.
    absl::StatusOr<double> sumsq = g.SumOfSquares();
    ASSERT_FALSE(sumsq.ok());
    EXPECT_EQ(sumsq.status().code(), absl::StatusCode::kInternal);
    EXPECT_NE(sumsq.status().message().find("0 of "), std::string::npos)
        << sumsq.status();
    // Every full-unit buffer went back once its reduce-scatter ran; the
    // peak is at least the largest unit.
    EXPECT_GE(g.unit_grads_peak(), layout.units()[0].padded * sizeof(float));
  }
}

// One worker on the host under ZeRO-2/3: the first micro-batch writes into
// the partition itself; the second sums a buffer of its own first.
TEST(GradShardTest, OneWorkerWritesIntoItsPartition) {
  const FlatLayout layout = TinyLayout(1);
  MirrorGroup group(0, 1);
  CommQueue queue;
  auto grads = GradShard::Create(&layout, 0, &group, &queue, nullptr,
                                 {.stage = 3, .bf16_wire = true});
  ASSERT_TRUE(grads.ok()) << grads.status();
  GradShard& g = **grads;
  EXPECT_EQ(g.push_buffer_bytes(), g.size() * sizeof(uint16_t));
  ASSERT_TRUE(g.BeginStep().ok());
  absl::StatusOr<GradShard::UnitGradPtr> direct = g.Buffer(1, false);
  ASSERT_TRUE(direct.ok());
  EXPECT_EQ(*direct, nullptr);
  absl::Span<float> span = g.Span(1, *direct);
  const size_t offset = layout.units()[0].padded;
  EXPECT_EQ(span.data(), g.partition().data() + offset);
  span[0] = 3.0f;
  g.QueueReduceScatter(1, nullptr, false, nullptr);  // nothing to scatter
  absl::StatusOr<GradShard::UnitGradPtr> summed = g.Buffer(1, true);
  ASSERT_TRUE(summed.ok());
  ASSERT_NE(*summed, nullptr);
  g.Span(1, *summed)[0] = 0.5f;
  g.QueueReduceScatter(1, *std::move(summed), true, nullptr);
  ASSERT_TRUE(queue.Drain().ok());
  EXPECT_EQ(group.reduce_scatters, 1);
  EXPECT_EQ(g.partition()[offset], 3.5f);
  // A new step starts from zero.
  ASSERT_TRUE(g.BeginStep().ok());
  EXPECT_EQ(g.partition()[offset], 0.0f);
}

// ZeRO-1: every unit's full gradient stays resident across micro-batches
// (the same buffer each time) and is zeroed by BeginStep.
TEST(GradShardTest, ZeroOneKeepsResidentBuffersAndZeroesThemPerStep) {
  const FlatLayout layout = TinyLayout(2);
  MirrorGroup group(0, 2);
  CommQueue queue;
  auto grads = GradShard::Create(&layout, 0, &group, &queue, nullptr,
                                 {.stage = 1, .bf16_wire = false});
  ASSERT_TRUE(grads.ok()) << grads.status();
  GradShard& g = **grads;
  uint64_t all = 0;
  for (const UnitInfo& u : layout.units()) all += u.padded * sizeof(float);
  EXPECT_EQ(g.unit_grads_peak(), all);
  ASSERT_TRUE(g.BeginStep().ok());
  auto a = g.Buffer(0, false);
  auto b = g.Buffer(0, true);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->get(), b->get());
  g.Span(0, *a)[5] = 2.0f;
  ASSERT_TRUE(g.BeginStep().ok());
  EXPECT_EQ(g.Span(0, *a)[5], 0.0f);
}

TEST(GradShardTest, AStageOutsideOneToThreeIsRefused) {
  const FlatLayout layout = TinyLayout(1);
  MirrorGroup group(0, 1);
  CommQueue queue;
  for (int stage : {0, 4}) {
    auto grads = GradShard::Create(&layout, 0, &group, &queue, nullptr,
                                   {.stage = stage, .bf16_wire = false});
    ASSERT_FALSE(grads.ok());
    EXPECT_EQ(grads.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(grads.status().message().find("stage"), std::string::npos);
  }
}

}  // namespace
}  // namespace zeroshard
