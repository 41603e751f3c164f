#include "model/kernels/cuda/flash_attention.h"

#include <math.h>

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "common/bf16_bits.h"
#include "common/cuda_status.h"
#include "common/status_macros.h"
#include "model/kernels/cuda/elementwise.h"
#include "model/kernels/cuda/flash_attention_kernels.cuh"
#include "model/kernels/cuda/launch.h"
#include "model/kernels/online_softmax.h"

namespace zeroshard::kernels::cuda {
namespace {

using flash::BackwardSmem;
using flash::FlashBackwardKernel;
using flash::FlashForwardKernel;
using flash::ForwardSmem;
using flash::kBlock;
using flash::kTile;
using flash::RowDotKernel;

// The current device takes BF16 tensor-core products (sm_80+) and `bytes`
// of shared memory per block.
absl::Status CheckDevice(const char* op, size_t bytes) {
  int dev = 0, major = 0, optin = 0;
  RETURN_IF_ERROR(CudaStatus(cudaGetDevice(&dev), op));
  RETURN_IF_ERROR(CudaStatus(
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev),
      op));
  RETURN_IF_ERROR(CudaStatus(
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin,
                             dev),
      op));
  if (major < 8) {
    return absl::FailedPreconditionError(absl::StrCat(
        op, ": BF16 tensor-core products need compute capability 8.0 or "
            "later; device ",
        dev, " is ", major, ".x (use --attention=online or probs)"));
  }
  if (static_cast<size_t>(optin) < bytes) {
    return absl::FailedPreconditionError(absl::StrCat(
        op, ": needs ", bytes, " B of shared memory per block; device ", dev,
        " offers ", optin));
  }
  return absl::OkStatus();
}

size_t BackwardSmemFor(int64_t hd) {
  switch (hd) {
    case 16: return BackwardSmem<16>();
    case 32: return BackwardSmem<32>();
    case 64: return BackwardSmem<64>();
    default: return BackwardSmem<128>();
  }
}

// Both kernels' grid: a block per kTile rows of its own side, head and
// sequence.
dim3 TileGridOf(const AttentionShape& s) {
  return dim3(static_cast<unsigned>((s.seq + kTile - 1) / kTile),
              static_cast<unsigned>(s.heads), static_cast<unsigned>(s.batch));
}

template <int HD>
absl::Status LaunchForward(const char* op, const AttentionShape& s,
                           const uint16_t* qkv, float* lse, float* y,
                           cudaStream_t stream) {
  constexpr size_t kSmem = ForwardSmem<HD>();
  RETURN_IF_ERROR(CheckDevice(op, kSmem));
  RETURN_IF_ERROR(CudaStatus(
      cudaFuncSetAttribute(FlashForwardKernel<HD>,
                           cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(kSmem)),
      op));
  const float scale = 1.0f / sqrtf(static_cast<float>(HD));
  FlashForwardKernel<HD><<<TileGridOf(s), kBlock, kSmem, stream>>>(
      qkv, s.seq, s.width, s.heads, scale, lse, y);
  return LaunchStatus(op);
}

template <int HD>
absl::Status LaunchBackward(const char* op, const AttentionShape& s,
                            const uint16_t* qkv, const uint16_t* dy16,
                            const float* lse, const float* y, float* dsum,
                            float* dqkv, cudaStream_t stream) {
  constexpr size_t kSmem = BackwardSmem<HD>();
  RETURN_IF_ERROR(CudaStatus(
      cudaFuncSetAttribute(FlashBackwardKernel<HD>,
                           cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(kSmem)),
      op));
  const int64_t rows = s.batch * s.heads * s.seq;
  RowDotKernel<HD><<<GridFor(rows), kThreads, 0, stream>>>(
      y, dy16, s.seq, s.width, s.heads, rows, dsum);
  RETURN_IF_ERROR(LaunchStatus(op));
  // dQ is summed into dqkv with atomics, so its columns start at zero; dK
  // and dV are stored whole (left as they are here, so a test's sentinel
  // shows an element the kernel missed).
  RETURN_IF_ERROR(CudaStatus(
      cudaMemset2DAsync(dqkv, sizeof(float) * 3 * s.width, 0,
                        sizeof(float) * s.width,
                        static_cast<size_t>(s.batch * s.seq), stream),
      op));
  const float scale = 1.0f / sqrtf(static_cast<float>(HD));
  FlashBackwardKernel<HD><<<TileGridOf(s), kBlock, kSmem, stream>>>(
      qkv, dy16, lse, dsum, s.seq, s.width, s.heads, scale, dqkv);
  return LaunchStatus(op);
}

}  // namespace

absl::Status CheckFlashAttentionShape(const AttentionShape& s) {
  if (s.dtype != DType::kBf16) {
    return absl::InvalidArgumentError(absl::StrCat(
        "flash attention: qkv must be bf16 (tensor-core products), not ",
        DTypeName(s.dtype), "; use --attention=online or probs"));
  }
  // The online attention's shapes (sizes, head dims 16..128): the same
  // recurrence, instantiated for the same head dims.
  RETURN_IF_ERROR(CheckOnlineAttentionShape(s));
  if (s.batch > 65535 || s.heads > 65535 ||
      (s.seq + kTile - 1) / kTile > 0x7fffffff) {
    return absl::InvalidArgumentError(absl::StrCat(
        "flash attention: batch ", s.batch, ", heads ", s.heads, " or seq ",
        s.seq, " over the grid's limits"));
  }
  return absl::OkStatus();
}

absl::Status FlashAttention::Forward(const AttentionShape& s, const void* qkv,
                                     float* lse, float* y,
                                     cudaStream_t stream) {
  const char* op = "cuda::FlashAttention::Forward";
  RETURN_IF_ERROR(CheckFlashAttentionShape(s));
  RETURN_IF_ERROR(CheckElementwise(op, 1, {qkv, lse, y}));
  if (reinterpret_cast<uintptr_t>(qkv) % 16 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": qkv must be 16-byte aligned"));
  }
  const auto* x = static_cast<const uint16_t*>(qkv);
  switch (s.width / s.heads) {
    case 16: return LaunchForward<16>(op, s, x, lse, y, stream);
    case 32: return LaunchForward<32>(op, s, x, lse, y, stream);
    case 64: return LaunchForward<64>(op, s, x, lse, y, stream);
    default: return LaunchForward<128>(op, s, x, lse, y, stream);
  }
}

absl::Status FlashAttention::Backward(const AttentionShape& s, const void* qkv,
                                      const float* lse, const float* y,
                                      const float* dy, float* dqkv,
                                      cudaStream_t stream) {
  const char* op = "cuda::FlashAttention::Backward";
  RETURN_IF_ERROR(CheckFlashAttentionShape(s));
  RETURN_IF_ERROR(CheckElementwise(op, 1, {qkv, lse, y, dy, dqkv}));
  if (reinterpret_cast<uintptr_t>(qkv) % 16 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": qkv must be 16-byte aligned"));
  }
  RETURN_IF_ERROR(
      CheckDevice(op, BackwardSmemFor(s.width / s.heads)));
  const int64_t n = s.batch * s.seq * s.width;
  const int64_t rows = s.batch * s.heads * s.seq;
  RETURN_IF_ERROR(dy_bf16_.Reserve(static_cast<size_t>(n) * 2, stream));
  RETURN_IF_ERROR(
      dsum_.Reserve(static_cast<size_t>(rows) * sizeof(float), stream));
  auto* dy16 = static_cast<uint16_t*>(dy_bf16_.data());
  auto* dsum = static_cast<float*>(dsum_.data());
  // dY as a product operand: rounded to BF16 once.
  RETURN_IF_ERROR(FloatsToBf16(dy, dy16, n, stream));
  const auto* x = static_cast<const uint16_t*>(qkv);
  switch (s.width / s.heads) {
    case 16:
      return LaunchBackward<16>(op, s, x, dy16, lse, y, dsum, dqkv, stream);
    case 32:
      return LaunchBackward<32>(op, s, x, dy16, lse, y, dsum, dqkv, stream);
    case 64:
      return LaunchBackward<64>(op, s, x, dy16, lse, y, dsum, dqkv, stream);
    default:
      return LaunchBackward<128>(op, s, x, dy16, lse, y, dsum, dqkv,
                                 stream);
  }
}

}  // namespace zeroshard::kernels::cuda
