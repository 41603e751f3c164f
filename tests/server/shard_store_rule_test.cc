// The store holds whatever state slots its update rule declares
// (optim/update_rule.h): a rule of one slot (SGD with momentum, written
// here) is stored, updated, measured and restored through the same calls
// as AdamW's two, and rules the store cannot hold are refused up front.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/dtype.h"
#include "gtest/gtest.h"
#include "optim/update_rule.h"
#include "server/shard_store.h"

namespace zeroshard {
namespace {

// m = beta1 * m + coefficient * g; p -= lr * m. One slot, "momentum_buffer".
class MomentumRule final : public UpdateRule {
 public:
  explicit MomentumRule(std::vector<StateSlot> slots = {
                            {"momentum_buffer", SlotFormat::kFp32}})
      : slots_(std::move(slots)) {}
  absl::string_view name() const override { return "sgd_momentum"; }
  absl::Span<const StateSlot> slots() const override { return slots_; }
  AdamStep MakeStep(const OptimizerConfig& config, uint64_t t,
                    float coefficient, double weight_decay,
                    double lr_scale) const override {
    AdamStep s;
    s.lr = static_cast<float>(config.lr * lr_scale);
    s.beta1 = static_cast<float>(config.beta1);
    s.coefficient = coefficient;
    return s;
  }
  absl::Status Update(const AdamStep& step, GradView grad,
                      const StateSlice& slice) const override {
    for (size_t i = 0; i < slice.n; ++i) {
      const float g =
          (grad.bf16 ? Bf16ToFloat(static_cast<const uint16_t*>(grad.data)[i])
                     : static_cast<const float*>(grad.data)[i]) *
          step.coefficient;
      float& m = slice.slots[0][i];
      m = step.beta1 * m + g;
      slice.master[i] -= step.lr * m;
      if (slice.mirror != nullptr) slice.mirror[i] = FloatToBf16(slice.master[i]);
    }
    return absl::OkStatus();
  }
  absl::Status UpdateOnDevice(const AdamStep&, GradView, const StateSlice&,
                              void*) const override {
    return absl::UnimplementedError("no device kernel");
  }
  bool HasDeviceUpdate() const override { return false; }
  absl::string_view KernelName() const override { return "scalar"; }

 private:
  std::vector<StateSlot> slots_;
};

constexpr FlatRange kOwned{128, 128 + 3 * 1024 + 100};
constexpr uint64_t kChunk = 1024;

TEST(ShardStoreRuleTest, AOneSlotRuleIsStoredUpdatedAndRestored) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const MomentumRule rule;
  auto store = ShardStore::Create(kOwned, kChunk, Placement::kHost, rule);
  ASSERT_TRUE(store.ok()) << store.status();
  ShardStore& s = **store;
  EXPECT_EQ(s.num_slots(), 1u);
  EXPECT_EQ(&s.rule(), &rule);
  const size_t n = kOwned.size();
  const auto bytes = s.BytesByKind();
  EXPECT_EQ(bytes.at("momentum_buffer"), n * sizeof(float));
  EXPECT_EQ(bytes.count("exp_avg"), 0u);

  // A restore: master and the slot from random values.
  std::vector<float> master(n), m(n);
  for (float& x : master) x = normal(rng);
  for (float& x : m) x = normal(rng);
  ASSERT_TRUE(s.WriteState(kOwned, master.data(), {m.data()}).ok());
  // Two arrays for a one-slot rule: refused, nothing written.
  const std::vector<float> other(n, 9.0f);
  EXPECT_EQ(s.WriteState(kOwned, other.data(), {other.data(), other.data()})
                .code(),
            absl::StatusCode::kInvalidArgument);

  // A step on every chunk, checked against the rule applied by hand.
  OptimizerConfig config;
  config.lr = 0.05;
  config.beta1 = 0.8;
  std::vector<float> g(n);
  for (float& x : g) x = normal(rng);
  const AdamStep step = rule.MakeStep(config, 1, 0.5f, 0.0, 1.0);
  for (size_t c = 0; c < s.num_chunks(); ++c) {
    const FlatRange r = s.ChunkRange(c);
    const ShardStore::ChunkUpdate u{
        step, GradView::Fp32(g.data() + (r.begin - kOwned.begin)), r};
    ASSERT_TRUE(s.ApplyUpdatesInChunk(c, {&u, 1}, nullptr).ok());
  }
  std::vector<uint16_t> want_mirror(n);
  StateSlice want{.master = master.data(), .mirror = want_mirror.data(), .n = n};
  want.slots[0] = m.data();
  ASSERT_TRUE(rule.Update(step, GradView::Fp32(g.data()), want).ok());

  double norm_w = 0, norm_m = 0;
  for (size_t c = 0; c < s.num_chunks(); ++c) {
    ASSERT_TRUE(s.WithChunkLocked(c, [&](const ShardStore::ChunkArrays& a) {
                   const size_t i = a.range.begin - kOwned.begin;
                   EXPECT_EQ(std::memcmp(a.master, master.data() + i,
                                         a.range.size() * 4), 0) << c;
                   EXPECT_EQ(std::memcmp(a.slots[0], m.data() + i,
                                         a.range.size() * 4), 0) << c;
                 }).ok());
    std::vector<uint16_t> mirror(s.ChunkRange(c).size());
    ASSERT_TRUE(s.Read(s.ChunkRange(c), DType::kBf16, mirror.data()).ok());
    const size_t i = s.ChunkRange(c).begin - kOwned.begin;
    EXPECT_EQ(std::memcmp(mirror.data(), want_mirror.data() + i,
                          mirror.size() * 2), 0) << c;
  }
  for (size_t i = 0; i < n; ++i) {
    norm_w += static_cast<double>(master[i]) * master[i];
    norm_m += static_cast<double>(m[i]) * m[i];
  }
  auto norms = s.Norms();
  ASSERT_TRUE(norms.ok()) << norms.status();
  ASSERT_EQ(norms->slots.size(), 1u);
  EXPECT_DOUBLE_EQ(norms->master, std::sqrt(norm_w));
  EXPECT_DOUBLE_EQ(norms->slots[0], std::sqrt(norm_m));
}

// A whole-tensor update writes its copies back when it succeeds; when it
// fails the store is poisoned (every later call refused), since the step's
// claim on the chunks stands: the server must not serve a tensor left
// behind as if it were updated.
TEST(ShardStoreRuleTest, AFailedWholeTensorUpdatePoisonsTheStore) {
  const MomentumRule rule;
  auto store = ShardStore::Create(kOwned, kChunk, Placement::kHost, rule);
  ASSERT_TRUE(store.ok()) << store.status();
  ShardStore& s = **store;
  const size_t n = kOwned.size();
  std::vector<float> master(n), m(n, 0.5f);
  for (size_t i = 0; i < n; ++i) master[i] = 0.001f * static_cast<float>(i);
  ASSERT_TRUE(s.WriteState(kOwned, master.data(), {m.data()}).ok());
  // Across the first chunk boundary: two locks, one at a time.
  const FlatRange whole{kOwned.begin + 1000, kOwned.begin + 1100};
  ASSERT_TRUE(s.UpdateWholeRange(whole, [&](const StateSlice& x) {
                 EXPECT_EQ(x.n, whole.size());
                 EXPECT_EQ(x.mirror, nullptr);
                 for (size_t i = 0; i < x.n; ++i) x.master[i] += 1.0f;
                 x.slots[0][0] = 7.0f;
                 return absl::OkStatus();
               }).ok());
  std::vector<float> got(whole.size());
  for (uint64_t at = whole.begin; at < whole.end;) {
    const FlatRange r{at, std::min(whole.end, s.ChunkRange(s.ChunkOf(at)).end)};
    ASSERT_TRUE(s.Read(r, DType::kFp32, got.data() + (at - whole.begin)).ok());
    at = r.end;
  }
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i], master[1000 + i] + 1.0f) << i;
  }

  const absl::Status failed = s.UpdateWholeRange(
      whole, [&](const StateSlice& x) {
        x.master[0] = -99.0f;  // on the copy only
        return absl::InvalidArgumentError("non-finite statistics");
      });
  EXPECT_EQ(failed.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(s.fault().ok());
  EXPECT_NE(s.fault().message().find("non-finite statistics"),
            std::string::npos) << s.fault();
  float first = 0;
  EXPECT_FALSE(s.Read({whole.begin, whole.begin + 1}, DType::kFp32, &first).ok());
  EXPECT_FALSE(s.WithChunkLocked(1, [](const ShardStore::ChunkArrays&) {}).ok());
}

TEST(ShardStoreRuleTest, RulesTheStoreCannotHoldAreRefused) {
  // 8-bit slots: chunks must hold whole blocks, and stay off the device.
  const UpdateRule& q8 = UpdateRuleFor(OptimizerKind::kAdamW8bit);
  auto a = ShardStore::Create(kOwned, kChunk, Placement::kHost, q8);
  EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument) << a.status();
  EXPECT_NE(a.status().message().find("multiple of 2048"), std::string::npos);
  auto d = ShardStore::Create(kOwned, 4096, Placement::kDevice, q8);
  EXPECT_EQ(d.status().code(), absl::StatusCode::kFailedPrecondition) << d.status();
  std::vector<StateSlot> five(kMaxStateSlots + 1, {"s", SlotFormat::kFp32});
  const MomentumRule many(five);
  auto b = ShardStore::Create(kOwned, kChunk, Placement::kHost, many);
  EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument)
      << b.status();
}

TEST(ShardStoreRuleTest, AdamWDeclaresItsTwoMoments) {
  const UpdateRule& adamw = UpdateRuleFor(OptimizerKind::kAdamW);
  EXPECT_EQ(&adamw, &UpdateRuleFor(OptimizerKind::kAdam));
  ASSERT_EQ(adamw.slots().size(), 2u);
  EXPECT_STREQ(adamw.slots()[0].name, "exp_avg");
  EXPECT_STREQ(adamw.slots()[1].name, "exp_avg_sq");
  EXPECT_EQ(adamw.SlotIndex("exp_avg_sq"), 1);
  EXPECT_EQ(adamw.SlotIndex("momentum_buffer"), -1);
  EXPECT_EQ(adamw.StateBytesPerElement(), 8u);
  EXPECT_EQ(OptimizerStateBytesPerElement(OptimizerKind::kAdamW), 8u);
  auto store = ShardStore::Create(kOwned, kChunk, Placement::kHost, adamw);
  ASSERT_TRUE(store.ok()) << store.status();
  const auto bytes = (*store)->BytesByKind();
  EXPECT_EQ(bytes.at("exp_avg"), kOwned.size() * 4);
  EXPECT_EQ(bytes.at("exp_avg_sq"), kOwned.size() * 4);
}

}  // namespace
}  // namespace zeroshard
