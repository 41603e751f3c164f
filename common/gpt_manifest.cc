#include "common/gpt_manifest.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace zeroshard {

absl::Status ValidateGptShape(const GptShape& s) {
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

absl::StatusOr<ModelManifest> MakeGptManifest(const GptShape& s,
                                              uint32_t partition_count) {
  absl::Status valid = ValidateGptShape(s);
  if (!valid.ok()) return valid;
  const int64_t C = s.width;
  ModelManifest m;
  m.partition_count = partition_count;
  m.units.push_back(
      {"embedding", {{"wte.weight", {s.vocab, C}}, {"wpe.weight", {s.context, C}}}});
  for (int l = 0; l < s.layers; ++l) {
    const std::string p = absl::StrCat("h.", l, ".");
    m.units.push_back({absl::StrCat("block_", l),
                       {{p + "ln_1.weight", {C}},
                        {p + "ln_1.bias", {C}},
                        {p + "attn.c_attn.weight", {C, 3 * C}},
                        {p + "attn.c_attn.bias", {3 * C}},
                        {p + "attn.c_proj.weight", {C, C}},
                        {p + "attn.c_proj.bias", {C}},
                        {p + "ln_2.weight", {C}},
                        {p + "ln_2.bias", {C}},
                        {p + "mlp.c_fc.weight", {C, 4 * C}},
                        {p + "mlp.c_fc.bias", {4 * C}},
                        {p + "mlp.c_proj.weight", {4 * C, C}},
                        {p + "mlp.c_proj.bias", {C}}}});
  }
  m.units.push_back({"final", {{"ln_f.weight", {C}}, {"ln_f.bias", {C}}}});
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
