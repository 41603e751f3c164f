// The device AdamW (optim/adam_device.h) against the scalar reference, bit for
// bit, on fresh random inputs; and its refusals of bad arrays. CUDA builds
// only. The refusals run everywhere (they are decided before any CUDA call);
// the comparisons skip without a device and say so.
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "common/dtype.h"
#include "gtest/gtest.h"
#include "optim/adam_device.h"
#include "optim/optimizer.h"
#include "tests/support/cuda_device.h"
#include "tests/support/test_seed.h"

namespace zeroshard {
namespace {

struct HostState {
  std::vector<float> master, m, v, grad32;
  std::vector<uint16_t> mirror, grad16;
};

HostState RandomState(size_t n, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> scale_exp(-6.0f, 2.0f);
  HostState s;
  s.master.resize(n);
  s.m.resize(n);
  s.v.resize(n);
  s.grad32.resize(n);
  s.grad16.resize(n);
  s.mirror.assign(n, 0xDEAD);
  for (size_t i = 0; i < n; ++i) {
    s.master[i] = normal(rng);
    s.m[i] = 0.1f * normal(rng);
    const float sd = normal(rng) * 0.01f;
    s.v[i] = sd * sd;
    s.grad32[i] = normal(rng) * std::pow(10.0f, scale_exp(rng));
    s.grad16[i] = FloatToBf16(s.grad32[i]);
  }
  // The edges: zero and negative-zero gradients, an infinite and a NaN one.
  if (n > 4) {
    s.grad32[0] = 0.0f;
    s.grad32[1] = -0.0f;
    s.grad32[2] = INFINITY;
    s.grad32[3] = NAN;
    for (int i = 0; i < 4; ++i) s.grad16[i] = FloatToBf16(s.grad32[i]);
  }
  return s;
}

// Device copies of a HostState; freed on destruction.
struct DeviceState {
  float *master = nullptr, *m = nullptr, *v = nullptr, *grad32 = nullptr;
  uint16_t *mirror = nullptr, *grad16 = nullptr;
  size_t n = 0;

  explicit DeviceState(const HostState& h) : n(h.master.size()) {
    Put(&master, h.master);
    Put(&m, h.m);
    Put(&v, h.v);
    Put(&grad32, h.grad32);
    Put(&mirror, h.mirror);
    Put(&grad16, h.grad16);
  }
  ~DeviceState() {
    for (void* p : {static_cast<void*>(master), static_cast<void*>(m),
                    static_cast<void*>(v), static_cast<void*>(grad32),
                    static_cast<void*>(mirror), static_cast<void*>(grad16)}) {
      cudaFree(p);
    }
  }
  template <typename T>
  void Put(T** d, const std::vector<T>& h) {
    ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(d), h.size() * sizeof(T)),
              cudaSuccess);
    ASSERT_EQ(cudaMemcpy(*d, h.data(), h.size() * sizeof(T),
                         cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  template <typename T>
  static std::vector<T> Get(const T* d, size_t n) {
    std::vector<T> h(n);
    EXPECT_EQ(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost),
              cudaSuccess);
    return h;
  }
};

void ExpectSameBits(const std::vector<float>& want,
                    const std::vector<float>& got, const char* what) {
  ASSERT_EQ(want.size(), got.size());
  size_t bad = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (FloatBits(want[i]) != FloatBits(got[i])) {
      if (++bad <= 5) {
        ADD_FAILURE() << what << "[" << i << "]: reference " << want[i]
                      << " device " << got[i];
      }
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": elements differing from the reference";
}

OptimizerConfig Config(OptimizerKind kind, double weight_decay) {
  OptimizerConfig c;
  c.kind = kind;
  c.lr = 3e-4;
  c.weight_decay = weight_decay;
  return c;
}

TEST(AdamCudaTest, MatchesTheReferenceBitForBit) {
  ZS_SKIP_WITHOUT_CUDA_DEVICE();
  const uint64_t seed = testing::TestSeed();
  SCOPED_TRACE(testing::SeedTrace(seed));
  std::mt19937_64 rng(seed);
  struct Case {
    OptimizerKind kind;
    double wd;
    bool bf16;
    bool mirror;
  };
  const Case cases[] = {{OptimizerKind::kAdamW, 0.1, false, true},
                        {OptimizerKind::kAdamW, 0.0, true, true},
                        {OptimizerKind::kAdam, 0.01, false, false},
                        {OptimizerKind::kAdam, 0.0, true, true}};
  for (const size_t n : {size_t{1}, size_t{257}, size_t{1} << 20,
                         (size_t{1} << 24) + 3}) {
    for (const Case& c : cases) {
      SCOPED_TRACE(::testing::Message() << "n " << n << " kind "
                                      << static_cast<int>(c.kind) << " wd "
                                      << c.wd << " bf16 " << c.bf16);
      HostState h = RandomState(n, rng);
      DeviceState d(h);
      const OptimizerConfig config = Config(c.kind, c.wd);
      for (uint64_t t = 1; t <= 3; ++t) {
        const AdamStep step = MakeAdamStep(config, t, 0.5f);
        const GradView hg = c.bf16 ? GradView::Bf16(h.grad16.data())
                                   : GradView::Fp32(h.grad32.data());
        AdamUpdateReference(step, hg,
                            {h.master.data(), h.m.data(), h.v.data(),
                             c.mirror ? h.mirror.data() : nullptr, n});
        const GradView dg = c.bf16 ? GradView::Bf16(d.grad16)
                                   : GradView::Fp32(d.grad32);
        ASSERT_TRUE(AdamUpdateDevice(step, dg,
                                     {d.master, d.m, d.v,
                                      c.mirror ? d.mirror : nullptr, n},
                                     nullptr)
                        .ok());
      }
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      ExpectSameBits(h.master, DeviceState::Get(d.master, n), "master");
      ExpectSameBits(h.m, DeviceState::Get(d.m, n), "exp_avg");
      ExpectSameBits(h.v, DeviceState::Get(d.v, n), "exp_avg_sq");
      EXPECT_EQ(h.mirror, DeviceState::Get(d.mirror, n)) << "mirror";
    }
  }
}

TEST(AdamCudaTest, PinnedHostStateIsUpdatedInPlace) {
  ZS_SKIP_WITHOUT_CUDA_DEVICE();
  const uint64_t seed = testing::TestSeed();
  SCOPED_TRACE(testing::SeedTrace(seed));
  std::mt19937_64 rng(seed);
  const size_t n = 100003;
  HostState h = RandomState(n, rng);
  float *master = nullptr, *m = nullptr, *v = nullptr, *g = nullptr;
  for (float** p : {&master, &m, &v, &g}) {
    ASSERT_EQ(cudaHostAlloc(reinterpret_cast<void**>(p), n * 4,
                            cudaHostAllocMapped),
              cudaSuccess);
  }
  std::memcpy(master, h.master.data(), n * 4);
  std::memcpy(m, h.m.data(), n * 4);
  std::memcpy(v, h.v.data(), n * 4);
  std::memcpy(g, h.grad32.data(), n * 4);
  const AdamStep step = MakeAdamStep(Config(OptimizerKind::kAdamW, 0.1), 1, 1);
  AdamUpdateReference(step, GradView::Fp32(h.grad32.data()),
                      {h.master.data(), h.m.data(), h.v.data(), nullptr, n});
  ASSERT_TRUE(
      AdamUpdateDevice(step, GradView::Fp32(g), {master, m, v, nullptr, n},
                       nullptr)
          .ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ExpectSameBits(h.master, std::vector<float>(master, master + n), "master");
  ExpectSameBits(h.v, std::vector<float>(v, v + n), "exp_avg_sq");
  for (float* p : {master, m, v, g}) cudaFreeHost(p);
}

TEST(AdamCudaTest, PageableHostMemoryIsRefused) {
  ZS_SKIP_WITHOUT_CUDA_DEVICE();
  std::vector<float> master(64), m(64), v(64), g(64);
  const AdamStep step = MakeAdamStep(Config(OptimizerKind::kAdamW, 0.1), 1, 1);
  const absl::Status s = AdamUpdateDevice(
      step, GradView::Fp32(g.data()),
      {master.data(), m.data(), v.data(), nullptr, 64}, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("device-visible"), std::string::npos) << s;
}

// Decided before any CUDA call, so these run on every machine.
TEST(AdamDeviceArgsTest, BadArraysAreRefusedByName) {
  const AdamStep step = MakeAdamStep(Config(OptimizerKind::kAdamW, 0.1), 1, 1);
  alignas(16) float buf[64] = {};
  struct Bad {
    GradView grad;
    AdamSlice slice;
    const char* names;
  };
  const Bad bads[] = {
      {GradView::Fp32(nullptr), {buf, buf + 16, buf + 32, nullptr, 8},
       "the gradient is null"},
      {GradView::Fp32(buf + 48), {buf, nullptr, buf + 32, nullptr, 8},
       "exp_avg is null"},
      {GradView::Fp32(reinterpret_cast<const float*>(
           reinterpret_cast<const char*>(buf + 48) + 2)),
       {buf, buf + 16, buf + 32, nullptr, 8},
       "the gradient is not aligned to 4 B"},
      {GradView::Fp32(buf + 48), {buf, buf + 4, buf + 32, nullptr, 8},
       "master and exp_avg overlap"},
      {GradView::Fp32(buf + 48),
       {buf, buf + 16, buf + 32, reinterpret_cast<uint16_t*>(buf + 4), 8},
       "master and mirror overlap"},
  };
  for (const Bad& b : bads) {
    const absl::Status s = AdamUpdateDevice(step, b.grad, b.slice, nullptr);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find(b.names), std::string::npos)
        << s << " should say " << b.names;
  }
  EXPECT_TRUE(AdamUpdateDevice(step, GradView::Fp32(nullptr),
                               {nullptr, nullptr, nullptr, nullptr, 0}, nullptr)
                  .ok())
      << "n == 0 does nothing";
}

// Without a device, a well-formed call is a clear FAILED_PRECONDITION (or, on
// a machine with one, succeeds): never a crash.
TEST(AdamDeviceArgsTest, NoDeviceIsAClearError) {
  if (testing::NoCudaDeviceReason().empty()) {
    GTEST_SKIP() << "a CUDA device is present (the comparisons cover it)";
  }
  float master[8] = {}, m[8] = {}, v[8] = {}, g[8] = {};
  const AdamStep step = MakeAdamStep(Config(OptimizerKind::kAdamW, 0.1), 1, 1);
  const absl::Status s = AdamUpdateDevice(step, GradView::Fp32(g),
                                          {master, m, v, nullptr, 8}, nullptr);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
}

}  // namespace
}  // namespace zeroshard
