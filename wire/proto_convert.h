// Conversions between the domain types of common/ and the wire messages of
// proto/zeroshard/v1/shard.proto. The only file that knows both.
#ifndef ZEROSHARD_WIRE_PROTO_CONVERT_H_
#define ZEROSHARD_WIRE_PROTO_CONVERT_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/dtype.h"
#include "common/layout.h"
#include "common/optimizer_config.h"
#include "common/param_groups.h"
#include "proto/zeroshard/v1/shard.pb.h"

namespace zeroshard {

v1::ModelManifest ToProto(const ModelManifest& manifest);
ModelManifest FromProto(const v1::ModelManifest& manifest);
// INVALID_ARGUMENT naming the first tensor whose init rule or parameter
// class is unspecified or out of range (the servers check every Init).
absl::Status CheckManifestRules(const v1::ModelManifest& manifest);

v1::OptimizerConfig ToProto(const OptimizerConfig& config);
// INVALID_ARGUMENT for an unknown enum value; ranges are checked separately
// by ValidateOptimizerConfig.
absl::StatusOr<OptimizerConfig> FromProto(const v1::OptimizerConfig& config);

// Appends the resolved parameter groups (name, settings, flat ranges) to
// out->param_groups: what Init carries to the servers.
void AddParamGroups(const std::vector<ResolvedGroup>& groups,
                    v1::OptimizerConfig* out);
// A group's tensor rule, validated against its registry entry
// (common/optimizer_rules.h): today's form (a name and every param by
// keyword), the first named form's spellings, or the oldest (a kind and
// the rule's own fields); none for kind NONE. INVALID_ARGUMENT naming an
// unknown kind, name or keyword, or a value out of range.
absl::StatusOr<TensorRule> ParseTensorRuleProto(const v1::TensorRule& in);
// The same, none where ParseTensorRuleProto refuses (for rules a server
// already accepted at Init).
TensorRule TensorRuleFromProto(const v1::TensorRule& in);
// The inverse: the groups `in` carries, each with its ranges and their sum.
std::vector<ResolvedGroup> ParamGroupsFromProto(const v1::OptimizerConfig& in);

v1::DType ToProto(DType dtype);
// INVALID_ARGUMENT for DTYPE_UNSPECIFIED or an unknown value.
absl::StatusOr<DType> FromProto(v1::DType dtype);

// A step's group settings (PushGradHeader / PushGradCommit group_settings).
void SettingToProto(const StepSetting& in, v1::GroupSetting* out);
// Each checked (ValidateStepSetting): INVALID_ARGUMENT naming the first bad.
absl::StatusOr<std::vector<StepSetting>> SettingsFromProto(
    const google::protobuf::RepeatedPtrField<v1::GroupSetting>& in);

}  // namespace zeroshard

#endif  // ZEROSHARD_WIRE_PROTO_CONVERT_H_
