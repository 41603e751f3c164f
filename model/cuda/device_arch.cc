#include "model/cuda/device_arch.h"

#include "absl/strings/str_cat.h"
#include "model/arch.h"
#include "model/cuda/device_gpt.h"
#include "model/cuda/device_llama.h"

namespace zeroshard::model {

bool HasDeviceModel(absl::string_view arch) {
  return arch == "gpt2" || arch == "llama";
}

absl::StatusOr<std::unique_ptr<UnitModel>> MakeDeviceModel(
    const FlatLayout& layout, const ModelShape& shape, DType param_dtype,
    const CheckpointPolicy& policy, int device, DeviceAttention attention) {
  absl::StatusOr<const ModelArch*> arch = ArchForShape(shape);
  if (!arch.ok()) return arch.status();
  if ((*arch)->name() == "gpt2") {
    absl::StatusOr<std::unique_ptr<DeviceGptModel>> m = DeviceGptModel::Create(
        layout, shape, param_dtype, policy, device, attention);
    if (!m.ok()) return m.status();
    return std::unique_ptr<UnitModel>(*std::move(m));
  }
  if ((*arch)->name() == "llama") {
    absl::StatusOr<std::unique_ptr<DeviceLlamaModel>> m =
        DeviceLlamaModel::Create(layout, shape, param_dtype, policy, device,
                                 attention);
    if (!m.ok()) return m.status();
    return std::unique_ptr<UnitModel>(*std::move(m));
  }
  return absl::UnimplementedError(absl::StrCat(
      "model architecture '", (*arch)->name(),
      "' has no CUDA model in this build; use --device=cpu"));
}

}  // namespace zeroshard::model
