// The flat layout: intersections, and property tests over random manifests,
// server counts S and worker counts N.
#include "common/layout.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/support/test_seed.h"

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

// Two manifests differ at the first unit whose tensors' names or shapes
// differ, or where one has no more units; padding and keep_whole do not
// count.
TEST(FirstDifferingUnitTest, NamesShapesAndUnitCount) {
  ModelManifest a;
  a.units = {{"e", {{"w", {4, 2}}}}, {"b", {{"x", {2}}, {"y", {2, 2}}}}};
  ModelManifest b = a;
  b.partition_count = 3;
  b.units[1].tensors[0].keep_whole = true;
  EXPECT_EQ(FirstDifferingUnit(a, b), std::nullopt);
  b.units[1].tensors[1].shape = {2, 3};
  EXPECT_EQ(FirstDifferingUnit(a, b), 1u);
  b = a;
  b.units[0].tensors[0].name = "v";
  EXPECT_EQ(FirstDifferingUnit(a, b), 0u);
  b = a;
  b.units.pop_back();
  EXPECT_EQ(FirstDifferingUnit(a, b), 1u);
  EXPECT_EQ(FirstDifferingUnit(b, a), 1u);
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
  bool any_whole = false;
  for (const TensorInfo& t : layout.tensors()) any_whole |= t.keep_whole;
  uint64_t at = 0;
  for (uint32_t k = 0; k < S; ++k) {
    const FlatRange r = layout.ServerRange(k);
    ASSERT_EQ(r.begin, at) << "server " << k;
    ASSERT_LE(r.begin, r.end);
    ASSERT_EQ(r.begin % kFlatAlignment, 0u);
    ASSERT_EQ(r.end % kFlatAlignment, 0u);
    if (!any_whole) {
      ASSERT_EQ(r, ServerRangeFor(total, S, k));
      // Balanced: no server owns more than its share plus one alignment unit.
      ASSERT_LE(r.size(), total / S + kFlatAlignment);
    }
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
  // Each worker's elements together: a 1/N of the flat space.
  for (uint32_t r = 0; r < N; ++r) {
    uint64_t sum = 0;
    for (const FlatRange& wr : layout.WorkerRanges(r)) sum += wr.size();
    ASSERT_EQ(layout.WorkerElems(r), sum);
    ASSERT_EQ(layout.WorkerElems(r) * N, layout.total_elems());
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
  const uint64_t seed = ::zeroshard::testing::TestSeed();
  SCOPED_TRACE(::zeroshard::testing::SeedTrace(seed));
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

// Where keep_whole tensors sit: each on one server, and each boundary the
// aligned cut nearest the even split that lies inside no such tensor (found
// here by marking every forbidden cut, not by the layout's walk), never
// before the previous boundary.
void CheckWholeTensors(const FlatLayout& layout) {
  const uint32_t S = layout.num_servers();
  const uint64_t total = layout.total_elems();
  for (const TensorInfo& t : layout.tensors()) {
    if (!t.keep_whole) continue;
    const uint32_t k = layout.ServerOf(t.offset);
    ASSERT_TRUE(layout.ServerRange(k).Contains(t.range()))
        << t.name << " [" << t.offset << ", " << t.offset + t.numel
        << ") straddles server " << k;
    ASSERT_EQ(layout.SplitByServer(t.range()).size(), 1u) << t.name;
  }
  std::vector<bool> allowed(total / kFlatAlignment + 1, true);
  for (const TensorInfo& t : layout.tensors()) {
    if (!t.keep_whole) continue;
    for (uint64_t c = (t.offset / kFlatAlignment + 1) * kFlatAlignment;
         c < t.offset + t.numel; c += kFlatAlignment) {
      allowed[c / kFlatAlignment] = false;
    }
  }
  uint64_t prev = 0;
  for (uint32_t k = 1; k < S; ++k) {
    const uint64_t ideal = ServerRangeFor(total, S, k).begin;
    uint64_t want = ideal;
    for (uint64_t d = 0;; d += kFlatAlignment) {
      ASSERT_LE(d, total) << "no allowed cut near " << ideal;
      if (d <= ideal && allowed[(ideal - d) / kFlatAlignment]) {
        want = ideal - d;
        break;
      }
      if (ideal + d <= total && allowed[(ideal + d) / kFlatAlignment]) {
        want = ideal + d;
        break;
      }
    }
    want = std::max(want, prev);
    ASSERT_EQ(layout.ServerRange(k).begin, want)
        << "boundary " << k << " (even split at " << ideal << ")";
    prev = want;
  }
}

TEST(FlatLayoutTest, KeepWholeTensorsNeverStraddleAServer) {
  const uint64_t seed = ::zeroshard::testing::TestSeed();
  SCOPED_TRACE(::zeroshard::testing::SeedTrace(seed));
  std::mt19937_64 rng(seed);
  const uint32_t partition_counts[] = {1, 2, 3, 4, 6, 8};
  for (int iter = 0; iter < 200; ++iter) {
    const uint32_t pc = partition_counts[rng() % 6];
    ModelManifest m = RandomManifest(rng, pc);
    // Half the tensors, or every one (adjacent whole tensors whose shared
    // edge is not aligned leave no cut between them).
    const bool all = iter % 4 == 0;
    for (UnitSpec& u : m.units) {
      for (TensorSpec& t : u.tensors) t.keep_whole = all || rng() % 2 == 0;
    }
    const uint32_t N = pc % 2 == 0 ? 2 : 1;
    const uint32_t S = 1 + rng() % (iter % 10 == 0 ? 40 : 9);
    auto layout = FlatLayout::Create(m, S, N);
    ASSERT_TRUE(layout.ok()) << layout.status();
    SCOPED_TRACE(absl::StrCat("seed=", seed, " iter=", iter, " S=", S, " N=", N,
                              " pc=", pc, " total=", layout->total_elems()));
    CheckLayout(*layout, rng);
    if (HasFatalFailure()) return;
    CheckWholeTensors(*layout);
    if (HasFatalFailure()) return;
  }
}

// Worked cases of the boundary walk, and a layout: a 64 x 100 matrix and a
// bias in one unit of 6528 elements, split evenly over two servers at 3264;
// kept whole, the matrix [0, 6400) moves the cut to the nearer of 0 and
// 6400 (3136 away against 3264).
TEST(FlatLayoutTest, WholeTensorCutExamples) {
  const std::vector<FlatRange> whole = {{10, 500}, {500, 700}, {1000, 1100}};
  EXPECT_EQ(WholeTensorCut(whole, 0), 0u);       // holds nothing inside
  EXPECT_EQ(WholeTensorCut(whole, 768), 768u);   // between tensors
  // 448 lies in [10, 500); below, AlignDown(10) = 0; above, 512 lies in
  // [500, 700), so the walk goes on to AlignUp(700) = 704: 448 - 0 > 704 -
  // 448, so 704.
  EXPECT_EQ(WholeTensorCut(whole, 448), 704u);
  EXPECT_EQ(WholeTensorCut(whole, 64), 0u);
  EXPECT_EQ(WholeTensorCut(whole, 1024), 960u);  // [1000, 1100): 960 or 1152
  // A tie goes to the lower cut: 3200 in [0, 6400), cuts 0 and 6400.
  EXPECT_EQ(WholeTensorCut(std::vector<FlatRange>{{0, 6400}}, 3200), 0u);
  auto layout = FlatLayout::Create(
      {{{"u", {{"w", {64, 100}}, {"b", {100}}}}}, 1}, 2, 1);
  ASSERT_TRUE(layout.ok());
  EXPECT_EQ(layout->ServerRange(0), (FlatRange{0, 3264}));  // even split
  ModelManifest m = layout->manifest();
  m.units[0].tensors[0].keep_whole = true;
  layout = FlatLayout::Create(m, 2, 1);
  ASSERT_TRUE(layout.ok());
  EXPECT_TRUE(layout->tensors()[0].keep_whole);
  EXPECT_EQ(layout->ServerRange(0), (FlatRange{0, 6400}));
  EXPECT_EQ(layout->ServerRange(1), (FlatRange{6400, 6528}));
}

TEST(FlatLayoutTest, ServerRangeForLargeTotals) {
  const uint64_t seed = ::zeroshard::testing::TestSeed();
  SCOPED_TRACE(::zeroshard::testing::SeedTrace(seed));
  std::mt19937_64 rng(seed);
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

// The init rule and class travel with each tensor into TensorInfo; a rule
// the servers could not apply is refused naming the tensor.
TEST(FlatLayoutTest, TensorsKeepTheirInitRuleAndClassAndBadOnesAreRefused) {
  ModelManifest m = SmallManifest();
  m.units[0].tensors[1].init = {InitRule::Kind::kNormal, 4.0};
  m.units[0].tensors[1].param_class = TensorClass::kNorm;
  m.units[1].tensors[0].init = {InitRule::Kind::kOnes};
  auto layout = FlatLayout::Create(m, 1, 1);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->tensors()[1].init.std_divisor, 4.0);
  EXPECT_EQ(layout->tensors()[1].param_class, TensorClass::kNorm);
  EXPECT_EQ(layout->tensors()[2].init.kind, InitRule::Kind::kOnes);
  EXPECT_EQ(layout->tensors()[0].init.kind, InitRule::Kind::kNormal);
  EXPECT_EQ(layout->tensors()[0].param_class, TensorClass::kMatrix);
  for (double bad : {0.0, -1.0, std::nan(""), HUGE_VAL}) {
    m = SmallManifest();
    m.units[0].tensors[1].init.std_divisor = bad;
    ExpectInvalid(m, 1, 1, "tensor 'y': init std_divisor");
  }
  m = SmallManifest();
  m.units[1].tensors[0].init.kind = static_cast<InitRule::Kind>(7);
  ExpectInvalid(m, 1, 1, "tensor 'z' has an unknown init rule");
  m = SmallManifest();
  m.units[1].tensors[0].param_class = static_cast<TensorClass>(-1);
  ExpectInvalid(m, 1, 1, "tensor 'z' has an unknown parameter class");
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

// The tensor element at flat offset `o` of `layout`: (tensor, index), or
// (-1, 0) for padding. Found by search, independently of MapBetweenLayouts.
std::pair<int, uint64_t> TensorElementAt(const FlatLayout& layout,
                                         uint64_t o) {
  const auto& ts = layout.tensors();
  auto it = std::upper_bound(
      ts.begin(), ts.end(), o,
      [](uint64_t x, const TensorInfo& t) { return x < t.offset; });
  if (it == ts.begin()) return {-1, 0};
  --it;
  if (o >= it->offset + it->numel) return {-1, 0};
  return {static_cast<int>(it - ts.begin()), o - it->offset};
}

// Smaller tensors than RandomManifest, so that every element can be checked.
ModelManifest SmallRandomManifest(std::mt19937_64& rng) {
  ModelManifest m;
  const int units = 1 + rng() % 5;
  for (int u = 0; u < units; ++u) {
    UnitSpec unit{absl::StrCat("unit_", u), {}};
    const int tensors = 1 + rng() % 4;
    for (int t = 0; t < tensors; ++t) {
      std::vector<int64_t> shape;
      const int dims = 1 + rng() % 3;
      for (int d = 0; d < dims; ++d) {
        shape.push_back(1 + rng() % (d == 0 ? 300 : 9));
      }
      unit.tensors.push_back({absl::StrCat(unit.name, ".t", t), shape});
    }
    m.units.push_back(unit);
  }
  return m;
}

TEST(MapBetweenLayoutsTest, EveryTensorElementMapsToItselfInTheOtherLayout) {
  const uint64_t seed = ::zeroshard::testing::TestSeed();
  SCOPED_TRACE(::zeroshard::testing::SeedTrace(seed));
  std::mt19937_64 rng(seed);
  const uint32_t partition_counts[] = {1, 2, 3, 4, 6, 8};
  for (int iter = 0; iter < 60; ++iter) {
    ModelManifest a = SmallRandomManifest(rng), b = a;
    // Another rule may keep other tensors whole: the model is the same.
    for (UnitSpec& u : a.units) {
      for (TensorSpec& t : u.tensors) t.keep_whole = rng() % 3 == 0;
    }
    a.partition_count = partition_counts[rng() % 6];
    b.partition_count = partition_counts[rng() % 6];
    const uint32_t sa = 1 + rng() % 5, sb = 1 + rng() % 5;
    // Any worker count dividing the partition count.
    const uint32_t na = a.partition_count % 2 == 0 ? 2 : 1;
    auto from = FlatLayout::Create(a, sa, na);
    auto to = FlatLayout::Create(b, sb, b.partition_count);
    ASSERT_TRUE(from.ok() && to.ok());
    const uint64_t total = to->total_elems();
    std::vector<FlatRange> ranges = {{0, total}};
    for (uint32_t k = 0; k < sb; ++k) ranges.push_back(to->ServerRange(k));
    const uint64_t x = rng() % (total + 1), y = rng() % (total + 1);
    ranges.push_back({std::min(x, y), std::max(x, y)});
    for (const FlatRange& range : ranges) {
      SCOPED_TRACE(absl::StrCat("seed=", seed, " iter=", iter, " from S=", sa,
                                " pc=", a.partition_count, " to S=", sb,
                                " pc=", b.partition_count, " range [",
                                range.begin, ", ", range.end, ")"));
      auto moves = MapBetweenLayouts(*from, *to, range);
      ASSERT_TRUE(moves.ok()) << moves.status();
      // Where each element of the range comes from; -1: nowhere.
      std::vector<int64_t> src(range.size(), -1);
      for (size_t i = 0; i < moves->size(); ++i) {
        const FlatMove& mv = (*moves)[i];
        ASSERT_GT(mv.size, 0u);
        ASSERT_GE(mv.to, range.begin);
        ASSERT_LE(mv.to + mv.size, range.end);
        ASSERT_LE(mv.from + mv.size, from->total_elems());
        if (i > 0) {
          const FlatMove& prev = (*moves)[i - 1];
          ASSERT_LE(prev.to + prev.size, mv.to) << "moves not sorted by to";
          ASSERT_FALSE(prev.to + prev.size == mv.to &&
                       prev.from + prev.size == mv.from)
              << "moves " << i - 1 << " and " << i << " are not merged";
        }
        for (uint64_t j = 0; j < mv.size; ++j) {
          src[mv.to - range.begin + j] = static_cast<int64_t>(mv.from + j);
        }
      }
      uint64_t mapped = 0;
      for (uint64_t o = range.begin; o < range.end; ++o) {
        const auto [t, i] = TensorElementAt(*to, o);
        const int64_t s = src[o - range.begin];
        if (t < 0) {
          ASSERT_EQ(s, -1) << "padding at " << o << " maps to " << s;
          continue;
        }
        ++mapped;
        ASSERT_NE(s, -1) << "element " << i << " of "
                         << to->tensors()[t].name << " maps nowhere";
        const auto [ft, fi] = TensorElementAt(*from, s);
        ASSERT_GE(ft, 0) << o << " maps to padding " << s;
        ASSERT_EQ(from->tensors()[ft].name, to->tensors()[t].name) << o;
        ASSERT_EQ(fi, i) << o;
      }
      uint64_t moved = 0;
      for (const FlatMove& mv : *moves) moved += mv.size;
      ASSERT_EQ(moved, mapped);
      // The identity: a layout onto itself is one move per unit at most
      // (tensors of a unit are contiguous, units are split by padding).
      auto self = MapBetweenLayouts(*to, *to, range);
      ASSERT_TRUE(self.ok());
      ASSERT_LE(self->size(), to->units().size());
      for (const FlatMove& mv : *self) ASSERT_EQ(mv.from, mv.to);
    }
  }
}

TEST(MapBetweenLayoutsTest, RefusesOtherModelsAndRangesOutside) {
  const uint64_t seed = ::zeroshard::testing::TestSeed();
  SCOPED_TRACE(::zeroshard::testing::SeedTrace(seed));
  std::mt19937_64 rng(seed);
  ModelManifest a = SmallRandomManifest(rng);
  a.partition_count = 2;
  auto from = FlatLayout::Create(a, 2, 2);
  ASSERT_TRUE(from.ok());
  auto expect_refused = [&](const ModelManifest& m) {
    auto to = FlatLayout::Create(m, 3, 1);
    ASSERT_TRUE(to.ok()) << to.status();
    EXPECT_NE(ModelFingerprint(m), ModelFingerprint(a));
    auto moves = MapBetweenLayouts(*from, *to, {0, to->total_elems()});
    EXPECT_EQ(moves.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(moves.status().message().find("different models"),
              std::string::npos)
        << moves.status();
  };
  ModelManifest b = a;  // another shape of the same size
  b.partition_count = 1;
  std::vector<int64_t>& shape = b.units.back().tensors.back().shape;
  shape.insert(shape.begin(), 1);
  expect_refused(b);
  b = a;  // a renamed tensor
  b.units[0].tensors[0].name += "_x";
  expect_refused(b);
  b = a;  // one tensor more
  b.units[0].tensors.push_back({"extra", {64}});
  expect_refused(b);
  // The padding is not the model: another partition count is the same one.
  b = a;
  b.partition_count = 6;
  EXPECT_EQ(ModelFingerprint(b), ModelFingerprint(a));
  auto to = FlatLayout::Create(b, 1, 3);
  ASSERT_TRUE(to.ok());
  const uint64_t total = to->total_elems();
  EXPECT_TRUE(MapBetweenLayouts(*from, *to, {0, total}).ok());
  EXPECT_EQ(MapBetweenLayouts(*from, *to, {0, total + 1}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MapBetweenLayouts(*from, *to, {5, 4}).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto empty = MapBetweenLayouts(*from, *to, {7, 7});
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
}

}  // namespace
}  // namespace zeroshard
