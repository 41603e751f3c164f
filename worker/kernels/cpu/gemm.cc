#include "worker/kernels/cpu/gemm.h"

#include <map>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "oneapi/dnnl/dnnl.hpp"
#include "worker/kernels/cpu/bf16_convert.h"
#include "worker/kernels/cpu/threading.h"

namespace zeroshard::kernels::cpu {
namespace {

struct Stored {
  int64_t rows, cols;  // shape of the matrix as stored
};

Stored StoredShape(const MatRef& x, int64_t logical_rows, int64_t logical_cols) {
  return x.trans ? Stored{logical_cols, logical_rows}
                 : Stored{logical_rows, logical_cols};
}

absl::Status CheckOperand(const char* name, const MatRef& x, int64_t rows,
                          int64_t cols) {
  if (x.data == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("gemm: operand ", name, " is null"));
  }
  if (x.dtype != DType::kFp32 && x.dtype != DType::kBf16) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gemm: operand ", name, " has dtype ", DTypeName(x.dtype),
        "; only fp32 and bf16 are supported"));
  }
  const Stored s = StoredShape(x, rows, cols);
  if (x.ld < s.cols) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gemm: operand ", name, " leading dimension ", x.ld, " < ", s.cols));
  }
  return absl::OkStatus();
}

absl::Status Check(const GemmDesc& g) {
  if (g.m <= 0 || g.n <= 0 || g.k <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("gemm: sizes must be positive: m=", g.m, " n=", g.n, " k=", g.k));
  }
  if (g.c == nullptr || g.ldc < g.n) {
    return absl::InvalidArgumentError(
        absl::StrCat("gemm: bad output (null or ldc ", g.ldc, " < n ", g.n, ")"));
  }
  if (absl::Status s = CheckOperand("A", g.a, g.m, g.k); !s.ok()) return s;
  return CheckOperand("B", g.b, g.k, g.n);
}

// Copies an FP32 operand to dense BF16 (keeping its stored orientation).
MatRef ToBf16(const MatRef& x, int64_t rows, int64_t cols,
              std::vector<uint16_t>& scratch) {
  const Stored s = StoredShape(x, rows, cols);
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
// process showed (tests/worker/engine_parity_test.cc).
std::map<Key, dnnl::matmul>& ThreadCache() {
  thread_local std::map<Key, dnnl::matmul> cache;
  return cache;
}

Context& Ctx() {
  static Context* ctx = new Context();
  return *ctx;
}

}  // namespace

absl::Status Gemm(const GemmDesc& g0) {
  if (absl::Status s = Check(g0); !s.ok()) return s;
  GemmDesc g = g0;
  thread_local std::vector<uint16_t> scratch_a, scratch_b;
  if (g.a.dtype != g.b.dtype) {
    if (g.a.dtype == DType::kFp32) g.a = ToBf16(g.a, g.m, g.k, scratch_a);
    if (g.b.dtype == DType::kFp32) g.b = ToBf16(g.b, g.k, g.n, scratch_b);
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
  return absl::OkStatus();
}

absl::Status GemmReference(const GemmDesc& g) {
  if (absl::Status s = Check(g); !s.ok()) return s;
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
      out = g.accumulate ? out + static_cast<float>(acc) : static_cast<float>(acc);
    }
  }
  return absl::OkStatus();
}

}  // namespace zeroshard::kernels::cpu
