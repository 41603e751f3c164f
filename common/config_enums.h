// The enums of the training configuration (common/config.h), each with its
// one table of canonical names (common/enum_names.h): the names the
// resolved config writes and reads, the JSON choices where DeepSpeed has no
// spelling of its own, and the flags. Apart from config.h so that a part
// that needs one enum (server/placement.h) does not include the whole
// configuration.
#ifndef ZEROSHARD_COMMON_CONFIG_ENUMS_H_
#define ZEROSHARD_COMMON_CONFIG_ENUMS_H_

#include "common/enum_names.h"

namespace zeroshard {

enum class Precision { kFp32 = 0, kBf16 = 1, kFp16 = 2 };
inline constexpr EnumNames<Precision, 3> kPrecisionNames = {
    {{Precision::kFp32, "fp32"}, {Precision::kBf16, "bf16"}, {Precision::kFp16, "fp16"}}};

// DeepSpeed's `communication_data_type`, applied to the gradients a worker
// pushes to the shard servers: "fp32" (default) or "bf16" (half the bytes on
// the wire and buffered on the servers; each element of the FP32-reduced,
// FP32-accumulated shard is rounded to BF16 just before it is sent). The
// reduce-scatter among workers stays FP32. "fp16" is refused: the servers
// take FP32 or BF16 gradients.
enum class CommDataType { kFp32 = 0, kBf16 = 1 };
inline constexpr EnumNames<CommDataType, 2> kCommDataTypeNames = {
    {{CommDataType::kFp32, "fp32"}, {CommDataType::kBf16, "bf16"}}};

enum class OffloadDevice { kNone = 0, kCpu = 1 };
inline constexpr EnumNames<OffloadDevice, 2> kOffloadDeviceNames = {
    {{OffloadDevice::kNone, "none"}, {OffloadDevice::kCpu, "cpu"}}};

enum class CheckpointPolicy { kNone = 0, kEveryBlock = 1, kEveryK = 2 };
inline constexpr EnumNames<CheckpointPolicy, 3> kCheckpointPolicyNames = {
    {{CheckpointPolicy::kNone, "none"},
     {CheckpointPolicy::kEveryBlock, "every_block"},
     {CheckpointPolicy::kEveryK, "every_k"}}};

enum class Placement { kHost = 0, kPinned = 1, kDevice = 2 };
inline constexpr EnumNames<Placement, 3> kPlacementNames = {
    {{Placement::kHost, "host"}, {Placement::kPinned, "pinned"},
     {Placement::kDevice, "device"}}};

enum class MetricsFormat { kCsv = 0, kJsonl = 1 };
inline constexpr EnumNames<MetricsFormat, 2> kMetricsFormatNames = {
    {{MetricsFormat::kCsv, "csv"}, {MetricsFormat::kJsonl, "jsonl"}}};

// zeroshard.data.format: text read as bytes (vocab 256), llm.c `.bin`
// shards, bare uint16 arrays (nanoGPT), or llmc/uint16 by header magic
// (data/token_file.h).
enum class DataFormat { kBytes = 0, kLlmc = 1, kUint16 = 2, kAuto = 3 };
inline constexpr EnumNames<DataFormat, 4> kDataFormatNames = {
    {{DataFormat::kBytes, "bytes"}, {DataFormat::kLlmc, "llmc"},
     {DataFormat::kUint16, "uint16"}, {DataFormat::kAuto, "auto"}}};

// The canonical names ("fp32", "every_block", "pinned", ...).
inline const char* PrecisionName(Precision p) { return NameOf(kPrecisionNames, p); }
inline const char* CommDataTypeName(CommDataType t) {
  return NameOf(kCommDataTypeNames, t);
}
inline const char* CheckpointPolicyName(CheckpointPolicy p) {
  return NameOf(kCheckpointPolicyNames, p);
}
inline const char* PlacementName(Placement p) { return NameOf(kPlacementNames, p); }
inline const char* DataFormatName(DataFormat f) { return NameOf(kDataFormatNames, f); }

}  // namespace zeroshard

#endif  // ZEROSHARD_COMMON_CONFIG_ENUMS_H_
