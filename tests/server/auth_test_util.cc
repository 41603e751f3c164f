#include "tests/server/auth_test_util.h"

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/server/server_test_util.h"

namespace zeroshard::testing {

const std::vector<std::string>& AllMethods() {
  static const auto* methods = new std::vector<std::string>{
      "Init",    "Gather",       "PushGrad",   "ApplyStep", "Inspect",
      "Checkpoint", "Restore",   "ReadSnapshot", "SetWeights", "KvSet",
      "KvGet",   "KvWait",       "OpenRegion", "CloseRegion", "StepLog",
      "Replay"};
  return *methods;
}

absl::Status WriteTokenCredentials(const std::string& dir,
                                   const std::string& tag) {
  std::string table;
  for (const char* role : {"worker", "ctl", "admin"}) {
    const std::string token = absl::StrCat(tag, "-", role, "-0123456789abcdef");
    absl::StrAppend(&table, role, " ", token, "\n");
    std::ofstream out(absl::StrCat(dir, "/", role, ".token.tmp"));
    out << token << "\n";
    if (!out) return absl::InternalError("cannot write a token");
    out.close();
    std::filesystem::rename(absl::StrCat(dir, "/", role, ".token.tmp"),
                            absl::StrCat(dir, "/", role, ".token"));
  }
  std::ofstream out(dir + "/tokens.tmp");
  out << table;
  if (!out) return absl::InternalError("cannot write the token table");
  out.close();
  std::filesystem::rename(dir + "/tokens.tmp", dir + "/tokens");
  return absl::OkStatus();
}

bool CopyDir(const std::string& from, const std::string& to) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(from, ec)) {
    if (!entry.is_regular_file()) continue;
    std::filesystem::copy_file(entry.path(), to / entry.path().filename(),
                               std::filesystem::copy_options::overwrite_existing,
                               ec);
    if (ec) return false;
  }
  return !ec;
}

namespace {

constexpr int kDeadlineMs = 5000;

grpc::Status GatherStatus(v1::ShardService::Stub& stub) {
  grpc::ClientContext c;
  SetDeadline(c, kDeadlineMs);
  v1::GatherRequest req;
  auto* r = req.add_ranges();
  r->set_offset(0);
  r->set_length(64);
  req.set_dtype(v1::DTYPE_FP32);
  req.set_min_version(-1);
  auto reader = stub.Gather(&c, req);
  v1::GatherChunk chunk;
  while (reader->Read(&chunk)) {
  }
  return reader->Finish();
}

grpc::Status PushHeaderOnly(v1::ShardService::Stub& stub) {
  grpc::ClientContext c;
  SetDeadline(c, kDeadlineMs);
  v1::PushGradResponse resp;
  auto writer = stub.PushGrad(&c, &resp);
  v1::PushGradMessage m;
  *m.mutable_header() = Header(0);
  writer->Write(m);
  writer->WritesDone();
  return writer->Finish();
}

}  // namespace

std::map<std::string, grpc::Status> CallEveryMethod(
    v1::ShardService::Stub& stub) {
  std::map<std::string, grpc::Status> out;
  auto unary = [&](const std::string& name, auto call) {
    grpc::ClientContext c;
    SetDeadline(c, kDeadlineMs);
    out[name] = call(&c);
  };
  unary("Init", [&](grpc::ClientContext* c) {
    v1::InitResponse r;
    return stub.Init(c, MakeInit(SmallManifest(1), 1, 0, 1, 4096), &r);
  });
  out["Gather"] = GatherStatus(stub);
  out["PushGrad"] = PushHeaderOnly(stub);
  unary("ApplyStep", [&](grpc::ClientContext* c) {
    v1::ApplyStepRequest q;
    q.set_run_id(kTestRunId);
    v1::ApplyStepResponse r;
    return stub.ApplyStep(c, q, &r);
  });
  out["Inspect"] = InspectStatus(stub);
  unary("Checkpoint", [&](grpc::ClientContext* c) {
    v1::CheckpointRequest q;
    v1::CheckpointResponse r;
    return stub.Checkpoint(c, q, &r);
  });
  unary("Restore", [&](grpc::ClientContext* c) {
    v1::RestoreRequest q;
    q.set_directory("/nonexistent/zeroshard");
    v1::RestoreResponse r;
    return stub.Restore(c, q, &r);
  });
  {
    grpc::ClientContext c;
    SetDeadline(c, kDeadlineMs);
    v1::ReadSnapshotRequest q;
    q.set_step(12345);
    auto reader = stub.ReadSnapshot(&c, q);
    v1::GatherChunk chunk;
    while (reader->Read(&chunk)) {
    }
    out["ReadSnapshot"] = reader->Finish();
  }
  out["SetWeights"] = SetWeightsAs(stub, 0, {});
  {
    grpc::ClientContext c;
    SetDeadline(c, kDeadlineMs);
    v1::StepLogRequest q;
    q.set_run_id(kTestRunId);
    auto reader = stub.StepLog(&c, q);
    v1::PushGradMessage m;
    while (reader->Read(&m)) {
    }
    out["StepLog"] = reader->Finish();
  }
  {
    grpc::ClientContext c;
    SetDeadline(c, kDeadlineMs);
    v1::ReplayResponse r;
    auto writer = stub.Replay(&c, &r);
    writer->WritesDone();
    out["Replay"] = writer->Finish();
  }
  unary("KvSet", [&](grpc::ClientContext* c) {
    v1::KvSetRequest q;
    q.set_key("k");
    q.set_value("v");
    q.set_run_id(kTestRunId);
    v1::KvSetResponse r;
    return stub.KvSet(c, q, &r);
  });
  unary("KvGet", [&](grpc::ClientContext* c) {
    v1::KvGetRequest q;
    q.set_key("k");
    q.set_run_id(kTestRunId);
    v1::KvGetResponse r;
    return stub.KvGet(c, q, &r);
  });
  {
    grpc::ClientContext c;
    SetDeadline(c, 300);  // the key may not exist: a short wait suffices
    v1::KvWaitRequest q;
    q.add_keys("k");
    q.set_run_id(kTestRunId);
    v1::KvWaitResponse r;
    out["KvWait"] = stub.KvWait(&c, q, &r);
  }
  unary("OpenRegion", [&](grpc::ClientContext* c) {
    v1::OpenRegionRequest q;
    q.set_bytes(8192);
    q.set_run_id(kTestRunId);
    v1::OpenRegionResponse r;
    return stub.OpenRegion(c, q, &r);
  });
  unary("CloseRegion", [&](grpc::ClientContext* c) {
    v1::CloseRegionRequest q;
    q.set_region(1);
    v1::CloseRegionResponse r;
    return stub.CloseRegion(c, q, &r);
  });
  return out;
}

grpc::Status InspectStatus(v1::ShardService::Stub& stub) {
  grpc::ClientContext c;
  SetDeadline(c, kDeadlineMs);
  v1::InspectResponse r;
  return stub.Inspect(&c, v1::InspectRequest(), &r);
}

v1::InspectResponse InspectAs(v1::ShardService::Stub& stub) {
  grpc::ClientContext c;
  SetDeadline(c, kDeadlineMs);
  v1::InspectResponse r;
  const grpc::Status s = stub.Inspect(&c, v1::InspectRequest(), &r);
  EXPECT_TRUE(s.ok()) << s.error_message();
  return r;
}

grpc::Status SetWeightsAs(v1::ShardService::Stub& stub, uint64_t offset,
                          const std::vector<float>& values) {
  grpc::ClientContext c;
  SetDeadline(c, kDeadlineMs);
  v1::SetWeightsResponse resp;
  auto writer = stub.SetWeights(&c, &resp);
  if (!values.empty()) {
    v1::WeightPiece piece;
    piece.set_offset(offset);
    piece.set_dtype(v1::DTYPE_FP32);
    piece.set_data(std::string(reinterpret_cast<const char*>(values.data()),
                               values.size() * sizeof(float)));
    writer->Write(piece);
  }
  writer->WritesDone();
  return writer->Finish();
}

}  // namespace zeroshard::testing
