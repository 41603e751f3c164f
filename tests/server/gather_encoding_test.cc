#include "server/gather_encoding.h"

#include <grpcpp/support/proto_buffer_reader.h>

#include <cstring>
#include <random>

#include "gtest/gtest.h"
#include "proto/zeroshard/v1/shard.pb.h"

namespace zeroshard {
namespace {

TEST(GatherEncodingTest, ParsesAsGatherChunkForRandomValues) {
  std::mt19937_64 rng(std::random_device{}());
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

}  // namespace
}  // namespace zeroshard
