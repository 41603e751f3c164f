#include "model/arch.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "model/gpt2_arch.h"
#include "model/llama_arch.h"

namespace zeroshard::model {
namespace {

// Every architecture this build knows, by name. Adding one is a line here.
const std::vector<const ModelArch*>& Registry() {
  static const std::vector<const ModelArch*> archs = {&Gpt2Arch(), &LlamaArch()};
  return archs;
}

}  // namespace

absl::StatusOr<const ModelArch*> FindArch(absl::string_view name) {
  for (const ModelArch* a : Registry()) {
    if (a->name() == name) return a;
  }
  return absl::NotFoundError(absl::StrCat(
      "unknown model architecture '", name, "' (zeroshard.model.arch); known: ",
      absl::StrJoin(ArchNames(), ", ")));
}

std::vector<std::string> ArchNames() {
  std::vector<std::string> names;
  for (const ModelArch* a : Registry()) names.emplace_back(a->name());
  std::sort(names.begin(), names.end());
  return names;
}

absl::StatusOr<const ModelArch*> ArchForShape(const ModelShape& shape) {
  absl::StatusOr<const ModelArch*> arch = FindArch(shape.arch);
  if (!arch.ok()) return arch.status();
  if (absl::Status s = (*arch)->Validate(shape); !s.ok()) return s;
  return arch;
}

absl::StatusOr<const ModelArch*> ArchOfManifest(const ModelManifest& manifest) {
  if (manifest.arch.empty()) {
    return absl::NotFoundError(
        "the model manifest names no architecture (its arch is empty)");
  }
  return FindArch(manifest.arch);
}

}  // namespace zeroshard::model
