// PushGrad streams through PushReceiver (server/push_receiver.h) on a small
// ModelShard: headers, pieces and commits in any order and any content, each
// message either parsed by protobuf or, as the server does for received
// slices, by wire/push_grad_codec.h's raw decoder over 1 to 3 slices.
//
// Input: a flags byte (bit 0: raw decoder; bit 1: give headers the shard's
// run_id so the fuzzer gets past that check; bit 2: make every region piece
// name the one open shared-memory region), then one record per message
// (tests/fuzz/fuzz_util.h), each preceded by two slice-split bytes.
// Checked: no crash, leak or UB; a session that ends (finished, failed or
// dropped) leaves no pending gradient bytes behind.
#include <grpcpp/grpcpp.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "server/push_receiver.h"
#include "tests/fuzz/fuzz_shard.h"
#include "tests/fuzz/fuzz_slices.h"
#include "tests/fuzz/fuzz_util.h"
#include "wire/push_grad_codec.h"

namespace zeroshard::fuzz {
namespace {

// Feeds one message to the session; false when the stream ends here.
bool Feed(PushReceiver& session, const ModelShard& state, bool raw,
          bool fix_run, uint64_t region, std::string_view record, size_t cut1,
          size_t cut2) {
  v1::PushGradMessage message;
  if (raw) {
    grpc::ByteBuffer buffer = Slices(record, cut1, cut2);
    ReceivedPushGrad received;
    if (!DecodePushGradMessage(buffer, &received).ok()) return false;
    if (received.is_piece)
      return session.OnPiece(std::move(received.piece)).ok();
    message = std::move(received.message);
  } else if (!message.ParseFromArray(record.data(),
                                     static_cast<int>(record.size()))) {
    return false;
  }
  if (fix_run && message.has_header()) {
    message.mutable_header()->set_run_id(state.request().run_id());
  }
  if (region != 0 && message.has_region_piece()) {
    message.mutable_region_piece()->set_region(region);
  }
  return session.OnMessage(message).ok();
}

void Run(const uint8_t* data, size_t size) {
  QuietProtobuf();
  std::shared_ptr<ModelShard> state = FuzzShard();
  FuzzInput in(data, size);
  const uint8_t flags = in.Byte();
  // One region of 4 pages: the pieces it serves are read from or copied out
  // of it, never past its end.
  uint64_t region = 0;
  const SharedRegions* regions = &FuzzRegions(&region);
  {
    PushReceiver session(state, regions);
    bool ok = true;
    while (ok && !in.empty() && !session.finished()) {
      const size_t cut1 = in.Byte(), cut2 = in.Byte();
      ok = Feed(session, *state, flags & 1, flags & 2,
                (flags & 4) ? region : 0, in.Record(), cut1, cut2);
    }
    if (ok && !session.finished()) ok = session.OnEndOfStream().ok();
    if (!ok) session.Discard();
  }
  // A prepared commit holds its bytes in the shard until ApplyStep; nothing
  // else may keep any once the session is gone.
  if (state->prepared().elems == 0 &&
      state->store().pending_grad_bytes() != 0) {
    std::fprintf(
        stderr, "pending gradient bytes left after the session: %llu\n",
        static_cast<unsigned long long>(state->store().pending_grad_bytes()));
    std::abort();
  }
}

}  // namespace
}  // namespace zeroshard::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  zeroshard::fuzz::Run(data, size);
  return 0;
}
