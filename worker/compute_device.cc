#include "worker/compute_device.h"

#include <cstdlib>

#include "absl/strings/match.h"
#include "absl/strings/strip.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

#if ZS_HAVE_CUDA_MODEL
#include <cuda_runtime_api.h>

#include "model/cuda/device_arch.h"
#endif

namespace zeroshard {
namespace {

// The device for auto / "cuda": $LOCAL_RANK (one process per GPU, as
// torchrun and the Kubernetes manifests start them) or rank % devices.
int DefaultIndex(int rank, int devices) {
  const char* local = std::getenv("LOCAL_RANK");
  int k = 0;
  if (local != nullptr && absl::SimpleAtoi(local, &k) && k >= 0) {
    return k % devices;
  }
  return rank % devices;
}

const char* AttentionName(DeviceRequest::Attention a) {
  switch (a) {
    case DeviceRequest::Attention::kOnline: return "online";
    case DeviceRequest::Attention::kFlash: return "flash";
    default: return "probs";
  }
}

absl::StatusOr<ComputeChoice> Cpu(const DeviceRequest& request,
                                  std::string why) {
  if (request.attention != DeviceRequest::Attention::kProbs) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--attention=", AttentionName(request.attention),
        " runs on the CUDA model, and this worker computes on the CPU (", why,
        "); use --attention=probs"));
  }
  ComputeChoice c;
  c.name = "cpu";
  c.description = absl::StrCat("compute: cpu (", why, ")");
  c.make_model = MakeCpuModel;
  return c;
}

}  // namespace

absl::StatusOr<DeviceRequest> ParseDeviceFlag(absl::string_view flag) {
  DeviceRequest r;
  if (flag == "auto" || flag.empty()) return r;
  if (flag == "cpu") {
    r.kind = DeviceRequest::Kind::kCpu;
    return r;
  }
  if (flag == "cuda") {
    r.kind = DeviceRequest::Kind::kCuda;
    return r;
  }
  int k = -1;
  if (absl::ConsumePrefix(&flag, "cuda:") && absl::SimpleAtoi(flag, &k) &&
      k >= 0) {
    r.kind = DeviceRequest::Kind::kCuda;
    r.index = k;
    return r;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--device='", flag,
                   "' is not one of auto, cpu, cuda, cuda:K (K >= 0)"));
}

absl::Status ParseAttentionFlag(absl::string_view flag,
                                DeviceRequest* request) {
  using A = DeviceRequest::Attention;
  if (flag == "probs" || flag.empty()) {
    request->attention = A::kProbs;
    return absl::OkStatus();
  }
  if (flag == "online") {
    request->attention = A::kOnline;
    return absl::OkStatus();
  }
  if (flag == "flash") {
    request->attention = A::kFlash;
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--attention='", flag, "' is not one of probs, online, flash"));
}

bool BuiltWithCudaModel() {
#if ZS_HAVE_CUDA_MODEL
  return true;
#else
  return false;
#endif
}

absl::StatusOr<ComputeChoice> ChooseCompute(const DeviceRequest& request,
                                            int rank, DType param_dtype,
                                            absl::string_view arch) {
  using Kind = DeviceRequest::Kind;
  if (request.kind == Kind::kCpu) return Cpu(request, "--device=cpu");
  // Refused before the worker joins, like the rest of the choice.
  if (request.attention == DeviceRequest::Attention::kFlash &&
      param_dtype != DType::kBf16) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--attention=flash multiplies on BF16 tensor cores, and this run is ",
        DTypeName(param_dtype),
        "; set bf16 in the config, or use --attention=online or probs"));
  }
#if ZS_HAVE_CUDA_MODEL
  if (!model::HasDeviceModel(arch)) {
    const std::string why =
        absl::StrCat("the ", arch, " architecture has no CUDA model yet");
    if (request.kind == Kind::kAuto) return Cpu(request, why);
    return absl::FailedPreconditionError(absl::StrCat(
        "--device=cuda", request.index >= 0 ? absl::StrCat(":", request.index) : "",
        ": ", why, "; use --device=cpu"));
  }
  absl::StatusOr<int> devices = model::CudaDeviceCount();
  if (!devices.ok()) {
    if (request.kind == Kind::kAuto) {
      return Cpu(request, std::string(devices.status().message()));
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "--device=cuda", request.index >= 0 ? absl::StrCat(":", request.index) : "",
        ": ", devices.status().message(), "; use --device=cpu"));
  }
  if (param_dtype == DType::kFp16) {
    if (request.kind == Kind::kAuto) {
      return Cpu(request,
                 "fp16 training runs on the CPU path; bf16 trains on the GPU");
    }
    return absl::InvalidArgumentError(
        "--device=cuda: the CUDA model trains in bf16 or fp32, and this run "
        "is fp16; set bf16 in the config, or use --device=cpu");
  }
  const int k = request.index >= 0 ? request.index : DefaultIndex(rank, *devices);
  if (k >= *devices) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--device=cuda:", k, ": this machine has ", *devices,
        " CUDA device(s), cuda:0..cuda:", *devices - 1));
  }
  cudaDeviceProp prop{};
  std::string device_name = "?";
  const bool have_prop = cudaGetDeviceProperties(&prop, k) == cudaSuccess;
  if (have_prop) device_name = prop.name;
  if (request.attention == DeviceRequest::Attention::kFlash && have_prop &&
      prop.major < 8) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--attention=flash needs BF16 tensor cores (compute capability 8.0 "
        "or later); cuda:", k, " (", device_name, ") is ", prop.major, ".",
        prop.minor, ": use --attention=online or probs"));
  }
  ComputeChoice c;
  c.name = absl::StrCat("cuda:", k);
  c.cuda_device = k;
  using A = DeviceRequest::Attention;
  const model::DeviceAttention attention =
      request.attention == A::kOnline  ? model::DeviceAttention::kOnline
      : request.attention == A::kFlash ? model::DeviceAttention::kFlash
                                       : model::DeviceAttention::kProbs;
  c.description = absl::StrCat(
      "compute: ", c.name, " (", device_name, ", ", DTypeName(param_dtype),
      " on cuBLASLt",
      request.attention == A::kOnline  ? ", online-softmax attention"
      : request.attention == A::kFlash ? ", flash attention on tensor cores"
                                       : "",
      ")");
  c.make_model = [k, attention](const FlatLayout& layout,
                                const GptShape& shape, DType dtype,
                                const model::CheckpointPolicy& policy)
      -> absl::StatusOr<std::unique_ptr<model::UnitModel>> {
    return model::MakeDeviceModel(layout, shape, dtype, policy, k, attention);
  };
  return c;
#else
  (void)rank;
  (void)param_dtype;
  (void)arch;
  if (request.kind == Kind::kAuto) {
    return Cpu(request, "this zeroshard-worker was built without CUDA");
  }
  return absl::FailedPreconditionError(
      "--device=cuda: this zeroshard-worker was built without CUDA (CMake "
      "builds it when /usr/local/cuda has nvcc); use --device=cpu");
#endif
}

}  // namespace zeroshard
