#include "client/set_weights.h"

#include <algorithm>
#include <bit>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/piece_plan.h"
#include "wire/grpc_status.h"

namespace zeroshard {
namespace {

static_assert(std::endian::native == std::endian::little,
              "WeightPiece data is little-endian FP32; add a byte swap here");

// One attempt: server k's whole range as one stream.
absl::Status SendRange(const ShardChannels& channels, int k,
                       const FlatRange& range, const float* data) {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() +
                                      channels.options().call_timeout));
  v1::SetWeightsResponse response;
  std::unique_ptr<grpc::ClientWriter<v1::WeightPiece>> writer =
      channels.stub(k).SetWeights(&ctx, &response);
  const uint64_t per_piece =
      PieceElems(DType::kFp32, channels.options().max_message_bytes);
  v1::WeightPiece piece;
  for (uint64_t at = range.begin; at < range.end; at += per_piece) {
    const uint64_t n = std::min(per_piece, range.end - at);
    piece.set_offset(at);
    piece.set_dtype(v1::DTYPE_FP32);
    piece.set_data(reinterpret_cast<const char*>(data + (at - range.begin)),
                   n * sizeof(float));
    // False: the stream is broken; Finish says why.
    if (!writer->Write(piece)) break;
  }
  writer->WritesDone();
  absl::Status s =
      FromGrpcStatus(writer->Finish(), "SetWeights", channels.address(k));
  if (!s.ok()) return s;
  if (response.elems_written() != range.size()) {
    return absl::DataLossError(absl::StrCat(
        "SetWeights to ", channels.address(k), ": the server wrote ",
        response.elems_written(), " elements of the ", range.size(), " in [",
        range.begin, ", ", range.end, ")"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status SetMasterWeights(const ShardChannels& channels,
                              const FlatLayout& layout,
                              absl::Span<const float> flat) {
  if (flat.size() != layout.total_elems()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "SetMasterWeights: ", flat.size(), " weights for a flat space of ",
        layout.total_elems()));
  }
  if (channels.size() != static_cast<int>(layout.num_servers())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "SetMasterWeights: ", channels.size(), " servers for a layout of ",
        layout.num_servers()));
  }
  std::vector<absl::Status> results(channels.size());
  std::vector<std::thread> threads;
  for (int k = 0; k < channels.size(); ++k) {
    const FlatRange range = layout.ServerRange(k);
    if (range.empty()) continue;
    threads.emplace_back([&, k, range] {
      results[k] = RunWithRetry(channels.options().retry, [&] {
        return SendRange(channels, k, range, flat.data() + range.begin);
      });
    });
  }
  for (std::thread& t : threads) t.join();
  for (const absl::Status& s : results) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace zeroshard
