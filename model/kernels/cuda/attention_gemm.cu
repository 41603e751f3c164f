#include "model/kernels/cuda/attention_gemm.h"

#include <math.h>

#include "absl/strings/str_cat.h"
#include "common/bf16_bits.h"
#include "model/kernels/cuda/elementwise.h"
#include "model/kernels/cuda/launch.h"
#include "model/kernels/cuda/row_block.cuh"
#include "model/kernels/gemm_desc.h"

namespace zeroshard::kernels::cuda {
namespace {


struct MaxOp {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct SumOp {
  __device__ float operator()(float a, float b) const { return a + b; }
};

// One block per row r of `rows` rows of length T (row r is query i = r % T):
// p[j] = exp(s[j] scale - max) / sum for j <= i, 0 after. The exponentials
// are computed again for p rather than stored in s and read back: the same
// values, and T x T x 4 bytes per head less written and read.
template <typename E>
__global__ void CausalSoftmaxKernel(const float* __restrict__ scores,
                                    E* __restrict__ probs, int64_t T,
                                    float scale) {
  __shared__ BlockFloat::TempStorage tmp;
  __shared__ float broadcast;
  const int64_t r = blockIdx.x;
  const int64_t i = r % T;
  const float* s = scores + r * T;
  E* p = probs + r * T;
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j <= i; j += blockDim.x) {
    mx = fmaxf(mx, s[j] * scale);
  }
  mx = BlockAll(mx, MaxOp(), tmp, &broadcast);
  float sum = 0;
  for (int64_t j = threadIdx.x; j <= i; j += blockDim.x) {
    sum += expf(s[j] * scale - mx);
  }
  sum = BlockAll(sum, SumOp(), tmp, &broadcast);
  const float inv = 1.0f / sum;
  for (int64_t j = threadIdx.x; j < T; j += blockDim.x) {
    St(p + j, j <= i ? expf(s[j] * scale - mx) * inv : 0.0f);
  }
}

// dS[j] = P[j] (dP[j] - sum_k dP[k] P[k]) scale for j <= i, 0 after, in the
// product dtype E; P read in its saved dtype.
template <typename E>
__global__ void SoftmaxBackwardKernel(const float* __restrict__ dp,
                                      const E* __restrict__ probs,
                                      E* __restrict__ ds, int64_t T,
                                      float scale) {
  __shared__ BlockFloat::TempStorage tmp;
  __shared__ float broadcast;
  const int64_t r = blockIdx.x;
  const int64_t i = r % T;
  const float* d = dp + r * T;
  const E* p = probs + r * T;
  float dot = 0;
  for (int64_t j = threadIdx.x; j <= i; j += blockDim.x) dot += d[j] * Ld(p[j]);
  dot = BlockAll(dot, SumOp(), tmp, &broadcast);
  for (int64_t j = threadIdx.x; j < T; j += blockDim.x) {
    St(ds + r * T + j, j <= i ? Ld(p[j]) * (d[j] - dot) * scale : 0.0f);
  }
}

absl::Status Check(const AttentionShape& s, const void* a, const void* b,
                   const void* c, const void* d) {
  if (s.batch <= 0 || s.seq <= 0 || s.width <= 0 || s.heads <= 0 ||
      s.width % s.heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cuda attention: bad shape batch=", s.batch, " seq=", s.seq,
        " width=", s.width, " heads=", s.heads));
  }
  if (s.dtype != DType::kFp32 && s.dtype != DType::kBf16) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cuda attention: unsupported dtype ", DTypeName(s.dtype)));
  }
  if (a == nullptr || b == nullptr || c == nullptr || d == nullptr) {
    return absl::InvalidArgumentError("cuda attention: a pointer is null");
  }
  if (s.heads * s.seq > INT32_MAX) {
    return absl::InvalidArgumentError("cuda attention: heads x seq too large");
  }
  return absl::OkStatus();
}

template <typename E>
absl::Status LaunchSoftmax(float* scores, void* probs, int64_t rows, int64_t T,
                           float scale, cudaStream_t stream) {
  CausalSoftmaxKernel<E><<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
      scores, static_cast<E*>(probs), T, scale);
  return LaunchStatus("cuda attention: softmax");
}

template <typename E>
absl::Status LaunchSoftmaxBackward(const float* dp, const void* probs, void* ds,
                                   int64_t rows, int64_t T, float scale,
                                   cudaStream_t stream) {
  SoftmaxBackwardKernel<E><<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
      dp, static_cast<const E*>(probs), static_cast<E*>(ds), T, scale);
  return LaunchStatus("cuda attention: softmax backward");
}

}  // namespace

absl::Status GemmAttention::Forward(const AttentionShape& s, const void* qkv,
                                    void* probs, float* y,
                                    cudaStream_t stream) {
  if (absl::Status st = Check(s, qkv, probs, y, gemm_); !st.ok()) return st;
  const int64_t T = s.seq, C = s.width, H = s.heads, hd = C / H;
  const DType dt = s.dtype;
  const int64_t es = static_cast<int64_t>(DTypeSize(dt));
  const float scale = 1.0f / sqrtf(static_cast<float>(hd));
  if (absl::Status st = scores_.Reserve(H * T * T * sizeof(float), stream);
      !st.ok()) {
    return st;
  }
  float* scores = static_cast<float*>(scores_.data());
  for (int64_t b = 0; b < s.batch; ++b) {
    const char* base = static_cast<const char*>(qkv) + b * T * 3 * C * es;
    char* p_b = static_cast<char*>(probs) + b * H * T * T * es;
    // S_h = Q_h K_h^T, the heads as the batch.
    GemmDesc qk{.m = T, .n = T, .k = hd,
                .a = {base, dt, 3 * C, false},
                .b = {base + C * es, dt, 3 * C, true},
                .c = scores, .ldc = T,
                .batch = H, .stride_a = hd, .stride_b = hd, .stride_c = T * T};
    if (absl::Status st = gemm_->Run(qk, stream); !st.ok()) return st;
    const absl::Status sm =
        dt == DType::kBf16
            ? LaunchSoftmax<uint16_t>(scores, p_b, H * T, T, scale, stream)
            : LaunchSoftmax<float>(scores, p_b, H * T, T, scale, stream);
    if (!sm.ok()) return sm;
    // Y_h = P_h V_h into y's columns of head h.
    GemmDesc pv{.m = T, .n = hd, .k = T,
                .a = {p_b, dt, T, false},
                .b = {base + 2 * C * es, dt, 3 * C, false},
                .c = y + b * T * C, .ldc = C,
                .batch = H, .stride_a = T * T, .stride_b = hd, .stride_c = hd};
    if (absl::Status st = gemm_->Run(pv, stream); !st.ok()) return st;
  }
  return absl::OkStatus();
}

absl::Status GemmAttention::Backward(const AttentionShape& s, const void* qkv,
                                     const void* probs, const float* dy,
                                     float* dqkv, cudaStream_t stream) {
  if (absl::Status st = Check(s, qkv, probs, dy, dqkv); !st.ok()) return st;
  if (gemm_ == nullptr) {
    return absl::InvalidArgumentError("cuda attention: no cuBLASLt handle");
  }
  const int64_t T = s.seq, C = s.width, H = s.heads, hd = C / H;
  const DType dt = s.dtype;
  const int64_t es = static_cast<int64_t>(DTypeSize(dt));
  const float scale = 1.0f / sqrtf(static_cast<float>(hd));
  const int64_t M = s.batch * T;
  if (absl::Status st = scores_.Reserve(H * T * T * sizeof(float), stream);
      !st.ok()) {
    return st;
  }
  if (absl::Status st = ds_.Reserve(H * T * T * es, stream); !st.ok()) return st;
  // dY as a product operand: rounded to BF16 once against BF16 operands.
  const void* dyq = dy;
  if (dt == DType::kBf16) {
    if (absl::Status st = dy_bf16_.Reserve(M * C * 2, stream); !st.ok()) {
      return st;
    }
    auto* q = static_cast<uint16_t*>(dy_bf16_.data());
    if (absl::Status st = FloatsToBf16(dy, q, M * C, stream); !st.ok()) {
      return st;
    }
    dyq = q;
  }
  float* dp = static_cast<float*>(scores_.data());
  for (int64_t b = 0; b < s.batch; ++b) {
    const char* base = static_cast<const char*>(qkv) + b * T * 3 * C * es;
    const char* p_b = static_cast<const char*>(probs) + b * H * T * T * es;
    const char* dy_b = static_cast<const char*>(dyq) + b * T * C * es;
    float* dqkv_b = dqkv + b * T * 3 * C;
    // dP_h = dY_h V_h^T
    GemmDesc g1{.m = T, .n = T, .k = hd,
                .a = {dy_b, dt, C, false},
                .b = {base + 2 * C * es, dt, 3 * C, true},
                .c = dp, .ldc = T,
                .batch = H, .stride_a = hd, .stride_b = hd, .stride_c = T * T};
    if (absl::Status st = gemm_->Run(g1, stream); !st.ok()) return st;
    // dV_h = P_h^T dY_h
    GemmDesc g2{.m = T, .n = hd, .k = T,
                .a = {p_b, dt, T, true},
                .b = {dy_b, dt, C, false},
                .c = dqkv_b + 2 * C, .ldc = 3 * C,
                .batch = H, .stride_a = T * T, .stride_b = hd, .stride_c = hd};
    if (absl::Status st = gemm_->Run(g2, stream); !st.ok()) return st;
    const absl::Status sb =
        dt == DType::kBf16
            ? LaunchSoftmaxBackward<uint16_t>(dp, p_b, ds_.data(), H * T, T,
                                              scale, stream)
            : LaunchSoftmaxBackward<float>(dp, p_b, ds_.data(), H * T, T,
                                           scale, stream);
    if (!sb.ok()) return sb;
    // dQ_h = dS_h K_h, dK_h = dS_h^T Q_h
    GemmDesc g3{.m = T, .n = hd, .k = T,
                .a = {ds_.data(), dt, T, false},
                .b = {base + C * es, dt, 3 * C, false},
                .c = dqkv_b, .ldc = 3 * C,
                .batch = H, .stride_a = T * T, .stride_b = hd, .stride_c = hd};
    if (absl::Status st = gemm_->Run(g3, stream); !st.ok()) return st;
    GemmDesc g4{.m = T, .n = hd, .k = T,
                .a = {ds_.data(), dt, T, true},
                .b = {base, dt, 3 * C, false},
                .c = dqkv_b + C, .ldc = 3 * C,
                .batch = H, .stride_a = T * T, .stride_b = hd, .stride_c = hd};
    if (absl::Status st = gemm_->Run(g4, stream); !st.ok()) return st;
  }
  return absl::OkStatus();
}

}  // namespace zeroshard::kernels::cuda
