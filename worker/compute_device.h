// Which processor a worker computes on: `zeroshard-worker --device=...`.
//
//   auto      a CUDA device when this build has the CUDA model and the
//             machine has a usable device (cuda:K with K = $LOCAL_RANK, or
//             rank % devices), and the run trains in bf16 or fp32; the CPU
//             otherwise (the default)
//   cpu       the CPU model (model/gpt.h)
//   cuda      as cuda:K with K chosen as for auto; an error without a device
//   cuda:K    the CUDA model (model/cuda/device_gpt.h) on device K;
//             an error when there is no such device or the build has no CUDA
//
// The choice is logged in one line that says which path runs and why
// (ComputeChoice::description).
//
//   ASSIGN_OR_RETURN(ComputeChoice c, ChooseCompute(flag, rank, dtype));
//   ZS_LOG(INFO) << c.description;
//   StepEngine::Create(..., c.make_model);
#ifndef ZEROSHARD_WORKER_COMPUTE_DEVICE_H_
#define ZEROSHARD_WORKER_COMPUTE_DEVICE_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/dtype.h"
#include "worker/engine/step_engine.h"

namespace zeroshard {

struct DeviceRequest {
  enum class Kind { kAuto, kCpu, kCuda } kind = Kind::kAuto;
  int index = -1;  // kCuda: the K of cuda:K; -1 = chosen by rank
  // --attention: the CUDA model's attention (model/cuda/
  // device_block.h, DeviceAttention): probs, online (online softmax, FP32
  // SIMT) or flash (online softmax, tensor-core products, BF16). The CPU
  // model keeps the probabilities, so a run that computes on the CPU
  // refuses online and flash.
  enum class Attention { kProbs, kOnline, kFlash };
  Attention attention = Attention::kProbs;
};

// Parses the flag; INVALID_ARGUMENT naming --device otherwise.
absl::StatusOr<DeviceRequest> ParseDeviceFlag(absl::string_view flag);
// Parses --attention=probs|online|flash into `request`; INVALID_ARGUMENT naming
// --attention otherwise.
absl::Status ParseAttentionFlag(absl::string_view flag, DeviceRequest* request);

// Whether this build has the CUDA model.
bool BuiltWithCudaModel();

struct ComputeChoice {
  std::string name;         // "cpu" or "cuda:K"
  int cuda_device = -1;     // K, or -1 for the CPU
  std::string description;  // the one log line
  ModelFactory make_model;
};

// Resolves the request for this rank, parameter dtype and model
// architecture (zeroshard.model.arch): --device=auto takes the CPU, saying
// why, where the GPU cannot run the run (no device, fp16, an architecture
// without a CUDA model); --device=cuda refuses those, naming --device=cpu.
absl::StatusOr<ComputeChoice> ChooseCompute(const DeviceRequest& request,
                                            int rank, DType param_dtype,
                                            absl::string_view arch = "gpt2");

}  // namespace zeroshard

#endif  // ZEROSHARD_WORKER_COMPUTE_DEVICE_H_
