#include "model/generate.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "model/kernels/cpu/cpu_kernels.h"
#include "model/kernels/cpu/threading.h"
#include "model/activation_buffer.h"
#include "model/checkpoint_policy.h"
#include "model/gpt.h"
#include "model/gpt_block.h"
#include "model/unit_weights.h"

namespace zeroshard::model {
namespace {

namespace k = kernels::cpu;

// A uniform double in [0, 1) from 53 random bits (the same on every
// platform, unlike std::uniform_real_distribution).
double Uniform(std::mt19937_64& rng) {
  return static_cast<double>(rng() >> 11) * 0x1.0p-53;
}

}  // namespace

absl::Status ValidateGenerateOptions(const GenerateOptions& o) {
  if (o.max_new_tokens < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_new_tokens must be >= 0, got ", o.max_new_tokens));
  }
  if (!std::isfinite(o.temperature) || o.temperature < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "temperature must be finite and >= 0 (0: greedy), got ", o.temperature));
  }
  if (o.top_k < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "top_k must be >= 0 (0: the whole vocabulary), got ", o.top_k));
  }
  return absl::OkStatus();
}

int32_t PickToken(absl::Span<const float> logits, const GenerateOptions& o,
                  double draw) {
  const int32_t v = static_cast<int32_t>(logits.size());
  if (o.temperature == 0) {
    return static_cast<int32_t>(
        std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  // Candidates by descending logit (ties: lower id first), the top k kept.
  std::vector<int32_t> ids(v);
  std::iota(ids.begin(), ids.end(), 0);
  const int32_t keep = (o.top_k == 0 || o.top_k > v) ? v : o.top_k;
  auto by_logit = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  std::partial_sort(ids.begin(), ids.begin() + keep, ids.end(), by_logit);
  ids.resize(keep);
  const double top = logits[ids[0]];
  std::vector<double> p(keep);
  double sum = 0;
  for (int32_t i = 0; i < keep; ++i) {
    p[i] = std::exp((logits[ids[i]] - top) / o.temperature);
    sum += p[i];
  }
  double acc = 0;
  const double target = draw * sum;
  for (int32_t i = 0; i < keep; ++i) {
    acc += p[i];
    if (target < acc) return ids[i];
  }
  return ids[keep - 1];
}

absl::StatusOr<GptGenerator> GptGenerator::Create(const FlatLayout& layout,
                                                  const GptShape& shape,
                                                  absl::Span<const float> flat) {
  // Checks the shape and that the layout is its manifest.
  RETURN_IF_ERROR(GptModel::Create(layout, shape, DType::kFp32,
                                   CheckpointPolicy{CheckpointMode::kNone})
                      .status());
  if (flat.size() != layout.total_elems()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the weights hold ", flat.size(), " values, the model's flat space has ",
        layout.total_elems()));
  }
  GptGenerator g;
  g.layout_ = std::make_shared<const FlatLayout>(layout);
  g.shape_ = shape;
  g.flat_ = flat;
  return g;
}

absl::StatusOr<std::vector<float>> GptGenerator::NextTokenLogits(
    absl::Span<const int32_t> context) const {
  const int64_t T = static_cast<int64_t>(context.size());
  const int64_t C = shape_.width, V = shape_.vocab;
  if (T < 1 || T > shape_.context) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the context holds ", T, " tokens; the model takes 1..", shape_.context));
  }
  RETURN_IF_ERROR(k::CheckTokens(context.data(), T, V, "prompt token"));
  // One sequence of a small model is too little work per OpenMP region for
  // a second thread: on this 2-core machine under load, gpt-small's 48-token
  // sample took 1.9-10.9 s with 2 threads and 0.2 s with 1. Serial below
  // 2^26 multiply-adds per token (the parameters times the context).
  k::ScopedSerialIf serial(static_cast<int64_t>(layout_->param_elems()) * T <
                           (int64_t{1} << 26));
  auto unit = [&](int u) -> absl::StatusOr<UnitWeights> {
    const UnitInfo& info = layout_->units()[u];
    return UnitWeights::Resolve(
        *layout_, u, UnitParams{flat_.data() + info.offset, info.padded, DType::kFp32});
  };
  ASSIGN_OR_RETURN(UnitWeights emb, unit(GptModel::embedding_unit()));
  std::vector<float> x(T * C);
  RETURN_IF_ERROR(k::EmbeddingForward(context.data(), 1, T, C, V, emb.Vector(0),
                                      emb.Vector(1), x.data()));
  const BlockDims dims{1, T, C, shape_.heads, DType::kFp32};
  ActBuffer h(nullptr, DType::kFp32, T * C);
  h.FromFloat(x.data());
  for (int l = 0; l < shape_.layers; ++l) {
    ASSIGN_OR_RETURN(UnitWeights w, unit(GptModel::block_unit(l)));
    ActBuffer out;
    BlockActs acts;
    RETURN_IF_ERROR(BlockForward(dims, w, h, &out, &acts, nullptr));
    h = std::move(out);
  }
  // ln_f and the tied LM head on the last position only.
  ASSIGN_OR_RETURN(UnitWeights fin, unit(shape_.layers + 1));
  std::vector<float> ln(C), logits(V);
  float mean = 0, rstd = 0;
  RETURN_IF_ERROR(k::LayerNormForward(h.f32() + (T - 1) * C, fin.Vector(0),
                                      fin.Vector(1), 1, C, ln.data(), &mean, &rstd));
  const k::ConstTensor wte = emb.Matrix(0);
  RETURN_IF_ERROR(k::Gemm({.m = 1, .n = V, .k = C,
                           .a = {ln.data(), DType::kFp32, C, false},
                           .b = {wte.data, wte.dtype, C, true},
                           .c = logits.data(), .ldc = V}));
  return logits;
}

absl::StatusOr<std::vector<int32_t>> Generator::Generate(
    absl::Span<const int32_t> prompt, const GenerateOptions& options) const {
  const ModelShape& shape_ = shape();
  RETURN_IF_ERROR(ValidateGenerateOptions(options));
  if (prompt.empty()) {
    return absl::InvalidArgumentError("the prompt is empty: generation needs at least one token");
  }
  RETURN_IF_ERROR(k::CheckTokens(prompt.data(), prompt.size(), shape_.vocab, "prompt token"));
  std::vector<int32_t> tokens(prompt.begin(), prompt.end());
  std::vector<int32_t> out;
  std::mt19937_64 rng(options.seed);
  for (int n = 0; n < options.max_new_tokens; ++n) {
    const size_t len = std::min<size_t>(tokens.size(), shape_.context);
    ASSIGN_OR_RETURN(std::vector<float> logits,
                     NextTokenLogits(absl::MakeConstSpan(tokens).last(len)));
    const double draw = options.temperature == 0 ? 0.0 : Uniform(rng);
    const int32_t next = PickToken(logits, options, draw);
    tokens.push_back(next);
    out.push_back(next);
  }
  return out;
}

}  // namespace zeroshard::model
