#include "tests/server/server_test_util.h"

#include <chrono>
#include <cmath>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "wire/grpc_tuning.h"
#include "gtest/gtest.h"

namespace zeroshard::testing {

void SetRules(v1::TensorSpec* t, v1::InitRule::Kind kind, double std_divisor,
              v1::ParamClass cls) {
  t->mutable_init()->set_kind(kind);
  if (kind == v1::InitRule::NORMAL) t->mutable_init()->set_std_divisor(std_divisor);
  t->set_param_class(cls);
}

v1::ModelManifest SmallManifest(uint32_t partition_count) {
  const int64_t d = 32, vocab = 100;
  v1::ModelManifest m;
  m.set_partition_count(partition_count);
  auto tensor = [](v1::UnitSpec* u, const std::string& name,
                   std::vector<int64_t> shape) {
    v1::TensorSpec* t = u->add_tensors();
    t->set_name(name);
    for (int64_t s : shape) t->add_shape(s);
    // GPT-2's rules for its names (model/gpt_manifest.cc), two blocks.
    const bool bias = absl::EndsWith(name, ".bias");
    if (bias) {
      SetRules(t, v1::InitRule::ZEROS, 0, v1::BIAS);
    } else if (shape.size() == 1) {
      SetRules(t, v1::InitRule::ONES, 0, v1::NORM);
    } else if (absl::StartsWith(name, "wte") || absl::StartsWith(name, "wpe")) {
      SetRules(t, v1::InitRule::NORMAL, 1.0, v1::EMBEDDING);
    } else {
      SetRules(t, v1::InitRule::NORMAL,
               absl::EndsWith(name, "c_proj.weight") ? std::sqrt(2.0 * 2) : 1.0,
               v1::MATRIX);
    }
  };
  v1::UnitSpec* emb = m.add_units();
  emb->set_name("embedding");
  tensor(emb, "wte.weight", {vocab, d});
  tensor(emb, "wpe.weight", {16, d});
  for (int b = 0; b < 2; ++b) {
    v1::UnitSpec* u = m.add_units();
    u->set_name(absl::StrCat("block_", b));
    const std::string p = absl::StrCat("h.", b, ".");
    tensor(u, p + "ln_1.weight", {d});
    tensor(u, p + "ln_1.bias", {d});
    tensor(u, p + "attn.c_attn.weight", {d, 3 * d});
    tensor(u, p + "attn.c_attn.bias", {3 * d});
    tensor(u, p + "attn.c_proj.weight", {d, d});
    tensor(u, p + "mlp.c_fc.weight", {d, 4 * d});
    tensor(u, p + "mlp.c_proj.weight", {4 * d, d});
  }
  v1::UnitSpec* fin = m.add_units();
  fin->set_name("final");
  tensor(fin, "ln_f.weight", {d});
  tensor(fin, "ln_f.bias", {d});
  return m;
}

v1::InitRequest MakeInit(const v1::ModelManifest& manifest,
                         uint32_t num_servers, uint32_t server_index,
                         uint64_t seed, uint64_t chunk_elems) {
  v1::InitRequest r;
  *r.mutable_manifest() = manifest;
  r.set_num_servers(num_servers);
  r.set_server_index(server_index);
  v1::OptimizerConfig* o = r.mutable_optimizer();
  o->set_kind(v1::OptimizerConfig::ADAMW);
  o->set_lr(1e-2);
  o->set_beta1(0.9);
  o->set_beta2(0.999);
  o->set_eps(1e-8);
  o->set_weight_decay(0.1);
  r.mutable_init()->set_seed(seed);
  r.set_chunk_elems(chunk_elems);
  r.set_run_id(kTestRunId);
  return r;
}

std::unique_ptr<v1::ShardService::Stub> Connect(int port) {
  auto channel = grpc::CreateCustomChannel(
      absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials(),
      TunedChannelArguments());
  // Connected before the first call (bounded): on a loaded CI machine a
  // first connect attempt has failed transiently, and a fail-fast call on a
  // channel in TRANSIENT_FAILURE then fails at once. A server that is not
  // there still fails the calls, after this wait.
  channel->WaitForConnected(std::chrono::system_clock::now() +
                            std::chrono::seconds(10));
  return v1::ShardService::NewStub(channel);
}

grpc::Status InitServer(v1::ShardService::Stub& stub,
                        const v1::InitRequest& request,
                        v1::InitResponse* response) {
  grpc::ClientContext context;
  SetDeadline(context, 20000);
  v1::InitResponse local;
  return stub.Init(&context, request, response ? response : &local);
}

TestServer StartServer(uint32_t server_index, uint32_t num_servers,
                       const std::string& credentials_dir,
                       uint64_t max_pending_grad_bytes) {
  ShardServer::Options options;
  options.max_pending_grad_bytes = max_pending_grad_bytes;
  options.server_index = server_index;
  options.num_servers = num_servers;
  options.credentials_dir = credentials_dir;
  absl::StatusOr<std::unique_ptr<ShardServer>> server =
      ShardServer::Start(options);
  EXPECT_TRUE(server.ok()) << server.status();
  TestServer t;
  if (!server.ok()) return t;
  t.server = *std::move(server);
  t.stub = Connect(t.server->port());
  return t;
}

void SetDeadline(grpc::ClientContext& context, int ms) {
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::milliseconds(ms));
}

grpc::Status GatherBytes(v1::ShardService::Stub& stub,
                         const std::vector<FlatRange>& ranges, v1::DType dtype,
                         int64_t min_version, int deadline_ms,
                         std::string* out, std::vector<uint64_t>* versions) {
  grpc::ClientContext context;
  SetDeadline(context, deadline_ms);
  v1::GatherRequest request;
  for (const FlatRange& r : ranges) {
    v1::FlatRange* p = request.add_ranges();
    p->set_offset(r.begin);
    p->set_length(r.size());
  }
  request.set_dtype(dtype);
  request.set_min_version(min_version);
  auto reader = stub.Gather(&context, request);
  v1::GatherChunk chunk;
  while (reader->Read(&chunk)) {
    out->append(chunk.data());
    if (versions != nullptr) versions->push_back(chunk.version());
  }
  return reader->Finish();
}

std::vector<float> GatherFp32(v1::ShardService::Stub& stub, FlatRange range) {
  std::string bytes;
  grpc::Status s =
      GatherBytes(stub, {range}, v1::DTYPE_FP32, -1, 20000, &bytes);
  EXPECT_TRUE(s.ok()) << s.error_message();
  std::vector<float> out(bytes.size() / 4);
  if (!out.empty()) std::memcpy(out.data(), bytes.data(), out.size() * 4);
  return out;
}

Piece Fp32Piece(uint64_t offset, const std::vector<float>& values) {
  return {offset, v1::DTYPE_FP32,
          std::string(reinterpret_cast<const char*>(values.data()),
                      values.size() * sizeof(float))};
}

Piece Bf16Piece(uint64_t offset, const std::vector<uint16_t>& values) {
  return {offset, v1::DTYPE_BF16,
          std::string(reinterpret_cast<const char*>(values.data()),
                      values.size() * sizeof(uint16_t))};
}

v1::PushGradHeader Header(uint64_t step, uint32_t worker) {
  v1::PushGradHeader h;
  h.set_step(step);
  h.set_worker(worker);
  h.set_run_id(kTestRunId);
  return h;
}

grpc::Status Push(
    v1::ShardService::Stub& stub, const v1::PushGradHeader& header,
    const std::vector<Piece>& pieces, double coefficient, bool skip,
    v1::PushGradResponse* response, bool prepare,
    const std::vector<std::pair<std::string, std::string>>& metadata) {
  grpc::ClientContext context;
  SetDeadline(context, 20000);
  for (const auto& [key, value] : metadata) context.AddMetadata(key, value);
  v1::PushGradResponse local;
  auto writer = stub.PushGrad(&context, response ? response : &local);
  v1::PushGradMessage m;
  *m.mutable_header() = header;
  bool ok = writer->Write(m);
  for (const Piece& p : pieces) {
    if (!ok) break;
    m.Clear();
    m.mutable_piece()->set_offset(p.offset);
    m.mutable_piece()->set_dtype(p.dtype);
    m.mutable_piece()->set_data(p.data);
    ok = writer->Write(m);
  }
  if (ok && !header.coefficient_known()) {
    m.Clear();
    m.mutable_commit()->set_coefficient(coefficient);
    m.mutable_commit()->set_skip(skip);
    m.mutable_commit()->set_prepare(prepare);
    writer->Write(m);
  }
  writer->WritesDone();
  return writer->Finish();
}

v1::InspectResponse Inspect(v1::ShardService::Stub& stub) {
  grpc::ClientContext context;
  SetDeadline(context, 20000);
  v1::InspectResponse r;
  grpc::Status s = stub.Inspect(&context, v1::InspectRequest(), &r);
  EXPECT_TRUE(s.ok()) << s.error_message();
  return r;
}

std::unique_ptr<grpc::ClientWriter<v1::PushGradMessage>> OpenHeldPush(
    v1::ShardService::Stub& stub, grpc::ClientContext* context,
    v1::PushGradResponse* response, const v1::PushGradHeader& header,
    uint64_t offset, const std::vector<float>& values,
    uint64_t pending_after) {
  auto writer = stub.PushGrad(context, response);
  v1::PushGradMessage m;
  *m.mutable_header() = header;
  if (!writer->Write(m)) return nullptr;
  m.Clear();
  m.mutable_piece()->set_offset(offset);
  m.mutable_piece()->set_dtype(v1::DTYPE_FP32);
  m.mutable_piece()->set_data(values.data(), values.size() * sizeof(float));
  if (!writer->Write(m)) return nullptr;
  // Write returning does not mean the server has buffered the piece.
  const absl::Time limit = absl::Now() + absl::Seconds(20);
  while (Inspect(stub).pending_grad_bytes() != pending_after &&
         absl::Now() < limit) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  if (Inspect(stub).pending_grad_bytes() != pending_after) return nullptr;
  return writer;
}

}  // namespace zeroshard::testing
