// Runs CUDA kernel source on the host, for the kernels that have no host twin
// (model/kernels/cuda/flash_attention_kernels.cuh): a grid is run a block at
// a time, each block's threads as real threads, with
//   - threadIdx / blockIdx / blockDim / gridDim per thread;
//   - __syncthreads and __syncwarp as barriers of the block and of its warp;
//   - __shfl_xor_sync through a per-thread slot between two warp barriers;
//   - atomicAdd on a float as an atomic_ref;
//   - WMMA's 16x16x16 fragments: load / store / mma / fill with the
//     addressing the CUDA guide gives (row_major: element (r, c) at
//     p[r * ldm + c]; col_major: p[c * ldm + r]), BF16 inputs and FP32
//     accumulation, each load and store checked for WMMA's rules (a 256-bit
//     aligned pointer; ldm a multiple of 8 for 16-bit and 4 for 32-bit
//     elements): a breach is counted in WmmaViolations().
// A fragment's elements are reachable only through store_matrix_sync, so
// lane 0 of each warp does the loads, products and stores and the other
// lanes keep nothing: the code's barriers, not the emulation, must order
// every shared-memory write before its reads, as on a device.
// A kernel's `extern __shared__` array is an ordinary array the includer
// defines in the kernel's namespace (blocks run one at a time).
//
// Include after every other header (it defines the CUDA qualifiers away),
// then the kernel header:
//   #include "tests/model/cuda_block_emulation.h"
//   #include "model/kernels/cuda/flash_attention_kernels.cuh"
//   zeroshard::testing::cuda_emulation::Launch({gx, gy, gz}, 128, [&] {
//     flash::FlashForwardKernel<64>(...);
//   });
#ifndef ZEROSHARD_TESTS_WORKER_CUDA_BLOCK_EMULATION_H_
#define ZEROSHARD_TESTS_WORKER_CUDA_BLOCK_EMULATION_H_

#include <atomic>
#include <barrier>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <thread>
#include <type_traits>
#include <vector>

#include "common/bf16_bits.h"

#define ZS_FLASH_EMULATION 1
#define __global__
#define __device__
#define __shared__
#define __launch_bounds__(n)
#define __align__(n) __attribute__((aligned(n)))

struct EmulatedDim3 {
  unsigned x = 1, y = 1, z = 1;
};
inline thread_local EmulatedDim3 threadIdx, blockIdx, blockDim, gridDim;

// 16-byte aligned, as CUDA's: a misaligned vector access is UB that UBSan
// (the ASan build) reports, where a device would fault.
struct alignas(16) uint4 {
  uint32_t x, y, z, w;
};
inline uint4 make_uint4(uint32_t x, uint32_t y, uint32_t z, uint32_t w) {
  return {x, y, z, w};
}

struct __nv_bfloat16 {
  uint16_t bits;
};

namespace zeroshard::testing::cuda_emulation {

struct Block {
  explicit Block(int threads) : all(threads), slots(threads) {
    for (int w = 0; w < threads / 32; ++w) {
      warps.push_back(std::make_unique<std::barrier<>>(32));
    }
  }
  std::barrier<> all;
  std::vector<std::unique_ptr<std::barrier<>>> warps;
  std::vector<float> slots;
};
inline thread_local Block* current = nullptr;

inline std::atomic<int>& WmmaViolations() {
  static std::atomic<int> n{0};
  return n;
}

inline int Lane() { return static_cast<int>(threadIdx.x % 32); }

// Runs kernel() over `grid` blocks of `threads` threads (a multiple of 32),
// calling before_block() (if any) before each block starts: to poison its
// shared memory, say, so that a read of what the last block left shows.
template <typename F>
void Launch(EmulatedDim3 grid, int threads, F kernel,
            const std::function<void()>& before_block = nullptr) {
  for (unsigned z = 0; z < grid.z; ++z) {
    for (unsigned y = 0; y < grid.y; ++y) {
      for (unsigned x = 0; x < grid.x; ++x) {
        if (before_block) before_block();
        Block block(threads);
        std::vector<std::thread> ts;
        ts.reserve(threads);
        for (int t = 0; t < threads; ++t) {
          ts.emplace_back([&, t] {
            threadIdx = {static_cast<unsigned>(t), 0, 0};
            blockIdx = {x, y, z};
            blockDim = {static_cast<unsigned>(threads), 1, 1};
            gridDim = grid;
            current = &block;
            kernel();
          });
        }
        for (std::thread& th : ts) th.join();
      }
    }
  }
}

}  // namespace zeroshard::testing::cuda_emulation

inline void __syncthreads() {
  zeroshard::testing::cuda_emulation::current->all.arrive_and_wait();
}
inline void __syncwarp(unsigned = 0xffffffffu) {
  zeroshard::testing::cuda_emulation::current->warps[threadIdx.x / 32]
      ->arrive_and_wait();
}
inline float __shfl_xor_sync(unsigned, float v, int lane_mask) {
  auto* b = zeroshard::testing::cuda_emulation::current;
  const unsigned t = threadIdx.x;
  b->slots[t] = v;
  __syncwarp();
  const float r = b->slots[(t & ~31u) | ((t & 31u) ^ lane_mask)];
  __syncwarp();
  return r;
}
inline float atomicAdd(float* p, float v) {
  return std::atomic_ref<float>(*p).fetch_add(v);
}
[[noreturn]] inline void __trap() { std::abort(); }

namespace nvcuda::wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
struct fragment {
  static_assert(M == 16 && N == 16 && K == 16, "16x16x16 only");
  float x[16][16];
};

inline float ToFloat(float v) { return v; }
inline float ToFloat(__nv_bfloat16 v) {
  return zeroshard::Bf16BitsToFloat(v.bits);
}

template <typename T>
void CheckRules(const T* p, unsigned ldm) {
  const unsigned per = sizeof(T) == 2 ? 8 : 4;
  if (reinterpret_cast<uintptr_t>(p) % 32 != 0 || ldm % per != 0) {
    ++zeroshard::testing::cuda_emulation::WmmaViolations();
  }
}

template <typename Use, typename T, typename Layout>
void load_matrix_sync(fragment<Use, 16, 16, 16, T, Layout>& f, const T* p,
                      unsigned ldm) {
  CheckRules(p, ldm);
  if (zeroshard::testing::cuda_emulation::Lane() != 0) return;
  for (int r = 0; r < 16; ++r) {
    for (int c = 0; c < 16; ++c) {
      f.x[r][c] = ToFloat(std::is_same_v<Layout, col_major> ? p[c * ldm + r]
                                                            : p[r * ldm + c]);
    }
  }
}

inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float>& f,
                             const float* p, unsigned ldm, layout_t layout) {
  CheckRules(p, ldm);
  if (zeroshard::testing::cuda_emulation::Lane() != 0) return;
  for (int r = 0; r < 16; ++r) {
    for (int c = 0; c < 16; ++c) {
      f.x[r][c] = layout == mem_col_major ? p[c * ldm + r] : p[r * ldm + c];
    }
  }
}

inline void store_matrix_sync(float* p,
                              const fragment<accumulator, 16, 16, 16, float>& f,
                              unsigned ldm, layout_t layout) {
  CheckRules(p, ldm);
  if (zeroshard::testing::cuda_emulation::Lane() != 0) return;
  for (int r = 0; r < 16; ++r) {
    for (int c = 0; c < 16; ++c) {
      (layout == mem_col_major ? p[c * ldm + r] : p[r * ldm + c]) = f.x[r][c];
    }
  }
}

template <typename Use, typename T, typename Layout>
void fill_fragment(fragment<Use, 16, 16, 16, T, Layout>& f, float v) {
  for (auto& row : f.x) {
    for (float& e : row) e = v;
  }
}

template <typename T, typename La, typename Lb>
void mma_sync(fragment<accumulator, 16, 16, 16, float>& d,
              const fragment<matrix_a, 16, 16, 16, T, La>& a,
              const fragment<matrix_b, 16, 16, 16, T, Lb>& b,
              const fragment<accumulator, 16, 16, 16, float>& c) {
  if (zeroshard::testing::cuda_emulation::Lane() != 0) return;
  float out[16][16];
  for (int r = 0; r < 16; ++r) {
    for (int col = 0; col < 16; ++col) {
      float s = c.x[r][col];
      for (int k = 0; k < 16; ++k) s += a.x[r][k] * b.x[k][col];
      out[r][col] = s;
    }
  }
  for (int r = 0; r < 16; ++r) {
    for (int col = 0; col < 16; ++col) d.x[r][col] = out[r][col];
  }
}

}  // namespace nvcuda::wmma

#endif  // ZEROSHARD_TESTS_WORKER_CUDA_BLOCK_EMULATION_H_
