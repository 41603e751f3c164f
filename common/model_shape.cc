#include "common/model_shape.h"

#include "absl/strings/str_cat.h"

namespace zeroshard {

absl::Status ValidateModelShape(const ModelShape& s) {
  bool name_ok = !s.arch.empty() && s.arch.size() <= 64;
  for (char ch : s.arch) {
    name_ok = name_ok && ((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
                          ch == '-' || ch == '_');
  }
  if (!name_ok) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model arch '", s.arch,
        "' is not a name (1-64 of a-z, 0-9, '-', '_')"));
  }
  if (s.layers <= 0 || s.heads <= 0 || s.width <= 0 || s.vocab <= 0 ||
      s.context <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model shape must be positive: layers=", s.layers, " heads=", s.heads,
        " width=", s.width, " vocab=", s.vocab, " context=", s.context));
  }
  if (s.width % s.heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model width (", s.width, ") must be divisible by heads (", s.heads,
        ")"));
  }
  if (s.layers > 4096 || s.width > (1 << 16) || s.vocab > (1 << 24) ||
      s.context > (1 << 20)) {
    return absl::InvalidArgumentError("model shape is unreasonably large");
  }
  return absl::OkStatus();
}

std::string FirstLlamaKeySet(const ModelShape& s) {
  const ModelShape d;
  if (s.kv_heads != d.kv_heads) return "kv_heads";
  if (s.mlp_width != d.mlp_width) return "mlp_width";
  if (s.rope_theta != d.rope_theta) return "rope_theta";
  if (s.norm_eps != d.norm_eps) return "norm_eps";
  if (s.tie_embeddings != d.tie_embeddings) return "tie_embeddings";
  return "";
}

}  // namespace zeroshard
