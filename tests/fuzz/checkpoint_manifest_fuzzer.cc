// The checkpoint manifest parser (common/checkpoint_manifest.h): any text
// as MANIFEST.json. Input: the text.
// Checked: a parsed manifest that validates survives a write-and-parse
// round trip unchanged (the JSON written for it parses to the same JSON).
#include <cstdio>
#include <cstdlib>
#include <string>

#include "common/checkpoint_manifest.h"

namespace zeroshard::fuzz {
namespace {

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "checkpoint_manifest: %s\n", what);
  std::abort();
}

void Run(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<CheckpointManifest> m = ParseCheckpointManifest(text);
  if (!m.ok()) return;
  if (!ValidateCheckpointManifest(*m).ok()) return;
  const std::string json = CheckpointManifestJson(*m);
  absl::StatusOr<CheckpointManifest> again = ParseCheckpointManifest(json);
  if (!again.ok()) Fail("the JSON written for a valid manifest does not parse");
  if (!ValidateCheckpointManifest(*again).ok()) {
    Fail("a round-tripped manifest is no longer valid");
  }
  if (CheckpointManifestJson(*again) != json) {
    Fail("a manifest changed in a write-and-parse round trip");
  }
}

}  // namespace
}  // namespace zeroshard::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  zeroshard::fuzz::Run(data, size);
  return 0;
}
