#include "server/read_snapshot_reactor.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "wire/gather_codec.h"
#include "wire/grpc_status.h"

namespace zeroshard {

absl::StatusOr<ReadSnapshotPlan> PlanReadSnapshot(
    const ModelShard& shard, const v1::ReadSnapshotRequest& request) {
  ReadSnapshotPlan plan;
  std::string name = request.state();
  if (name.empty()) {
    switch (request.array()) {
      case v1::ReadSnapshotRequest::MASTER: name = "master"; break;
      case v1::ReadSnapshotRequest::EXP_AVG: name = "exp_avg"; break;
      case v1::ReadSnapshotRequest::EXP_AVG_SQ: name = "exp_avg_sq"; break;
      default:
        return absl::InvalidArgumentError(absl::StrCat(
            "ReadSnapshot: unknown array ", static_cast<int>(request.array())));
    }
  }
  if (name == "master") {
    plan.array = 0;
  } else {
    const int slot = shard.rule().SlotIndex(name);
    if (slot < 0) {
      std::string known = "master";
      for (const StateSlot& s : shard.rule().slots()) {
        absl::StrAppend(&known, ", ", s.name);
      }
      return absl::InvalidArgumentError(absl::StrCat(
          "ReadSnapshot: no state '", name.substr(0, 64), "' under optimizer "
          "rule ", shard.rule().name(), " (it keeps ", known, ")"));
    }
    plan.array = 1 + static_cast<size_t>(slot);
  }
  plan.owned = shard.owned();
  for (const v1::FlatRange& r : request.ranges()) {
    // Overflow-safe: offset + length may not wrap.
    if (r.length() > UINT64_MAX - r.offset()) {
      return absl::InvalidArgumentError(
          absl::StrCat("ReadSnapshot: range offset ", r.offset(), " length ",
                       r.length(), " overflows"));
    }
    if (r.offset() < plan.owned.begin ||
        r.offset() + r.length() > plan.owned.end) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ReadSnapshot: range [", r.offset(), ", ", r.offset() + r.length(),
          ") is outside the owned range [", plan.owned.begin, ", ",
          plan.owned.end, ")"));
    }
    if (r.length() > 0) plan.ranges.push_back({r.offset(), r.offset() + r.length()});
  }
  plan.snapshot = shard.FindSnapshot(request.step(), "");
  const auto result =
      plan.snapshot ? plan.snapshot->result() : std::nullopt;
  if (!result.has_value()) {
    return absl::NotFoundError(absl::StrCat(
        "ReadSnapshot: no complete in-memory snapshot of step ",
        request.step(), plan.snapshot ? " (armed, not complete yet)" : "",
        "; arm one with Checkpoint(directory=\"\", step=", request.step(),
        ")"));
  }
  if (!result->ok()) return result->status();
  return plan;
}

ReadSnapshotReactor::ReadSnapshotReactor(ReadSnapshotPlan plan,
                                         RpcCounters* counters)
    : plan_(std::move(plan)), counters_(counters) {
  if (!plan_.ranges.empty()) pos_ = plan_.ranges[0].begin;
  Next();
}

void ReadSnapshotReactor::Next() {
  while (range_index_ < plan_.ranges.size() &&
         pos_ >= plan_.ranges[range_index_].end) {
    ++range_index_;
    if (range_index_ < plan_.ranges.size()) {
      pos_ = plan_.ranges[range_index_].begin;
    }
  }
  if (range_index_ >= plan_.ranges.size()) {
    counters_->RecordResult(absl::OkStatus());
    FinishWith(absl::OkStatus());
    return;
  }
  const FlatRange& r = plan_.ranges[range_index_];
  const uint64_t n = std::min(r.end - pos_, kReadSnapshotMessageElems);
  const size_t bytes = n * sizeof(float);
  // An 8-bit slot's values are dequantized into the message.
  values_.resize(n);
  plan_.snapshot->Values(plan_.array, {pos_, pos_ + n}, values_.data());
  buffer_ = EncodeGatherChunk(
      pos_, DType::kFp32, plan_.snapshot->step(), bytes,
      [&](uint8_t* dst) { std::memcpy(dst, values_.data(), bytes); });
  counters_->AddBytesOut(bytes);
  pos_ += n;
  StartWrite(&buffer_);
}

void ReadSnapshotReactor::OnWriteDone(bool ok) {
  if (!ok) {
    const absl::Status s = absl::CancelledError("ReadSnapshot: write failed");
    counters_->RecordResult(s);
    FinishWith(s);
    return;
  }
  Next();
}

}  // namespace zeroshard
