// The resolved configuration: every field of a TrainingConfig written out
// once, by whoever resolves the user's file, and read by every process that
// trains with it.
//
// zeroshard-train resolves the user's DeepSpeed-style file with its command
// line (LoadTrainingConfig with ConfigOverrides: "auto", --steps, --workers,
// --servers) and writes <out>/config.resolved.json; each zeroshard-worker
// reads that file as it is, with no overrides and no "auto" to resolve
// again. `zeroshard-ctl config` writes the same file for workers started by
// hand or by a deployment.
//
//   ASSIGN_OR_RETURN(ParsedConfig p, LoadTrainingConfig(path, overrides));
//   RETURN_IF_ERROR(WriteFileAtomically(out, ResolvedConfigJson(p.config)));
//   ...
//   ASSIGN_OR_RETURN(TrainingConfig cfg, LoadResolvedConfig(out));  // worker
//
// Contracts:
// - The file is JSON: {"zeroshard_resolved_config": 1, "config": {...}}, the
//   inner object holding every field under zeroshard's own names (the keys
//   of CanonicalJson plus the host-local ones: addresses, paths, timeouts,
//   the recorded DeepSpeed keys). One list of fields (VisitConfig) makes
//   the file, reads it back and makes CanonicalJson. Numbers round-trip exactly, so
//   ConfigFingerprint(ParseResolvedConfig(ResolvedConfigJson(c))) ==
//   ConfigFingerprint(c) and the bytes written again are the same.
// - Reading is strict: a missing key, an unknown key, a wrong type or an
//   unknown enum name is INVALID_ARGUMENT naming the key path; the result is
//   checked with ValidateTrainingConfig. A DeepSpeed-style file (no
//   "zeroshard_resolved_config" marker) is INVALID_ARGUMENT saying how to
//   resolve it.
#ifndef ZEROSHARD_COMMON_RESOLVED_CONFIG_H_
#define ZEROSHARD_COMMON_RESOLVED_CONFIG_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "common/config.h"

namespace zeroshard {

// The marker's value; a reader refuses any other version.
inline constexpr int kResolvedConfigVersion = 1;

std::string ResolvedConfigJson(const TrainingConfig& config);

absl::StatusOr<TrainingConfig> ParseResolvedConfig(std::string_view text);

// Reads and parses `path`; errors are prefixed with the path (NOT_FOUND when
// it cannot be read).
absl::StatusOr<TrainingConfig> LoadResolvedConfig(const std::string& path);

}  // namespace zeroshard

#endif  // ZEROSHARD_COMMON_RESOLVED_CONFIG_H_
