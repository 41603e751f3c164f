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

// One attempt: slot `slot`'s pieces (inside its range, ascending) as one
// stream to server k, one of the slot's copies.
absl::Status SendRanges(const ShardChannels& channels, int slot, int k,
                        absl::Span<const WeightRange> ranges,
                        const std::string& state,
                        std::optional<uint64_t> optimizer_step) {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() +
                                      channels.options().call_timeout));
  channels.RouteTo(&ctx, slot, k);
  v1::SetWeightsResponse response;
  std::unique_ptr<grpc::ClientWriter<v1::WeightPiece>> writer =
      channels.stub(k).SetWeights(&ctx, &response);
  const uint64_t per_piece =
      PieceElems(DType::kFp32, channels.options().max_message_bytes);
  v1::WeightPiece piece;
  uint64_t sent = 0;
  bool broken = false;
  for (const WeightRange& w : ranges) {
    for (uint64_t at = w.range.begin; at < w.range.end && !broken;
         at += per_piece) {
      const uint64_t n = std::min(per_piece, w.range.end - at);
      piece.set_offset(at);
      piece.set_dtype(v1::DTYPE_FP32);
      if (!state.empty()) piece.set_state(state);
      if (optimizer_step.has_value()) piece.set_optimizer_step(*optimizer_step);
      piece.set_data(
          reinterpret_cast<const char*>(w.data + (at - w.range.begin)),
          n * sizeof(float));
      // False: the stream is broken; Finish says why.
      broken = !writer->Write(piece);
    }
    sent += w.range.size();
  }
  writer->WritesDone();
  absl::Status s =
      FromGrpcStatus(writer->Finish(), "SetWeights", channels.address(k));
  if (!s.ok()) return s;
  if (response.elems_written() != sent) {
    return absl::DataLossError(absl::StrCat(
        "SetWeights to ", channels.address(k), ": the server wrote ",
        response.elems_written(), " elements of the ", sent, " sent in ",
        ranges.size(), " range(s)"));
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
  const WeightRange all{FlatRange{0, layout.total_elems()}, flat.data()};
  return SetMasterWeightRanges(channels, layout, absl::MakeConstSpan(&all, 1));
}

absl::Status SetMasterWeightRanges(const ShardChannels& channels,
                                   const FlatLayout& layout,
                                   absl::Span<const WeightRange> ranges) {
  return SetStateRanges(channels, layout, ranges, "", std::nullopt);
}

absl::Status SetStateRanges(const ShardChannels& channels,
                            const FlatLayout& layout,
                            absl::Span<const WeightRange> ranges,
                            const std::string& state,
                            std::optional<uint64_t> optimizer_step) {
  if (channels.size() != static_cast<int>(layout.num_servers())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "SetMasterWeights: ", channels.size(), " servers for a layout of ",
        layout.num_servers()));
  }
  // Every range inside the flat space, ascending and disjoint, before any
  // byte is sent: a bad list writes nothing.
  uint64_t last_end = 0;
  for (size_t i = 0; i < ranges.size(); ++i) {
    const FlatRange& r = ranges[i].range;
    if (r.begin > r.end || r.end > layout.total_elems() ||
        (i > 0 && r.begin < last_end) ||
        (r.size() > 0 && ranges[i].data == nullptr)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "SetMasterWeights: range ", i, " [", r.begin, ", ", r.end,
          ") is not inside the flat space [0, ", layout.total_elems(),
          ") after the previous range (they must ascend and not overlap); "
          "nothing is written"));
    }
    last_end = r.end;
  }
  // Each server's share: the ranges cut at its owned range.
  std::vector<std::vector<WeightRange>> per_server(channels.size());
  for (int k = 0; k < channels.size(); ++k) {
    const FlatRange own = layout.ServerRange(k);
    for (const WeightRange& w : ranges) {
      const uint64_t b = std::max(own.begin, w.range.begin);
      const uint64_t e = std::min(own.end, w.range.end);
      if (b >= e) continue;
      per_server[k].push_back(
          WeightRange{FlatRange{b, e}, w.data + (b - w.range.begin)});
    }
  }
  std::vector<absl::Status> results(channels.size());
  std::vector<std::thread> threads;
  for (int k = 0; k < channels.size(); ++k) {
    if (per_server[k].empty()) continue;
    threads.emplace_back([&, k] {
      // Every copy of the slot.
      results[k] = channels.OnEveryCopy(k, [&](int server) {
        return RunWithRetry(channels.options().retry, [&] {
          return SendRanges(channels, k, server, per_server[k], state,
                            optimizer_step);
        }, channels.channel(server).get());
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
