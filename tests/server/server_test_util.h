// Shared pieces of the shard server tests: a small GPT-like manifest, Init
// requests, an in-process server with a stub, and Gather / PushGrad helpers
// that wrap the generated gRPC stubs with bounded deadlines.
#ifndef ZEROSHARD_TESTS_SERVER_SERVER_TEST_UTIL_H_
#define ZEROSHARD_TESTS_SERVER_SERVER_TEST_UTIL_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/layout.h"
#include "proto/zeroshard/v1/shard.grpc.pb.h"
#include "server/shard_server.h"

namespace zeroshard::testing {

// States a hand-made tensor's init rule and parameter class, as an
// architecture would (the servers refuse a manifest without them).
void SetRules(v1::TensorSpec* t,
              v1::InitRule::Kind kind = v1::InitRule::NORMAL,
              double std_divisor = 1.0, v1::ParamClass cls = v1::MATRIX);

// embedding, two blocks and a final LayerNorm of width 32; with
// partition_count 3 the flat space is a few tens of thousands of elements.
v1::ModelManifest SmallManifest(uint32_t partition_count);

// The run of MakeInit's requests and Header's pushes.
inline constexpr char kTestRunId[] = "test-run";

v1::InitRequest MakeInit(const v1::ModelManifest& manifest,
                         uint32_t num_servers, uint32_t server_index,
                         uint64_t seed, uint64_t chunk_elems);

// An in-process server on 127.0.0.1:0 and a stub to it.
struct TestServer {
  std::unique_ptr<ShardServer> server;
  std::unique_ptr<v1::ShardService::Stub> stub;
};
// Init with a 20 s deadline; the reply goes to `response` when given.
grpc::Status InitServer(v1::ShardService::Stub& stub,
                        const v1::InitRequest& request,
                        v1::InitResponse* response = nullptr);

TestServer StartServer(uint32_t server_index, uint32_t num_servers,
                       const std::string& credentials_dir = "",
                       uint64_t max_pending_grad_bytes = 0);
std::unique_ptr<v1::ShardService::Stub> Connect(int port);

// A deadline `ms` milliseconds from now.
void SetDeadline(grpc::ClientContext& context, int ms);

// Gathers one range; the payloads are concatenated. Versions seen are
// appended to *versions when non-null.
grpc::Status GatherBytes(v1::ShardService::Stub& stub,
                         const std::vector<FlatRange>& ranges, v1::DType dtype,
                         int64_t min_version, int deadline_ms,
                         std::string* out,
                         std::vector<uint64_t>* versions = nullptr);
std::vector<float> GatherFp32(v1::ShardService::Stub& stub, FlatRange range);

// A gradient piece for a push.
struct Piece {
  uint64_t offset = 0;
  v1::DType dtype = v1::DTYPE_FP32;
  std::string data;
};
Piece Fp32Piece(uint64_t offset, const std::vector<float>& values);
Piece Bf16Piece(uint64_t offset, const std::vector<uint16_t>& values);

// Sends header, pieces and (unless header.coefficient_known) a commit,
// which with `prepare` asks for a two-phase prepare (the step applies on
// ApplyStep); `metadata` goes with the call (a slot's copy: zs-slot,
// zs-copies).
grpc::Status Push(
    v1::ShardService::Stub& stub, const v1::PushGradHeader& header,
    const std::vector<Piece>& pieces, double coefficient, bool skip,
    v1::PushGradResponse* response = nullptr, bool prepare = false,
    const std::vector<std::pair<std::string, std::string>>& metadata = {});
v1::PushGradHeader Header(uint64_t step, uint32_t worker = 0);

// Opens a PushGrad stream on `context`, writes `header` and one FP32 piece
// of `values` at `offset`, and waits (bounded, 20 s) until the server's
// pending gradient bytes reach `pending_after`, i.e. until it has buffered
// the piece. The caller then commits, cancels or half-closes the stream.
// Null if a write failed or the bytes never showed.
std::unique_ptr<grpc::ClientWriter<v1::PushGradMessage>> OpenHeldPush(
    v1::ShardService::Stub& stub, grpc::ClientContext* context,
    v1::PushGradResponse* response, const v1::PushGradHeader& header,
    uint64_t offset, const std::vector<float>& values,
    uint64_t pending_after);

v1::InspectResponse Inspect(v1::ShardService::Stub& stub);

}  // namespace zeroshard::testing

#endif  // ZEROSHARD_TESTS_SERVER_SERVER_TEST_UTIL_H_
