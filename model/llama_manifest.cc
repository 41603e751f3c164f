#include "model/llama_manifest.h"

#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace zeroshard {

LlamaDims LlamaDimsOf(const ModelShape& s) {
  LlamaDims d;
  d.layers = s.layers;
  d.heads = s.heads;
  d.kv_heads = s.kv_heads > 0 ? s.kv_heads : s.heads;
  d.width = s.width;
  d.head_dim = s.heads > 0 ? s.width / s.heads : 0;
  if (s.mlp_width > 0) {
    d.mlp_width = s.mlp_width;
  } else {
    const int64_t hidden = 2 * 4 * static_cast<int64_t>(s.width) / 3;
    d.mlp_width = (hidden + 255) / 256 * 256;
  }
  d.vocab = s.vocab;
  d.context = s.context;
  d.rope_theta = s.rope_theta;
  d.norm_eps = s.norm_eps;
  d.tie_embeddings = s.tie_embeddings;
  return d;
}

absl::Status ValidateLlamaShape(const ModelShape& s) {
  RETURN_IF_ERROR(ValidateModelShape(s));
  if (s.arch != "llama") {
    return absl::InvalidArgumentError(absl::StrCat("model arch '", s.arch, "' is not llama"));
  }
  const LlamaDims d = LlamaDimsOf(s);
  if (s.kv_heads < 0 || d.kv_heads > d.heads || d.heads % d.kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "zeroshard.model.kv_heads (", s.kv_heads, ") must divide heads (", s.heads,
        "): each key/value head serves heads / kv_heads query heads"));
  }
  if (d.head_dim % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "zeroshard.model.width / heads (", d.head_dim,
        ") must be even: rotary embeddings turn pairs of dimensions"));
  }
  if (s.mlp_width < 0 || d.mlp_width > (int64_t{1} << 20)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "zeroshard.model.mlp_width (", s.mlp_width, ") must be in [1, 2^20]"));
  }
  if (!(s.rope_theta > 1) || !std::isfinite(s.rope_theta)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "zeroshard.model.rope_theta (", s.rope_theta, ") must be > 1"));
  }
  if (!(s.norm_eps > 0 && s.norm_eps <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "zeroshard.model.norm_eps (", s.norm_eps, ") must be in (0, 1]"));
  }
  return absl::OkStatus();
}

absl::StatusOr<ModelManifest> MakeLlamaManifest(const ModelShape& s,
                                                uint32_t partition_count) {
  RETURN_IF_ERROR(ValidateLlamaShape(s));
  const LlamaDims d = LlamaDimsOf(s);
  const int64_t C = d.width, hd = d.head_dim, F = d.mlp_width;
  const InitRule normal;
  const InitRule ones{InitRule::Kind::kOnes};
  using TC = TensorClass;
  auto matrix = [&](std::string name, int64_t out, int64_t in) {
    return TensorSpec{std::move(name), {out, in}, normal, TC::kMatrix};
  };
  auto gain = [&](std::string name) {
    return TensorSpec{std::move(name), {C}, ones, TC::kNorm};
  };
  ModelManifest m;
  m.arch = "llama";
  m.partition_count = partition_count;
  m.units.push_back(
      {"embedding", {{"model.embed_tokens.weight", {d.vocab, C}, normal, TC::kEmbedding}}});
  for (int64_t l = 0; l < d.layers; ++l) {
    const std::string p = absl::StrCat("model.layers.", l, ".");
    m.units.push_back({absl::StrCat("block_", l),
                       {gain(p + "input_layernorm.weight"),
                        matrix(p + "self_attn.q_proj.weight", d.heads * hd, C),
                        matrix(p + "self_attn.k_proj.weight", d.kv_heads * hd, C),
                        matrix(p + "self_attn.v_proj.weight", d.kv_heads * hd, C),
                        matrix(p + "self_attn.o_proj.weight", C, d.heads * hd),
                        gain(p + "post_attention_layernorm.weight"),
                        matrix(p + "mlp.gate_proj.weight", F, C),
                        matrix(p + "mlp.up_proj.weight", F, C),
                        matrix(p + "mlp.down_proj.weight", C, F)}});
  }
  UnitSpec final_unit{"final", {gain("model.norm.weight")}};
  if (!d.tie_embeddings) {
    final_unit.tensors.push_back({"lm_head.weight", {d.vocab, C}, normal, TC::kEmbedding});
  }
  m.units.push_back(std::move(final_unit));
  return m;
}

uint64_t LlamaParamCount(const ModelShape& s) {
  const LlamaDims d = LlamaDimsOf(s);
  const uint64_t C = d.width, hd = d.head_dim, F = d.mlp_width;
  const uint64_t per_block = 2 * C + C * d.heads * hd + 2 * C * d.kv_heads * hd +
                             d.heads * hd * C + 3 * C * F;
  const uint64_t embed = static_cast<uint64_t>(d.vocab) * C;
  return embed + per_block * d.layers + C + (d.tie_embeddings ? 0 : embed);
}

}  // namespace zeroshard
