#include "comm/collectives.h"

#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "comm/gloo_collectives.h"
#ifdef ZS_HAVE_NCCL
#include "comm/nccl_collectives.h"
#include "comm/nccl_host_group.h"
#endif

namespace zeroshard {

absl::Status WorkerGroup::AgreeOn(absl::string_view what,
                                  uint64_t fingerprint) {
  // Slot q holds rank q's fingerprint after the sum (the others add zero),
  // so every rank sees every fingerprint and reaches the same verdict.
  std::vector<uint64_t> all(size(), 0);
  all[rank()] = fingerprint;
  RETURN_IF_ERROR(AllReduce(absl::MakeSpan(all), ReduceOp::kSum));
  std::vector<std::string> differing;
  for (int q = 1; q < size(); ++q) {
    if (all[q] != all[0]) {
      differing.push_back(absl::StrCat("rank ", q, " has ", all[q]));
    }
  }
  if (differing.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("workers disagree on ", what, ": rank 0 has ", all[0], ", ",
                   absl::StrJoin(differing, ", ")));
}

absl::Status ValidateGroupShape(int rank, int size) {
  if (size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker group size must be >= 1, got ", size));
  }
  if (rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "worker rank ", rank, " out of range for group size ", size));
  }
  return absl::OkStatus();
}

absl::Status ValidateAllGather(int size, size_t local_bytes,
                               size_t out_bytes) {
  if (out_bytes != local_bytes * static_cast<size_t>(size)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "all-gather: output of ", out_bytes, " bytes must be size (", size,
        ") x local part (", local_bytes, " bytes)"));
  }
  return absl::OkStatus();
}

absl::Status ValidateReduceScatter(int size, size_t in_elems, size_t out_elems,
                                   float scale) {
  if (in_elems != out_elems * static_cast<size_t>(size)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "reduce-scatter: input of ", in_elems, " floats must be size (", size,
        ") x output part (", out_elems, " floats)"));
  }
  if (!std::isfinite(scale)) {
    return absl::InvalidArgumentError(
        absl::StrCat("reduce-scatter: scale must be finite, got ", scale));
  }
  return absl::OkStatus();
}

size_t ReduceTypeBytes(ReduceType type) {
  switch (type) {
    case ReduceType::kF32:
      return 4;
    case ReduceType::kF64:
    case ReduceType::kI64:
    case ReduceType::kU64:
      return 8;
  }
  return 8;
}

absl::StatusOr<std::unique_ptr<WorkerGroup>> CreateWorkerGroup(
    absl::string_view backend, int rank, int size, RendezvousStore* store,
    const GroupOptions& options) {
  RETURN_IF_ERROR(ValidateGroupShape(rank, size));
  if (store == nullptr) {
    return absl::InvalidArgumentError("worker group needs a rendezvous store");
  }
  if (options.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker group timeout must be positive, got ",
                     absl::FormatDuration(options.timeout)));
  }
  if (backend == "gloo") {
    ASSIGN_OR_RETURN(std::unique_ptr<GlooWorkerGroup> group,
                     GlooWorkerGroup::Create(rank, size, store, options));
    return std::unique_ptr<WorkerGroup>(std::move(group));
  }
  if (backend == "nccl-host") {
#ifdef ZS_HAVE_NCCL
    return CreateHostStagedNcclGroup(rank, size, store, options);
#else
    return absl::UnimplementedError(
        "collectives backend 'nccl' is not built (no CUDA/NCCL at configure "
        "time); use 'gloo'");
#endif
  }
  if (backend == "nccl") {
#ifdef ZS_HAVE_NCCL
    ASSIGN_OR_RETURN(std::unique_ptr<NcclWorkerGroup> group,
                     NcclWorkerGroup::Create(rank, size, store, options));
    return std::unique_ptr<WorkerGroup>(std::move(group));
#else
    return absl::UnimplementedError(
        "collectives backend 'nccl' is not built (no CUDA/NCCL at configure "
        "time); use 'gloo'");
#endif
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown collectives backend '", backend,
      "' (want 'gloo', 'nccl' or 'nccl-host')"));
}

absl::Status CheckBackendUsable(absl::string_view backend) {
  if (backend == "gloo") return absl::OkStatus();
  if (backend == "nccl" || backend == "nccl-host") {
#ifdef ZS_HAVE_NCCL
    return VisibleCudaDevices().status();
#else
    return absl::UnimplementedError(
        "collectives backend 'nccl' is not built (no CUDA/NCCL at configure "
        "time); use 'gloo'");
#endif
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown collectives backend '", backend, "' (want 'gloo' or 'nccl')"));
}

}  // namespace zeroshard
