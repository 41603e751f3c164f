#include "model/cuda/device_gpt.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/cuda_status.h"
#include "common/status_macros.h"
#include "model/kernels/cuda/cross_entropy.h"
#include "model/kernels/cuda/elementwise.h"
#include "model/kernels/cuda/embedding.h"
#include "model/kernels/cuda/layernorm.h"
#include "model/kernels/online_softmax.h"
#include "model/kernels/gemm_desc.h"
#include "model/gpt.h"

namespace zeroshard::model {
namespace {

namespace k = kernels::cuda;
using kernels::MatRef;

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

// Head scratch slots.
enum : int { kHeadX, kHeadLn, kHeadLogits, kHeadStats, kHeadLnq };

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

absl::StatusOr<std::unique_ptr<DeviceGptModel>> DeviceGptModel::Create(
    const FlatLayout& layout, const GptShape& shape, DType param_dtype,
    const CheckpointPolicy& policy, int device, DeviceAttention attention) {
  if (param_dtype == DType::kFp16) {
    return absl::InvalidArgumentError(
        "the CUDA model trains in bf16 or fp32; fp16 (with loss scaling) runs "
        "on the CPU path only: set bf16 in the config, or --device=cpu");
  }
  if (attention == DeviceAttention::kOnline) {
    // The shapes the online kernels are instantiated for.
    RETURN_IF_ERROR(kernels::CheckOnlineAttentionShape(
        {1, shape.context, shape.width, shape.heads, param_dtype}));
  }
  if (attention == DeviceAttention::kFlash) {
    RETURN_IF_ERROR(kernels::cuda::CheckFlashAttentionShape(
        {1, shape.context, shape.width, shape.heads, param_dtype}));
  }
  // The same checks as the CPU model (shape, policy, dtype, layout).
  RETURN_IF_ERROR(
      GptModel::Create(layout, shape, param_dtype, policy).status());
  ASSIGN_OR_RETURN(const int count, CudaDeviceCount());
  if (device < 0 || device >= count) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--device=cuda:", device, ": this machine has ", count,
        " CUDA device(s), cuda:0..cuda:", count - 1));
  }
  std::unique_ptr<DeviceGptModel> m(new DeviceGptModel());
  m->layout_ = std::make_shared<const FlatLayout>(layout);
  m->shape_ = shape;
  m->param_dtype_ = param_dtype;
  m->policy_ = policy;
  m->device_ = device;
  m->device_name_ = absl::StrCat("cuda:", device);
  RETURN_IF_ERROR(CudaStatus(cudaSetDevice(device), "selecting the device"));
  RETURN_IF_ERROR(CudaStatus(
      cudaStreamCreateWithFlags(&m->stream_, cudaStreamNonBlocking),
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
  ASSIGN_OR_RETURN(m->gemm_, k::CublasLtGemm::Create());
  m->runner_ = std::make_unique<DeviceBlockRunner>(m->gemm_.get(), m->stream_,
                                                   attention);
  m->memory_ = std::make_unique<DeviceMemory>(device, m->stream_);
  m->inputs_.resize(shape.layers + 1);
  m->acts_.resize(shape.layers);
  return m;
}

DeviceGptModel::~DeviceGptModel() {
  Select().IgnoreError();
  Clear();
  if (stream_ != nullptr) {
    cudaStreamSynchronize(stream_);
    runner_.reset();
    memory_.reset();
    cudaStreamDestroy(stream_);
    // The activations the pool kept for the next step go back to the device
    // (Create told the pool to keep them).
    TrimStreamOrderedPool();
  }
}

absl::Status DeviceGptModel::Select() const {
  return CudaStatus(cudaSetDevice(device_), "selecting the model's device");
}

absl::Status DeviceGptModel::Synchronize() {
  RETURN_IF_ERROR(Select());
  return CudaStatus(cudaStreamSynchronize(stream_), "waiting for the model");
}

void DeviceGptModel::set_op_timer(kernels::cuda::OpTimer* timer) {
  timer_ = timer;
  runner_->set_timer(timer);
}

int64_t DeviceGptModel::workspace_bytes() const {
  int64_t total = runner_ != nullptr ? runner_->scratch_bytes() : 0;
  for (const Slot& s : slots_) {
    total += static_cast<int64_t>(s.params.bytes() + s.f32.bytes());
  }
  for (const auto& s : grad_stage_) total += static_cast<int64_t>(s.bytes());
  for (const auto& s : head_) total += static_cast<int64_t>(s.bytes());
  return total;
}

void DeviceGptModel::Clear() {
  for (DeviceBuffer& b : inputs_) b.Release();
  for (DeviceBlockActs& a : acts_) a.Release();
  dx_.Release();
  phase_ = Phase::kIdle;
  next_ = 0;
}

absl::StatusOr<DeviceUnitWeights> DeviceGptModel::Weights(int unit,
                                                          const UnitParams& p,
                                                          int slot) {
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
    // As UnitWeights: vectors and the embedding tables are read in FP32.
    const bool need_f32 = t.shape.size() != 2 || t.name == "wte.weight" ||
                          t.name == "wpe.weight";
    if (need_f32) {
      RETURN_IF_ERROR(k::Bf16sToFloat(
          reinterpret_cast<const uint16_t*>(base) + off, f32 + off,
          static_cast<int64_t>(t.numel), stream_));
      w.vector.push_back(f32 + off);
    } else {
      w.vector.push_back(nullptr);
    }
  }
  return w;
}

absl::StatusOr<DeviceGptModel::GradTarget> DeviceGptModel::StageGrad(
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

absl::Status DeviceGptModel::FinishGrad(const GradTarget& g) {
  if (g.host == nullptr) return absl::OkStatus();
  RETURN_IF_ERROR(CudaStatus(
      cudaMemcpyAsync(g.host, g.device, g.n * sizeof(float),
                      cudaMemcpyDeviceToHost, stream_),
      "copying a gradient back to the host"));
  return CudaStatus(cudaStreamSynchronize(stream_),
                    "waiting for the unit's backward");
}

absl::Status DeviceGptModel::Begin(int batch, int seq,
                                   absl::Span<const int32_t> tokens,
                                   absl::Span<const int32_t> targets) {
  RETURN_IF_ERROR(Select());
  Mark("host gaps");
  Clear();
  // Tokens checked here: the device kernels cannot report a bad one.
  RETURN_IF_ERROR(ValidateMicroBatch(shape_, batch, seq, tokens, targets));
  const size_t n = static_cast<size_t>(batch) * seq;
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
  dims_ = BlockDims{batch, seq, shape_.width, shape_.heads,
                    ComputeDType(param_dtype_)};
  phase_ = Phase::kForward;
  next_ = -1;
  return absl::OkStatus();
}

absl::Status DeviceGptModel::EmbeddingForward(const UnitParams& embedding) {
  RETURN_IF_ERROR(Select());
  RETURN_IF_ERROR(CheckPhase(Phase::kForward, "EmbeddingForward"));
  if (next_ != -1) {
    return absl::FailedPreconditionError("EmbeddingForward called twice");
  }
  Mark("host gaps");
  ASSIGN_OR_RETURN(DeviceUnitWeights w, Weights(embedding_unit(), embedding, 0));
  Mark("param and grad staging");
  const int64_t M = dims_.rows(), C = dims_.width;
  RETURN_IF_ERROR(head_[kHeadX].Reserve(M * C * sizeof(float), stream_));
  float* x = static_cast<float*>(head_[kHeadX].data());
  RETURN_IF_ERROR(k::EmbeddingForward(
      static_cast<const int32_t*>(tokens_d_.data()), dims_.batch, dims_.seq, C,
      shape_.vocab, w.Vector(0), w.Vector(1), x, stream_));
  Mark("embedding");
  ASSIGN_OR_RETURN(inputs_[0],
                   DeviceBuffer::Allocate(mem_.get(), dims_.dtype, M * C, stream_));
  RETURN_IF_ERROR(inputs_[0].FromFloat(x));
  Mark("casts");
  next_ = 0;
  return absl::OkStatus();
}

absl::Status DeviceGptModel::BlockForward(int l, const UnitParams& block) {
  RETURN_IF_ERROR(Select());
  RETURN_IF_ERROR(CheckPhase(Phase::kForward, "BlockForward"));
  if (l != next_) {
    return absl::FailedPreconditionError(
        absl::StrCat("BlockForward(", l, ") called; expected block ", next_));
  }
  Mark("host gaps");
  ASSIGN_OR_RETURN(DeviceUnitWeights w, Weights(block_unit(l), block, 0));
  Mark("param and grad staging");
  DeviceBlockActs acts;
  RETURN_IF_ERROR(runner_->Forward(dims_, w, inputs_[l], &inputs_[l + 1],
                                   &acts, mem_.get()));
  if (policy_.KeepsInternals()) acts_[l] = std::move(acts);
  if (!policy_.KeepsInput(l)) inputs_[l].Release();
  ++next_;
  return absl::OkStatus();
}

absl::Status DeviceGptModel::FinalHeadForward(const DeviceUnitWeights& wf,
                                              const DeviceUnitWeights& we) {
  const int64_t M = dims_.rows(), C = dims_.width, V = shape_.vocab;
  const DType dt = dims_.dtype;
  RETURN_IF_ERROR(head_[kHeadX].Reserve(M * C * sizeof(float), stream_));
  RETURN_IF_ERROR(head_[kHeadLn].Reserve(M * C * sizeof(float), stream_));
  RETURN_IF_ERROR(head_[kHeadStats].Reserve(2 * M * sizeof(float), stream_));
  RETURN_IF_ERROR(head_[kHeadLnq].Reserve(M * C * DTypeSize(dt), stream_));
  // Logits, then (BF16) their gradient rounded for the two products: room
  // for both.
  RETURN_IF_ERROR(head_[kHeadLogits].Reserve(
      M * V * (sizeof(float) + (dt == DType::kBf16 ? 2 : 0)), stream_));
  float* x = static_cast<float*>(head_[kHeadX].data());
  float* ln = static_cast<float*>(head_[kHeadLn].data());
  float* stats = static_cast<float*>(head_[kHeadStats].data());
  RETURN_IF_ERROR(inputs_[shape_.layers].ToFloat(x));
  Mark("casts");
  RETURN_IF_ERROR(k::LayerNormForward(x, wf.Vector(0), wf.Vector(1), M, C, ln,
                                      stats, stats + M, stream_));
  Mark("layernorm fwd");
  void* lnq = head_[kHeadLnq].data();
  if (dt == DType::kBf16) {
    RETURN_IF_ERROR(
        k::FloatsToBf16(ln, static_cast<uint16_t*>(lnq), M * C, stream_));
  } else {
    RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(lnq, ln, M * C * sizeof(float),
                                               cudaMemcpyDeviceToDevice,
                                               stream_),
                               "copying ln_f"));
  }
  Mark("casts");
  // logits[M,V] = ln_f(x) wte^T
  RETURN_IF_ERROR(gemm_->Run({.m = M, .n = V, .k = C,
                              .a = {lnq, dt, C, false},
                              .b = {we.matrix[0], dt, C, true},
                              .c = static_cast<float*>(head_[kHeadLogits].data()),
                              .ldc = V},
                             stream_));
  Mark("head matmul fwd");
  return absl::OkStatus();
}

absl::StatusOr<double> DeviceGptModel::Loss(float loss_scale) {
  const int64_t M = dims_.rows(), V = shape_.vocab;
  RETURN_IF_ERROR(loss_d_.Reserve(sizeof(double), stream_));
  float* logits = static_cast<float*>(head_[kHeadLogits].data());
  RETURN_IF_ERROR(k::SoftmaxCrossEntropy(
      logits, static_cast<const int32_t*>(targets_d_.data()), M, V, loss_scale,
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

absl::StatusOr<double> DeviceGptModel::FinalForwardBackward(
    const UnitParams& final_params, const UnitParams& embedding,
    float loss_scale, absl::Span<float> final_grad,
    absl::Span<float> embedding_grad) {
  RETURN_IF_ERROR(Select());
  RETURN_IF_ERROR(CheckPhase(Phase::kForward, "FinalForwardBackward"));
  if (next_ != shape_.layers) {
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
  const int64_t M = dims_.rows(), C = dims_.width, V = shape_.vocab;
  const DType dt = dims_.dtype;
  RETURN_IF_ERROR(FinalHeadForward(wf, we));
  ASSIGN_OR_RETURN(const double loss, Loss(loss_scale));
  float* dlogits = static_cast<float*>(head_[kHeadLogits].data());
  float* ln = static_cast<float*>(head_[kHeadLn].data());
  float* x = static_cast<float*>(head_[kHeadX].data());
  float* stats = static_cast<float*>(head_[kHeadStats].data());
  // Against BF16 operands the FP32 dlogits is rounded to BF16 first, as the
  // CPU's mixed-dtype product does (model/kernels/cpu/gemm.h).
  MatRef dl{dlogits, DType::kFp32, V, false};
  if (dt == DType::kBf16) {
    auto* q = reinterpret_cast<uint16_t*>(dlogits + M * V);
    RETURN_IF_ERROR(k::FloatsToBf16(dlogits, q, M * V, stream_));
    dl = {q, DType::kBf16, V, false};
    Mark("casts");
  }
  // d ln = dlogits wte (into ln, no longer needed); d wte += dlogits^T lnq.
  RETURN_IF_ERROR(gemm_->Run({.m = M, .n = C, .k = V,
                              .a = dl,
                              .b = {we.matrix[0], dt, C, false},
                              .c = ln, .ldc = C},
                             stream_));
  MatRef dlt = dl;
  dlt.trans = true;
  RETURN_IF_ERROR(gemm_->Run({.m = V, .n = C, .k = M,
                              .a = dlt,
                              .b = {head_[kHeadLnq].data(), dt, C, false},
                              .c = ge.device + we.offset[0], .ldc = C,
                              .accumulate = true},
                             stream_));
  Mark("head matmul bwd");
  ASSIGN_OR_RETURN(dx_, DeviceBuffer::Allocate(mem_.get(), DType::kFp32, M * C,
                                               stream_));
  RETURN_IF_ERROR(CudaStatus(
      cudaMemsetAsync(dx_.data(), 0, M * C * sizeof(float), stream_),
      "zeroing dx"));
  Mark("copies");
  RETURN_IF_ERROR(k::LayerNormBackward(ln, x, wf.Vector(0), stats, stats + M,
                                       M, C, dx_.f32(), gf.device + wf.offset[0],
                                       gf.device + wf.offset[1], stream_));
  Mark("layernorm bwd");
  RETURN_IF_ERROR(FinishGrad(gf));
  RETURN_IF_ERROR(FinishGrad(ge));
  Mark("param and grad staging");
  inputs_[shape_.layers].Release();
  phase_ = Phase::kBackward;
  next_ = shape_.layers - 1;
  if (next_ < 0) phase_ = Phase::kEmbeddingBackward;
  return loss;
}

absl::StatusOr<double> DeviceGptModel::FinalForwardLoss(
    const UnitParams& final_params, const UnitParams& embedding) {
  RETURN_IF_ERROR(Select());
  RETURN_IF_ERROR(CheckPhase(Phase::kForward, "FinalForwardLoss"));
  if (next_ != shape_.layers) {
    return absl::FailedPreconditionError(absl::StrCat(
        "FinalForwardLoss called before block ", next_, " ran forward"));
  }
  ASSIGN_OR_RETURN(DeviceUnitWeights wf, Weights(final_unit(), final_params, 0));
  ASSIGN_OR_RETURN(DeviceUnitWeights we, Weights(embedding_unit(), embedding, 1));
  RETURN_IF_ERROR(FinalHeadForward(wf, we));
  ASSIGN_OR_RETURN(const double loss, Loss(1.0f));
  Clear();
  return loss;
}

bool DeviceGptModel::NeedsRecompute(int l) const {
  return l >= 0 && l < shape_.layers && !acts_[l].held();
}

int DeviceGptModel::RecomputeStart(int l) const {
  int j = std::clamp(l, 0, shape_.layers - 1);
  while (j > 0 && inputs_[j].empty()) --j;
  return j;
}

absl::Status DeviceGptModel::RecomputeBlock(int j, const UnitParams& block) {
  RETURN_IF_ERROR(Select());
  RETURN_IF_ERROR(CheckPhase(Phase::kBackward, "RecomputeBlock"));
  if (j < 0 || j > next_ || inputs_[j].empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "RecomputeBlock(", j,
        "): the block's input is not held (next backward is block ", next_,
        "; recompute from RecomputeStart)"));
  }
  Mark("host gaps");
  ASSIGN_OR_RETURN(DeviceUnitWeights w, Weights(block_unit(j), block, 0));
  Mark("param and grad staging");
  DeviceBuffer out;
  DeviceBlockActs acts;
  RETURN_IF_ERROR(
      runner_->Forward(dims_, w, inputs_[j], &out, &acts, mem_.get()));
  acts_[j] = std::move(acts);
  if (j + 1 <= next_ && inputs_[j + 1].empty()) inputs_[j + 1] = std::move(out);
  return absl::OkStatus();
}

absl::Status DeviceGptModel::BlockBackward(int l, const UnitParams& block,
                                           absl::Span<float> grad) {
  RETURN_IF_ERROR(Select());
  RETURN_IF_ERROR(CheckPhase(Phase::kBackward, "BlockBackward"));
  if (l != next_) {
    return absl::FailedPreconditionError(
        absl::StrCat("BlockBackward(", l, ") called; expected block ", next_));
  }
  if (NeedsRecompute(l) || inputs_[l].empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "BlockBackward(", l,
        "): activations not held; call RecomputeBlock for blocks ",
        RecomputeStart(l), "..", l, " first"));
  }
  Mark("host gaps");
  ASSIGN_OR_RETURN(GradTarget g, StageGrad(block_unit(l), grad, 0));
  ASSIGN_OR_RETURN(DeviceUnitWeights w, Weights(block_unit(l), block, 0));
  Mark("param and grad staging");
  ASSIGN_OR_RETURN(DeviceBuffer dx_in,
                   DeviceBuffer::Allocate(mem_.get(), DType::kFp32,
                                          dims_.rows() * dims_.width, stream_));
  RETURN_IF_ERROR(runner_->Backward(dims_, w, inputs_[l], acts_[l], dx_.f32(),
                                    dx_in.f32(), g.device));
  RETURN_IF_ERROR(FinishGrad(g));
  Mark("param and grad staging");
  dx_ = std::move(dx_in);
  acts_[l].Release();
  inputs_[l].Release();
  if (--next_ < 0) phase_ = Phase::kEmbeddingBackward;
  return absl::OkStatus();
}

absl::Status DeviceGptModel::EmbeddingBackward(
    absl::Span<float> embedding_grad) {
  RETURN_IF_ERROR(Select());
  RETURN_IF_ERROR(CheckPhase(Phase::kEmbeddingBackward, "EmbeddingBackward"));
  Mark("host gaps");
  ASSIGN_OR_RETURN(GradTarget g, StageGrad(embedding_unit(), embedding_grad, 0));
  Mark("param and grad staging");
  const UnitInfo& u = layout_->units()[embedding_unit()];
  const uint64_t wte = layout_->tensors()[u.tensors[0]].offset - u.offset;
  const uint64_t wpe = layout_->tensors()[u.tensors[1]].offset - u.offset;
  RETURN_IF_ERROR(k::EmbeddingBackward(
      dx_.f32(), static_cast<const int32_t*>(tokens_d_.data()), dims_.batch,
      dims_.seq, dims_.width, shape_.vocab, g.device + wte, g.device + wpe,
      stream_));
  Mark("embedding");
  RETURN_IF_ERROR(FinishGrad(g));
  Mark("param and grad staging");
  Clear();
  return absl::OkStatus();
}

}  // namespace zeroshard::model
