// Which slot of the flat space a call is for, when a server holds more than
// its own (docs/DESIGN.md, "Replicas"): with zeroshard.replicas 2, server k
// also keeps a copy of slot k - 1 mod S, and a client that reaches that
// copy (a write to both copies, or a read after the slot's first holder
// died) names the slot in the call's "zs-slot" metadata. A call without it
// is for the server's own slot, as every call was before replicas.
//
//   grpc::ClientContext ctx;
//   SetSlotMetadata(&ctx, 2);                       // client
//   ASSIGN_OR_RETURN(std::optional<uint32_t> slot,  // server
//                    SlotFromMetadata(context->client_metadata()));
#ifndef ZEROSHARD_WIRE_SLOT_METADATA_H_
#define ZEROSHARD_WIRE_SLOT_METADATA_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <map>
#include <optional>

#include "absl/status/statusor.h"

namespace zeroshard {

inline constexpr char kSlotMetadataKey[] = "zs-slot";

// Adds the slot to a call's metadata (before the call starts).
void SetSlotMetadata(grpc::ClientContext* context, uint32_t slot);

// How a server without state (not initialised: a fresh process, e.g. one
// started in place of a dead one) begins its refusal; with replicas, a
// client that meets it on a server it had been using treats that copy as
// lost (client/shard_channels.h CopyLost).
inline constexpr char kNotInitialisedMessage[] =
    "the shard server is not initialised";

// The copies of each slot the client writes ("zs-copies"): a write to a
// server that keeps 2 from a client that does not say 2 is refused, so a
// one-copy tool cannot make two copies differ.
inline constexpr char kCopiesMetadataKey[] = "zs-copies";
void SetCopiesMetadata(grpc::ClientContext* context, uint32_t copies);
// The copies a call says its client writes: 1 without the key.
uint32_t CopiesFromMetadata(
    const std::multimap<grpc::string_ref, grpc::string_ref>& metadata);

// The slot a call names: nullopt without the key; INVALID_ARGUMENT for a
// value that is not one decimal number below 2^31, or for the key twice.
absl::StatusOr<std::optional<uint32_t>> SlotFromMetadata(
    const std::multimap<grpc::string_ref, grpc::string_ref>& metadata);

}  // namespace zeroshard

#endif  // ZEROSHARD_WIRE_SLOT_METADATA_H_
