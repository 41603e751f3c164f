// The CUDA model of an architecture (model/arch.h) on device `device`:
// GPT-2's is DeviceGptModel (device_gpt.h), Llama's DeviceLlamaModel
// (device_llama.h). An architecture without a CUDA model is UNIMPLEMENTED,
// naming it, so --device=cpu is the way on.
#ifndef ZEROSHARD_MODEL_CUDA_DEVICE_ARCH_H_
#define ZEROSHARD_MODEL_CUDA_DEVICE_ARCH_H_

#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/dtype.h"
#include "common/layout.h"
#include "common/model_shape.h"
#include "model/checkpoint_policy.h"
#include "model/cuda/device_block.h"
#include "model/unit_model.h"

namespace zeroshard::model {

// OK with the device count, or FAILED_PRECONDITION saying why no device is
// usable (no driver, no device).
absl::StatusOr<int> CudaDeviceCount();

// Whether the architecture `arch` has a CUDA model in this build (GPT-2 and
// Llama).
bool HasDeviceModel(absl::string_view arch);

absl::StatusOr<std::unique_ptr<UnitModel>> MakeDeviceModel(
    const FlatLayout& layout, const ModelShape& shape, DType param_dtype,
    const CheckpointPolicy& policy, int device, DeviceAttention attention);

}  // namespace zeroshard::model

#endif  // ZEROSHARD_MODEL_CUDA_DEVICE_ARCH_H_
