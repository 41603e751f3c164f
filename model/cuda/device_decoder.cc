#include "model/cuda/device_decoder.h"

#include <cmath>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "common/cuda_status.h"
#include "common/status_macros.h"
#include "model/cuda/device_arch.h"
#include "model/kernels/cuda/cross_entropy.h"
#include "model/kernels/cuda/elementwise.h"
#include "model/kernels/gemm_desc.h"

namespace zeroshard::model {
namespace {

// Whether the device can use p in place (device or managed memory). Pinned
// and pageable host memory are copied like any host buffer.
bool IsDeviceMemory(const void* p) {
  cudaPointerAttributes attr;
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    cudaGetLastError();  // not sticky; clear it
    return false;
  }
  return attr.type == cudaMemoryTypeDevice ||
         attr.type == cudaMemoryTypeManaged;
}

}  // namespace

absl::StatusOr<int> CudaDeviceCount() {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return absl::FailedPreconditionError(absl::StrCat(
        "no usable CUDA device: ", cudaGetErrorName(e), " (",
        cudaGetErrorString(e), ")"));
  }
  if (count <= 0) {
    return absl::FailedPreconditionError("no usable CUDA device: 0 devices");
  }
  return count;
}

absl::Status DeviceDecoderBase::InitDevice(const FlatLayout& layout,
                                           const ModelShape& shape,
                                           DType param_dtype,
                                           const CheckpointPolicy& policy,
                                           int device) {
  ASSIGN_OR_RETURN(const int count, CudaDeviceCount());
  if (device < 0 || device >= count) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--device=cuda:", device, ": this machine has ", count,
        " CUDA device(s), cuda:0..cuda:", count - 1));
  }
  layout_ = std::make_shared<const FlatLayout>(layout);
  shape_ = shape;
  layers_ = shape.layers;
  inputs_.resize(shape.layers + 1);
  param_dtype_ = param_dtype;
  policy_ = policy;
  device_ = device;
  device_name_ = absl::StrCat("cuda:", device);
  RETURN_IF_ERROR(CudaStatus(cudaSetDevice(device), "selecting the device"));
  RETURN_IF_ERROR(CudaStatus(
      cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking),
      "creating the compute stream"));
  // Activations and kernel scratch are allocated stream-ordered from the
  // device's default pool, which by default gives freed memory back to the
  // device at every synchronisation: each step would map its gigabytes
  // anew. The pool keeps them; DeviceMemory and DeviceScratch trim it
  // before they give up on an allocation, and the destructor trims it.
  cudaMemPool_t pool = nullptr;
  RETURN_IF_ERROR(CudaStatus(cudaDeviceGetDefaultMemPool(&pool, device),
                             "the device's memory pool"));
  uint64_t keep = UINT64_MAX;
  RETURN_IF_ERROR(CudaStatus(
      cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep),
      "keeping freed activations in the pool"));
  ASSIGN_OR_RETURN(gemm_, kernels::cuda::CublasLtGemm::Create());
  memory_ = std::make_unique<DeviceMemory>(device, stream_);
  return absl::OkStatus();
}

DeviceDecoderBase::~DeviceDecoderBase() {
  if (stream_ == nullptr) return;
  Select().IgnoreError();
  cudaStreamSynchronize(stream_);
  memory_.reset();
  cudaStreamDestroy(stream_);
  // The activations the pool kept for the next step go back to the device
  // (InitDevice told the pool to keep them).
  TrimStreamOrderedPool();
}

absl::Status DeviceDecoderBase::Select() const {
  return CudaStatus(cudaSetDevice(device_), "selecting the model's device");
}

absl::Status DeviceDecoderBase::Synchronize() {
  RETURN_IF_ERROR(Select());
  return CudaStatus(cudaStreamSynchronize(stream_), "waiting for the model");
}

void DeviceDecoderBase::set_op_timer(kernels::cuda::OpTimer* timer) {
  timer_ = timer;
  set_block_timer(timer);
}

int64_t DeviceDecoderBase::workspace_bytes() const {
  int64_t total = block_scratch_bytes();
  for (const Slot& s : slots_) {
    total += static_cast<int64_t>(s.params.bytes() + s.f32.bytes());
  }
  for (const auto& s : grad_stage_) total += static_cast<int64_t>(s.bytes());
  for (const auto& s : head_) total += static_cast<int64_t>(s.bytes());
  return total;
}

absl::StatusOr<DeviceUnitWeights> DeviceDecoderBase::Weights(
    int unit, const UnitParams& p, int slot) {
  const UnitInfo& u = layout_->units()[unit];
  if (p.dtype != param_dtype_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "unit ", unit, ": parameters are ", DTypeName(p.dtype),
        ", the model trains in ", DTypeName(param_dtype_)));
  }
  if (p.data == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("unit '", u.name, "': parameters are null"));
  }
  if (p.length < u.numel) {
    return absl::InvalidArgumentError(absl::StrCat(
        "unit '", u.name, "': parameter buffer has ", p.length,
        " elements, the unit needs ", u.numel));
  }
  const size_t esize = DTypeSize(p.dtype);
  const char* base = static_cast<const char*>(p.data);
  Slot& s = slots_[slot];
  if (!IsDeviceMemory(p.data)) {
    const size_t bytes = u.numel * esize;
    RETURN_IF_ERROR(s.params.Reserve(bytes, stream_));
    RETURN_IF_ERROR(CudaStatus(
        cudaMemcpyAsync(s.params.data(), p.data, bytes,
                        cudaMemcpyHostToDevice, stream_),
        absl::StrCat("copying unit '", u.name, "' to the device")));
    base = static_cast<const char*>(s.params.data());
  }
  DeviceUnitWeights w;
  w.compute = ComputeDType(p.dtype);
  if (p.dtype == DType::kBf16) {
    RETURN_IF_ERROR(s.f32.Reserve(u.numel * sizeof(float), stream_));
  }
  float* f32 = static_cast<float*>(s.f32.data());
  for (int ti : u.tensors) {
    const TensorInfo& t = layout_->tensors()[ti];
    const uint64_t off = t.offset - u.offset;
    w.offset.push_back(off);
    w.matrix.push_back(base + off * esize);
    if (p.dtype == DType::kFp32) {
      w.vector.push_back(reinterpret_cast<const float*>(base) + off);
      continue;
    }
    // As UnitWeights: vectors and the embedding unit's tables (GPT-2's wte
    // and wpe, Llama's embed_tokens) are read in FP32.
    const bool table =
        unit == embedding_unit() && t.param_class == TensorClass::kEmbedding;
    if (t.shape.size() != 2 || table) {
      RETURN_IF_ERROR(kernels::cuda::Bf16sToFloat(
          reinterpret_cast<const uint16_t*>(base) + off, f32 + off,
          static_cast<int64_t>(t.numel), stream_));
      w.vector.push_back(f32 + off);
    } else {
      w.vector.push_back(nullptr);
    }
  }
  return w;
}

absl::StatusOr<DeviceDecoderBase::GradTarget> DeviceDecoderBase::StageGrad(
    int unit, absl::Span<float> grad, int slot) {
  const UnitInfo& u = layout_->units()[unit];
  if (grad.data() == nullptr || grad.size() < u.numel) {
    return absl::InvalidArgumentError(absl::StrCat(
        "unit '", u.name, "': gradient buffer has ", grad.size(),
        " elements, the unit needs ", u.numel));
  }
  GradTarget g;
  g.n = u.numel;
  if (IsDeviceMemory(grad.data())) {
    g.device = grad.data();
    return g;
  }
  const size_t bytes = u.numel * sizeof(float);
  RETURN_IF_ERROR(grad_stage_[slot].Reserve(bytes, stream_));
  g.device = static_cast<float*>(grad_stage_[slot].data());
  g.host = grad.data();
  // The caller's values: the model accumulates into them.
  RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(g.device, g.host, bytes,
                                             cudaMemcpyHostToDevice, stream_),
                             "copying a gradient to the device"));
  return g;
}

absl::Status DeviceDecoderBase::FinishGrad(const GradTarget& g) {
  if (g.host == nullptr) return absl::OkStatus();
  RETURN_IF_ERROR(CudaStatus(
      cudaMemcpyAsync(g.host, g.device, g.n * sizeof(float),
                      cudaMemcpyDeviceToHost, stream_),
      "copying a gradient back to the host"));
  return CudaStatus(cudaStreamSynchronize(stream_),
                    "waiting for the unit's backward");
}

absl::Status DeviceDecoderBase::CopyBatch(absl::Span<const int32_t> tokens,
                                          absl::Span<const int32_t> targets) {
  const size_t n = tokens.size();
  RETURN_IF_ERROR(tokens_d_.Reserve(n * sizeof(int32_t), stream_));
  RETURN_IF_ERROR(targets_d_.Reserve(n * sizeof(int32_t), stream_));
  RETURN_IF_ERROR(CudaStatus(
      cudaMemcpyAsync(tokens_d_.data(), tokens.data(), n * sizeof(int32_t),
                      cudaMemcpyHostToDevice, stream_),
      "copying the tokens"));
  RETURN_IF_ERROR(CudaStatus(
      cudaMemcpyAsync(targets_d_.data(), targets.data(), n * sizeof(int32_t),
                      cudaMemcpyHostToDevice, stream_),
      "copying the targets"));
  Mark("copies");
  return absl::OkStatus();
}

absl::StatusOr<double> DeviceDecoderBase::Loss(float* logits, int64_t rows,
                                               int64_t vocab, float loss_scale) {
  RETURN_IF_ERROR(loss_d_.Reserve(sizeof(double), stream_));
  RETURN_IF_ERROR(kernels::cuda::SoftmaxCrossEntropy(
      logits, targets_device(), rows, vocab, loss_scale,
      static_cast<double*>(loss_d_.data()), logits, stream_));
  Mark("cross-entropy");
  double loss = 0;
  RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(&loss, loss_d_.data(),
                                             sizeof(double),
                                             cudaMemcpyDeviceToHost, stream_),
                             "reading the loss"));
  RETURN_IF_ERROR(
      CudaStatus(cudaStreamSynchronize(stream_), "waiting for the loss"));
  Mark("host gaps");
  return loss;
}

void DeviceDecoderBase::Clear() {
  for (DeviceBuffer& b : inputs_) b.Release();
  dx_.Release();
  phase_ = Phase::kIdle;
  next_ = 0;
}

absl::Status DeviceDecoderBase::BeginBatch(int batch, int seq,
                                           absl::Span<const int32_t> tokens,
                                           absl::Span<const int32_t> targets) {
  RETURN_IF_ERROR(Select());
  Mark("host gaps");
  Clear();
  RETURN_IF_ERROR(ValidateMicroBatch(shape_, batch, seq, tokens, targets));
  RETURN_IF_ERROR(CopyBatch(tokens, targets));
  batch_ = batch;
  seq_ = seq;
  phase_ = Phase::kForward;
  next_ = -1;  // the embedding first
  return absl::OkStatus();
}

absl::Status DeviceDecoderBase::EmbeddingForward(const UnitParams& embedding) {
  RETURN_IF_ERROR(Select());
  RETURN_IF_ERROR(CheckPhase(Phase::kForward, "EmbeddingForward"));
  if (next_ != -1) {
    return absl::FailedPreconditionError("EmbeddingForward called twice");
  }
  Mark("host gaps");
  ASSIGN_OR_RETURN(DeviceUnitWeights w, Weights(embedding_unit(), embedding, 0));
  Mark("param and grad staging");
  const int64_t M = rows(), C = shape_.width;
  RETURN_IF_ERROR(head_[kHeadX].Reserve(M * C * sizeof(float), stream_));
  float* x = static_cast<float*>(head_[kHeadX].data());
  RETURN_IF_ERROR(EmbedTokens(w, x));
  Mark("embedding");
  ASSIGN_OR_RETURN(inputs_[0], DeviceBuffer::Allocate(
                                   mem_.get(), ComputeDType(param_dtype_),
                                   M * C, stream_));
  RETURN_IF_ERROR(inputs_[0].FromFloat(x));
  Mark("casts");
  next_ = 0;
  return absl::OkStatus();
}

absl::Status DeviceDecoderBase::FinalHeadForward(const DeviceUnitWeights& wf,
                                                 const DeviceUnitWeights& we) {
  const int64_t M = rows(), C = shape_.width, V = shape_.vocab;
  const DType dt = ComputeDType(param_dtype_);
  RETURN_IF_ERROR(head_[kHeadX].Reserve(M * C * sizeof(float), stream_));
  RETURN_IF_ERROR(head_[kHeadNormed].Reserve(M * C * sizeof(float), stream_));
  RETURN_IF_ERROR(head_[kHeadNormedQ].Reserve(M * C * DTypeSize(dt), stream_));
  // Logits, then (BF16) their gradient rounded for the two products: room
  // for both.
  RETURN_IF_ERROR(head_[kHeadLogits].Reserve(
      M * V * (sizeof(float) + (dt == DType::kBf16 ? 2 : 0)), stream_));
  float* x = static_cast<float*>(head_[kHeadX].data());
  float* normed = static_cast<float*>(head_[kHeadNormed].data());
  RETURN_IF_ERROR(inputs_[layers_].ToFloat(x));
  Mark("casts");
  RETURN_IF_ERROR(FinalNormForward(wf, x, normed));
  void* nq = head_[kHeadNormedQ].data();
  if (dt == DType::kBf16) {
    RETURN_IF_ERROR(kernels::cuda::FloatsToBf16(
        normed, static_cast<uint16_t*>(nq), M * C, stream_));
  } else {
    RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(nq, normed, M * C * sizeof(float),
                                               cudaMemcpyDeviceToDevice, stream_),
                               "copying the final norm's rows"));
  }
  Mark("casts");
  const kernels::cuda::DeviceTensor head = HeadMatrix(wf, we);
  // logits[M, V] = normed head^T
  RETURN_IF_ERROR(gemm_->Run({.m = M, .n = V, .k = C,
                              .a = {nq, dt, C, false},
                              .b = {head.data, head.dtype, C, true},
                              .c = static_cast<float*>(head_[kHeadLogits].data()),
                              .ldc = V},
                             stream_));
  Mark("head matmul fwd");
  return absl::OkStatus();
}

absl::StatusOr<double> DeviceDecoderBase::FinalForwardBackward(
    const UnitParams& final_params, const UnitParams& embedding,
    float loss_scale, absl::Span<float> final_grad,
    absl::Span<float> embedding_grad) {
  RETURN_IF_ERROR(Select());
  RETURN_IF_ERROR(CheckPhase(Phase::kForward, "FinalForwardBackward"));
  if (next_ != layers_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "FinalForwardBackward called before block ", next_, " ran forward"));
  }
  if (!(loss_scale > 0.0f) || !std::isfinite(loss_scale)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "loss_scale must be positive and finite, got ", loss_scale));
  }
  Mark("host gaps");
  ASSIGN_OR_RETURN(GradTarget gf, StageGrad(final_unit(), final_grad, 0));
  ASSIGN_OR_RETURN(GradTarget ge, StageGrad(embedding_unit(), embedding_grad, 1));
  ASSIGN_OR_RETURN(DeviceUnitWeights wf, Weights(final_unit(), final_params, 0));
  ASSIGN_OR_RETURN(DeviceUnitWeights we, Weights(embedding_unit(), embedding, 1));
  Mark("param and grad staging");
  const int64_t M = rows(), C = shape_.width, V = shape_.vocab;
  const DType dt = ComputeDType(param_dtype_);
  RETURN_IF_ERROR(FinalHeadForward(wf, we));
  float* dlogits = static_cast<float*>(head_[kHeadLogits].data());
  ASSIGN_OR_RETURN(const double loss, Loss(dlogits, M, V, loss_scale));
  float* normed = static_cast<float*>(head_[kHeadNormed].data());
  float* x = static_cast<float*>(head_[kHeadX].data());
  // Against BF16 operands the FP32 dlogits is rounded to BF16 first, as the
  // CPU's mixed-dtype product does (model/kernels/cpu/gemm.h).
  kernels::MatRef dl{dlogits, DType::kFp32, V, false};
  if (dt == DType::kBf16) {
    auto* q = reinterpret_cast<uint16_t*>(dlogits + M * V);
    RETURN_IF_ERROR(kernels::cuda::FloatsToBf16(dlogits, q, M * V, stream_));
    dl = {q, DType::kBf16, V, false};
    Mark("casts");
  }
  const kernels::cuda::DeviceTensor head = HeadMatrix(wf, we);
  // d normed = dlogits head (into normed, no longer needed); d head +=
  // dlogits^T normed (in the compute dtype).
  RETURN_IF_ERROR(gemm_->Run({.m = M, .n = C, .k = V,
                              .a = dl,
                              .b = {head.data, head.dtype, C, false},
                              .c = normed, .ldc = C},
                             stream_));
  kernels::MatRef dlt = dl;
  dlt.trans = true;
  RETURN_IF_ERROR(gemm_->Run({.m = V, .n = C, .k = M,
                              .a = dlt,
                              .b = {head_[kHeadNormedQ].data(), dt, C, false},
                              .c = HeadGrad(wf, we, gf.device, ge.device),
                              .ldc = C, .accumulate = true},
                             stream_));
  Mark("head matmul bwd");
  ASSIGN_OR_RETURN(dx_, DeviceBuffer::Allocate(mem_.get(), DType::kFp32, M * C,
                                               stream_));
  RETURN_IF_ERROR(CudaStatus(
      cudaMemsetAsync(dx_.data(), 0, M * C * sizeof(float), stream_),
      "zeroing dx"));
  Mark("copies");
  RETURN_IF_ERROR(FinalNormBackward(wf, normed, x, dx_.f32(), gf.device));
  RETURN_IF_ERROR(FinishGrad(gf));
  RETURN_IF_ERROR(FinishGrad(ge));
  Mark("param and grad staging");
  inputs_[layers_].Release();
  phase_ = Phase::kBackward;
  next_ = layers_ - 1;
  if (next_ < 0) phase_ = Phase::kEmbeddingBackward;
  return loss;
}

absl::StatusOr<double> DeviceDecoderBase::FinalForwardLoss(
    const UnitParams& final_params, const UnitParams& embedding) {
  RETURN_IF_ERROR(Select());
  RETURN_IF_ERROR(CheckPhase(Phase::kForward, "FinalForwardLoss"));
  if (next_ != layers_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "FinalForwardLoss called before block ", next_, " ran forward"));
  }
  ASSIGN_OR_RETURN(DeviceUnitWeights wf, Weights(final_unit(), final_params, 0));
  ASSIGN_OR_RETURN(DeviceUnitWeights we, Weights(embedding_unit(), embedding, 1));
  RETURN_IF_ERROR(FinalHeadForward(wf, we));
  ASSIGN_OR_RETURN(const double loss,
                   Loss(static_cast<float*>(head_[kHeadLogits].data()), rows(),
                        shape_.vocab, 1.0f));
  Clear();
  return loss;
}

absl::Status DeviceDecoderBase::EmbeddingBackward(
    absl::Span<float> embedding_grad) {
  RETURN_IF_ERROR(Select());
  RETURN_IF_ERROR(CheckPhase(Phase::kEmbeddingBackward, "EmbeddingBackward"));
  Mark("host gaps");
  ASSIGN_OR_RETURN(GradTarget g, StageGrad(embedding_unit(), embedding_grad, 0));
  Mark("param and grad staging");
  RETURN_IF_ERROR(EmbeddingGrad(g.device));
  Mark("embedding");
  RETURN_IF_ERROR(FinishGrad(g));
  Mark("param and grad staging");
  Clear();
  return absl::OkStatus();
}

}  // namespace zeroshard::model
