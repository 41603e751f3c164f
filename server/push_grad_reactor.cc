#include "server/push_grad_reactor.h"

#include <string>
#include <utility>

#include "wire/grpc_status.h"
#include "wire/proto_buffer.h"

namespace zeroshard {

PushGradReactor::PushGradReactor(std::shared_ptr<ModelShard> state,
                                 grpc::ByteBuffer* response,
                                 RpcCounters* counters)
    : session_(std::move(state)), response_(response), counters_(counters) {
  StartRead(&message_);
}

void PushGradReactor::OnReadDone(bool ok) {
  if (!ok) {
    // Half-close, cancellation or a broken connection.
    End(session_.OnEndOfStream());
    return;
  }
  absl::Status s = DecodePushGradMessage(message_, &decoded_);
  message_.Clear();
  if (s.ok()) {
    s = decoded_.is_piece ? session_.OnPiece(std::move(decoded_.piece))
                          : session_.OnMessage(decoded_.message);
  }
  decoded_.piece = PushGradPieceInput();
  const uint64_t bytes = session_.payload_bytes();
  counters_->AddBytesIn(bytes - counted_bytes_);
  counted_bytes_ = bytes;
  if (!s.ok()) {
    End(s);
  } else if (session_.finished()) {
    End(absl::OkStatus());
  } else {
    StartRead(&message_);
  }
}

void PushGradReactor::End(const absl::Status& status) {
  result_ = status;
  // A failed stream gives back its buffers before the status goes out.
  if (!status.ok()) session_.Discard();
  // Counted before the client can see the status (see RpcCounters).
  counters_->RecordResult(result_);
  recorded_ = true;
  if (status.ok()) {
    *response_ = ProtoToByteBuffer(session_.response());
  }
  Finish(ToGrpcStatus(status));
}

void PushGradReactor::OnDone() {
  if (!recorded_) counters_->RecordResult(result_);
  delete this;
}

}  // namespace zeroshard
