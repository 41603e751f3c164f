// A store under an 8-bit rule (AdamW8bit: exp_avg and exp_avg_sq as codes
// and one scale per 2048 elements, blocks counted from the owned range's
// start): a chunk's updates, however they cut its blocks, are applied
// block by block at once, equal to the reference step over the chunk;
// updates that leave part of a block out are refused; images restore bit
// for bit; Inspect's norms and the byte counts follow the 8-bit slots.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "gtest/gtest.h"
#include "optim/adam8bit.h"
#include "optim/optimizer_pool.h"
#include "optim/quant8.h"
#include "optim/update_rule.h"
#include "server/shard_store.h"

namespace zeroshard {
namespace shard_store_q8_test {
namespace {

// Owned range not starting at a multiple of 2048: the blocks follow it.
constexpr FlatRange kOwned{192, 192 + 3 * 4096 + 1000};
constexpr uint64_t kChunk = 4096;

// The state of the owned range as plain arrays (one 8-bit image per slot).
struct Copy {
  std::vector<float> master;
  std::vector<uint8_t> m, v;
  std::vector<float> m_max, v_max;
  bool operator==(const Copy&) const = default;
};

Copy Read(const ShardStore& s) {
  const size_t n = kOwned.size();
  Copy c{std::vector<float>(n), std::vector<uint8_t>(n), std::vector<uint8_t>(n),
         std::vector<float>(Q8Blocks(n)), std::vector<float>(Q8Blocks(n))};
  for (size_t k = 0; k < s.num_chunks(); ++k) {
    EXPECT_TRUE(s.WithChunkLocked(k, [&](const ShardStore::ChunkArrays& a) {
                   const size_t i = a.range.begin - kOwned.begin, len = a.range.size();
                   EXPECT_EQ(a.slots[0], nullptr);
                   std::memcpy(c.master.data() + i, a.master, len * 4);
                   std::memcpy(c.m.data() + i, a.codes[0], len);
                   std::memcpy(c.v.data() + i, a.codes[1], len);
                   std::memcpy(c.m_max.data() + i / 2048, a.absmax[0], Q8Blocks(len) * 4);
                   std::memcpy(c.v_max.data() + i / 2048, a.absmax[1], Q8Blocks(len) * 4);
                 }).ok());
  }
  return c;
}

// A store under AdamW8bit with random master weights and moments.
std::unique_ptr<ShardStore> RandomStore(std::mt19937_64& rng) {
  auto store = ShardStore::Create(kOwned, kChunk, Placement::kHost,
                                  UpdateRuleFor(OptimizerKind::kAdamW8bit));
  EXPECT_TRUE(store.ok()) << store.status();
  std::normal_distribution<float> normal;
  const size_t n = kOwned.size();
  std::vector<float> w(n), m(n), v(n);
  for (size_t i = 0; i < n; ++i) {
    w[i] = normal(rng);
    m[i] = normal(rng) * 1e-2f;
    v[i] = std::fabs(normal(rng)) * 1e-4f;
  }
  EXPECT_TRUE((*store)->WriteState(kOwned, w.data(), {m.data(), v.data()}).ok());
  return *std::move(store);
}

TEST(ShardStoreQ8Test, UpdatesCuttingBlocksEqualTheReferenceStepOverEachChunk) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  std::unique_ptr<ShardStore> s = RandomStore(rng);
  const UpdateRule& rule = s->rule();
  EXPECT_TRUE(rule.quantized());
  Copy want = Read(*s);
  const size_t n = kOwned.size();
  std::vector<float> g(n);
  for (float& x : g) x = normal(rng);
  OptimizerConfig config;
  config.kind = OptimizerKind::kAdamW8bit;
  config.lr = 1e-2;
  const AdamStep step = rule.MakeStep(config, 3, 0.5f, 0.1, 1.0);
  OptimizerPool pool(2);
  for (size_t c = 0; c < s->num_chunks(); ++c) {
    const FlatRange r = s->ChunkRange(c);
    // Cut at random points (inside blocks), listed out of order.
    std::vector<uint64_t> cuts = {r.begin, r.end};
    std::uniform_int_distribution<uint64_t> at(r.begin + 1, r.end - 1);
    for (int k = 0; k < 5; ++k) cuts.push_back(at(rng));
    std::sort(cuts.begin(), cuts.end());
    cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
    std::vector<ShardStore::ChunkUpdate> updates;
    for (size_t k = cuts.size() - 1; k-- > 0;) {
      updates.push_back({step, GradView::Fp32(g.data() + (cuts[k] - kOwned.begin)),
                         {cuts[k], cuts[k + 1]}});
    }
    ASSERT_TRUE(s->ApplyUpdatesInChunk(c, updates, c % 2 == 0 ? &pool : nullptr).ok());
    // The reference over the whole chunk at once.
    const size_t i = r.begin - kOwned.begin;
    ASSERT_TRUE(Adam8bitUpdateReference(
                    step, GradView::Fp32(g.data() + i),
                    {.master = want.master.data() + i, .exp_avg = want.m.data() + i,
                     .exp_avg_absmax = want.m_max.data() + i / 2048,
                     .exp_avg_sq = want.v.data() + i,
                     .exp_avg_sq_absmax = want.v_max.data() + i / 2048,
                     .mirror = nullptr, .n = r.size()})
                    .ok());
  }
  const Copy got = Read(*s);
  EXPECT_TRUE(got.master == want.master);
  EXPECT_TRUE(got.m == want.m && got.m_max == want.m_max);
  EXPECT_TRUE(got.v == want.v && got.v_max == want.v_max);
  // The mirror follows the master.
  std::vector<uint16_t> mirror(s->ChunkRange(1).size());
  ASSERT_TRUE(s->Read(s->ChunkRange(1), DType::kBf16, mirror.data()).ok());
  EXPECT_EQ(mirror[5], FloatToBf16(want.master[s->ChunkRange(1).begin - kOwned.begin + 5]));
}

TEST(ShardStoreQ8Test, UpdatesLeavingPartOfABlockOutAreRefused) {
  std::mt19937_64 rng(7);
  std::unique_ptr<ShardStore> s = RandomStore(rng);
  const Copy before = Read(*s);
  // Whole blocks, in pieces: fine. The owned range's end closes a block.
  const FlatRange whole[] = {{kOwned.begin + 2048, kOwned.begin + 3000},
                             {kOwned.begin + 3000, kOwned.begin + 4096},
                             {kOwned.end - 1000, kOwned.end}};
  EXPECT_TRUE(s->CheckWholeBlocks(whole).ok());
  const FlatRange part[] = {{kOwned.begin + 2048, kOwned.begin + 3000}};
  const absl::Status st = s->CheckWholeBlocks(part);
  EXPECT_TRUE(absl::IsFailedPrecondition(st)) << st;
  EXPECT_NE(st.message().find(absl::StrCat("[", kOwned.begin + 2048, ", ",
                                           kOwned.begin + 4096, ")")),
            std::string::npos)
      << st;
  // Applied anyway: refused, and the store stops serving (a claim stood).
  std::vector<float> g(1000, 0.5f);
  OptimizerConfig config;
  const ShardStore::ChunkUpdate u{
      s->rule().MakeStep(config, 1, 1.0f, 0.0, 1.0), GradView::Fp32(g.data()),
      {kOwned.begin + 100, kOwned.begin + 1100}};
  EXPECT_FALSE(s->ApplyUpdatesInChunk(0, {&u, 1}, nullptr).ok());
  EXPECT_FALSE(s->fault().ok());
  // FP32 rules take any cut.
  auto fp32 = ShardStore::Create(kOwned, kChunk, Placement::kHost,
                                 UpdateRuleFor(OptimizerKind::kAdamW));
  ASSERT_TRUE(fp32.ok());
  EXPECT_TRUE((*fp32)->CheckWholeBlocks(part).ok());
  (void)before;
}

TEST(ShardStoreQ8Test, ImagesRestoreBitForBitAndNormsAreOfTheValues) {
  std::mt19937_64 rng(std::random_device{}());
  std::unique_ptr<ShardStore> s = RandomStore(rng);
  const Copy c = Read(*s);
  const size_t n = kOwned.size();
  // Bytes: a code each and a scale per block.
  const auto bytes = s->BytesByKind();
  EXPECT_EQ(bytes.at("exp_avg"), n + 4 * Q8Blocks(n));
  EXPECT_EQ(bytes.at("exp_avg_sq"), n + 4 * Q8Blocks(n));
  // Images (codes, then scales) into another store: the same state.
  std::vector<char> m(SlotBytes(SlotFormat::kQ8Signed, n)), v(m.size());
  std::memcpy(m.data(), c.m.data(), n);
  std::memcpy(m.data() + n, c.m_max.data(), c.m_max.size() * 4);
  std::memcpy(v.data(), c.v.data(), n);
  std::memcpy(v.data() + n, c.v_max.data(), c.v_max.size() * 4);
  std::mt19937_64 other_rng(1);
  std::unique_ptr<ShardStore> t = RandomStore(other_rng);
  EXPECT_FALSE(Read(*t) == c);
  ASSERT_TRUE(t->WriteStateImages(c.master.data(), {m.data(), v.data()}).ok());
  EXPECT_TRUE(Read(*t) == c);
  // Norms of the dequantized values.
  std::vector<float> mv(n);
  ASSERT_TRUE(DequantizeBlockwiseReference(c.m, c.m_max, 2048, Quant8Map::kSigned,
                                           absl::MakeSpan(mv)).ok());
  double sum = 0;
  for (float x : mv) sum += static_cast<double>(x) * x;
  auto norms = s->Norms();
  ASSERT_TRUE(norms.ok()) << norms.status();
  EXPECT_DOUBLE_EQ(norms->slots[0], std::sqrt(sum));
  EXPECT_GT(norms->slots[0], 0);
  // A non-finite state cannot be quantized: refused by WriteState.
  std::vector<float> w(n, 1.0f), bad(n, 0.0f), fine(n, 0.0f);
  bad[17] = std::nanf("");
  const absl::Status st = t->WriteState(kOwned, w.data(), {bad.data(), fine.data()});
  EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
}

}  // namespace
}  // namespace shard_store_q8_test
}  // namespace zeroshard
