// wire/gather_codec against protobuf's own serializer and parser, and the
// encoder against the decoder.
#include "wire/gather_codec.h"

#include <grpcpp/support/proto_buffer_reader.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/support/test_seed.h"
#include "proto/zeroshard/v1/shard.pb.h"

namespace zeroshard {
namespace {


TEST(GatherCodecTest, ParsesAsGatherChunkForRandomValues) {
  const uint64_t seed = ::zeroshard::testing::TestSeed();
  SCOPED_TRACE(::zeroshard::testing::SeedTrace(seed));
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 200; ++trial) {
    // Spread values over every varint length.
    const uint64_t offset = rng() >> (rng() % 64);
    const uint64_t version = rng() >> (rng() % 64);
    const DType dtype = trial % 2 ? DType::kBf16 : DType::kFp32;
    const size_t bytes = (rng() % 3 == 0) ? 0 : rng() % 5000;
    std::string payload(bytes, '\0');
    for (char& c : payload) c = static_cast<char>(rng());
    grpc::ByteBuffer buffer =
        EncodeGatherChunk(offset, dtype, version, bytes, [&](uint8_t* dst) {
          if (bytes) std::memcpy(dst, payload.data(), bytes);
        });
    EXPECT_EQ(buffer.Length(),
              GatherChunkHeaderSize(offset, dtype, version, bytes) + bytes);
    v1::GatherChunk chunk;
    grpc::ProtoBufferReader reader(&buffer);
    ASSERT_TRUE(chunk.ParseFromZeroCopyStream(&reader));
    EXPECT_EQ(chunk.offset(), offset);
    EXPECT_EQ(chunk.version(), version);
    EXPECT_EQ(static_cast<int>(chunk.dtype()), static_cast<int>(dtype));
    EXPECT_EQ(chunk.data(), payload);
  }
}

TEST(GatherCodecTest, GatherChunkDecodesAcrossAnySliceSplit) {
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

TEST(GatherCodecTest, TruncatedChunkIsDataLoss) {
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

// Encoder to decoder, the way the bytes travel from a server to a worker.
TEST(GatherCodecTest, EncodedChunkRoundTripsThroughTheDecoder) {
  const uint64_t seed = ::zeroshard::testing::TestSeed();
  SCOPED_TRACE(::zeroshard::testing::SeedTrace(seed));
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 100; ++trial) {
    const uint64_t offset = rng() >> (rng() % 64);
    const uint64_t version = rng() >> (rng() % 64);
    const DType dtype = trial % 2 ? DType::kBf16 : DType::kFp32;
    const size_t bytes = (rng() % 4 == 0) ? 0 : rng() % 200000;
    std::string payload(bytes, '\0');
    for (char& c : payload) c = static_cast<char>(rng());
    grpc::ByteBuffer buffer =
        EncodeGatherChunk(offset, dtype, version, bytes, [&](uint8_t* dst) {
          if (bytes) std::memcpy(dst, payload.data(), bytes);
        });
    GatherChunkView view;
    ASSERT_TRUE(DecodeGatherChunk(buffer, &view).ok());
    EXPECT_EQ(view.offset, offset);
    EXPECT_EQ(view.version, version);
    EXPECT_EQ(view.dtype, static_cast<int>(dtype));
    ASSERT_EQ(view.data_bytes, bytes);
    std::string out(bytes, '\0');
    view.CopyDataTo(out.data());
    EXPECT_EQ(out, payload);
  }
}

}  // namespace
}  // namespace zeroshard
