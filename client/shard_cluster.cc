#include "client/shard_cluster.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "client/apply_step.h"
#include "client/catch_up.h"
#include "client/checkpoint_client.h"
#include "client/set_weights.h"
#include "client/shard_channels.h"
#include "client/shard_client.h"
#include "client/snapshot_reader.h"
#include "client/status_from_proto.h"
#include "common/status_macros.h"
#include "wire/grpc_status.h"

namespace zeroshard {

absl::StatusOr<std::unique_ptr<ShardCluster>> ShardCluster::Connect(
    const std::vector<std::string>& servers, ShardClientOptions options,
    std::optional<FlatLayout> layout) {
  if (!layout.has_value()) {
    ASSIGN_OR_RETURN(std::unique_ptr<ShardChannels> channels,
                     ShardChannels::Connect(servers, std::move(options)));
    return std::unique_ptr<ShardCluster>(
        new ShardCluster(servers, std::move(channels), nullptr));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<ShardClient> client,
                   ShardClient::Create(servers, *std::move(layout),
                                       std::move(options)));
  return std::unique_ptr<ShardCluster>(
      new ShardCluster(servers, nullptr, std::move(client)));
}

ShardCluster::ShardCluster(std::vector<std::string> addresses,
                           std::unique_ptr<ShardChannels> channels,
                           std::unique_ptr<ShardClient> client)
    : addresses_(std::move(addresses)),
      channels_(std::move(channels)),
      client_(std::move(client)) {}

ShardCluster::~ShardCluster() = default;

const ShardChannels& ShardCluster::channels() const {
  return client_ != nullptr ? client_->channels() : *channels_;
}

int ShardCluster::num_servers() const { return channels().size(); }

const std::string& ShardCluster::address(int k) const {
  return channels().address(k);
}

const ShardClientOptions& ShardCluster::options() const {
  return channels().options();
}

const FlatLayout& ShardCluster::layout() const { return client_->layout(); }

absl::Status ShardCluster::NeedLayout(const char* call) const {
  if (client_ != nullptr) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      call, " needs the model's layout: connect the cluster with one"));
}

absl::StatusOr<ServerStatus> ShardCluster::Inspect(int k) const {
  return InspectCopy(k, k);
}

bool ShardCluster::ServerGone(int k) const { return channels().IsDown(k); }

void ShardCluster::LeaveServer(int k, const absl::Status& why) const {
  channels().MarkDown(k, why);
}

absl::Status ShardCluster::CheckCopiesAgree() const {
  return channels().CheckCopiesAgree();
}

absl::Status ShardCluster::LeaveStaleCopies() const {
  return channels().LeaveStaleCopies();
}

std::vector<int> ShardCluster::GoneServers() const {
  return channels().DownServers();
}

absl::StatusOr<bool> ShardCluster::AnswersAgain(int k,
                                                absl::Duration timeout) const {
  return channels().Answers(k, timeout);
}

absl::Status ShardCluster::ReviveServer(int k, const InitOptions& options,
                                        const std::string& directory,
                                        uint64_t step) {
  RETURN_IF_ERROR(RestoreServer(k, options, directory, step));
  channels().MarkUp(k);
  return absl::OkStatus();
}

absl::Status ShardCluster::OpenStepLogs(int k, uint64_t from_step) const {
  return zeroshard::OpenStepLogs(channels(), k, from_step);
}

absl::StatusOr<uint64_t> ShardCluster::ReplayStepLogs(int k) const {
  return zeroshard::ReplayStepLogs(channels(), k);
}

void ShardCluster::CloseStepLogs(int k) const {
  zeroshard::CloseStepLogs(channels(), k);
}

absl::Status ShardCluster::RestoreServer(int k, const InitOptions& options,
                                         const std::string& directory,
                                         uint64_t step) {
  RETURN_IF_ERROR(NeedLayout("RestoreServer"));
  const ShardChannels& c = channels();
  // A server back from a partition holds this run's model at an older step:
  // replaced, as a new process's empty one is made, before the restore.
  InitOptions replace = options;
  replace.replace = true;
  RETURN_IF_ERROR(client_->InitServer(k, replace));
  const int S = c.size();
  for (int slot : {k, (k + S - 1) % S}) {
    ASSIGN_OR_RETURN(const ServerRestore r,
                     RestoreCopy(c, slot, k, directory, step,
                                 c.options().call_timeout));
    if (r.version != step) {
      return absl::DataLossError(absl::StrCat(
          "server ", k, "'s copy of slot ", slot, " restored to step ",
          r.version, ", not ", step));
    }
  }
  return absl::OkStatus();
}

void ShardCluster::MarkServerBack(int k) const { channels().MarkUp(k); }

absl::StatusOr<ServerStatus> ShardCluster::InspectCopy(int slot, int k) const {
  ASSIGN_OR_RETURN(v1::InspectResponse r, channels().InspectCopy(slot, k));
  return StatusFromProto(r);
}

std::vector<absl::StatusOr<ServerStatus>> ShardCluster::InspectAll() const {
  std::vector<absl::StatusOr<ServerStatus>> out;
  for (absl::StatusOr<v1::InspectResponse>& r : channels().InspectAll()) {
    if (r.ok()) {
      out.push_back(StatusFromProto(*r));
    } else {
      out.push_back(r.status());
    }
  }
  return out;
}

absl::StatusOr<std::string> ShardCluster::Health(int k) const {
  return channels().Health(k);
}

std::vector<absl::StatusOr<std::string>> ShardCluster::HealthAll() const {
  return channels().HealthAll();
}

bool ShardCluster::WaitForConnected(int k, absl::Time deadline) const {
  return channels().WaitForConnected(k, deadline);
}

absl::StatusOr<ClusterView> ShardCluster::Discover() const {
  return InspectCluster(channels());
}

absl::StatusOr<std::vector<ServerInit>> ShardCluster::Init(
    const InitOptions& options) {
  RETURN_IF_ERROR(NeedLayout("Init"));
  return client_->Init(options);
}

absl::StatusOr<GatherResult> ShardCluster::Gather(
    absl::Span<const FlatRange> ranges, DType dtype, int64_t min_version,
    void* out, size_t out_bytes, CallCanceller* cancel) {
  RETURN_IF_ERROR(NeedLayout("Gather"));
  return client_->Gather(ranges, dtype, min_version, out, out_bytes, cancel);
}

absl::StatusOr<std::unique_ptr<PushSession>> ShardCluster::OpenPush(
    uint64_t step, uint32_t worker, std::optional<StepCommit> known) {
  RETURN_IF_ERROR(NeedLayout("OpenPush"));
  return client_->OpenPush(step, worker, known);
}

absl::StatusOr<int> ShardCluster::AttachSharedMemory(
    absl::Span<const FlatRange> ranges, std::string* why) {
  RETURN_IF_ERROR(NeedLayout("AttachSharedMemory"));
  return client_->AttachSharedMemory(ranges, why);
}

void ShardCluster::DetachSharedMemory() {
  if (client_ != nullptr) client_->DetachSharedMemory();
}

absl::StatusOr<PushResult> ShardCluster::PushGrad(
    uint64_t step, uint32_t worker, absl::Span<const GradSpan> grads,
    const StepCommit& commit, bool coefficient_known) {
  RETURN_IF_ERROR(NeedLayout("PushGrad"));
  return client_->PushGrad(step, worker, grads, commit, coefficient_known);
}

absl::Status ShardCluster::SetMasterWeights(absl::Span<const float> flat) {
  RETURN_IF_ERROR(NeedLayout("SetMasterWeights"));
  return zeroshard::SetMasterWeights(channels(), layout(), flat);
}

absl::Status ShardCluster::SetMasterWeightRanges(
    absl::Span<const FlatRange> ranges, absl::Span<const float> values) {
  return SetStateRanges(ranges, values, "", std::nullopt);
}

absl::Status ShardCluster::SetStateRanges(
    absl::Span<const FlatRange> ranges, absl::Span<const float> values,
    const std::string& state, std::optional<uint64_t> optimizer_step) {
  RETURN_IF_ERROR(NeedLayout("SetMasterWeights"));
  std::vector<WeightRange> pieces;
  uint64_t at = 0;
  for (const FlatRange& r : ranges) {
    if (r.begin > r.end || r.size() > values.size() - at) {
      return absl::InvalidArgumentError(absl::StrCat(
          "SetMasterWeights: ", values.size(), " values for ranges of more "
          "elements (or a range that ends before it begins); nothing is "
          "written"));
    }
    pieces.push_back(WeightRange{r, values.data() + at});
    at += r.size();
  }
  if (at != values.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "SetMasterWeights: ", values.size(), " values for ranges of ", at,
        " elements; nothing is written"));
  }
  return zeroshard::SetStateRanges(channels(), layout(), pieces, state,
                                   optimizer_step);
}

absl::StatusOr<PushResult> ShardCluster::ApplyStep(
    uint64_t step, uint64_t attempt, absl::Duration timeout) const {
  return ApplyStepAll(channels(), step, attempt, timeout);
}

absl::Status ShardCluster::ApplyStepOn(int k, uint64_t step, uint64_t attempt,
                                       absl::Duration timeout) const {
  return zeroshard::ApplyStepOn(channels(), k, step, attempt, timeout);
}

absl::Status ShardCluster::ArmCheckpoint(uint64_t step,
                                         const std::string& directory) const {
  return zeroshard::ArmCheckpoint(channels(), step, directory);
}

absl::StatusOr<std::vector<ShardFile>> ShardCluster::WaitCheckpoint(
    uint64_t step, const std::string& directory,
    absl::Duration timeout) const {
  return zeroshard::WaitCheckpoint(channels(), step, directory, timeout);
}

absl::StatusOr<std::vector<ServerRestore>> ShardCluster::Restore(
    const std::string& directory, std::optional<uint64_t> step,
    absl::Duration timeout) const {
  return RestoreAll(channels(), directory, step, timeout);
}

absl::StatusOr<ArmedSnapshot> ShardCluster::SnapshotAtOneStep(
    const std::vector<int>& servers, const std::string& directory,
    std::optional<uint64_t> step, const SnapshotReadOptions& options) const {
  return zeroshard::SnapshotAtOneStep(channels(), servers, directory, step,
                                      options);
}

absl::StatusOr<ConsistentSnapshot> ShardCluster::ReadConsistentSnapshot(
    const FlatLayout& layout, FlatRange range,
    const std::vector<std::string>& arrays,
    const SnapshotReadOptions& options) const {
  return zeroshard::ReadConsistentSnapshot(channels(), layout, range, arrays,
                                           options);
}

absl::StatusOr<std::unique_ptr<KvClient>> ShardCluster::OpenKv(
    KvClient::Scope scope, int k) const {
  if (k < 0 || k >= num_servers()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "OpenKv: server ", k, " of ", num_servers()));
  }
  return KvClient::Connect(KvHolders(addresses(), options().replicas,
                                     static_cast<size_t>(k)),
                           std::move(scope),
                           options().control_timeout, options().security);
}

}  // namespace zeroshard
