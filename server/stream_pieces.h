// The pieces a client stream buffers before it applies them whole
// (SetWeights, Replay), each checked as it arrives, before any memory of
// the shard is touched: its dtype FP32 or BF16, a whole number of elements
// of at most kMaxPiecePayloadBytes, inside the owned range, overlapping no
// piece kept before, the stream's buffered bytes within the owned range's
// FP32 bytes, and (when asked) no NaN or Inf. Each refusal starts with the
// stream's RPC and ends with its `tail` ("; nothing is written").
//
//   StreamPieces pieces("SetWeights", "; nothing is written");
//   RETURN_IF_ERROR(pieces.Add(state, piece.offset(), piece.dtype(),
//                              piece.mutable_data(), {.finite = true}));
//   for (const StreamPieces::Piece& p : pieces.pieces()) ...
#ifndef ZEROSHARD_SERVER_STREAM_PIECES_H_
#define ZEROSHARD_SERVER_STREAM_PIECES_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/dtype.h"
#include "common/layout.h"
#include "proto/zeroshard/v1/shard.pb.h"
#include "server/model_shard.h"

namespace zeroshard {

class StreamPieces {
 public:
  struct Piece {
    FlatRange range;
    DType dtype;
    std::string data;
  };
  struct Checks {
    bool finite = false;       // refuse NaN and Inf
    bool allow_empty = false;  // a piece of no bytes: OK, nothing kept
  };

  StreamPieces(std::string rpc, std::string tail)
      : rpc_(std::move(rpc)), tail_(std::move(tail)) {}

  // Checks the piece of `data` (moved out when kept) at `offset` and keeps
  // it.
  absl::Status Add(const ModelShard& state, uint64_t offset, v1::DType dtype,
                   std::string* data, Checks checks);

  const std::vector<Piece>& pieces() const { return pieces_; }
  size_t size() const { return pieces_.size(); }
  // Drops every piece (a push applied; a stream ended).
  void Clear();

 private:
  const std::string rpc_, tail_;
  std::vector<Piece> pieces_;
  std::map<uint64_t, uint64_t> ranges_;  // begin -> end of the kept pieces
  uint64_t bytes_ = 0;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_SERVER_STREAM_PIECES_H_
