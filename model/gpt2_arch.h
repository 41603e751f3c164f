// GPT-2 as a ModelArch ("gpt2"): model/gpt_manifest.h's tensors with
// GPT-2's init rules and parameter classes, the CPU GptModel (model/gpt.h),
// its activation estimate (model/memory_estimate.h) and the Hugging Face
// names of model/hf_gpt2.h. Its CUDA model is DeviceGptModel
// (model/cuda/device_arch.h).
#ifndef ZEROSHARD_MODEL_GPT2_ARCH_H_
#define ZEROSHARD_MODEL_GPT2_ARCH_H_

#include "model/arch.h"

namespace zeroshard::model {

const ModelArch& Gpt2Arch();

}  // namespace zeroshard::model

#endif  // ZEROSHARD_MODEL_GPT2_ARCH_H_
