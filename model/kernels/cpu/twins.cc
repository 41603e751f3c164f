#include "model/kernels/cpu/twins.h"

#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "model/kernels/cpu/embedding.h"
#include "model/kernels/element_math.h"
#include "model/kernels/llama_math.h"

namespace zeroshard::kernels::cpu {
namespace {

absl::Status CheckRows(const char* op, int64_t m, int64_t c) {
  if (m <= 0 || c <= 0 || c > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": sizes must be positive (and a row at most 2^30): m=", m,
        " c=", c));
  }
  return absl::OkStatus();
}

}  // namespace

void GeluForwardTwin(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = GeluForwardElement(x[i]);
}

void GeluBackwardTwin(const float* x, const float* dy, float* dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dx[i] = GeluBackwardElement(x[i], dy[i]);
}

absl::Status LayerNormForwardTwin(const float* x, const float* gamma,
                                  const float* beta, int64_t m, int64_t c,
                                  float* y, float* mean, float* rstd) {
  if (absl::Status s = CheckRows("layernorm", m, c); !s.ok()) return s;
  const int ci = static_cast<int>(c);
  for (int64_t i = 0; i < m; ++i) {
    const float* xi = x + i * c;
    double sum = 0;
    for (int64_t j = 0; j < c; ++j) sum += xi[j];
    const float mu = LayerNormMean(static_cast<float>(sum), ci);
    double ss = 0;
    for (int64_t j = 0; j < c; ++j) {
      const float d = xi[j] - mu;
      ss += static_cast<double>(d) * d;
    }
    const float rs = LayerNormRstd(static_cast<float>(ss), ci);
    for (int64_t j = 0; j < c; ++j) {
      y[i * c + j] = LayerNormElement(xi[j], mu, rs, gamma[j], beta[j]);
    }
    mean[i] = mu;
    rstd[i] = rs;
  }
  return absl::OkStatus();
}

absl::Status LayerNormBackwardTwin(const float* dy, const float* x,
                                   const float* gamma, const float* mean,
                                   const float* rstd, int64_t m, int64_t c,
                                   float* dx, float* dgamma, float* dbeta) {
  if (absl::Status s = CheckRows("layernorm", m, c); !s.ok()) return s;
  // dgamma / dbeta: per channel, a sum over rows (double, then added once).
  std::vector<double> dg(static_cast<size_t>(c)), db(static_cast<size_t>(c));
  for (int64_t i = 0; i < m; ++i) {
    const float* dyi = dy + i * c;
    const float* xi = x + i * c;
    double s1 = 0, s2 = 0;
    for (int64_t j = 0; j < c; ++j) {
      const float xhat = (xi[j] - mean[i]) * rstd[i];
      const float dnorm = dyi[j] * gamma[j];
      s1 += dnorm;
      s2 += static_cast<double>(dnorm) * xhat;
      dg[j] += static_cast<double>(dyi[j]) * xhat;
      db[j] += dyi[j];
    }
    const float mean_dnorm = static_cast<float>(s1 / c);
    const float mean_dnorm_xhat = static_cast<float>(s2 / c);
    for (int64_t j = 0; j < c; ++j) {
      const float xhat = (xi[j] - mean[i]) * rstd[i];
      dx[i * c + j] += LayerNormBackwardElement(dyi[j], gamma[j], xhat, rstd[i],
                                                mean_dnorm, mean_dnorm_xhat);
    }
  }
  for (int64_t j = 0; j < c; ++j) {
    dgamma[j] += static_cast<float>(dg[j]);
    dbeta[j] += static_cast<float>(db[j]);
  }
  return absl::OkStatus();
}

absl::Status RmsNormForwardTwin(const float* x, const float* g, int64_t m, int64_t c,
                                float eps, float* y, float* rstd) {
  if (absl::Status s = CheckRows("rmsnorm", m, c); !s.ok()) return s;
  for (int64_t i = 0; i < m; ++i) {
    const float* xi = x + i * c;
    double ss = 0;
    for (int64_t j = 0; j < c; ++j) ss += static_cast<double>(xi[j]) * xi[j];
    const float rs = RmsNormRstd(static_cast<float>(ss), static_cast<int>(c), eps);
    for (int64_t j = 0; j < c; ++j) y[i * c + j] = RmsNormElement(xi[j], rs, g[j]);
    rstd[i] = rs;
  }
  return absl::OkStatus();
}

absl::Status RmsNormBackwardTwin(const float* dy, const float* x, const float* g,
                                 const float* rstd, int64_t m, int64_t c, float* dx,
                                 float* dg) {
  if (absl::Status s = CheckRows("rmsnorm", m, c); !s.ok()) return s;
  for (int64_t i = 0; i < m; ++i) {
    double dot = 0;
    for (int64_t j = 0; j < c; ++j) {
      dot += RmsNormDotTerm(dy[i * c + j], x[i * c + j], rstd[i], g[j]);
    }
    const float mean = static_cast<float>(dot) / static_cast<float>(c);
    for (int64_t j = 0; j < c; ++j) {
      dx[i * c + j] += RmsNormBackwardElement(dy[i * c + j], x[i * c + j], rstd[i], g[j], mean);
    }
  }
  for (int64_t j = 0; j < c; ++j) {
    float acc = 0;
    for (int64_t i = 0; i < m; ++i) acc += dy[i * c + j] * (x[i * c + j] * rstd[i]);
    dg[j] += acc;
  }
  return absl::OkStatus();
}

absl::Status SoftmaxCrossEntropyTwin(const float* logits,
                                     const int32_t* targets, int64_t m,
                                     int64_t vocab, float grad_scale,
                                     double* loss, float* dlogits) {
  if (absl::Status s = CheckRows("cross-entropy", m, vocab); !s.ok()) return s;
  if (absl::Status s = CheckTokens(targets, m, vocab, "target"); !s.ok()) {
    return s;
  }
  const float scale = grad_scale / static_cast<float>(m);
  double total = 0;
  for (int64_t i = 0; i < m; ++i) {
    const float* li = logits + i * vocab;
    float mx = li[0];
    for (int64_t v = 1; v < vocab; ++v) mx = std::fmax(mx, li[v]);
    double sum = 0;
    for (int64_t v = 0; v < vocab; ++v) sum += expf(li[v] - mx);
    const float sum_exp = static_cast<float>(sum);
    const int32_t t = targets[i];
    total += CrossEntropyRowLoss(mx, sum_exp, li[t]);
    // dlogits may alias logits: the target's logit was read above.
    for (int64_t v = 0; v < vocab; ++v) {
      dlogits[i * vocab + v] =
          CrossEntropyGradElement(li[v], mx, sum_exp, v == t, scale);
    }
  }
  *loss = total / static_cast<double>(m);
  return absl::OkStatus();
}

void GradNormTermsTwin(const float* g, int64_t n, double* sum_sq,
                       int64_t* non_finite) {
  double s = 0;
  int64_t bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    s += SquareTerm(g[i]);
    bad += IsFiniteElement(g[i]) ? 0 : 1;
  }
  *sum_sq = s;
  *non_finite = bad;
}

}  // namespace zeroshard::kernels::cpu
