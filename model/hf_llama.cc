#include "model/hf_llama.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/safetensors.h"
#include "common/status_macros.h"
#include "model/llama_manifest.h"

namespace zeroshard {
namespace {

constexpr char kLlamaHead[] = "lm_head.weight";

absl::Status LlamaBad(absl::string_view source, absl::string_view name, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(source, ": tensor '", name, "': ", what));
}

std::string LlamaShapeText(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// What each of a file's entries is: layout tensor t (>= 0), a skipped
// buffer (-1) or the tied head (-2).
absl::StatusOr<std::vector<int>> MatchLlamaFile(const SafetensorsReader& reader,
                                           const FlatLayout& layout) {
  const std::vector<SafetensorsEntry>& entries = reader.index().tensors;
  std::vector<int> out(entries.size(), -1);
  std::vector<bool> found(layout.tensors().size(), false);
  const bool tied = !layout.FindTensor(kLlamaHead).ok();
  for (size_t e = 0; e < entries.size(); ++e) {
    const SafetensorsEntry& entry = entries[e];
    if (absl::EndsWith(entry.name, ".rotary_emb.inv_freq")) continue;
    absl::StatusOr<int> t = layout.FindTensor(entry.name);
    if (!t.ok() && tied && entry.name == kLlamaHead) {
      out[e] = -2;
    } else if (!t.ok()) {
      return LlamaBad(reader.path(), entry.name, "is not a tensor of this Llama layout");
    } else {
      out[e] = *t;
      found[*t] = true;
    }
    const TensorInfo& want = layout.tensors()[out[e] >= 0 ? out[e] : 0];
    if (entry.shape != want.shape) {
      return LlamaBad(reader.path(), entry.name,
                 absl::StrCat("has shape ", LlamaShapeText(entry.shape), ", the layout's is ",
                              LlamaShapeText(want.shape)));
    }
    const SafetensorsDType d = entry.dtype;
    if (d != SafetensorsDType::kF32 && d != SafetensorsDType::kBF16 &&
        d != SafetensorsDType::kF16) {
      return LlamaBad(reader.path(), entry.name,
                 absl::StrCat("has dtype ", SafetensorsDTypeName(d),
                              "; weights must be F32, BF16 or F16"));
    }
  }
  for (size_t t = 0; t < found.size(); ++t) {
    if (!found[t]) return LlamaBad(reader.path(), layout.tensors()[t].name, "is missing");
  }
  return out;
}

}  // namespace

absl::StatusOr<ModelShape> LlamaShapeOfLayout(const FlatLayout& layout, int heads) {
  const ModelManifest& m = layout.manifest();
  if (m.units.size() < 3 || m.units[0].tensors.size() != 1 ||
      m.units[1].tensors.size() != 9 || heads <= 0) {
    return absl::InvalidArgumentError("the layout is not a Llama manifest");
  }
  ModelShape s;
  s.arch = "llama";
  s.layers = static_cast<int>(m.units.size()) - 2;
  s.heads = heads;
  s.vocab = static_cast<int>(m.units[0].tensors[0].shape[0]);
  s.width = static_cast<int>(m.units[0].tensors[0].shape[1]);
  const int64_t head_dim = s.width / heads;
  if (head_dim <= 0 || s.width % heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the layout's width ", s.width, " is not a multiple of heads ", heads));
  }
  s.kv_heads = static_cast<int>(m.units[1].tensors[2].shape[0] / head_dim);
  s.mlp_width = static_cast<int>(m.units[1].tensors[6].shape[0]);
  s.tie_embeddings = m.units.back().tensors.size() == 1;
  ASSIGN_OR_RETURN(ModelManifest want, MakeLlamaManifest(s, m.partition_count));
  if (std::optional<size_t> u = FirstDifferingUnit(m, want)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the layout is not the Llama manifest of ", heads, " heads (unit '",
        *u < m.units.size() ? m.units[*u].name : std::string("(missing)"), "')"));
  }
  return s;
}

absl::Status WriteHfLlamaSafetensors(const std::string& path, const FlatLayout& layout,
                                     absl::Span<const float> flat,
                                     std::map<std::string, std::string> metadata) {
  if (flat.size() != layout.total_elems()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "weights have ", flat.size(), " values, the layout ", layout.total_elems()));
  }
  std::vector<SafetensorsTensorView> views;
  for (const TensorInfo& t : layout.tensors()) {
    views.push_back({t.name, t.shape, flat.subspan(t.offset, t.numel)});
  }
  metadata.emplace("format", "pt");
  return WriteSafetensors(path, views, metadata);
}

absl::Status CheckHfLlamaSafetensors(const std::string& path, const FlatLayout& layout) {
  ASSIGN_OR_RETURN(SafetensorsReader reader, SafetensorsReader::Open(path));
  return MatchLlamaFile(reader, layout).status();
}

absl::StatusOr<std::vector<float>> ReadHfLlamaSafetensors(const std::string& path,
                                                          const FlatLayout& layout) {
  ASSIGN_OR_RETURN(SafetensorsReader reader, SafetensorsReader::Open(path));
  ASSIGN_OR_RETURN(std::vector<int> matches, MatchLlamaFile(reader, layout));
  const std::vector<SafetensorsEntry>& entries = reader.index().tensors;
  std::vector<float> flat(layout.total_elems(), 0.0f);
  for (size_t e = 0; e < entries.size(); ++e) {
    if (matches[e] < 0) continue;
    const TensorInfo& t = layout.tensors()[matches[e]];
    RETURN_IF_ERROR(reader.ReadFp32(entries[e], absl::MakeSpan(flat.data() + t.offset, t.numel)));
  }
  for (size_t e = 0; e < entries.size(); ++e) {
    if (matches[e] != -2) continue;  // a tied head must be the embedding
    std::vector<float> head(entries[e].numel);
    RETURN_IF_ERROR(reader.ReadFp32(entries[e], absl::MakeSpan(head)));
    const TensorInfo& embed = layout.tensors()[0];
    if (!std::equal(head.begin(), head.end(), flat.begin() + embed.offset)) {
      return LlamaBad(path, kLlamaHead, "differs from model.embed_tokens.weight, and the "
                              "embeddings are tied (zeroshard.model.tie_embeddings)");
    }
  }
  return flat;
}

}  // namespace zeroshard
