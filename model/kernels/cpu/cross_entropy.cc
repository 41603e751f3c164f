#include "model/kernels/cpu/cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "model/kernels/cpu/embedding.h"
#include "model/kernels/cpu/threading.h"

namespace zeroshard::kernels::cpu {

absl::Status SoftmaxCrossEntropy(const float* logits, const int32_t* targets,
                                 int64_t m, int64_t vocab, float grad_scale,
                                 double* loss, float* dlogits) {
  if (m <= 0 || vocab <= 0) {
    return absl::InvalidArgumentError("cross-entropy: sizes must be positive");
  }
  if (absl::Status s = CheckTokens(targets, m, vocab, "target"); !s.ok()) return s;
  std::vector<double> row_loss(static_cast<size_t>(m));
  const float g = grad_scale / static_cast<float>(m);
#pragma omp parallel for schedule(static) if (ParallelWorth(m * vocab))
  for (int64_t i = 0; i < m; ++i) {
    const float* li = logits + i * vocab;
    float* di = dlogits + i * vocab;
    float mx = li[0];
    for (int64_t v = 1; v < vocab; ++v) mx = std::max(mx, li[v]);
    double sum = 0;
    for (int64_t v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(li[v] - mx));
    const double log_z = std::log(sum) + mx;
    const int32_t tgt = targets[i];
    row_loss[i] = log_z - li[tgt];
    const float inv = static_cast<float>(1.0 / sum);
    for (int64_t v = 0; v < vocab; ++v) {
      di[v] = g * (std::exp(li[v] - mx) * inv - (v == tgt ? 1.0f : 0.0f));
    }
  }
  double total = 0;
  for (double l : row_loss) total += l;
  *loss = total / static_cast<double>(m);
  return absl::OkStatus();
}

}  // namespace zeroshard::kernels::cpu
