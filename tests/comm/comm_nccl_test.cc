// WorkerGroup on NCCL: skipped without a GPU, except the factory's refusal.
#include <algorithm>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/comm/comm_group_runner.h"
#include "comm/collectives.h"
#ifdef ZS_HAVE_NCCL
#include <cuda_runtime.h>

#include "tests/support/cuda_device.h"
#include "comm/nccl_collectives.h"
#endif

namespace zeroshard {
namespace {

bool HaveGpu() {
#ifdef ZS_HAVE_NCCL
  return VisibleCudaDevices().ok();
#else
  return false;
#endif
}

TEST(NcclWorkerGroupTest, FactoryRefusesClearlyWithoutGpu) {
  if (HaveGpu()) GTEST_SKIP() << "a GPU is present";
  for (const char* backend : {"nccl", "nccl-host"}) {
    InMemoryRendezvousStore store;
    auto group = CreateWorkerGroup(backend, 0, 1, &store, TestGroupOptions());
    ASSERT_FALSE(group.ok()) << backend;
    const absl::Status usable = CheckBackendUsable(backend);
#ifdef ZS_HAVE_NCCL
    EXPECT_EQ(group.status().code(), absl::StatusCode::kFailedPrecondition)
        << group.status();
    EXPECT_NE(group.status().message().find("GPU"), std::string::npos);
    EXPECT_EQ(usable.code(), absl::StatusCode::kFailedPrecondition) << usable;
#else
    EXPECT_EQ(group.status().code(), absl::StatusCode::kUnimplemented);
    EXPECT_EQ(usable.code(), absl::StatusCode::kUnimplemented) << usable;
#endif
  }
  EXPECT_TRUE(CheckBackendUsable("gloo").ok());
  EXPECT_EQ(CheckBackendUsable("mpi").code(), absl::StatusCode::kInvalidArgument);
}

#ifdef ZS_HAVE_NCCL
// One rank per GPU; a single GPU runs a group of one.
TEST(NcclWorkerGroupTest, CollectivesOnDeviceBuffers) {
  auto devices = VisibleCudaDevices();
  if (!devices.ok()) {
    if (testing::CudaDeviceExpected()) GTEST_FAIL() << devices.status();
    GTEST_SKIP() << devices.status();
  }
  const int n = std::min(*devices, 4);
  const size_t part = 1001;
  auto statuses = RunGroup("nccl", n, TestGroupOptions(), [&](WorkerGroup& g) {
    const int r = g.rank();
    std::vector<float> host_in(part * n);
    for (size_t i = 0; i < host_in.size(); ++i) host_in[i] = float(r + 1) * (i % 13);
    float *d_in = nullptr, *d_out = nullptr;
    if (cudaMalloc(&d_in, host_in.size() * 4) != cudaSuccess ||
        cudaMalloc(&d_out, part * 4) != cudaSuccess) {
      return absl::InternalError("cudaMalloc");
    }
    cudaMemcpy(d_in, host_in.data(), host_in.size() * 4, cudaMemcpyHostToDevice);
    // A pageable copy may return before its DMA lands, and the group's
    // non-blocking stream does not wait for the legacy stream.
    cudaDeviceSynchronize();
    absl::Status s = g.ReduceScatter({d_in, host_in.size()}, {d_out, part}, 1.0f);
    if (s.ok()) s = g.AllGatherInPlace({reinterpret_cast<uint8_t*>(d_in), host_in.size() * 4});
    if (s.ok()) s = g.Synchronize();
    std::vector<float> got(part);
    cudaMemcpy(got.data(), d_out, part * 4, cudaMemcpyDeviceToHost);
    cudaFree(d_in);
    cudaFree(d_out);
    if (!s.ok()) return s;
    const float ranks_sum = n * (n + 1) / 2.0f;
    for (size_t i = 0; i < part; ++i) {
      if (got[i] != ranks_sum * ((r * part + i) % 13)) {
        return absl::InternalError("reduce-scatter differs");
      }
    }
    double v[2] = {1.0, double(r)};
    s = g.AllReduce(absl::MakeSpan(v, 2), ReduceOp::kMax);
    if (!s.ok()) return s;
    if (v[1] != n - 1) return absl::InternalError("all-reduce differs");
    std::string bytes = r == 0 ? "config" : "";
    s = g.Broadcast(&bytes, 0);
    if (!s.ok()) return s;
    if (bytes != "config") return absl::InternalError("broadcast differs");
    return g.AgreeOn("config", 42);
  });
  for (const auto& s : statuses) EXPECT_TRUE(s.ok()) << s;
}

// The engine's contract (host buffers) over NCCL, staged through the device.
TEST(NcclWorkerGroupTest, HostStagedCollectives) {
  auto devices = VisibleCudaDevices();
  if (!devices.ok()) {
    if (testing::CudaDeviceExpected()) GTEST_FAIL() << devices.status();
    GTEST_SKIP() << devices.status();
  }
  const int n = std::min(*devices, 4);
  const size_t part = 777;
  auto statuses =
      RunGroup("nccl-host", n, TestGroupOptions(), [&](WorkerGroup& g) {
        const int r = g.rank();
        if (g.backend() != "nccl") return absl::InternalError("backend name");
        std::vector<float> in(part * n), out(part, -1.0f);
        for (size_t i = 0; i < in.size(); ++i) in[i] = float(r + 1) * (i % 11);
        absl::Status s = g.ReduceScatter(in, absl::MakeSpan(out), 0.5f);
        if (!s.ok()) return s;
        const float ranks_sum = n * (n + 1) / 2.0f;
        for (size_t i = 0; i < part; ++i) {
          if (out[i] != 0.5f * ranks_sum * ((r * part + i) % 11)) {
            return absl::InternalError("reduce-scatter differs");
          }
        }
        std::vector<uint8_t> unit(part * n, 0);
        for (size_t i = 0; i < part; ++i) unit[r * part + i] = uint8_t(r + 7);
        s = g.AllGatherInPlace(absl::MakeSpan(unit));
        if (!s.ok()) return s;
        std::vector<uint8_t> mine(part, uint8_t(r + 1)), all(part * n, 0);
        s = g.AllGather(mine, absl::MakeSpan(all));
        if (!s.ok()) return s;
        for (int q = 0; q < n; ++q) {
          for (size_t i = 0; i < part; ++i) {
            if (unit[q * part + i] != uint8_t(q + 7) ||
                all[q * part + i] != uint8_t(q + 1)) {
              return absl::InternalError("all-gather differs");
            }
          }
        }
        // Refused before any communication: sizes that do not split.
        std::vector<uint8_t> odd(part * n + 1);
        if (n > 1 && g.AllGatherInPlace(absl::MakeSpan(odd)).ok()) {
          return absl::InternalError("an uneven all-gather was accepted");
        }
        return g.AgreeOn("config", 7);
      });
  for (const auto& s : statuses) EXPECT_TRUE(s.ok()) << s;
}
#endif

}  // namespace
}  // namespace zeroshard
