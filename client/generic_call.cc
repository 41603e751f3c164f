#include "client/generic_call.h"

namespace zeroshard {
namespace {

// Each call has at most one operation in flight, so one tag serves all.
void* const kTag = reinterpret_cast<void*>(1);

}  // namespace

GenericStreamCall::GenericStreamCall(
    const std::shared_ptr<grpc::Channel>& channel, const std::string& method,
    grpc::ClientContext* context)
    : context_(context), stub_(channel) {
  call_ = stub_.PrepareCall(context_, method, &cq_);
  if (call_ != nullptr) {
    call_->StartCall(kTag);
    started_ = Await();
  }
}

GenericStreamCall::~GenericStreamCall() {
  if (call_ != nullptr && !finished_) {
    context_->TryCancel();
    Finish();
  }
  cq_.Shutdown();
  void* tag;
  bool ok;
  while (cq_.Next(&tag, &ok)) {
  }
}

bool GenericStreamCall::Await() {
  void* tag = nullptr;
  bool ok = false;
  if (!cq_.Next(&tag, &ok)) return false;  // only after Shutdown
  return ok;
}

bool GenericStreamCall::Write(const grpc::ByteBuffer& message) {
  if (!started_ || finished_) return false;
  call_->Write(message, kTag);
  return Await();
}

bool GenericStreamCall::WriteLast(const grpc::ByteBuffer& message) {
  if (!started_ || finished_) return false;
  call_->WriteLast(message, grpc::WriteOptions(), kTag);
  return Await();
}

bool GenericStreamCall::WritesDone() {
  if (!started_ || finished_) return false;
  call_->WritesDone(kTag);
  return Await();
}

bool GenericStreamCall::Read(grpc::ByteBuffer* message) {
  if (!started_ || finished_) return false;
  call_->Read(message, kTag);
  return Await();
}

grpc::Status GenericStreamCall::Finish() {
  if (call_ == nullptr) {
    return grpc::Status(grpc::StatusCode::INTERNAL,
                        "gRPC could not prepare the call");
  }
  if (finished_) {
    return grpc::Status(grpc::StatusCode::INTERNAL,
                        "GenericStreamCall::Finish called twice");
  }
  finished_ = true;
  grpc::Status status;
  call_->Finish(&status, kTag);
  Await();
  return status;
}

}  // namespace zeroshard
