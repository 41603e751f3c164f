// How the client cuts a flat range into wire messages: first at server
// boundaries (FlatLayout::SplitByServer), then into pieces of at most
// `max_message_bytes` of payload, each a whole number of elements (a multiple
// of 64 elements when the limit allows).
//
//   ASSIGN_OR_RETURN(auto pieces, PlanPieces(layout, {0, 1 << 20},
//                                            DType::kBf16, 1 << 20));
//   for (const PlannedPiece& p : pieces) send(p.server, p.range,
//                                             data + p.byte_offset);
#ifndef ZEROSHARD_CLIENT_PIECE_PLAN_H_
#define ZEROSHARD_CLIENT_PIECE_PLAN_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/dtype.h"
#include "common/layout.h"

namespace zeroshard {

// Largest payload of one message the client sends or asks for (1 MiB, the
// chunk size of the wire contract; the server accepts pieces up to 4 MiB,
// kMaxPiecePayloadBytes, wire/push_grad_codec.h).
inline constexpr size_t kMaxClientPieceBytes = 1 << 20;

struct PlannedPiece {
  int server = 0;
  FlatRange range;
  // Byte offset of the piece's first element from the start of the range's
  // data.
  size_t byte_offset = 0;
};

// Elements per piece for a dtype and message limit (>= 1).
uint64_t PieceElems(DType dtype, size_t max_message_bytes);

// Checks that a range lies in [0, total) and is not empty; the error names
// the range and the total.
absl::Status ValidateRange(const FlatLayout& layout, const FlatRange& range);

// Checks ranges one by one, then that no two overlap (in any order).
absl::Status ValidateDisjoint(const FlatLayout& layout,
                              absl::Span<const FlatRange> ranges);

// Pieces of `range` in order. INVALID_ARGUMENT for a bad range, a dtype other
// than FP32/BF16, or max_message_bytes of 0 or above kMaxClientPieceBytes.
absl::StatusOr<std::vector<PlannedPiece>> PlanPieces(const FlatLayout& layout,
                                                     const FlatRange& range,
                                                     DType dtype,
                                                     size_t max_message_bytes);

}  // namespace zeroshard

#endif  // ZEROSHARD_CLIENT_PIECE_PLAN_H_
