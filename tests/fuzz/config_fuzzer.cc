// The training configuration parser (common/config.h ParseTrainingConfig,
// common/config_json.cc): any text as a configuration file, with or without
// launcher overrides.
// Input: a flags byte (bit 0: override workers, bit 1: servers, bit 2:
// steps, each from the next byte), then the JSON text.
// Checked: an accepted config passes ValidateTrainingConfig and keeps
// DeepSpeed's batch rule; its canonical JSON is stable.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "common/config.h"
#include "tests/fuzz/fuzz_util.h"

namespace zeroshard::fuzz {
namespace {

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "config: %s\n", what);
  std::abort();
}

void Run(const uint8_t* data, size_t size) {
  FuzzInput in(data, size);
  const uint8_t flags = in.Byte();
  ConfigOverrides overrides;
  if (flags & 1) overrides.workers = in.Byte();
  if (flags & 2) overrides.servers = in.Byte();
  if (flags & 4) overrides.steps = in.Byte();
  const std::string text(in.Rest());
  absl::StatusOr<ParsedConfig> parsed = ParseTrainingConfig(text, overrides);
  if (!parsed.ok()) return;
  const TrainingConfig& c = parsed->config;
  if (!ValidateTrainingConfig(c).ok()) Fail("accepted an invalid config");
  if (static_cast<int64_t>(c.micro_batch_size) * c.gradient_accumulation_steps *
          c.cluster.workers !=
      c.train_batch_size) {
    Fail("accepted a config that breaks the batch rule");
  }
  if (CanonicalJson(c) != CanonicalJson(c) ||
      ConfigFingerprint(c) != ConfigFingerprint(c)) {
    Fail("canonical JSON is not stable");
  }
}

}  // namespace
}  // namespace zeroshard::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  zeroshard::fuzz::Run(data, size);
  return 0;
}
