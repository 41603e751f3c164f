// Bytes as gRPC would hand them to the server: a ByteBuffer of up to three
// slices, cut where the fuzzer says (cut1, cut2 taken modulo the lengths).
#ifndef ZEROSHARD_TESTS_FUZZ_FUZZ_SLICES_H_
#define ZEROSHARD_TESTS_FUZZ_FUZZ_SLICES_H_

#include <grpcpp/grpcpp.h>

#include <cstddef>
#include <string_view>
#include <vector>

namespace zeroshard::fuzz {

inline grpc::ByteBuffer Slices(std::string_view bytes, size_t cut1,
                               size_t cut2) {
  cut1 = bytes.empty() ? 0 : cut1 % (bytes.size() + 1);
  const size_t left = bytes.size() - cut1;
  cut2 = cut1 + (left == 0 ? 0 : cut2 % (left + 1));
  std::vector<grpc::Slice> slices;
  if (cut1 > 0) slices.emplace_back(bytes.data(), cut1);
  if (cut2 > cut1) slices.emplace_back(bytes.data() + cut1, cut2 - cut1);
  if (bytes.size() > cut2) {
    slices.emplace_back(bytes.data() + cut2, bytes.size() - cut2);
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

}  // namespace zeroshard::fuzz

#endif  // ZEROSHARD_TESTS_FUZZ_FUZZ_SLICES_H_
