#include "model/gpt_manifest.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace zeroshard {

absl::Status ValidateGptShape(const GptShape& s) {
  RETURN_IF_ERROR(ValidateModelShape(s));
  if (s.arch != "gpt2") {
    return absl::InvalidArgumentError(
        absl::StrCat("model arch '", s.arch, "' is not gpt2"));
  }
  if (const std::string key = FirstLlamaKeySet(s); !key.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "zeroshard.model.", key, " is Llama's (arch \"llama\"); GPT-2 has none: "
        "its heads are all key/value heads, its MLP 4 x width, its positions "
        "learned and its head tied to the token embedding"));
  }
  return absl::OkStatus();
}

absl::StatusOr<ModelManifest> MakeGptManifest(const GptShape& s,
                                              uint32_t partition_count) {
  absl::Status valid = ValidateGptShape(s);
  if (!valid.ok()) return valid;
  const int64_t C = s.width;
  // Init rules as GPT-2's: N(0, std) for the matrices and embeddings, the
  // two residual projections of each block at std / sqrt(2 * layers), zero
  // biases and unit LayerNorm gains. Classes name the parameter groups.
  const InitRule normal;
  const InitRule residual{InitRule::Kind::kNormal,
                          std::sqrt(2.0 * std::max(s.layers, 1))};
  const InitRule zeros{InitRule::Kind::kZeros};
  const InitRule ones{InitRule::Kind::kOnes};
  using TC = TensorClass;
  auto matrix = [&](std::string name, std::vector<int64_t> shape,
                    const InitRule& rule) {
    return TensorSpec{std::move(name), std::move(shape), rule, TC::kMatrix};
  };
  auto bias = [&](std::string name, int64_t n) {
    return TensorSpec{std::move(name), {n}, zeros, TC::kBias};
  };
  auto gain = [&](std::string name, int64_t n) {
    return TensorSpec{std::move(name), {n}, ones, TC::kNorm};
  };
  ModelManifest m;
  m.arch = "gpt2";
  m.partition_count = partition_count;
  m.units.push_back(
      {"embedding",
       {{"wte.weight", {s.vocab, C}, normal, TC::kEmbedding},
        {"wpe.weight", {s.context, C}, normal, TC::kEmbedding}}});
  for (int l = 0; l < s.layers; ++l) {
    const std::string p = absl::StrCat("h.", l, ".");
    m.units.push_back({absl::StrCat("block_", l),
                       {gain(p + "ln_1.weight", C),
                        bias(p + "ln_1.bias", C),
                        matrix(p + "attn.c_attn.weight", {C, 3 * C}, normal),
                        bias(p + "attn.c_attn.bias", 3 * C),
                        matrix(p + "attn.c_proj.weight", {C, C}, residual),
                        bias(p + "attn.c_proj.bias", C),
                        gain(p + "ln_2.weight", C),
                        bias(p + "ln_2.bias", C),
                        matrix(p + "mlp.c_fc.weight", {C, 4 * C}, normal),
                        bias(p + "mlp.c_fc.bias", 4 * C),
                        matrix(p + "mlp.c_proj.weight", {4 * C, C}, residual),
                        bias(p + "mlp.c_proj.bias", C)}});
  }
  m.units.push_back(
      {"final", {gain("ln_f.weight", C), bias("ln_f.bias", C)}});
  return m;
}

uint64_t GptParamCount(const GptShape& s) {
  const uint64_t C = s.width;
  const uint64_t per_block = 2 * C + C * 3 * C + 3 * C + C * C + C + 2 * C +
                             C * 4 * C + 4 * C + 4 * C * C + C;
  return static_cast<uint64_t>(s.vocab) * C + static_cast<uint64_t>(s.context) * C +
         per_block * s.layers + 2 * C;
}

}  // namespace zeroshard
