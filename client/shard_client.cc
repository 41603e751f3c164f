#include "client/shard_client.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/piece_plan.h"
#include "client/server_region.h"
#include "client/status_from_proto.h"
#include "common/status_macros.h"
#include "wire/grpc_status.h"
#include "wire/proto_convert.h"

namespace zeroshard {

absl::StatusOr<std::unique_ptr<ShardClient>> ShardClient::Create(
    const std::vector<std::string>& servers, FlatLayout layout,
    ShardClientOptions options) {
  if (servers.size() != layout.num_servers()) {
    return absl::InvalidArgumentError(
        absl::StrCat(servers.size(), " server addresses given for a layout of ",
                     layout.num_servers(), " servers"));
  }
  auto channels = ShardChannels::Connect(servers, std::move(options));
  if (!channels.ok()) return channels.status();
  return std::unique_ptr<ShardClient>(
      new ShardClient(std::move(layout), std::move(*channels)));
}

absl::StatusOr<v1::OptimizerConfig> InitOptimizer(const FlatLayout& layout,
                                                   const InitOptions& options) {
  RETURN_IF_ERROR(ValidateOptimizerConfig(options.optimizer));
  v1::OptimizerConfig out = ToProto(options.optimizer);
  if (options.explicit_groups.empty()) {
    AddParamGroups(ResolveParamGroups(layout, options.param_groups,
                                      options.optimizer.weight_decay),
                   &out);
  } else {
    std::vector<FlatRange> all;
    for (const ResolvedGroup& g : options.explicit_groups) {
      if (!std::isfinite(g.weight_decay) || g.weight_decay < 0 ||
          !std::isfinite(g.lr_scale) || g.lr_scale < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "parameter group ", g.name, ": weight_decay ", g.weight_decay,
            " and lr_scale ", g.lr_scale, " must be finite and >= 0"));
      }
      for (const FlatRange& r : g.ranges) {
        if (r.empty() || r.end > layout.total_elems()) {
          return absl::InvalidArgumentError(absl::StrCat(
              "parameter group ", g.name, ": range [", r.begin, ", ", r.end,
              ") is empty or outside [0, ", layout.total_elems(), ")"));
        }
        all.push_back(r);
      }
    }
    RETURN_IF_ERROR(CheckDisjoint(all));
    AddParamGroups(options.explicit_groups, &out);
  }
  return out;
}

absl::StatusOr<v1::InitRequest> ShardClient::InitRequestFor(
    const InitOptions& options) const {
  // The optimizer checked (and its groups) before anything else.
  ASSIGN_OR_RETURN(v1::OptimizerConfig optimizer, InitOptimizer(layout_, options));
  if (options.chunk_elems % kFlatAlignment != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "chunk_elems ", options.chunk_elems, " is not a multiple of 64"));
  }
  v1::InitRequest base;
  *base.mutable_manifest() = ToProto(layout_.manifest());
  base.set_num_servers(num_servers());
  *base.mutable_optimizer() = std::move(optimizer);
  if (options.seed.has_value()) {
    base.mutable_init()->set_seed(*options.seed);
  } else {
    base.mutable_init()->set_zeros(true);
  }
  base.mutable_init()->set_init_std(options.init_std);
  base.set_run_id(channels_->options().run_id);
  base.set_num_workers(options.num_workers);
  base.set_replace(options.replace);
  base.set_replicas(options.replicas);
  base.set_chunk_elems(options.chunk_elems);
  return base;
}

absl::Status ShardClient::InitOn(int k, const v1::InitRequest& base,
                                 v1::InitResponse* response) const {
  v1::InitRequest req = base;
  req.set_server_index(k);
  RETURN_IF_ERROR(RunWithRetry(channels_->options().retry, [&] {
    grpc::ClientContext ctx;
    channels_->PrepareControlContext(&ctx);
    return FromGrpcStatus(channels_->stub(k).Init(&ctx, req, response),
                          "Init", channels_->address(k));
  }, channels_->channel(k).get()));
  const FlatRange want = layout_.ServerRange(k);
  if (response->owned_begin() != want.begin ||
      response->owned_end() != want.end ||
      response->total_elems() != layout_.total_elems()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "server ", k, " at ", channels_->address(k), " owns [",
        response->owned_begin(), ", ", response->owned_end(), ") of ",
        response->total_elems(), " elements; the client's layout says [",
        want.begin, ", ", want.end, ") of ", layout_.total_elems()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<ServerInit>> ShardClient::Init(
    const InitOptions& options) {
  ASSIGN_OR_RETURN(const v1::InitRequest base, InitRequestFor(options));
  const int S = num_servers();
  std::vector<v1::InitResponse> responses(S);
  RETURN_IF_ERROR(RunInParallel(
      S, [&](int k) { return InitOn(k, base, &responses[k]); }));
  std::vector<ServerInit> out;
  for (const v1::InitResponse& r : responses) out.push_back(InitFromProto(r));
  return out;
}

absl::Status ShardClient::InitServer(int k, const InitOptions& options) {
  ASSIGN_OR_RETURN(const v1::InitRequest base, InitRequestFor(options));
  v1::InitResponse response;
  return InitOn(k, base, &response);
}

absl::StatusOr<GatherResult> ShardClient::Gather(
    absl::Span<const FlatRange> ranges, DType dtype, int64_t min_version,
    void* out, size_t out_bytes, CallCanceller* cancel) {
  if (dtype != DType::kFp32 && dtype != DType::kBf16) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Gather dtype ", DTypeName(dtype), " is not fp32 or bf16"));
  }
  if (absl::Status s = ValidateDisjoint(layout_, ranges); !s.ok()) return s;
  const size_t esize = DTypeSize(dtype);
  uint64_t elems = 0;
  for (const FlatRange& r : ranges) elems += r.size();
  if (out == nullptr || out_bytes != elems * esize) {
    return absl::InvalidArgumentError(
        absl::StrCat("Gather output buffer holds ", out_bytes, " bytes; the ",
                     ranges.size(), " ranges need ", elems * esize));
  }
  std::vector<std::vector<GatherTarget>> by_server(num_servers());
  auto* dst = static_cast<uint8_t*>(out);
  for (const FlatRange& r : ranges) {
    for (const ServerSlice& s : layout_.SplitByServer(r)) {
      by_server[s.server].push_back(
          {s.range, dst + (s.range.begin - r.begin) * esize});
    }
    dst += r.size() * esize;
  }
  std::vector<int> active;
  for (int k = 0; k < num_servers(); ++k) {
    if (!by_server[k].empty()) active.push_back(k);
  }
  std::vector<absl::StatusOr<GatherResult>> results(
      num_servers(), absl::UnknownError("not run"));
  auto run = [&](int k) {
    results[k] = GatherFromServer(*channels_, k, std::move(by_server[k]),
                                  dtype, min_version, cancel);
  };
  std::vector<std::thread> threads;
  for (size_t i = 1; i < active.size(); ++i) threads.emplace_back(run, active[i]);
  if (!active.empty()) run(active[0]);
  for (auto& t : threads) t.join();
  GatherResult total;
  bool first = true;
  for (int k : active) {
    if (!results[k].ok()) return results[k].status();
    MergeGatherResult(*results[k], first, &total);
    first = false;
  }
  return total;
}

absl::StatusOr<int> ShardClient::AttachSharedMemory(
    absl::Span<const FlatRange> ranges, std::string* why) {
  std::vector<uint64_t> elems(num_servers(), 0);
  for (const FlatRange& r : ranges) {
    if (r.end < r.begin || r.end > layout_.total_elems()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "AttachSharedMemory: range [", r.begin, ", ", r.end,
          ") is not inside [0, ", layout_.total_elems(), ")"));
    }
    for (int k = 0; k < num_servers(); ++k) {
      const FlatRange own = layout_.ServerRange(k);
      const uint64_t b = std::max(r.begin, own.begin);
      const uint64_t e = std::min(r.end, own.end);
      if (b < e) elems[k] += e - b;
    }
  }
  int attached = 0;
  for (int k = 0; k < num_servers(); ++k) {
    if (channels_->region(k) != nullptr) {
      ++attached;
      continue;
    }
    if (elems[k] == 0) continue;
    // A server this client left and that answers again may still hold the
    // region dropped then: closed first, so that it counts against no limit.
    for (uint64_t id : channels_->TakeStaleRegions(k)) {
      ServerRegion::CloseOn(*channels_, k, id);
    }
    const uint64_t bytes = elems[k] * sizeof(float);
    absl::StatusOr<std::unique_ptr<ServerRegion>> region =
        ServerRegion::Open(*channels_, k, bytes, bytes);
    if (!region.ok()) {
      if (why != nullptr && why->empty()) {
        *why = std::string(region.status().message());
      }
      continue;
    }
    channels_->SetRegion(k, *std::move(region));
    ++attached;
  }
  return attached;
}

void ShardClient::DetachSharedMemory() {
  for (int k = 0; k < num_servers(); ++k) channels_->SetRegion(k, nullptr);
}

absl::StatusOr<std::unique_ptr<PushSession>> ShardClient::OpenPush(
    uint64_t step, uint32_t worker, std::optional<StepCommit> known) {
  if (known.has_value()) {
    RETURN_IF_ERROR(ValidateStepCommit(*known));
  }
  return std::unique_ptr<PushSession>(
      new PushSession(channels_.get(), &layout_, step, worker, known));
}

absl::StatusOr<PushResult> ShardClient::PushGrad(
    uint64_t step, uint32_t worker, absl::Span<const GradSpan> grads,
    const StepCommit& commit, bool coefficient_known) {
  auto session = OpenPush(
      step, worker,
      coefficient_known ? std::optional<StepCommit>(commit) : std::nullopt);
  if (!session.ok()) return session.status();
  for (const GradSpan& g : grads) {
    if (absl::Status s = (*session)->Add(g.range, g.dtype, g.data); !s.ok()) {
      (*session)->Abort();
      return s;
    }
  }
  return (*session)->Commit(commit);
}

}  // namespace zeroshard
