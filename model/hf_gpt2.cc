#include "model/hf_gpt2.h"

#include <cstring>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "model/gpt_manifest.h"
#include "common/status_macros.h"

namespace zeroshard {
namespace {

constexpr absl::string_view kPrefix = "transformer.";
constexpr absl::string_view kHead = "lm_head.weight";

std::string ShapeText(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// What one input entry is.
enum class Role { kParam, kMaskBuffer, kTiedHead };
struct Match {
  Role role = Role::kParam;
  int tensor = -1;  // layout tensor (kParam), wte (kTiedHead)
};

// An input entry: its name and shape as found.
struct Entry {
  absl::string_view name;
  const std::vector<int64_t>* shape;
};

// "h.<i>.attn.bias" / "h.<i>.attn.masked_bias" with i < layers: the causal
// mask buffers of HF's GPT2Attention, which are not parameters.
bool IsMaskBuffer(absl::string_view name, int layers) {
  if (!absl::ConsumePrefix(&name, "h.")) return false;
  const size_t dot = name.find('.');
  if (dot == absl::string_view::npos || dot == 0) return false;
  const absl::string_view index = name.substr(0, dot);
  int i = 0;
  for (char c : index) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return false;
  }
  if (!absl::SimpleAtoi(index, &i) || i >= layers) return false;
  const absl::string_view rest = name.substr(dot + 1);
  return rest == "attn.bias" || rest == "attn.masked_bias";
}

absl::Status Bad(absl::string_view source, absl::string_view name,
                 absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat(source, ": tensor '", name, "': ", what));
}

// Assigns every entry a role; refuses unknown, repeated and mis-shaped
// entries and reports missing parameters.
absl::StatusOr<std::vector<Match>> MatchEntries(const FlatLayout& layout,
                                                absl::Span<const Entry> entries,
                                                absl::string_view source) {
  RETURN_IF_ERROR(CheckGpt2Layout(layout));
  const std::vector<TensorInfo>& tensors = layout.tensors();
  absl::flat_hash_map<absl::string_view, int> by_name;
  for (size_t i = 0; i < tensors.size(); ++i) {
    by_name[tensors[i].name] = static_cast<int>(i);
  }
  const int layers = static_cast<int>(layout.units().size()) - 2;
  const int wte = by_name.at("wte.weight");
  std::vector<int> found_as(tensors.size(), -1);  // entry index per tensor
  absl::flat_hash_map<std::string, size_t> seen;  // name without prefix
  std::vector<Match> out;
  out.reserve(entries.size());
  for (size_t e = 0; e < entries.size(); ++e) {
    absl::string_view name = entries[e].name;
    absl::ConsumePrefix(&name, kPrefix);
    if (auto [it, fresh] = seen.emplace(std::string(name), e); !fresh) {
      return Bad(source, entries[e].name,
                 absl::StrCat("given twice (also as '",
                              entries[it->second].name, "')"));
    }
    const std::vector<int64_t>& shape = *entries[e].shape;
    Match m;
    if (IsMaskBuffer(name, layers)) {
      m.role = Role::kMaskBuffer;
      out.push_back(m);
      continue;
    }
    if (name == kHead) {
      if (shape != tensors[wte].shape) {
        return Bad(source, entries[e].name,
                   absl::StrCat("has shape ", ShapeText(shape),
                                "; the head is tied to wte.weight ",
                                ShapeText(tensors[wte].shape)));
      }
      m.role = Role::kTiedHead;
      m.tensor = wte;
      out.push_back(m);
      continue;
    }
    auto it = by_name.find(name);
    if (it == by_name.end()) {
      return Bad(source, entries[e].name,
                 "is not a parameter of this GPT-2 model (its layout has " +
                     absl::StrCat(layers, " blocks)"));
    }
    const TensorInfo& t = tensors[it->second];
    if (shape != t.shape) {
      std::string hint;
      if (shape.size() == 2 && t.shape.size() == 2 &&
          shape[0] == t.shape[1] && shape[1] == t.shape[0]) {
        hint = " (transposed? HF GPT-2 stores Conv1D weights as [in, out], "
               "as zeroshard does)";
      }
      return Bad(source, entries[e].name,
                 absl::StrCat("has shape ", ShapeText(shape),
                              "; the model's is ", ShapeText(t.shape), hint));
    }
    m.tensor = it->second;
    found_as[m.tensor] = static_cast<int>(e);
    out.push_back(m);
  }
  std::vector<std::string> missing;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (found_as[i] < 0) missing.push_back(tensors[i].name);
  }
  if (!missing.empty()) {
    const size_t shown = std::min<size_t>(missing.size(), 5);
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": missing tensor '", missing[0], "'",
        missing.size() > 1
            ? absl::StrCat(" (", missing.size(), " missing: ",
                           absl::StrJoin(missing.begin(),
                                         missing.begin() + shown, ", "),
                           missing.size() > shown ? ", ..." : "", ")")
            : ""));
  }
  return out;
}

absl::Status CheckTiedHead(const FlatLayout& layout, absl::string_view source,
                           absl::Span<const float> flat,
                           absl::Span<const float> head) {
  const TensorInfo& wte = layout.tensors()[*layout.FindTensor("wte.weight")];
  if (head.size() != wte.numel ||
      std::memcmp(head.data(), flat.data() + wte.offset,
                  wte.numel * sizeof(float)) != 0) {
    return Bad(source, kHead,
               "differs from wte.weight; zeroshard's GPT-2 ties the LM head "
               "to the token embedding");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckGpt2Layout(const FlatLayout& layout) {
  const ModelManifest& m = layout.manifest();
  const auto bad = [](absl::string_view what) {
    return absl::InvalidArgumentError(
        absl::StrCat("not a GPT-2 layout (model/gpt_manifest.h): ", what));
  };
  if (m.units.size() < 3 || m.units[0].tensors.size() != 2 ||
      m.units[0].tensors[0].shape.size() != 2 ||
      m.units[0].tensors[1].shape.size() != 2) {
    return bad("it does not start with an embedding unit of wte and wpe");
  }
  for (const TensorSpec& t : m.units[0].tensors) {
    for (int64_t d : t.shape) {
      if (d <= 0 || d > (int64_t{1} << 30)) {
        return bad(absl::StrCat("tensor '", t.name, "' has shape ",
                                ShapeText(t.shape)));
      }
    }
  }
  GptShape shape;
  shape.layers = static_cast<int>(m.units.size()) - 2;
  shape.heads = 1;  // shapes do not depend on it
  shape.vocab = static_cast<int>(m.units[0].tensors[0].shape[0]);
  shape.width = static_cast<int>(m.units[0].tensors[0].shape[1]);
  shape.context = static_cast<int>(m.units[0].tensors[1].shape[0]);
  absl::StatusOr<ModelManifest> want =
      MakeGptManifest(shape, m.partition_count);
  if (!want.ok()) return bad(want.status().message());
  for (size_t u = 0; u < m.units.size(); ++u) {
    const UnitSpec& a = m.units[u];
    const UnitSpec& b = want->units[u];
    if (a.name != b.name || a.tensors.size() != b.tensors.size()) {
      return bad(absl::StrCat("unit ", u, " is '", a.name, "', want '",
                              b.name, "'"));
    }
    for (size_t t = 0; t < a.tensors.size(); ++t) {
      if (a.tensors[t].name != b.tensors[t].name ||
          a.tensors[t].shape != b.tensors[t].shape) {
        return bad(absl::StrCat("tensor '", a.tensors[t].name, "' ",
                                ShapeText(a.tensors[t].shape), " where '",
                                b.tensors[t].name, "' ",
                                ShapeText(b.tensors[t].shape), " belongs"));
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<ModelShape> Gpt2ShapeOfLayout(const FlatLayout& layout,
                                             int heads) {
  RETURN_IF_ERROR(CheckGpt2Layout(layout));
  const ModelManifest& m = layout.manifest();
  ModelShape s;
  s.layers = static_cast<int>(m.units.size()) - 2;
  s.heads = heads;
  s.vocab = static_cast<int>(m.units[0].tensors[0].shape[0]);
  s.width = static_cast<int>(m.units[0].tensors[0].shape[1]);
  s.context = static_cast<int>(m.units[0].tensors[1].shape[0]);
  return s;
}

absl::StatusOr<std::vector<SafetensorsTensorView>> HfGpt2TensorsFromFlat(
    const FlatLayout& layout, absl::Span<const float> flat) {
  RETURN_IF_ERROR(CheckGpt2Layout(layout));
  if (flat.size() != layout.total_elems()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "flat weights have ", flat.size(), " elements; the layout has ",
        layout.total_elems()));
  }
  std::vector<SafetensorsTensorView> out;
  out.reserve(layout.tensors().size());
  for (const TensorInfo& t : layout.tensors()) {
    // Same name, same shape, same row-major order: see the header.
    out.push_back({t.name, t.shape, flat.subspan(t.offset, t.numel)});
  }
  return out;
}

absl::StatusOr<std::vector<float>> FlatFromHfGpt2Tensors(
    const FlatLayout& layout, absl::Span<const SafetensorsTensor> tensors,
    absl::string_view source) {
  std::vector<Entry> entries;
  entries.reserve(tensors.size());
  for (const SafetensorsTensor& t : tensors) {
    uint64_t numel = 1;
    for (int64_t d : t.shape) {
      if (d < 0 || __builtin_mul_overflow(numel, static_cast<uint64_t>(d),
                                          &numel)) {
        return Bad(source, t.name,
                   absl::StrCat("has an invalid shape ", ShapeText(t.shape)));
      }
    }
    if (numel != t.data.size()) {
      return Bad(source, t.name,
                 absl::StrCat("has shape ", ShapeText(t.shape), " and ",
                              t.data.size(), " values"));
    }
    entries.push_back({t.name, &t.shape});
  }
  ASSIGN_OR_RETURN(std::vector<Match> matches,
                   MatchEntries(layout, entries, source));
  std::vector<float> flat(layout.total_elems(), 0.0f);
  for (size_t e = 0; e < tensors.size(); ++e) {
    if (matches[e].role != Role::kParam) continue;
    const TensorInfo& t = layout.tensors()[matches[e].tensor];
    std::memcpy(flat.data() + t.offset, tensors[e].data.data(),
                t.numel * sizeof(float));
  }
  for (size_t e = 0; e < tensors.size(); ++e) {
    if (matches[e].role == Role::kTiedHead) {
      RETURN_IF_ERROR(CheckTiedHead(layout, source, flat, tensors[e].data));
    }
  }
  return flat;
}

absl::Status WriteHfSafetensors(const std::string& path,
                                const FlatLayout& layout,
                                absl::Span<const float> flat,
                                std::map<std::string, std::string> metadata) {
  ASSIGN_OR_RETURN(std::vector<SafetensorsTensorView> views,
                   HfGpt2TensorsFromFlat(layout, flat));
  metadata.emplace("format", "pt");
  return WriteSafetensors(path, views, metadata);
}

namespace {

// Matches a file's index; the dtype of every tensor that is read must
// widen to FP32.
absl::StatusOr<std::vector<Match>> MatchFile(const SafetensorsReader& reader,
                                             const FlatLayout& layout) {
  const std::vector<SafetensorsEntry>& tensors = reader.index().tensors;
  std::vector<Entry> entries;
  entries.reserve(tensors.size());
  for (const SafetensorsEntry& e : tensors) entries.push_back({e.name, &e.shape});
  ASSIGN_OR_RETURN(std::vector<Match> matches,
                   MatchEntries(layout, entries, reader.path()));
  for (size_t e = 0; e < tensors.size(); ++e) {
    const SafetensorsDType d = tensors[e].dtype;
    if (matches[e].role != Role::kMaskBuffer &&
        d != SafetensorsDType::kF32 && d != SafetensorsDType::kBF16 &&
        d != SafetensorsDType::kF16) {
      return Bad(reader.path(), tensors[e].name,
                 absl::StrCat("has dtype ", SafetensorsDTypeName(d),
                              "; weights must be F32, BF16 or F16"));
    }
  }
  return matches;
}

}  // namespace

absl::Status CheckHfSafetensors(const std::string& path,
                                const FlatLayout& layout) {
  ASSIGN_OR_RETURN(SafetensorsReader reader, SafetensorsReader::Open(path));
  return MatchFile(reader, layout).status();
}

absl::StatusOr<std::vector<float>> ReadHfSafetensors(const std::string& path,
                                                     const FlatLayout& layout) {
  ASSIGN_OR_RETURN(SafetensorsReader reader, SafetensorsReader::Open(path));
  ASSIGN_OR_RETURN(std::vector<Match> matches, MatchFile(reader, layout));
  const std::vector<SafetensorsEntry>& entries = reader.index().tensors;
  std::vector<float> flat(layout.total_elems(), 0.0f);
  for (size_t e = 0; e < entries.size(); ++e) {
    if (matches[e].role != Role::kParam) continue;
    const TensorInfo& t = layout.tensors()[matches[e].tensor];
    RETURN_IF_ERROR(reader.ReadFp32(
        entries[e], absl::MakeSpan(flat.data() + t.offset, t.numel)));
  }
  for (size_t e = 0; e < entries.size(); ++e) {
    if (matches[e].role != Role::kTiedHead) continue;
    std::vector<float> head(entries[e].numel);
    RETURN_IF_ERROR(reader.ReadFp32(entries[e], absl::MakeSpan(head)));
    RETURN_IF_ERROR(CheckTiedHead(layout, path, flat, head));
  }
  return flat;
}

}  // namespace zeroshard
