// Which x86-64 SIMD paths this CPU can run, for the run-time dispatch of the
// optimizer's kernels and the gradient scan (docs/DESIGN.md, "Optimizer
// rules"). The libraries target the baseline CPU; a SIMD path is chosen only
// when the CPU has every extension it is compiled with.
#ifndef ZEROSHARD_OPTIM_CPU_FEATURES_H_
#define ZEROSHARD_OPTIM_CPU_FEATURES_H_

namespace zeroshard {

// AVX2 with FMA (the -mavx2 -mfma kernels).
inline bool CpuHasAvx2Fma() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return false;
#endif
}

// AVX-512 F, BW and VL (the -mavx512f -mavx512bw -mavx512vl kernels).
inline bool CpuHasAvx512() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") &&
         __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl");
#else
  return false;
#endif
}

// CpuHasAvx512() and DQ (the 8-bit quantization kernels: optim/quant8.h).
inline bool CpuHasAvx512Dq() {
#if defined(__x86_64__)
  return CpuHasAvx512() && __builtin_cpu_supports("avx512dq");
#else
  return false;
#endif
}

// CpuHasAvx512Dq() and VBMI (byte permutes: the 8-bit dequantization).
inline bool CpuHasAvx512Vbmi() {
#if defined(__x86_64__)
  return CpuHasAvx512Dq() && __builtin_cpu_supports("avx512vbmi");
#else
  return false;
#endif
}

}  // namespace zeroshard

#endif  // ZEROSHARD_OPTIM_CPU_FEATURES_H_
