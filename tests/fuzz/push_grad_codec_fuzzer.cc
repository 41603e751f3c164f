// wire/push_grad_codec.h's raw PushGradMessage decoder against protobuf's
// own parser (the reference: the decoder must accept exactly what protobuf
// accepts, with the same meaning), over received bytes split into 1 to 3
// slices; and EncodePushPiece -> DecodePushGradMessage round trips.
//
// Input: two slice-split bytes, a mode byte, then the message bytes (mode
// even), or offset (8 bytes), dtype (1 byte) and data (mode odd) to encode.
#include <grpcpp/grpcpp.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_slices.h"
#include "tests/fuzz/fuzz_util.h"
#include "wire/push_grad_codec.h"

namespace zeroshard::fuzz {
namespace {

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "push_grad_codec: %s\n", what);
  std::abort();
}

std::string Joined(const PushGradPieceInput& piece) {
  std::string out;
  for (const auto& [p, n] : piece.segments) {
    out.append(reinterpret_cast<const char*>(p), n);
  }
  return out;
}

// Decodes `buffer` and checks the result against protobuf's parse of `bytes`.
void Check(grpc::ByteBuffer& buffer, std::string_view bytes) {
  ReceivedPushGrad got;
  const bool decoded = DecodePushGradMessage(buffer, &got).ok();
  v1::PushGradMessage want;
  const bool parsed =
      want.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()));
  if (decoded != parsed) {
    Fail(decoded ? "decoder accepted what protobuf refuses"
                 : "decoder refused what protobuf accepts");
  }
  if (!decoded) return;
  if (got.is_piece) {
    if (!want.has_piece()) Fail("decoded a piece protobuf did not see");
    if (got.piece.offset != want.piece().offset() ||
        got.piece.dtype != static_cast<int>(want.piece().dtype())) {
      Fail("piece offset or dtype differs from protobuf's");
    }
    if (got.piece.bytes != want.piece().data().size() ||
        Joined(got.piece) != want.piece().data()) {
      Fail("piece data differs from protobuf's");
    }
  } else if (got.message.SerializeAsString() != want.SerializeAsString()) {
    // Compared as bytes: Equals would call a NaN coefficient a difference.
    Fail("message differs from protobuf's parse");
  }
}

void Run(const uint8_t* data, size_t size) {
  QuietProtobuf();
  FuzzInput in(data, size);
  const size_t cut1 = in.Byte(), cut2 = in.Byte();
  const uint8_t mode = in.Byte();
  if (mode % 2 == 0) {
    const std::string_view bytes = in.Rest();
    grpc::ByteBuffer buffer = Slices(bytes, cut1, cut2);
    Check(buffer, bytes);
    return;
  }
  const uint64_t offset = in.Uint(8);
  const DType dtype = in.Byte() % 2 ? DType::kBf16 : DType::kFp32;
  const std::string payload(in.Rest());
  auto in_flight = std::make_shared<InFlightBytes>();
  {
    grpc::ByteBuffer encoded = EncodePushPiece(offset, dtype, payload.data(),
                                               payload.size(), in_flight);
    std::vector<grpc::Slice> slices;
    if (!encoded.Dump(&slices).ok()) Fail("cannot read the encoded buffer");
    std::string bytes;
    for (const grpc::Slice& s : slices) {
      bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
    }
    ReceivedPushGrad got;
    if (!DecodePushGradMessage(encoded, &got).ok() || !got.is_piece) {
      Fail("an encoded piece does not decode as a piece");
    }
    if (got.piece.offset != offset || Joined(got.piece) != payload) {
      Fail("an encoded piece does not round-trip");
    }
    grpc::ByteBuffer resliced = Slices(bytes, cut1, cut2);
    Check(resliced, bytes);
  }
  if (in_flight->bytes() != 0) Fail("in-flight bytes not released");
}

}  // namespace
}  // namespace zeroshard::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  zeroshard::fuzz::Run(data, size);
  return 0;
}
