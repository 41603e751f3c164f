// The hand-rolled wire codec against protobuf's own serializer and parser.
#include "client/wire_codec.h"

#include <random>

#include "gtest/gtest.h"
#include "proto/zeroshard/v1/shard.pb.h"

namespace zeroshard {
namespace {

std::string Flatten(const grpc::ByteBuffer& b) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(b.Dump(&slices).ok());
  std::string s;
  for (const auto& sl : slices) {
    s.append(reinterpret_cast<const char*>(sl.begin()), sl.size());
  }
  return s;
}

TEST(WireCodecTest, PushPieceParsesAsPushGradMessage) {
  std::mt19937_64 rng(3);
  for (int trial = 0; trial < 50; ++trial) {
    const size_t bytes = rng() % 3 == 0 ? 0 : rng() % 200000;
    std::string data(bytes, '\0');
    for (auto& c : data) c = static_cast<char>(rng());
    const uint64_t offset = rng() >> (rng() % 64);
    const DType dtype = rng() % 2 ? DType::kFp32 : DType::kBf16;
    auto in_flight = std::make_shared<InFlightBytes>();
    {
      grpc::ByteBuffer bb =
          EncodePushPiece(offset, dtype, data.data(), bytes, in_flight);
      EXPECT_EQ(in_flight->bytes(), bytes);
      v1::PushGradMessage msg;
      ASSERT_TRUE(msg.ParseFromString(Flatten(bb)));
      ASSERT_TRUE(msg.has_piece());
      EXPECT_EQ(msg.piece().offset(), offset);
      EXPECT_EQ(static_cast<int>(msg.piece().dtype()), static_cast<int>(dtype));
      EXPECT_EQ(msg.piece().data(), data);
    }
    EXPECT_EQ(in_flight->bytes(), 0u);  // released with the buffer
  }
}

TEST(WireCodecTest, GatherChunkDecodesAcrossAnySliceSplit) {
  std::mt19937_64 rng(4);
  for (int trial = 0; trial < 100; ++trial) {
    v1::GatherChunk chunk;
    chunk.set_offset(rng() >> (rng() % 64));
    chunk.set_dtype(rng() % 2 ? v1::DTYPE_BF16 : v1::DTYPE_FP32);
    chunk.set_version(rng() % 1000);
    std::string data(rng() % 5000, '\0');
    for (auto& c : data) c = static_cast<char>(rng());
    chunk.set_data(data);
    std::string wire = chunk.SerializeAsString();
    if (trial % 3 == 0) wire += std::string("\x2a\x03xyz", 5);  // unknown field 5
    // Cut the bytes into random slices.
    std::vector<grpc::Slice> slices;
    size_t at = 0;
    while (at < wire.size()) {
      const size_t n = std::min(wire.size() - at, 1 + rng() % 700);
      slices.emplace_back(wire.data() + at, n);
      at += n;
    }
    grpc::ByteBuffer bb(slices.data(), slices.size());
    GatherChunkView view;
    ASSERT_TRUE(DecodeGatherChunk(bb, &view).ok());
    EXPECT_EQ(view.offset, chunk.offset());
    EXPECT_EQ(view.dtype, static_cast<int>(chunk.dtype()));
    EXPECT_EQ(view.version, chunk.version());
    ASSERT_EQ(view.data_bytes, data.size());
    std::string out(data.size(), '\0');
    view.CopyDataTo(out.data());
    EXPECT_EQ(out, data);
  }
}

TEST(WireCodecTest, TruncatedChunkIsDataLoss) {
  v1::GatherChunk chunk;
  chunk.set_offset(5);
  chunk.set_data(std::string(100, 'a'));
  std::string wire = chunk.SerializeAsString();
  wire.resize(wire.size() - 10);
  grpc::Slice slice(wire);
  grpc::ByteBuffer bb(&slice, 1);
  GatherChunkView view;
  EXPECT_EQ(DecodeGatherChunk(bb, &view).code(), absl::StatusCode::kDataLoss);
}

TEST(WireCodecTest, InFlightWaitsForRoomWithATimeout) {
  InFlightBytes f;
  f.Add(100);
  EXPECT_TRUE(f.WaitForRoom(50, 200, absl::Now()));
  EXPECT_FALSE(f.WaitForRoom(150, 200, absl::Now() + absl::Milliseconds(20)));
  f.Release(100);
  EXPECT_TRUE(f.WaitForRoom(500, 200, absl::Now()));  // empty: always room
}

}  // namespace
}  // namespace zeroshard
