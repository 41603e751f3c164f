#include "model/kernels/cpu/gemm.h"

#include <atomic>
#include <map>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "oneapi/dnnl/dnnl.hpp"
#include "model/kernels/cpu/bf16_convert.h"
#include "model/kernels/cpu/threading.h"

namespace zeroshard::kernels::cpu {
namespace {

using Stored = kernels::StoredShape;
using kernels::StoredShapeOf;

absl::Status Check(const GemmDesc& g) { return kernels::ValidateGemm(g); }

// Copies an FP32 operand to dense BF16 (keeping its stored orientation).
MatRef ToBf16(const MatRef& x, int64_t rows, int64_t cols,
              std::vector<uint16_t>& scratch) {
  const Stored s = StoredShapeOf(x, rows, cols);
  scratch.resize(static_cast<size_t>(s.rows * s.cols));
  const float* src = static_cast<const float*>(x.data);
  if (x.ld == s.cols) {
    FloatsToBf16(src, scratch.data(), s.rows * s.cols);
  } else {
    for (int64_t r = 0; r < s.rows; ++r) {
      FloatsToBf16(src + r * x.ld, scratch.data() + r * s.cols, s.cols);
    }
  }
  return MatRef{scratch.data(), DType::kBf16, s.cols, x.trans};
}

// Copies a BF16 operand to dense FP32 (exact), keeping its orientation.
MatRef ToFp32(const MatRef& x, int64_t rows, int64_t cols,
              std::vector<float>& scratch) {
  const Stored s = StoredShapeOf(x, rows, cols);
  scratch.resize(static_cast<size_t>(s.rows * s.cols));
  const uint16_t* src = static_cast<const uint16_t*>(x.data);
  for (int64_t r = 0; r < s.rows; ++r) {
    Bf16sToFloat(src + r * x.ld, scratch.data() + r * s.cols, s.cols);
  }
  return MatRef{scratch.data(), DType::kFp32, s.cols, x.trans};
}

std::atomic<bool>& ForceWidening() {
  static std::atomic<bool> force{false};
  return force;
}

dnnl::memory::desc Desc(const MatRef& x, int64_t rows, int64_t cols) {
  const auto dt = x.dtype == DType::kBf16 ? dnnl::memory::data_type::bf16
                                          : dnnl::memory::data_type::f32;
  const dnnl::memory::dims strides =
      x.trans ? dnnl::memory::dims{1, x.ld} : dnnl::memory::dims{x.ld, 1};
  return dnnl::memory::desc({rows, cols}, dt, strides);
}

using Key = std::tuple<int64_t, int64_t, int64_t, int, int64_t, bool, int64_t,
                       bool, int64_t, bool>;

struct Context {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
};

// Primitives are cached per thread: one dnnl::matmul executed from several
// threads at once gave wrong products here (its library-managed scratchpad
// is shared by concurrent executions), as worker threads running in one
// process showed (tests/worker/engine/engine_parity_test.cc).
std::map<Key, dnnl::matmul>& ThreadCache() {
  thread_local std::map<Key, dnnl::matmul> cache;
  return cache;
}

Context& Ctx() {
  static Context* ctx = new Context();
  return *ctx;
}

// Whether oneDNN builds a BF16 matmul on this CPU: it needs AVX-512
// (avx512_core; native BF16 dot products with avx512_bf16 or AMX). Debian's
// oneDNN 2.6 on an AVX2-only CPU throws "could not create a primitive
// descriptor iterator". Asked once, with a small product.
bool NativeBf16Matmul() {
  static const bool native = [] {
    try {
      const dnnl::memory::desc d({16, 16}, dnnl::memory::data_type::bf16,
                                 dnnl::memory::dims{16, 1});
      const dnnl::memory::desc c({16, 16}, dnnl::memory::data_type::f32,
                                 dnnl::memory::dims{16, 1});
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(d, d, c), Ctx().engine);
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return native;
}

}  // namespace

absl::string_view Bf16GemmPath() {
  return NativeBf16Matmul() && !ForceWidening().load() ? "native" : "widened";
}

void ForceBf16WideningForTesting(bool widen) { ForceWidening().store(widen); }

absl::Status Gemm(const GemmDesc& g0) {
  if (absl::Status s = Check(g0); !s.ok()) return s;
  if (g0.batch > 1) {
    for (int64_t i = 0; i < g0.batch; ++i) {
      if (absl::Status s = Gemm(BatchItem(g0, i)); !s.ok()) return s;
    }
    return absl::OkStatus();
  }
  GemmDesc g = g0;
  thread_local std::vector<uint16_t> scratch_a, scratch_b;
  if (g.a.dtype != g.b.dtype) {
    if (g.a.dtype == DType::kFp32) g.a = ToBf16(g.a, g.m, g.k, scratch_a);
    if (g.b.dtype == DType::kFp32) g.b = ToBf16(g.b, g.k, g.n, scratch_b);
  }
  // Without BF16 matmul in oneDNN, BF16 operands are widened exactly to FP32:
  // the same products (each BF16 x BF16 product is exact in FP32), at the
  // FP32 rate.
  thread_local std::vector<float> wide_a, wide_b;
  if (g.a.dtype == DType::kBf16 && Bf16GemmPath() == "widened") {
    g.a = ToFp32(g.a, g.m, g.k, wide_a);
    g.b = ToFp32(g.b, g.k, g.n, wide_b);
  }
  Context& ctx = Ctx();
  const Key key{g.m, g.n, g.k, static_cast<int>(g.a.dtype), g.a.ld, g.a.trans,
                g.b.ld, g.b.trans, g.ldc, g.accumulate};
  const dnnl::memory::desc ad = Desc(g.a, g.m, g.k);
  const dnnl::memory::desc bd = Desc(g.b, g.k, g.n);
  const dnnl::memory::desc cd({g.m, g.n}, dnnl::memory::data_type::f32,
                              dnnl::memory::dims{g.ldc, 1});
  dnnl::matmul prim;
  {
    auto it = ThreadCache().find(key);
    if (it != ThreadCache().end()) prim = it->second;
  }
  try {
    if (!prim) {
      dnnl::primitive_attr attr;
      if (g.accumulate) {
        dnnl::post_ops ops;
        ops.append_sum(1.0f);
        attr.set_post_ops(ops);
      }
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(ad, bd, cd), attr,
                                      ctx.engine);
      prim = dnnl::matmul(pd);
      ThreadCache().emplace(key, prim);
    }
    ScopedSerialIf serial(!ParallelWorth(g.m * g.n * g.k));
    thread_local dnnl::stream stream(Ctx().engine);
    dnnl::memory am(ad, ctx.engine, const_cast<void*>(g.a.data));
    dnnl::memory bm(bd, ctx.engine, const_cast<void*>(g.b.data));
    dnnl::memory cm(cd, ctx.engine, g.c);
    prim.execute(stream, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm},
                          {DNNL_ARG_DST, cm}});
    stream.wait();
  } catch (const dnnl::error& e) {
    return absl::InternalError(absl::StrCat("gemm: oneDNN failed: ", e.what()));
  }
  if (g.bias != nullptr || g.gelu) {
#pragma omp parallel for schedule(static) if (ParallelWorth(g.m * g.n))
    for (int64_t i = 0; i < g.m; ++i) {
      float* row = g.c + i * g.ldc;
      for (int64_t j = 0; j < g.n; ++j) row[j] = kernels::GemmEpilogue(g, row[j], j);
    }
  }
  return absl::OkStatus();
}

absl::Status GemmReference(const GemmDesc& g) {
  if (absl::Status s = Check(g); !s.ok()) return s;
  if (g.batch > 1) {
    for (int64_t i = 0; i < g.batch; ++i) {
      if (absl::Status s = GemmReference(BatchItem(g, i)); !s.ok()) return s;
    }
    return absl::OkStatus();
  }
  const bool mixed = g.a.dtype != g.b.dtype;
  auto load = [&](const MatRef& x, int64_t r, int64_t c) -> double {
    const int64_t idx = x.trans ? c * x.ld + r : r * x.ld + c;
    if (x.dtype == DType::kBf16) {
      return Bf16ToFloat(static_cast<const uint16_t*>(x.data)[idx]);
    }
    const float v = static_cast<const float*>(x.data)[idx];
    return mixed ? Bf16ToFloat(FloatToBf16(v)) : v;
  };
  for (int64_t i = 0; i < g.m; ++i) {
    for (int64_t j = 0; j < g.n; ++j) {
      double acc = 0;
      for (int64_t p = 0; p < g.k; ++p) acc += load(g.a, i, p) * load(g.b, p, j);
      float& out = g.c[i * g.ldc + j];
      out = kernels::GemmEpilogue(
          g, g.accumulate ? out + static_cast<float>(acc) : static_cast<float>(acc), j);
    }
  }
  return absl::OkStatus();
}

}  // namespace zeroshard::kernels::cpu
