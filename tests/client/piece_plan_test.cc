// PlanPieces: pieces tile the range exactly, in order, each inside one
// server and under the message limit; property-tested over random layouts.
#include "client/piece_plan.h"

#include <random>

#include "gtest/gtest.h"

namespace zeroshard {
namespace {

FlatLayout RandomLayout(std::mt19937_64& rng, uint32_t servers) {
  ModelManifest m;
  m.partition_count = 1 + rng() % 4;
  const int units = 1 + rng() % 5;
  for (int u = 0; u < units; ++u) {
    UnitSpec unit{"u" + std::to_string(u), {}};
    const int tensors = 1 + rng() % 3;
    for (int t = 0; t < tensors; ++t) {
      unit.tensors.push_back({unit.name + ".t" + std::to_string(t),
                              {static_cast<int64_t>(1 + rng() % 3000)}});
    }
    m.units.push_back(unit);
  }
  return *FlatLayout::Create(m, servers, 1);
}

TEST(PiecePlanTest, PiecesTileTheRangeOnOwningServers) {
  std::mt19937_64 rng(1234);
  for (int trial = 0; trial < 300; ++trial) {
    const uint32_t S = 1 + rng() % 5;
    FlatLayout layout = RandomLayout(rng, S);
    const uint64_t T = layout.total_elems();
    const uint64_t a = rng() % T;
    const uint64_t b = a + 1 + rng() % (T - a);
    const DType dtype = rng() % 2 ? DType::kFp32 : DType::kBf16;
    const size_t limit = 1 + rng() % 5000;
    auto pieces = PlanPieces(layout, {a, b}, dtype, limit);
    ASSERT_TRUE(pieces.ok()) << pieces.status();
    uint64_t at = a;
    for (const PlannedPiece& p : *pieces) {
      ASSERT_EQ(p.range.begin, at);
      ASSERT_FALSE(p.range.empty());
      ASSERT_LE(p.range.size() * DTypeSize(dtype),
                std::max(limit, DTypeSize(dtype)));
      ASSERT_TRUE(layout.ServerRange(p.server).Contains(p.range));
      ASSERT_EQ(p.byte_offset, (p.range.begin - a) * DTypeSize(dtype));
      at = p.range.end;
    }
    ASSERT_EQ(at, b);
  }
}

TEST(PiecePlanTest, FullMessagesAreWholeAlignmentUnits) {
  std::mt19937_64 rng(7);
  FlatLayout layout = RandomLayout(rng, 1);
  auto pieces = *PlanPieces(layout, {0, layout.total_elems()}, DType::kBf16,
                            1000);  // 500 elements -> 448 per piece
  for (size_t i = 0; i + 1 < pieces.size(); ++i) {
    EXPECT_EQ(pieces[i].range.size() % kFlatAlignment, 0u);
  }
  EXPECT_EQ(PieceElems(DType::kFp32, kMaxClientPieceBytes), 262144u);
  EXPECT_EQ(PieceElems(DType::kFp32, 3), 1u);
}

TEST(PiecePlanTest, RejectsBadInput) {
  std::mt19937_64 rng(9);
  FlatLayout layout = RandomLayout(rng, 2);
  const uint64_t T = layout.total_elems();
  EXPECT_FALSE(PlanPieces(layout, {5, 5}, DType::kFp32, 1024).ok());
  EXPECT_FALSE(PlanPieces(layout, {T - 1, T + 1}, DType::kFp32, 1024).ok());
  EXPECT_FALSE(PlanPieces(layout, {0, 1}, DType::kFp16, 1024).ok());
  EXPECT_FALSE(PlanPieces(layout, {0, 1}, DType::kFp32, 0).ok());
  EXPECT_FALSE(
      PlanPieces(layout, {0, 1}, DType::kFp32, kMaxClientPieceBytes + 1).ok());
  EXPECT_TRUE(ValidateDisjoint(layout, {{FlatRange{10, 20}, FlatRange{0, 10}}}).ok());
  EXPECT_FALSE(ValidateDisjoint(layout, {{FlatRange{10, 20}, FlatRange{0, 11}}}).ok());
}

}  // namespace
}  // namespace zeroshard
