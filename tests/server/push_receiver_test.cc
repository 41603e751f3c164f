// PushReceiver fed pieces as received gRPC slices would hold them (split
// at arbitrary bytes, elements straddling two segments) gives bit for bit
// the state of the same pushes fed as whole protobuf messages, for pieces
// applied as they arrive and for a large commit applied on several threads.
#include "server/push_receiver.h"

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/support/test_seed.h"
#include "tests/server/server_test_util.h"

namespace zeroshard {
namespace {

v1::ModelManifest OneTensor(int64_t elems) {
  v1::ModelManifest m;
  m.set_partition_count(1);
  v1::UnitSpec* u = m.add_units();
  u->set_name("unit");
  v1::TensorSpec* t = u->add_tensors();
  t->set_name("w");
  t->add_shape(elems);
  testing::SetRules(t, v1::InitRule::NORMAL, 1.0, v1::NORM);
  return m;
}

std::shared_ptr<ModelShard> MakeState(const v1::ModelManifest& manifest) {
  auto state = ModelShard::Create(
      testing::MakeInit(manifest, 1, 0, /*seed=*/5, /*chunk_elems=*/4096),
      {0, 1}, Placement::kHost);
  EXPECT_TRUE(state.ok()) << state.status();
  return state.ok() ? std::shared_ptr<ModelShard>(*std::move(state)) : nullptr;
}

std::vector<float> Master(const ModelShard& state) {
  const ShardStore& store = state.store();
  std::vector<float> out(state.owned().size());
  for (size_t c = 0; c < store.num_chunks(); ++c) {
    const FlatRange r = store.ChunkRange(c);
    EXPECT_TRUE(
        store.Read(r, DType::kFp32, out.data() + (r.begin - state.owned().begin))
            .ok());
  }
  return out;
}

void RunCase(const v1::ModelManifest& manifest, bool known, bool bf16,
             std::mt19937_64& rng) {
  std::shared_ptr<ModelShard> whole = MakeState(manifest);
  std::shared_ptr<ModelShard> split = MakeState(manifest);
  ASSERT_NE(whole, nullptr);
  ASSERT_NE(split, nullptr);
  const FlatRange own = whole->owned();
  const size_t esize = bf16 ? 2 : 4;
  std::string grads(own.size() * esize, '\0');
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (size_t i = 0; i < own.size(); ++i) {
    const float g = normal(rng);
    if (bf16) {
      uint32_t bits;
      std::memcpy(&bits, &g, 4);
      const uint16_t h = static_cast<uint16_t>(bits >> 16);
      std::memcpy(&grads[i * 2], &h, 2);
    } else {
      std::memcpy(&grads[i * 4], &g, 4);
    }
  }
  for (uint64_t step = 0; step < 2; ++step) {
    PushReceiver a(whole), b(split);
    v1::PushGradMessage header;
    header.mutable_header()->set_step(step);
    header.mutable_header()->set_run_id(testing::kTestRunId);
    header.mutable_header()->set_coefficient_known(known);
    header.mutable_header()->set_coefficient(0.75);
    v1::PushGradMessage header_copy = header;
    ASSERT_TRUE(a.OnMessage(header).ok());
    ASSERT_TRUE(b.OnMessage(header_copy).ok());
    uint64_t at = own.begin;
    while (at < own.end) {
      const uint64_t n =
          std::min<uint64_t>(own.end - at, 1 + rng() % (kMaxPiecePayloadBytes / esize));
      const std::string bytes =
          grads.substr((at - own.begin) * esize, n * esize);
      v1::PushGradMessage piece;
      piece.mutable_piece()->set_offset(at);
      piece.mutable_piece()->set_dtype(bf16 ? v1::DTYPE_BF16 : v1::DTYPE_FP32);
      piece.mutable_piece()->set_data(bytes);
      ASSERT_TRUE(a.OnMessage(piece).ok());
      // The same bytes in segments cut at random places.
      auto held = std::make_shared<std::string>(bytes);
      PushGradPieceInput in;
      in.offset = at;
      in.dtype = bf16 ? v1::DTYPE_BF16 : v1::DTYPE_FP32;
      in.bytes = held->size();
      size_t pos = 0;
      while (pos < held->size()) {
        const size_t len = std::min<size_t>(held->size() - pos,
                                            1 + rng() % 20000);
        in.segments.emplace_back(
            reinterpret_cast<const uint8_t*>(held->data()) + pos, len);
        pos += len;
      }
      in.owner = held;
      ASSERT_TRUE(b.OnPiece(std::move(in)).ok());
      at += n;
    }
    if (!known) {
      v1::PushGradMessage commit;
      commit.mutable_commit()->set_coefficient(0.75);
      v1::PushGradMessage commit_copy = commit;
      ASSERT_TRUE(a.OnMessage(commit).ok());
      ASSERT_TRUE(b.OnMessage(commit_copy).ok());
    }
    ASSERT_TRUE(a.finished() || known);
    EXPECT_EQ(a.response().applied_elems(), own.size());
    EXPECT_EQ(b.response().applied_elems(), own.size());
    EXPECT_EQ(b.response().chunks_completed(), a.response().chunks_completed());
  }
  const std::vector<float> wa = Master(*whole), wb = Master(*split);
  ASSERT_EQ(wa.size(), wb.size());
  EXPECT_EQ(std::memcmp(wa.data(), wb.data(), wa.size() * 4), 0);
  EXPECT_EQ(whole->store().Norms()->slots,
            split->store().Norms()->slots);
}

TEST(PushGradSessionTest, SegmentedPiecesMatchWholePieces) {
  const uint64_t seed = ::zeroshard::testing::TestSeed();
  SCOPED_TRACE(::zeroshard::testing::SeedTrace(seed));
  std::mt19937_64 rng(seed);
  const v1::ModelManifest small = OneTensor(50000 + rng() % 1000);
  for (bool known : {true, false}) {
    for (bool bf16 : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "known=" << known << " bf16=" << bf16);
      RunCase(small, known, bf16, rng);
    }
  }
}

TEST(PushGradSessionTest, LargeCommitOnSeveralThreadsMatchesWholePieces) {
  const uint64_t seed = ::zeroshard::testing::TestSeed();
  SCOPED_TRACE(::zeroshard::testing::SeedTrace(seed));
  std::mt19937_64 rng(seed);
  // Above kParallelApplyElems: the commit is applied chunk by chunk on the
  // pool.
  const v1::ModelManifest large =
      OneTensor(kParallelApplyElems + 4096 + rng() % 1000);
  RunCase(large, /*known=*/false, /*bf16=*/false, rng);
}

}  // namespace
}  // namespace zeroshard
