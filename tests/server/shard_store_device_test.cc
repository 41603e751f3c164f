// --placement=device against --placement=host (CMake CUDA builds only; the
// comparisons skip without a GPU and say so): the same writes, AdamW updates
// (FP32 and BF16 gradients, with and without the optimizer pool), reads,
// snapshot copies and norms give the same bits in both stores.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "common/dtype.h"
#include "gtest/gtest.h"
#include "optim/optimizer.h"
#include "optim/optimizer_pool.h"
#include "server/device_transfer.h"
#include "server/placement.h"
#include "server/shard_store.h"
#include "tests/support/cuda_device.h"
#include "tests/support/test_seed.h"

namespace zeroshard {
namespace {

constexpr uint64_t kChunk = 4096;
const UpdateRule& kAdamW = UpdateRuleFor(OptimizerKind::kAdamW);
// Several chunks, a short last one, and an owned range that does not start
// at zero (offsets are global).
constexpr FlatRange kOwned{128, 128 + 3 * kChunk + 1000};

std::vector<float> Normal(size_t n, float sd, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, sd);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

struct Whole {
  std::vector<float> master, m, v, read32;
  std::vector<uint16_t> mirror;
};

Whole ReadWhole(const ShardStore& store) {
  const size_t n = store.owned().size();
  Whole w;
  w.master.resize(n);
  w.m.resize(n);
  w.v.resize(n);
  w.read32.resize(n);
  w.mirror.resize(n);
  for (size_t c = 0; c < store.num_chunks(); ++c) {
    const FlatRange r = store.ChunkRange(c);
    const size_t i = r.begin - store.owned().begin;
    EXPECT_TRUE(store.Read(r, DType::kBf16, w.mirror.data() + i).ok());
    EXPECT_TRUE(store.Read(r, DType::kFp32, w.read32.data() + i).ok());
    const absl::Status s =
        store.WithChunkLocked(c, [&](const ShardStore::ChunkArrays& a) {
          std::copy(a.master, a.master + r.size(), w.master.data() + i);
          std::copy(a.slots[0], a.slots[0] + r.size(), w.m.data() + i);
          std::copy(a.slots[1], a.slots[1] + r.size(), w.v.data() + i);
        });
    EXPECT_TRUE(s.ok()) << s;
  }
  return w;
}

// Bit equality (NaN payloads included), naming the first difference.
template <typename T>
void ExpectSameBits(const std::vector<T>& a, const std::vector<T>& b,
                    const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(T)) != 0) {
      ADD_FAILURE() << what << " differs first at element " << i << ": "
                    << a[i] << " (host) vs " << b[i] << " (device)";
      return;
    }
  }
}

void ExpectSameState(const ShardStore& host, const ShardStore& device) {
  const Whole h = ReadWhole(host), d = ReadWhole(device);
  ExpectSameBits(h.master, d.master, "master");
  ExpectSameBits(h.m, d.m, "exp_avg");
  ExpectSameBits(h.v, d.v, "exp_avg_sq");
  ExpectSameBits(h.read32, d.read32, "Read(FP32)");
  ExpectSameBits(h.mirror, d.mirror, "Read(BF16) (the mirror)");
  const absl::StatusOr<StateNorms> hn = host.Norms(), dn = device.Norms();
  ASSERT_TRUE(hn.ok() && dn.ok());
  EXPECT_EQ(hn->master, dn->master);
  EXPECT_EQ(hn->slots, dn->slots);
}

TEST(ShardStoreDeviceTest, MatchesTheHostPlacementBitForBit) {
  ZS_SKIP_WITHOUT_CUDA_DEVICE();
  const uint64_t seed = testing::TestSeed();
  SCOPED_TRACE(testing::SeedTrace(seed));
  std::mt19937_64 rng(seed);
  ASSERT_TRUE(SelectStateDevice(0).ok());
  auto host = ShardStore::Create(kOwned, kChunk, Placement::kHost, kAdamW);
  auto device = ShardStore::Create(kOwned, kChunk, Placement::kDevice, kAdamW);
  ASSERT_TRUE(host.ok()) << host.status();
  ASSERT_TRUE(device.ok()) << device.status();
  const size_t n = kOwned.size();

  ASSERT_TRUE((*host)->FillZeros().ok());
  ASSERT_TRUE((*device)->FillZeros().ok());
  ExpectSameState(**host, **device);

  // A restore: master, m, v from random arrays.
  std::vector<float> master = Normal(n, 1.0f, rng), m = Normal(n, 0.1f, rng),
                     v = Normal(n, 0.01f, rng);
  for (float& x : v) x *= x;
  ASSERT_TRUE((*host)->WriteState(kOwned, master.data(), {m.data(), v.data()}).ok());
  ASSERT_TRUE(
      (*device)->WriteState(kOwned, master.data(), {m.data(), v.data()}).ok());
  ExpectSameState(**host, **device);

  // Three AdamW steps: FP32 gradients, BF16 gradients, then FP32 spread over
  // the optimizer pool, each in several segments per chunk; the segments
  // start at odd offsets, as received bytes may.
  OptimizerConfig config;
  config.lr = 1e-3;
  config.weight_decay = 0.1;
  OptimizerPool pool(2);
  for (int step = 1; step <= 3; ++step) {
    std::vector<float> g = Normal(n, 0.05f, rng);
    g[7] = 0.0f;
    g[8] = -0.0f;
    std::vector<uint16_t> g16(n);
    FloatToBf16Array(g.data(), g16.data(), n);
    const bool bf16 = step == 2;
    for (size_t c = 0; c < (*host)->num_chunks(); ++c) {
      const FlatRange r = (*host)->ChunkRange(c);
      std::vector<ShardStore::ChunkUpdate> updates;
      for (uint64_t b = r.begin; b < r.end;) {
        const uint64_t e = std::min<uint64_t>(r.end, b + 1531);
        const size_t i = b - kOwned.begin;
        updates.push_back(
            {MakeAdamStep(config, step, 0.5f),
             bf16 ? GradView::Bf16(g16.data() + i) : GradView::Fp32(g.data() + i),
             {b, e}});
        b = e;
      }
      OptimizerPool* p = step == 3 ? &pool : nullptr;
      ASSERT_TRUE((*host)->ApplyUpdatesInChunk(c, updates, p).ok());
      const absl::Status s = (*device)->ApplyUpdatesInChunk(c, updates, p);
      ASSERT_TRUE(s.ok()) << s;
    }
    SCOPED_TRACE(step);
    ExpectSameState(**host, **device);
  }

  // SetWeights: BF16 over a range crossing a chunk boundary, FP32 inside one.
  const FlatRange cross{kOwned.begin + kChunk - 100, kOwned.begin + kChunk + 333};
  std::vector<uint16_t> w16(cross.size());
  const std::vector<float> w = Normal(cross.size(), 2.0f, rng);
  FloatToBf16Array(w.data(), w16.data(), w.size());
  ASSERT_TRUE((*host)->WriteWeights(cross, DType::kBf16, w16.data()).ok());
  ASSERT_TRUE((*device)->WriteWeights(cross, DType::kBf16, w16.data()).ok());
  const FlatRange inside{kOwned.begin + 10, kOwned.begin + 20};
  ASSERT_TRUE((*host)->WriteWeights(inside, DType::kFp32, w.data()).ok());
  ASSERT_TRUE((*device)->WriteWeights(inside, DType::kFp32, w.data()).ok());
  ExpectSameState(**host, **device);
  EXPECT_TRUE((*device)->fault().ok());
}

TEST(ShardStoreDeviceTest, TheStateLivesInDeviceMemory) {
  ZS_SKIP_WITHOUT_CUDA_DEVICE();
  ASSERT_TRUE(SelectStateDevice(0).ok());
  auto device = ShardStore::Create(kOwned, kChunk, Placement::kDevice, kAdamW);
  ASSERT_TRUE(device.ok()) << device.status();
  ASSERT_TRUE((*device)->FillZeros().ok());
  // The chunk arrays handed out are host copies, not the device buffers.
  const absl::Status s =
      (*device)->WithChunkLocked(0, [&](const ShardStore::ChunkArrays& a) {
        cudaPointerAttributes attr;
        ASSERT_EQ(cudaPointerGetAttributes(&attr, a.master), cudaSuccess);
        EXPECT_NE(attr.type, cudaMemoryTypeDevice);
        EXPECT_EQ(a.master[0], 0.0f);
      });
  EXPECT_TRUE(s.ok()) << s;
  const auto bytes = (*device)->BytesByKind();
  EXPECT_EQ(bytes.at("master"), kOwned.size() * sizeof(float));
  EXPECT_EQ(bytes.at("mirror"), kOwned.size() * sizeof(uint16_t));
}

}  // namespace
}  // namespace zeroshard
