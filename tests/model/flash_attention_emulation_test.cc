// The flash attention's CUDA kernels (model/kernels/cuda/
// flash_attention_kernels.cuh), compiled by the host compiler and run on the
// CPU under an emulation of a thread block, warp shuffles and WMMA fragments
// (cuda_block_emulation.h), against the online attention's twin: their
// tiling, causal mask, padded shared-memory layout, fragment layouts and
// index arithmetic, checked without a GPU. The tolerances are the device
// test's (kernels_cuda_test, OnlineAttentionMatchesTheTwin): the kernels
// round P, dO and dS to BF16 for their products. Every WMMA load and store
// must keep WMMA's alignment rules; every output element is written (NaN
// sentinels; dQ is summed into zeros, as the launcher clears its columns);
// each block's shared memory starts as NaN bytes, so a read of something
// the kernel did not write there shows, and nothing past the kernel's
// stated size is touched.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "common/bf16_bits.h"
#include "common/dtype.h"
#include "gtest/gtest.h"
#include "tests/support/expect_close.h"
#include "tests/support/test_seed.h"
#include "model/kernels/attention_shape.h"
#include "model/kernels/cpu/online_attention.h"
// Last: it defines the CUDA qualifiers away.
#include "tests/model/cuda_block_emulation.h"
#include "model/kernels/cuda/flash_attention_kernels.cuh"

namespace zeroshard::kernels::cuda::flash {
// The kernels' `extern __shared__` array, big enough for the largest block.
alignas(128) unsigned char smem[BackwardSmem<128>()];
}  // namespace zeroshard::kernels::cuda::flash

namespace zeroshard::kernels {
namespace {

namespace emu = zeroshard::testing::cuda_emulation;

std::vector<float> Sentinel(size_t n) {
  return std::vector<float>(n, std::numeric_limits<float>::quiet_NaN());
}

// 0xFF bytes: NaN as FP32 and as BF16.
void PoisonSharedMemory() {
  std::memset(cuda::flash::smem, 0xFF, sizeof(cuda::flash::smem));
}
bool UntouchedPast(size_t used) {
  for (size_t i = used; i < sizeof(cuda::flash::smem); ++i) {
    if (cuda::flash::smem[i] != 0xFF) return false;
  }
  return true;
}

// Forward and backward of the flash kernels for head dim HD, as
// flash_attention.cu launches them (D from the BF16 dO).
template <int HD>
void RunFlash(const AttentionShape& s, const std::vector<uint16_t>& qkv,
              const std::vector<float>& lse_in, const std::vector<float>& y_in,
              const std::vector<float>& dy, std::vector<float>* y,
              std::vector<float>* lse, std::vector<float>* dqkv) {
  constexpr int kTile = cuda::flash::kTile;
  const EmulatedDim3 grid{static_cast<unsigned>((s.seq + kTile - 1) / kTile),
                          static_cast<unsigned>(s.heads),
                          static_cast<unsigned>(s.batch)};
  const float scale = 1.0f / std::sqrt(static_cast<float>(HD));
  emu::Launch(
      grid, cuda::flash::kBlock,
      [&] {
        cuda::flash::FlashForwardKernel<HD>(qkv.data(), s.seq, s.width,
                                            s.heads, scale, lse->data(),
                                            y->data());
      },
      PoisonSharedMemory);
  EXPECT_TRUE(UntouchedPast(cuda::flash::ForwardSmem<HD>()));
  std::vector<uint16_t> dy16(dy.size());
  FloatToBf16Array(dy.data(), dy16.data(), dy.size());
  const int64_t rows = s.batch * s.heads * s.seq;
  std::vector<float> dsum(rows);
  emu::Launch({4, 1, 1}, 64, [&] {
    cuda::flash::RowDotKernel<HD>(y_in.data(), dy16.data(), s.seq, s.width,
                                  s.heads, rows, dsum.data());
  });
  // The launcher clears dQ's columns only; dK and dV keep their sentinels.
  for (int64_t row = 0; row < s.batch * s.seq; ++row) {
    std::fill_n(dqkv->begin() + row * 3 * s.width, s.width, 0.0f);
  }
  emu::Launch(
      grid, cuda::flash::kBlock,
      [&] {
        cuda::flash::FlashBackwardKernel<HD>(qkv.data(), dy16.data(),
                                             lse_in.data(), dsum.data(), s.seq,
                                             s.width, s.heads, scale,
                                             dqkv->data());
      },
      PoisonSharedMemory);
  EXPECT_TRUE(UntouchedPast(cuda::flash::BackwardSmem<HD>()));
}

TEST(FlashAttentionEmulationTest, KernelsMatchTheOnlineTwin) {
  const uint64_t seed = zeroshard::testing::TestSeed();
  SCOPED_TRACE(zeroshard::testing::SeedTrace(seed));
  std::mt19937_64 rng(seed);
  const AttentionShape shapes[] = {
      {.batch = 2, .seq = 150, .width = 128, .heads = 2},  // hd 64
      {.batch = 1, .seq = 37, .width = 64, .heads = 2},    // hd 32
      {.batch = 1, .seq = 70, .width = 128, .heads = 1},   // hd 128
      {.batch = 3, .seq = 1, .width = 64, .heads = 4},     // hd 16
      {.batch = 1, .seq = 128, .width = 192, .heads = 3},  // whole tiles
  };
  emu::WmmaViolations() = 0;
  for (AttentionShape s : shapes) {
    s.dtype = DType::kBf16;
    SCOPED_TRACE(::testing::Message() << "B=" << s.batch << " T=" << s.seq
                                      << " hd=" << s.width / s.heads);
    const size_t nqkv = s.batch * s.seq * 3 * s.width;
    const size_t ny = s.batch * s.seq * s.width;
    const size_t nl = s.batch * s.heads * s.seq;
    std::normal_distribution<float> wide(0.0f, 1.5f), unit(0.0f, 1.0f);
    std::vector<float> qkv_f(nqkv), dy(ny);
    for (float& v : qkv_f) v = wide(rng);
    for (float& v : dy) v = unit(rng);
    std::vector<uint16_t> qkv(nqkv);
    FloatToBf16Array(qkv_f.data(), qkv.data(), nqkv);
    std::vector<float> y_twin(ny), lse_twin(nl), dqkv_twin(nqkv);
    ASSERT_TRUE(
        cpu::OnlineAttentionForwardTwin(s, qkv.data(), lse_twin.data(),
                                        y_twin.data())
            .ok());
    ASSERT_TRUE(cpu::OnlineAttentionBackwardTwin(s, qkv.data(),
                                                 lse_twin.data(), y_twin.data(),
                                                 dy.data(), dqkv_twin.data())
                    .ok());
    std::vector<float> y = Sentinel(ny), lse = Sentinel(nl),
                       dqkv = Sentinel(nqkv);
    // The backward from the twin's forward, as the device test runs it.
    switch (s.width / s.heads) {
      case 16: RunFlash<16>(s, qkv, lse_twin, y_twin, dy, &y, &lse, &dqkv); break;
      case 32: RunFlash<32>(s, qkv, lse_twin, y_twin, dy, &y, &lse, &dqkv); break;
      case 64: RunFlash<64>(s, qkv, lse_twin, y_twin, dy, &y, &lse, &dqkv); break;
      default: RunFlash<128>(s, qkv, lse_twin, y_twin, dy, &y, &lse, &dqkv); break;
    }
    zeroshard::testing::ExpectAllClose(y, y_twin, 2e-2f, 2e-2f, "y", "flash",
                                       "twin");
    zeroshard::testing::ExpectAllClose(lse, lse_twin, 1e-4f, 1e-4f, "lse",
                                       "flash", "twin");
    zeroshard::testing::ExpectAllClose(dqkv, dqkv_twin, 3e-2f, 3e-2f, "dqkv",
                                       "flash", "twin");
  }
  EXPECT_EQ(emu::WmmaViolations().load(), 0)
      << "a WMMA load or store broke the alignment or ldm rules";
}

}  // namespace
}  // namespace zeroshard::kernels
