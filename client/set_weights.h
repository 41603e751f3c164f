// The client side of SetWeights (admin): overwrites the FP32 master weights
// (and the BF16 mirror) of the whole flat space, every server's range as one
// client stream of pieces of at most max_message_bytes, all servers in
// parallel. m, v, versions and Adam step counts stay as they are
// (proto/zeroshard/v1/shard.proto), so on freshly initialised servers this
// sets the starting weights of training.
//
//   ASSIGN_OR_RETURN(std::vector<float> flat, ReadHfSafetensors(path, layout));
//   RETURN_IF_ERROR(SetMasterWeights(client->channels(), layout, flat));
//
// Errors: INVALID_ARGUMENT when flat.size() != layout.total_elems(); a
// server's error with its address (the first failing server's, by index);
// DATA_LOSS when a server reports another element count than it was sent.
// Overwriting is idempotent, so a stream that fails with UNAVAILABLE is
// retried whole under the channels' retry policy; each attempt is bounded
// by the call timeout.
#ifndef ZEROSHARD_CLIENT_SET_WEIGHTS_H_
#define ZEROSHARD_CLIENT_SET_WEIGHTS_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "client/shard_channels.h"
#include "common/layout.h"

namespace zeroshard {

absl::Status SetMasterWeights(const ShardChannels& channels,
                              const FlatLayout& layout,
                              absl::Span<const float> flat);

// FP32 values for one range of the flat space.
struct WeightRange {
  FlatRange range;
  const float* data = nullptr;  // range.size() elements
};

// The same for some ranges only (ascending, disjoint, inside the flat
// space; INVALID_ARGUMENT otherwise, before anything is sent): each is cut
// at the servers' boundaries and every server gets its pieces in one
// stream. The rest of the flat space keeps its values; with m, v and the
// step counts unchanged this overwrites weights mid-run (the front-end's
// GatheredParameters(modifier_rank=...)).
absl::Status SetMasterWeightRanges(const ShardChannels& channels,
                                   const FlatLayout& layout,
                                   absl::Span<const WeightRange> ranges);

// The same for any array: `state` "" (the master weights) or one of the
// optimizer rule's FP32 state slots ("exp_avg", ...); with optimizer_step,
// every server that gets a piece then sets its chunks' Adam step count to
// it (torch's optimizer.load_state_dict: the state of another run). The
// weights and the other arrays stay.
absl::Status SetStateRanges(const ShardChannels& channels,
                            const FlatLayout& layout,
                            absl::Span<const WeightRange> ranges,
                            const std::string& state,
                            std::optional<uint64_t> optimizer_step);

}  // namespace zeroshard

#endif  // ZEROSHARD_CLIENT_SET_WEIGHTS_H_
