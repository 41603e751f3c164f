// The flash attention's kernels (flash_attention.h), in a header so that two
// compilers build the same source: nvcc, into flash_attention.cu, and the
// host compiler, into tests/model/flash_attention_emulation_test.cc, which
// runs these very kernels on the CPU under an emulation of a thread block
// (real threads and barriers), of warp shuffles and of WMMA's 16x16x16
// fragments (tests/model/cuda_block_emulation.h), and compares them with
// the online attention's twin. That is what checks their tiling, masking,
// padding and index arithmetic without a GPU; the device test checks the
// hardware's own arithmetic.
//
// The includer provides the CUDA vocabulary first: under nvcc, <mma.h> and
// <cuda_bf16.h> (included here); under ZS_FLASH_EMULATION, the emulation's
// stand-ins for them, for threadIdx / blockIdx / blockDim / gridDim,
// __syncthreads, __syncwarp, __shfl_xor_sync, atomicAdd and the CUDA
// qualifiers.
#ifndef ZEROSHARD_MODEL_KERNELS_CUDA_FLASH_ATTENTION_KERNELS_CUH_
#define ZEROSHARD_MODEL_KERNELS_CUDA_FLASH_ATTENTION_KERNELS_CUH_

#include <math.h>

#include <cstddef>
#include <cstdint>

#if !defined(ZS_FLASH_EMULATION)
#include <cuda_bf16.h>
#include <mma.h>
#endif

#include "common/bf16_bits.h"

// Compiled kernel bodies: a device with BF16 tensor cores, or the emulation.
#if (defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800) || \
    defined(ZS_FLASH_EMULATION)
#define ZS_FLASH_BODY 1
#else
#define ZS_FLASH_BODY 0
#endif

namespace zeroshard::kernels::cuda::flash {

namespace wmma = nvcuda::wmma;
using bf16 = __nv_bfloat16;

// Rows per block on its own side (queries in the forward, keys in the
// backward) and per tile on the other side; 4 warps of 16 rows each.
constexpr int kTile = 64;
constexpr int kWarps = kTile / 16;
constexpr int kBlock = kWarps * 32;

using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major>;
using FragAt = wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::col_major>;
using FragB = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major>;
using FragBt = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major>;
using FragC = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

// Row strides in shared memory, padded so that the rows a WMMA load or
// store touches together fall in different banks (unpadded, every row of a
// tile starts in bank 0): BF16 rows of HD or kTile elements get 8 more, FP32
// rows 4 more. Still multiples of 8 (BF16) and 4 (FP32) elements, as WMMA's
// ldm must be, and every fragment pointer stays 256-bit aligned.
template <int HD>
constexpr int kLdH = HD + 8;         // Q, K, V, dO (BF16)
constexpr int kLdT = kTile + 8;      // P, dS (BF16)
constexpr int kLdS = kTile + 4;      // S, dP (FP32)
template <int HD>
constexpr int kLdO = HD + 4;         // O, the staging (FP32)

// Dynamic shared memory of each kernel (every part a multiple of 128 B).
template <int HD>
constexpr size_t ForwardSmem() {
  return 3 * kTile * kLdH<HD> * 2    // Q, K, V tiles (BF16)
         + kTile * kLdS * 4          // S (FP32)
         + kTile * kLdT * 2          // P (BF16)
         + kTile * kLdO<HD> * 4;     // O accumulator (FP32)
}
template <int HD>
constexpr size_t BackwardSmem() {
  return 4 * kTile * kLdH<HD> * 2    // K, V, Q, dO tiles (BF16)
         + 2 * kTile * kLdS * 4      // S^T, dP^T (FP32)
         + 2 * kTile * kLdT * 2      // P^T, dS^T (BF16)
         + kTile * kLdO<HD> * 4      // staging: dQ rows, then dK / dV out
         + 2 * kTile * 4;            // lse and D of the query tile
}
static_assert(BackwardSmem<64>() == 108032, "the layout the docs state");

// The warp's maximum / sum of v, in every lane.
__device__ inline float WarpMax(float v) {
  for (int off = 16; off > 0; off >>= 1) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  }
  return v;
}
__device__ inline float WarpSum(float v) {
  for (int off = 16; off > 0; off >>= 1) {
    v += __shfl_xor_sync(0xffffffffu, v, off);
  }
  return v;
}

__device__ inline const bf16* AsBf16(const uint16_t* p) {
  return reinterpret_cast<const bf16*>(p);
}

// Rows [row0, row0 + kTile) of a [T, HD] slice whose row r starts at
// src + r * stride, into out (rows kLdH<HD> apart; zeros past T), 16 bytes a
// load.
template <int HD>
__device__ inline void StageRows(const uint16_t* src, int64_t stride,
                                 int64_t T, int64_t row0, uint16_t* out) {
  constexpr int kChunks = HD / 8;
  for (int e = threadIdx.x; e < kTile * kChunks; e += blockDim.x) {
    const int r = e / kChunks, ch = e % kChunks;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (row0 + r < T) {
      v = *reinterpret_cast<const uint4*>(src + (row0 + r) * stride + ch * 8);
    }
    *reinterpret_cast<uint4*>(out + r * kLdH<HD> + ch * 8) = v;
  }
}

template <int HD>
__global__ void __launch_bounds__(kBlock)
    FlashForwardKernel(const uint16_t* __restrict__ qkv, int64_t T, int64_t C,
                       int64_t H, float scale, float* __restrict__ lse,
                       float* __restrict__ y) {
#if ZS_FLASH_BODY
  constexpr int LH = kLdH<HD>, LO = kLdO<HD>;
  extern __shared__ __align__(128) unsigned char smem[];
  uint16_t* qs = reinterpret_cast<uint16_t*>(smem);
  uint16_t* ks = qs + kTile * LH;
  uint16_t* vs = ks + kTile * LH;
  float* ss = reinterpret_cast<float*>(vs + kTile * LH);
  uint16_t* ps = reinterpret_cast<uint16_t*>(ss + kTile * kLdS);
  float* os = reinterpret_cast<float*>(ps + kTile * kLdT);

  const int64_t b = blockIdx.z, h = blockIdx.y;
  const int64_t q0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t stride = 3 * C;
  const uint16_t* seq = qkv + b * T * stride + h * HD;
  StageRows<HD>(seq, stride, T, q0, qs);
  for (int e = threadIdx.x; e < kTile * LO; e += blockDim.x) os[e] = 0.0f;

  const bf16* qw = AsBf16(qs + warp * 16 * LH);
  float* sw = ss + warp * 16 * kLdS;
  const bf16* pw = AsBf16(ps + warp * 16 * kLdT);
  float* ow = os + warp * 16 * LO;
  // The warp's 16 rows' running max and sum, the same in every lane.
  float m[16], l[16];
#pragma unroll
  for (int r = 0; r < 16; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
  }

  // Key tiles up to the diagonal one (kTile queries and keys a tile).
  for (int64_t k0 = 0; k0 <= q0; k0 += kTile) {
    StageRows<HD>(seq + C, stride, T, k0, ks);
    StageRows<HD>(seq + 2 * C, stride, T, k0, vs);
    __syncthreads();
    // S_w = Q_w K^T: the warp's 16 queries x 64 keys.
    for (int n = 0; n < kTile / 16; ++n) {
      FragC acc;
      wmma::fill_fragment(acc, 0.0f);
#pragma unroll
      for (int kk = 0; kk < HD / 16; ++kk) {
        FragA a;
        FragBt kt;
        wmma::load_matrix_sync(a, qw + kk * 16, LH);
        wmma::load_matrix_sync(kt, AsBf16(ks) + n * 16 * LH + kk * 16, LH);
        wmma::mma_sync(acc, a, kt, acc);
      }
      wmma::store_matrix_sync(sw + n * 16, acc, kLdS, wmma::mem_row_major);
    }
    __syncwarp();
    // Each row's online softmax over the tile, one row at a time across the
    // warp (lanes c and c + 32: consecutive words, no bank conflicts). Key
    // k0 <= i is in every tile of a row the block owns, so the maximum is
    // finite.
#pragma unroll
    for (int r = 0; r < 16; ++r) {
      const int row = warp * 16 + r;
      const int64_t i = q0 + row;
      const float* srow = ss + row * kLdS;
      const int64_t j0 = k0 + lane, j1 = k0 + lane + 32;
      const float v0 = (j0 <= i && j0 < T) ? srow[lane] * scale : -INFINITY;
      const float v1 =
          (j1 <= i && j1 < T) ? srow[lane + 32] * scale : -INFINITY;
      const float mt = WarpMax(fmaxf(m[r], fmaxf(v0, v1)));
      const float corr = expf(m[r] - mt);  // 0 on the first tile (m = -inf)
      const float p0 = expf(v0 - mt), p1 = expf(v1 - mt);  // 0 where masked
      ps[row * kLdT + lane] = FloatToBf16Bits(p0);
      ps[row * kLdT + lane + 32] = FloatToBf16Bits(p1);
      l[r] = l[r] * corr + WarpSum(p0 + p1);
      m[r] = mt;
      for (int d = lane; d < HD; d += 32) os[row * LO + d] *= corr;
    }
    __syncwarp();
    // O_w = O_w + P_w V.
    for (int n = 0; n < HD / 16; ++n) {
      FragC acc;
      wmma::load_matrix_sync(acc, ow + n * 16, LO, wmma::mem_row_major);
#pragma unroll
      for (int kk = 0; kk < kTile / 16; ++kk) {
        FragA a;
        FragB v;
        wmma::load_matrix_sync(a, pw + kk * 16, kLdT);
        wmma::load_matrix_sync(v, AsBf16(vs) + kk * 16 * LH + n * 16, LH);
        wmma::mma_sync(acc, a, v, acc);
      }
      wmma::store_matrix_sync(ow + n * 16, acc, LO, wmma::mem_row_major);
    }
    __syncthreads();  // K and V are staged again next tile
  }
#pragma unroll
  for (int r = 0; r < 16; ++r) {
    const int row = warp * 16 + r;
    const int64_t i = q0 + row;
    if (i >= T) continue;
    const float inv = 1.0f / l[r];
    float* out = y + (b * T + i) * C + h * HD;
    for (int d = lane; d < HD; d += 32) out[d] = os[row * LO + d] * inv;
    if (lane == 0) lse[(b * H + h) * T + i] = m[r] + logf(l[r]);
  }
#elif defined(__CUDA_ARCH__)
  __trap();  // built for a device without BF16 tensor cores
#endif
}

// D_i = dO_i . y_i for every (b, h, i), [B, H, T], with dO the BF16 dY the
// products use: then sum_j P_ij (dP_ij - D_i) is 0 as it must be (with the
// FP32 dY it would be off by (dO - dY) . y, an error in every dS).
template <int HD>
__global__ void RowDotKernel(const float* __restrict__ y,
                             const uint16_t* __restrict__ dy16, int64_t T,
                             int64_t C, int64_t H, int64_t rows,
                             float* __restrict__ dsum) {
  for (int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       r < rows; r += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = r % T, bh = r / T, h = bh % H, b = bh / H;
    const int64_t at = (b * T + t) * C + h * HD;
    float s = 0.0f;
    for (int d = 0; d < HD; ++d) s += Bf16BitsToFloat(dy16[at + d]) * y[at + d];
    dsum[r] = s;
  }
}

template <int HD>
__global__ void __launch_bounds__(kBlock)
    FlashBackwardKernel(const uint16_t* __restrict__ qkv,
                        const uint16_t* __restrict__ dy16,
                        const float* __restrict__ lse,
                        const float* __restrict__ dsum, int64_t T, int64_t C,
                        int64_t H, float scale, float* __restrict__ dqkv) {
#if ZS_FLASH_BODY
  constexpr int LH = kLdH<HD>, LO = kLdO<HD>;
  extern __shared__ __align__(128) unsigned char smem[];
  uint16_t* ks = reinterpret_cast<uint16_t*>(smem);
  uint16_t* vs = ks + kTile * LH;
  uint16_t* qs = vs + kTile * LH;
  uint16_t* dos = qs + kTile * LH;
  float* sts = reinterpret_cast<float*>(dos + kTile * LH);  // [key][query]
  float* dpts = sts + kTile * kLdS;                         // [key][query]
  uint16_t* pts = reinterpret_cast<uint16_t*>(dpts + kTile * kLdS);
  uint16_t* dsts = pts + kTile * kLdT;                      // [key][query]
  float* stage = reinterpret_cast<float*>(dsts + kTile * kLdT);
  float* lses = stage + kTile * LO;
  float* dss = lses + kTile;

  const int64_t b = blockIdx.z, h = blockIdx.y;
  const int64_t k0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t stride = 3 * C;
  const uint16_t* seq = qkv + b * T * stride + h * HD;
  const uint16_t* dyseq = dy16 + b * T * C + h * HD;
  StageRows<HD>(seq + C, stride, T, k0, ks);
  StageRows<HD>(seq + 2 * C, stride, T, k0, vs);

  const bf16* kw = AsBf16(ks + warp * 16 * LH);
  const bf16* vw = AsBf16(vs + warp * 16 * LH);
  float* stw = sts + warp * 16 * kLdS;
  float* dptw = dpts + warp * 16 * kLdS;
  const bf16* ptw = AsBf16(pts + warp * 16 * kLdT);
  const bf16* dstw = AsBf16(dsts + warp * 16 * kLdT);
  float* stagew = stage + warp * 16 * LO;
  FragC dk[HD / 16], dv[HD / 16];
#pragma unroll
  for (int n = 0; n < HD / 16; ++n) {
    wmma::fill_fragment(dk[n], 0.0f);
    wmma::fill_fragment(dv[n], 0.0f);
  }

  // Query tiles from the diagonal one on (earlier queries see none of
  // these keys).
  for (int64_t q0 = k0; q0 < T; q0 += kTile) {
    StageRows<HD>(seq, stride, T, q0, qs);
    StageRows<HD>(dyseq, C, T, q0, dos);
    for (int e = threadIdx.x; e < kTile; e += blockDim.x) {
      const int64_t i = q0 + e;
      lses[e] = i < T ? lse[(b * H + h) * T + i] : 0.0f;
      dss[e] = i < T ? dsum[(b * H + h) * T + i] : 0.0f;
    }
    __syncthreads();
    // S^T_w = K_w Q^T and dP^T_w = V_w dO^T: the warp's 16 keys x 64 queries.
    for (int n = 0; n < kTile / 16; ++n) {
      FragC s_acc, dp_acc;
      wmma::fill_fragment(s_acc, 0.0f);
      wmma::fill_fragment(dp_acc, 0.0f);
#pragma unroll
      for (int kk = 0; kk < HD / 16; ++kk) {
        FragA a;
        FragBt bt;
        wmma::load_matrix_sync(a, kw + kk * 16, LH);
        wmma::load_matrix_sync(bt, AsBf16(qs) + n * 16 * LH + kk * 16, LH);
        wmma::mma_sync(s_acc, a, bt, s_acc);
        wmma::load_matrix_sync(a, vw + kk * 16, LH);
        wmma::load_matrix_sync(bt, AsBf16(dos) + n * 16 * LH + kk * 16, LH);
        wmma::mma_sync(dp_acc, a, bt, dp_acc);
      }
      wmma::store_matrix_sync(stw + n * 16, s_acc, kLdS, wmma::mem_row_major);
      wmma::store_matrix_sync(dptw + n * 16, dp_acc, kLdS,
                              wmma::mem_row_major);
    }
    __syncwarp();
    // P and dS for the warp's keys, rounded to BF16 for their products: one
    // key row at a time across the warp (queries lane and lane + 32).
#pragma unroll 4
    for (int r = 0; r < 16; ++r) {
      const int krow = warp * 16 + r;
      const int64_t j = k0 + krow;
      for (int c = lane; c < kTile; c += 32) {
        const int64_t i = q0 + c;
        float p = 0.0f, ds = 0.0f;
        if (i < T && j <= i) {
          p = expf(sts[krow * kLdS + c] * scale - lses[c]);
          ds = p * (dpts[krow * kLdS + c] - dss[c]) * scale;
        }
        pts[krow * kLdT + c] = FloatToBf16Bits(p);
        dsts[krow * kLdT + c] = FloatToBf16Bits(ds);
      }
    }
    __syncwarp();
    // dV_w += P^T_w dO;  dK_w += dS^T_w Q.
#pragma unroll
    for (int n = 0; n < HD / 16; ++n) {
#pragma unroll
      for (int kk = 0; kk < kTile / 16; ++kk) {
        FragA a;
        FragB bb;
        wmma::load_matrix_sync(a, ptw + kk * 16, kLdT);
        wmma::load_matrix_sync(bb, AsBf16(dos) + kk * 16 * LH + n * 16, LH);
        wmma::mma_sync(dv[n], a, bb, dv[n]);
        wmma::load_matrix_sync(a, dstw + kk * 16, kLdT);
        wmma::load_matrix_sync(bb, AsBf16(qs) + kk * 16 * LH + n * 16, LH);
        wmma::mma_sync(dk[n], a, bb, dk[n]);
      }
    }
    __syncthreads();  // every warp's dS^T rows are written
    // dQ of the tile's queries warp*16.. : dS (16 queries x 64 keys) K,
    // with dS read transposed out of dS^T, then added into dqkv.
    for (int n = 0; n < HD / 16; ++n) {
      FragC acc;
      wmma::fill_fragment(acc, 0.0f);
#pragma unroll
      for (int kk = 0; kk < kTile / 16; ++kk) {
        FragAt at;
        FragB bb;
        wmma::load_matrix_sync(at, AsBf16(dsts) + kk * 16 * kLdT + warp * 16,
                               kLdT);
        wmma::load_matrix_sync(bb, AsBf16(ks) + kk * 16 * LH + n * 16, LH);
        wmma::mma_sync(acc, at, bb, acc);
      }
      wmma::store_matrix_sync(stagew + n * 16, acc, LO, wmma::mem_row_major);
    }
    __syncwarp();
    for (int e = lane; e < 16 * HD; e += 32) {
      const int r = e / HD, d = e % HD;
      const int64_t i = q0 + warp * 16 + r;
      if (i < T) {
        atomicAdd(dqkv + (b * T + i) * stride + h * HD + d, stagew[r * LO + d]);
      }
    }
    __syncthreads();  // Q, dO, dS^T and the staging are reused next tile
  }
  // dK and dV: these keys are this block's alone.
  for (int part = 1; part <= 2; ++part) {
#pragma unroll
    for (int n = 0; n < HD / 16; ++n) {
      wmma::store_matrix_sync(stagew + n * 16, part == 1 ? dk[n] : dv[n], LO,
                              wmma::mem_row_major);
    }
    __syncwarp();
    for (int e = lane; e < 16 * HD; e += 32) {
      const int r = e / HD, d = e % HD;
      const int64_t jj = k0 + warp * 16 + r;
      if (jj < T) {
        dqkv[(b * T + jj) * stride + part * C + h * HD + d] = stagew[r * LO + d];
      }
    }
    __syncwarp();
  }
#elif defined(__CUDA_ARCH__)
  __trap();  // built for a device without BF16 tensor cores
#endif
}

}  // namespace zeroshard::kernels::cuda::flash

#endif  // ZEROSHARD_MODEL_KERNELS_CUDA_FLASH_ATTENTION_KERNELS_CUH_
