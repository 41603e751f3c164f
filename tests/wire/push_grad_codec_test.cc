// wire/push_grad_codec against protobuf's own serializer and parser, and the
// encoder against the decoder.
#include "wire/push_grad_codec.h"

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/support/test_seed.h"
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


std::string Flatten(const grpc::ByteBuffer& b) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(b.Dump(&slices).ok());
  std::string s;
  for (const auto& sl : slices) {
    s.append(reinterpret_cast<const char*>(sl.begin()), sl.size());
  }
  return s;
}

TEST(PushGradCodecTest, PushPieceParsesAsPushGradMessage) {
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

TEST(PushGradCodecTest, PiecesMatchProtobufForRandomSplits) {
  const uint64_t seed = ::zeroshard::testing::TestSeed();
  SCOPED_TRACE(::zeroshard::testing::SeedTrace(seed));
  std::mt19937_64 rng(seed);
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

TEST(PushGradCodecTest, OtherMessagesGoThroughProtobuf) {
  const uint64_t seed = ::zeroshard::testing::TestSeed();
  SCOPED_TRACE(::zeroshard::testing::SeedTrace(seed));
  std::mt19937_64 rng(seed);
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

TEST(PushGradCodecTest, TruncatedPieceIsRejected) {
  const uint64_t seed = ::zeroshard::testing::TestSeed();
  SCOPED_TRACE(::zeroshard::testing::SeedTrace(seed));
  std::mt19937_64 rng(seed);
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

// Found by the push_grad_codec fuzzer in CI: a piece whose length is a
// 10-byte varint. Protobuf reads a length in at most 5 bytes and refuses
// it; the fast path once read it as 0 (bits past the 64th wrapped away, or
// there were none) and took an empty piece. An overlong length of 5 bytes
// protobuf accepts, and so must the decoder; a 10-byte varint field that
// fits (tenth byte 1) is accepted by both.
TEST(PushGradCodecTest, LongLengthVarintsAreTakenExactlyAsProtobufTakesThem) {
  for (const char tenth : {'\x02', '\x00'}) {
    const std::string bad =
        std::string("\x12\x80\x80\x80\x80\x80\x80\x80\x80\x80", 10) + tenth;
    v1::PushGradMessage want;
    ASSERT_FALSE(want.ParseFromString(bad)) << int(tenth);
    grpc::Slice slice(bad.data(), bad.size());
    grpc::ByteBuffer buffer(&slice, 1);
    ReceivedPushGrad out;
    EXPECT_EQ(DecodePushGradMessage(buffer, &out).code(),
              absl::StatusCode::kInvalidArgument)
        << int(tenth);
  }
  // Length 0 in 5 bytes: protobuf takes an empty piece.
  const std::string five("\x12\x80\x80\x80\x80\x00", 6);
  v1::PushGradMessage five_want;
  ASSERT_TRUE(five_want.ParseFromString(five));
  grpc::Slice five_slice(five.data(), five.size());
  grpc::ByteBuffer five_buffer(&five_slice, 1);
  ReceivedPushGrad five_out;
  ASSERT_TRUE(DecodePushGradMessage(five_buffer, &five_out).ok());
  EXPECT_TRUE(five_out.is_piece);
  // Field 1 of the piece (offset) as a 10-byte varint that fits in 64 bits.
  v1::PushGradMessage fits_want;
  const std::string inner("\x08\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01", 11);
  const std::string fits = std::string("\x12") +
                           static_cast<char>(inner.size()) + inner;
  ASSERT_TRUE(fits_want.ParseFromString(fits));
  grpc::Slice fits_slice(fits.data(), fits.size());
  grpc::ByteBuffer fits_buffer(&fits_slice, 1);
  ReceivedPushGrad fits_out;
  ASSERT_TRUE(DecodePushGradMessage(fits_buffer, &fits_out).ok());
  ASSERT_TRUE(fits_out.is_piece);
  EXPECT_EQ(fits_out.piece.offset, fits_want.piece().offset());
  EXPECT_EQ(fits_out.piece.offset, uint64_t{1} << 63);
}

// Encoder to decoder, the way the bytes travel from a worker to a server.
TEST(PushGradCodecTest, EncodedPieceRoundTripsThroughTheDecoder) {
  const uint64_t seed = ::zeroshard::testing::TestSeed();
  SCOPED_TRACE(::zeroshard::testing::SeedTrace(seed));
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 100; ++trial) {
    const size_t bytes = rng() % 4 == 0 ? 0 : rng() % 300000;
    std::string data(bytes, '\0');
    for (auto& c : data) c = static_cast<char>(rng());
    const uint64_t offset = rng() >> (rng() % 64);
    const DType dtype = rng() % 2 ? DType::kFp32 : DType::kBf16;
    grpc::ByteBuffer sent = EncodePushPiece(offset, dtype, data.data(), bytes,
                                            /*in_flight=*/nullptr);
    // The transport may deliver the bytes in any slicing.
    grpc::ByteBuffer received = Split(Flatten(sent), rng);
    ReceivedPushGrad out;
    ASSERT_TRUE(DecodePushGradMessage(received, &out).ok());
    ASSERT_TRUE(out.is_piece);
    EXPECT_EQ(out.piece.offset, offset);
    EXPECT_EQ(out.piece.dtype, static_cast<int>(dtype));
    ASSERT_EQ(out.piece.bytes, bytes);
    std::string got;
    for (const auto& [p, n] : out.piece.segments) {
      got.append(reinterpret_cast<const char*>(p), n);
    }
    EXPECT_EQ(got, data);
  }
}

TEST(PushGradCodecTest, InFlightWaitsForRoomWithATimeout) {
  InFlightBytes f;
  f.Add(100);
  EXPECT_TRUE(f.WaitForRoom(50, 200, absl::Now()));
  EXPECT_FALSE(f.WaitForRoom(150, 200, absl::Now() + absl::Milliseconds(20)));
  f.Release(100);
  EXPECT_TRUE(f.WaitForRoom(500, 200, absl::Now()));  // empty: always room
}

}  // namespace
}  // namespace zeroshard
