// Internal to the optimizer: the per-ISA kernels behind AdamUpdate, exposed so
// that tests can call each one directly against AdamUpdateReference.
//
// Each kernel updates a whole slice on the calling thread, with no threading
// and no validation. A kernel is listed by AvailableAdamKernels() only when it
// was compiled in (the compiler knew the ISA flags) and the running CPU
// supports it.
//
//   for (const AdamKernel& k : AvailableAdamKernels())
//     k.fn(step, GradView::Fp32(g), slice);
#ifndef ZEROSHARD_OPTIM_OPTIMIZER_KERNELS_H_
#define ZEROSHARD_OPTIM_OPTIMIZER_KERNELS_H_

#include <vector>

#include "absl/strings/string_view.h"
#include "optim/optimizer.h"

namespace zeroshard {

using AdamKernelFn = void (*)(const AdamStep& step, GradView grad,
                              const AdamSlice& slice);

struct AdamKernel {
  absl::string_view name;  // "avx512", "avx2" or "scalar"
  AdamKernelFn fn;
};

// Compiled in optimizer_avx512.cc (-mavx512f -mavx512bw -mavx512vl) and
// optimizer_avx2.cc (-mavx2 -mfma); call only when the CPU supports them.
void AdamUpdateAvx512(const AdamStep& step, GradView grad,
                      const AdamSlice& slice);
void AdamUpdateAvx2(const AdamStep& step, GradView grad,
                    const AdamSlice& slice);

// The kernels usable on this machine, fastest first; the scalar reference is
// always last.
std::vector<AdamKernel> AvailableAdamKernels();

// The kernel AdamUpdate uses: the first available one, unless
// ZEROSHARD_OPTIMIZER_KERNEL names another available one.
const AdamKernel& SelectedAdamKernel();

}  // namespace zeroshard

#endif  // ZEROSHARD_OPTIM_OPTIMIZER_KERNELS_H_
