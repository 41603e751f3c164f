#include "server/push_grad_decoding.h"

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "proto/zeroshard/v1/shard.pb.h"

namespace zeroshard {
namespace {

// `bytes` split into slices at random places (some of one byte).
grpc::ByteBuffer Split(const std::string& bytes, std::mt19937_64& rng) {
  std::vector<grpc::Slice> slices;
  size_t at = 0;
  const size_t pieces = rng() % 5;
  while (at < bytes.size()) {
    size_t n = slices.size() >= pieces ? bytes.size() - at
                                       : 1 + rng() % (bytes.size() - at);
    slices.emplace_back(bytes.data() + at, n);
    at += n;
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

TEST(PushGradDecodingTest, PiecesMatchProtobufForRandomSplits) {
  std::mt19937_64 rng(std::random_device{}());
  for (int trial = 0; trial < 300; ++trial) {
    v1::PushGradMessage msg;
    v1::PushGradPiece* piece = msg.mutable_piece();
    piece->set_offset(rng() >> (rng() % 64));
    piece->set_dtype(trial % 3 == 0 ? v1::DTYPE_BF16 : v1::DTYPE_FP32);
    std::string data(rng() % 3000, '\0');
    for (char& c : data) c = static_cast<char>(rng());
    piece->set_data(data);
    grpc::ByteBuffer buffer = Split(msg.SerializeAsString(), rng);
    ReceivedPushGrad out;
    ASSERT_TRUE(DecodePushGradMessage(buffer, &out).ok());
    ASSERT_TRUE(out.is_piece);
    EXPECT_EQ(out.piece.offset, piece->offset());
    EXPECT_EQ(out.piece.dtype, static_cast<int>(piece->dtype()));
    ASSERT_EQ(out.piece.bytes, data.size());
    if (!data.empty()) {
      ASSERT_NE(out.piece.owner, nullptr);
      std::string got;
      for (const auto& [p, n] : out.piece.segments) {
        got.append(reinterpret_cast<const char*>(p), n);
      }
      EXPECT_EQ(got, data);
    }
  }
}

TEST(PushGradDecodingTest, OtherMessagesGoThroughProtobuf) {
  std::mt19937_64 rng(std::random_device{}());
  v1::PushGradMessage header;
  header.mutable_header()->set_step(7);
  header.mutable_header()->set_coefficient_known(true);
  v1::PushGradMessage commit;
  commit.mutable_commit()->set_coefficient(0.5);
  // A piece with a field repeated: protobuf's last-one-wins applies.
  v1::PushGradMessage a, b;
  a.mutable_piece()->set_offset(64);
  a.mutable_piece()->set_data("abcd");
  b.mutable_piece()->set_offset(128);
  const std::string twice = a.SerializeAsString() + b.SerializeAsString();
  for (const std::string& wire :
       {header.SerializeAsString(), commit.SerializeAsString(), twice}) {
    v1::PushGradMessage want;
    ASSERT_TRUE(want.ParseFromString(wire));
    grpc::ByteBuffer buffer = Split(wire, rng);
    ReceivedPushGrad out;
    ASSERT_TRUE(DecodePushGradMessage(buffer, &out).ok());
    EXPECT_FALSE(out.is_piece);
    EXPECT_EQ(out.message.SerializeAsString(), want.SerializeAsString());
  }
}

TEST(PushGradDecodingTest, TruncatedPieceIsRejected) {
  std::mt19937_64 rng(std::random_device{}());
  v1::PushGradMessage msg;
  msg.mutable_piece()->set_offset(1);
  msg.mutable_piece()->set_data(std::string(100, 'x'));
  std::string wire = msg.SerializeAsString();
  wire.resize(wire.size() - 1 - rng() % 50);
  grpc::ByteBuffer buffer = Split(wire, rng);
  ReceivedPushGrad out;
  const absl::Status s = DecodePushGradMessage(buffer, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
}

}  // namespace
}  // namespace zeroshard
