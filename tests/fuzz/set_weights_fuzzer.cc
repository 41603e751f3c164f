// SetWeights (server/set_weights_reactor.h) as the server receives it: a
// stream of any WeightPieces, sent to the real ShardService over an
// in-process gRPC channel (no socket), on a small initialised shard. The
// piece validation lives inside the reactor, so this drives the reactor.
// Input: one record per WeightPiece (protobuf bytes; fuzz_util.h); a record
// that does not parse ends the stream.
// Checked: no crash, leak or UB; a call that succeeds reports writing every
// element of the pieces it was sent.
#include <grpcpp/grpcpp.h>

#include <cstdio>
#include <cstdlib>
#include <memory>

#include "proto/zeroshard/v1/shard.grpc.pb.h"
#include "server/shard_service_impl.h"
#include "tests/fuzz/fuzz_shard.h"
#include "tests/fuzz/fuzz_util.h"

namespace zeroshard::fuzz {
namespace {

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "set_weights: %s\n", what);
  std::abort();
}

// One server for the whole run, initialised once: SetWeights leaves the
// validation inputs (layout, owned range) unchanged, so runs stay
// independent.
struct Server {
  ShardServiceImpl service{ShardServiceImpl::Config{.identity = {0, 1}}};
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<v1::ShardService::Stub> stub;

  Server() {
    grpc::ServerBuilder builder;
    builder.RegisterService(&service);
    server = builder.BuildAndStart();
    if (server == nullptr) Fail("cannot start the in-process server");
    stub = v1::ShardService::NewStub(
        server->InProcessChannel(grpc::ChannelArguments()));
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(20));
    v1::InitResponse response;
    grpc::Status s = stub->Init(&context, FuzzInit(1, 0), &response);
    if (!s.ok()) {
      std::fprintf(stderr, "Init: %s\n", s.error_message().c_str());
      Fail("cannot initialise the shard");
    }
  }
};

void Run(const uint8_t* data, size_t size) {
  QuietProtobuf();
  static Server* const server = new Server();  // lives for the process
  FuzzInput in(data, size);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(20));
  v1::SetWeightsResponse response;
  auto writer = server->stub->SetWeights(&context, &response);
  uint64_t sent_elems = 0;
  bool all_valid = true;
  while (!in.empty()) {
    std::string_view record = in.Record();
    v1::WeightPiece piece;
    if (!piece.ParseFromArray(record.data(), static_cast<int>(record.size()))) {
      break;
    }
    const size_t esize = piece.dtype() == v1::DTYPE_BF16   ? 2
                         : piece.dtype() == v1::DTYPE_FP32 ? 4
                                                           : 0;
    if (esize == 0 || piece.data().size() % esize != 0) all_valid = false;
    if (esize != 0) sent_elems += piece.data().size() / esize;
    if (!writer->Write(piece)) break;  // the server ended the call
  }
  writer->WritesDone();
  grpc::Status status = writer->Finish();
  if (status.ok() && (!all_valid || response.elems_written() != sent_elems)) {
    Fail("a successful call did not write exactly the pieces sent");
  }
}

}  // namespace
}  // namespace zeroshard::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  zeroshard::fuzz::Run(data, size);
  return 0;
}
