// The flat layout: intersections, and property tests over random manifests,
// server counts S and worker counts N.
#include "common/layout.h"

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace zeroshard {
namespace {

TEST(IntersectTest, Cases) {
  EXPECT_EQ(Intersect({0, 10}, {5, 20}), (FlatRange{5, 10}));
  EXPECT_EQ(Intersect({5, 20}, {0, 10}), (FlatRange{5, 10}));
  EXPECT_EQ(Intersect({0, 10}, {2, 3}), (FlatRange{2, 3}));
  EXPECT_TRUE(Intersect({0, 10}, {10, 20}).empty());  // touching
  EXPECT_TRUE(Intersect({0, 10}, {30, 40}).empty());  // disjoint
  const FlatRange d = Intersect({30, 40}, {0, 10});
  EXPECT_TRUE(d.empty());
  EXPECT_EQ(d.begin, d.end);
  EXPECT_TRUE(Intersect({4, 4}, {0, 10}).empty());
  EXPECT_TRUE((FlatRange{0, 10}).Contains({0, 10}));
  EXPECT_FALSE((FlatRange{0, 10}).Contains({5, 11}));
}

TEST(CheckDisjointTest, Cases) {
  EXPECT_TRUE(CheckDisjoint({}).ok());
  EXPECT_TRUE(CheckDisjoint({{0, 10}, {10, 20}, {30, 31}}).ok());  // touching
  EXPECT_TRUE(CheckDisjoint({{20, 30}, {0, 10}}).ok());            // any order
  const absl::Status s = CheckDisjoint({{20, 30}, {0, 10}, {25, 26}});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("[20, 30) and [25, 26) overlap"), std::string::npos)
      << s;
  // Empty ranges hold no element, and do not hide an overlap of others.
  EXPECT_TRUE(CheckDisjoint({{5, 5}, {0, 10}}).ok());
  EXPECT_FALSE(CheckDisjoint({{0, 10}, {5, 5}, {7, 9}}).ok());
}

ModelManifest RandomManifest(std::mt19937_64& rng, uint32_t partitions) {
  ModelManifest m;
  m.partition_count = partitions;
  const int units = 1 + rng() % 6;
  int tensor_id = 0;
  for (int u = 0; u < units; ++u) {
    UnitSpec unit{absl::StrCat("unit_", u), {}};
    const int tensors = 1 + rng() % 4;
    for (int t = 0; t < tensors; ++t) {
      std::vector<int64_t> shape;
      const int dims = 1 + rng() % 3;
      for (int d = 0; d < dims; ++d) shape.push_back(1 + rng() % (d == 0 ? 700 : 40));
      unit.tensors.push_back({absl::StrCat("t", tensor_id++), shape});
    }
    m.units.push_back(unit);
  }
  return m;
}

void CheckLayout(const FlatLayout& layout, std::mt19937_64& rng) {
  const uint32_t S = layout.num_servers(), N = layout.num_workers();
  const uint64_t pad = kFlatAlignment * layout.manifest().partition_count;
  // Units and tensors.
  uint64_t offset = 0, params = 0;
  for (size_t u = 0; u < layout.units().size(); ++u) {
    const UnitInfo& unit = layout.units()[u];
    ASSERT_EQ(unit.offset, offset);
    ASSERT_EQ(unit.padded % pad, 0u);
    ASSERT_GE(unit.padded, unit.numel);
    ASSERT_LT(unit.padded - unit.numel, pad);
    uint64_t t_off = unit.offset;
    for (int ti : unit.tensors) {
      const TensorInfo& t = layout.tensors()[ti];
      uint64_t numel = 1;
      for (int64_t d : t.shape) numel *= d;
      ASSERT_EQ(t.numel, numel);
      ASSERT_EQ(t.offset, t_off);
      ASSERT_EQ(t.unit, static_cast<int>(u));
      auto found = layout.FindTensor(t.name);
      ASSERT_TRUE(found.ok());
      ASSERT_EQ(*found, ti);
      t_off += numel;
    }
    ASSERT_EQ(t_off, unit.offset + unit.numel);
    offset += unit.padded;
    params += unit.numel;
  }
  ASSERT_EQ(layout.total_elems(), offset);
  ASSERT_EQ(layout.param_elems(), params);
  const uint64_t total = layout.total_elems();

  // Server ranges partition [0, total) contiguously, 64-aligned.
  uint64_t at = 0;
  for (uint32_t k = 0; k < S; ++k) {
    const FlatRange r = layout.ServerRange(k);
    ASSERT_EQ(r, ServerRangeFor(total, S, k));
    ASSERT_EQ(r.begin, at) << "server " << k;
    ASSERT_LE(r.begin, r.end);
    ASSERT_EQ(r.begin % kFlatAlignment, 0u);
    ASSERT_EQ(r.end % kFlatAlignment, 0u);
    // Balanced: no server owns more than its share plus one alignment unit.
    ASSERT_LE(r.size(), total / S + kFlatAlignment);
    for (uint64_t o : {r.begin, r.end - 1, r.begin + (r.size() / 2)}) {
      if (r.empty()) break;
      ASSERT_EQ(layout.ServerOf(o), k) << "offset " << o;
    }
    at = r.end;
  }
  ASSERT_EQ(at, total);
  for (int i = 0; i < 200; ++i) {
    const uint64_t o = rng() % total;
    ASSERT_TRUE(layout.ServerRange(layout.ServerOf(o)).Contains({o, o + 1}));
  }

  // Worker ranges partition every unit into N equal, aligned pieces.
  for (size_t u = 0; u < layout.units().size(); ++u) {
    const UnitInfo& unit = layout.units()[u];
    uint64_t w_at = unit.offset;
    for (uint32_t r = 0; r < N; ++r) {
      const FlatRange wr = layout.WorkerUnitRange(r, static_cast<int>(u));
      ASSERT_EQ(wr.begin, w_at);
      ASSERT_EQ(wr.size(), unit.padded / N);
      ASSERT_EQ(wr.begin % kFlatAlignment, 0u);
      ASSERT_EQ(layout.WorkerRanges(r)[u], wr);
      w_at = wr.end;
    }
    ASSERT_EQ(w_at, unit.offset + unit.padded);
  }

  // SplitByServer: exact, ordered, each piece inside its server's range.
  std::vector<FlatRange> probes;
  for (uint32_t r = 0; r < N; ++r) {
    for (const FlatRange& wr : layout.WorkerRanges(r)) probes.push_back(wr);
  }
  for (int i = 0; i < 100; ++i) {
    const uint64_t a = rng() % (total + 1), b = rng() % (total + 1);
    probes.push_back({std::min(a, b), std::max(a, b)});
  }
  probes.push_back({0, total});
  for (const FlatRange& p : probes) {
    const std::vector<ServerSlice> pieces = layout.SplitByServer(p);
    if (p.empty()) {
      ASSERT_TRUE(pieces.empty());
      continue;
    }
    uint64_t cur = p.begin;
    int last_server = -1;
    for (const ServerSlice& s : pieces) {
      ASSERT_FALSE(s.range.empty());
      ASSERT_EQ(s.range.begin, cur);
      ASSERT_GT(s.server, last_server);
      ASSERT_TRUE(layout.ServerRange(s.server).Contains(s.range));
      cur = s.range.end;
      last_server = s.server;
    }
    ASSERT_EQ(cur, p.end);
  }
}

TEST(FlatLayoutTest, PropertiesOverRandomShapesServersAndWorkers) {
  const uint64_t seed = std::random_device{}();
  std::mt19937_64 rng(seed);
  const uint32_t partition_counts[] = {1, 2, 3, 4, 6, 8};
  for (int iter = 0; iter < 300; ++iter) {
    const uint32_t pc = partition_counts[rng() % 6];
    std::vector<uint32_t> divisors;
    for (uint32_t d = 1; d <= pc; ++d) {
      if (pc % d == 0) divisors.push_back(d);
    }
    const uint32_t N = divisors[rng() % divisors.size()];
    const uint32_t S = 1 + rng() % (iter % 10 == 0 ? 40 : 7);
    const ModelManifest m = RandomManifest(rng, pc);
    auto layout = FlatLayout::Create(m, S, N);
    ASSERT_TRUE(layout.ok()) << layout.status();
    SCOPED_TRACE(absl::StrCat("seed=", seed, " iter=", iter, " S=", S, " N=", N,
                              " pc=", pc, " total=", layout->total_elems()));
    CheckLayout(*layout, rng);
    if (HasFatalFailure()) return;
  }
}

TEST(FlatLayoutTest, ServerRangeForLargeTotals) {
  std::mt19937_64 rng(std::random_device{}());
  for (int i = 0; i < 1000; ++i) {
    const uint64_t total = (rng() % (uint64_t{1} << 42)) * kFlatAlignment;
    const uint32_t S = 1 + rng() % 1000;
    uint64_t at = 0;
    for (uint32_t k = 0; k < S; ++k) {
      const FlatRange r = ServerRangeFor(total, S, k);
      ASSERT_EQ(r.begin, at);
      ASSERT_EQ(r.begin % kFlatAlignment, 0u);
      at = r.end;
    }
    ASSERT_EQ(at, total);
  }
}

ModelManifest SmallManifest() {
  return {{{"a", {{"x", {3, 5}}, {"y", {7}}}}, {"b", {{"z", {2, 2}}}}}, 2};
}

TEST(FlatLayoutTest, SmallExample) {
  auto layout = FlatLayout::Create(SmallManifest(), 2, 2);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->param_elems(), 15u + 7u + 4u);
  EXPECT_EQ(layout->total_elems(), 256u);  // two units padded to 128
  EXPECT_EQ(layout->ServerRange(0), (FlatRange{0, 128}));
  EXPECT_EQ(layout->ServerRange(1), (FlatRange{128, 256}));
  EXPECT_EQ(layout->WorkerUnitRange(1, 0), (FlatRange{64, 128}));
  EXPECT_EQ(layout->tensors()[1].offset, 15u);
  EXPECT_EQ(layout->tensors()[2].offset, 128u);
  EXPECT_EQ(layout->FindTensor("nope").status().code(), absl::StatusCode::kNotFound);
}

void ExpectInvalid(const ModelManifest& m, uint32_t S, uint32_t N,
                   const std::string& needle) {
  auto layout = FlatLayout::Create(m, S, N);
  ASSERT_FALSE(layout.ok()) << needle;
  EXPECT_EQ(layout.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(layout.status().message().find(needle), absl::string_view::npos)
      << layout.status();
}

TEST(FlatLayoutTest, RejectsBadInput) {
  ExpectInvalid(SmallManifest(), 0, 1, "num_servers");
  ExpectInvalid(SmallManifest(), 1, 0, "num_workers");
  ExpectInvalid(SmallManifest(), 1, 3, "divide");
  ModelManifest m = SmallManifest();
  m.partition_count = 0;
  ExpectInvalid(m, 1, 1, "partition_count");
  ExpectInvalid({{}, 1}, 1, 1, "no units");
  m = SmallManifest();
  m.units[1].name = "a";
  ExpectInvalid(m, 1, 1, "duplicate unit name 'a'");
  m = SmallManifest();
  m.units[1].tensors[0].name = "x";
  ExpectInvalid(m, 1, 1, "duplicate tensor name 'x'");
  m = SmallManifest();
  m.units[0].tensors[1].shape = {0};
  ExpectInvalid(m, 1, 1, "non-positive dimension");
  m.units[0].tensors[1].shape = {4, -2};
  ExpectInvalid(m, 1, 1, "non-positive dimension -2");
  m = SmallManifest();
  m.units[1].tensors.clear();
  ExpectInvalid(m, 1, 1, "no tensors");
  m = SmallManifest();
  m.units[0].name = "";
  ExpectInvalid(m, 1, 1, "no name");
  m = SmallManifest();
  m.units[0].tensors[0].name = "";
  ExpectInvalid(m, 1, 1, "no name");
  m = SmallManifest();
  m.units[0].tensors[0].shape = {int64_t{1} << 30, int64_t{1} << 30};
  ExpectInvalid(m, 1, 1, "too large");
}

}  // namespace
}  // namespace zeroshard
