// zeroshard-ctl sample: text generated from the weights the servers hold
// now. The master weights are read as a consistent snapshot (the export
// path, client/snapshot_reader.h), so training may go on meanwhile; the
// model runs forward on the CPU here (model/generate.h) and the
// prompt and output go through model/sample_text.h.
//
//   zeroshard-ctl sample --servers=H:P,... --heads=4 --prompt="The "
//   zeroshard-ctl sample --servers=... --config=run.json   # heads, sample.*
//
// The servers' layout gives every dimension but the head count: --heads, or
// --config's zeroshard.model.heads (its other dimensions must match the
// servers'). Options come from the command line, else --config's
// zeroshard.sample, else SampleConfig's defaults. stdout: the prompt and its
// continuation (or, with --json, an object with the step, the ids and the
// text); stderr: one line saying what was sampled.
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/flags/flag.h"
#include "absl/strings/strip.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "tools/ctl/commands.h"
#include "client/shard_cluster.h"
#include "common/config.h"
#include "model/sample_text.h"
#include "model/generate.h"
#include "model/arch.h"

ABSL_FLAG(std::string, prompt, "",
          "sample: text, or token ids as ids:ID,ID,... (default: \"The\", or "
          "ids:0 for a vocabulary above 256 without --vocab_file)");
ABSL_FLAG(int, max_new_tokens, 48, "sample: tokens to generate");
ABSL_FLAG(double, temperature, 0.8, "sample: softmax temperature (0: greedy)");
ABSL_FLAG(int, top_k, 40, "sample: sample among the k likeliest tokens (0: all)");
ABSL_FLAG(std::string, vocab_file, "",
          "sample: a GPT-2 vocabulary (vocab.json / encoder.json); with "
          "--merges_file");
ABSL_FLAG(std::string, merges_file, "",
          "sample: the GPT-2 merges (merges.txt / vocab.bpe); with --vocab_file");

namespace zeroshard::ctl {
namespace {

int Fail(int code, const std::string& message) {
  std::fprintf(stderr, "sample: %s\n", message.c_str());
  return code;
}

}  // namespace

int RunSample(const CtlFlags& flags, const CommandLine& command_line) {
  const auto given = [&](const char* name) { return command_line.Given(name); };
  SampleConfig opt;
  std::optional<ModelShape> config_shape;
  if (!flags.config_path.empty()) {
    absl::StatusOr<ParsedConfig> parsed = LoadTrainingConfig(flags.config_path);
    if (!parsed.ok()) return Fail(2, parsed.status().ToString());
    opt = parsed->config.cluster.sample;
    config_shape = parsed->config.cluster.model;
  } else if (flags.run.has_value()) {
    // --cluster=OUT: the run's own configuration.
    opt = flags.run->cluster.sample;
    config_shape = flags.run->cluster.model;
  }
  // An explicit --prompt is used as given (an empty one is an error).
  std::optional<std::string> prompt_flag;
  if (given("prompt")) prompt_flag = absl::GetFlag(FLAGS_prompt);
  if (given("max_new_tokens")) opt.max_new_tokens = absl::GetFlag(FLAGS_max_new_tokens);
  if (given("temperature")) opt.temperature = absl::GetFlag(FLAGS_temperature);
  if (given("top_k")) opt.top_k = absl::GetFlag(FLAGS_top_k);
  if (given("seed")) opt.seed = flags.seed;
  if (given("vocab_file") || given("merges_file")) {
    opt.vocab = absl::GetFlag(FLAGS_vocab_file);
    opt.merges = absl::GetFlag(FLAGS_merges_file);
  }
  int heads = 0;
  if (given("heads")) {
    heads = flags.shape.heads;
  } else if (config_shape.has_value()) {
    heads = config_shape->heads;
  } else {
    return Fail(2, "the servers' layout does not say the model's head count: "
                   "give --heads=H or --config=FILE");
  }
  const model::GenerateOptions gen_options{.max_new_tokens = opt.max_new_tokens,
                                           .temperature = opt.temperature,
                                           .top_k = opt.top_k,
                                           .seed = opt.seed};
  if (absl::Status s = model::ValidateGenerateOptions(gen_options); !s.ok()) {
    return Fail(2, std::string(s.message()));
  }

  auto channels = ShardCluster::Connect(flags.servers, ClientOptions(flags));
  if (!channels.ok()) return Fail(2, channels.status().ToString());
  auto view = (*channels)->Discover();
  if (!view.ok()) return Fail(1, view.status().ToString());
  const FlatLayout& layout = view->layout;
  // The servers' manifest names its architecture, which reads the shape.
  absl::StatusOr<const model::ModelArch*> layout_arch =
      model::ArchOfManifest(layout.manifest());
  if (!layout_arch.ok()) return Fail(1, layout_arch.status().ToString());
  // What the tensors do not say: the config's, else the shape flags'.
  ModelShape hint = config_shape.value_or(flags.shape);
  hint.heads = heads;
  absl::StatusOr<ModelShape> read_shape = (*layout_arch)->ShapeOfLayout(layout, hint);
  if (!read_shape.ok()) return Fail(1, read_shape.status().ToString());
  const ModelShape& shape = *read_shape;
  if (config_shape.has_value()) {
    const ModelShape& c = *config_shape;
    if (c.arch != shape.arch || c.layers != shape.layers || c.width != shape.width ||
        c.vocab != shape.vocab || c.context != shape.context) {
      return Fail(2, absl::StrCat(
          "--config=", flags.config_path, " describes a ", c.arch, " model of ", c.layers,
          " layers, width ", c.width, ", vocab ", c.vocab, ", context ", c.context,
          "; the servers hold a ", shape.arch, " model of ", shape.layers, " layers, width ", shape.width,
          ", vocab ", shape.vocab, ", context ", shape.context));
    }
  }
  absl::StatusOr<const model::ModelArch*> arch = model::ArchForShape(shape);
  if (!arch.ok()) {
    return Fail(2, absl::StrCat("--heads=", heads, ": ", arch.status().message()));
  }
  // The prompt is checked before the weights are read.
  absl::StatusOr<SampleText> text = SampleText::Create(shape.vocab, opt.vocab, opt.merges);
  if (!text.ok()) return Fail(2, text.status().ToString());
  const std::string prompt =
      prompt_flag.has_value() ? *prompt_flag
                              : (opt.prompt.empty() ? text->DefaultPrompt() : opt.prompt);
  absl::StatusOr<std::vector<int32_t>> prompt_ids = text->EncodePrompt(prompt);
  if (!prompt_ids.ok()) return Fail(2, prompt_ids.status().ToString());

  const absl::Time t0 = absl::Now();
  SnapshotReadOptions read;
  read.timeout = flags.timeout;
  auto snap = (*channels)->ReadConsistentSnapshot(layout, {0, layout.total_elems()},
                                     {kMasterState}, read);
  if (!snap.ok()) return Fail(1, snap.status().ToString());
  auto gen = (*arch)->MakeGenerator(layout, shape, snap->arrays[0]);
  if (!gen.ok()) return Fail(1, gen.status().ToString());
  auto out = (*gen)->Generate(*prompt_ids, gen_options);
  if (!out.ok()) return Fail(1, out.status().ToString());
  std::vector<int32_t> all = *prompt_ids;
  all.insert(all.end(), out->begin(), out->end());
  const std::string rendered = text->Render(all);
  std::fprintf(stderr,
               "sample: step %llu, %s prompt of %zu tokens, %zu new tokens, "
               "temperature %g, top_k %d, seed %llu (%.2f s)\n",
               static_cast<unsigned long long>(snap->step), text->kind_name(),
               prompt_ids->size(), out->size(), opt.temperature, opt.top_k,
               static_cast<unsigned long long>(opt.seed),
               absl::ToDoubleSeconds(absl::Now() - t0));
  if (flags.json) {
    nlohmann::json j = {{"step", snap->step},
                        {"kind", text->kind_name()},
                        {"prompt_ids", *prompt_ids},
                        {"new_ids", *out},
                        {"text", rendered}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("%s\n", rendered.c_str());
  }
  return 0;
}

}  // namespace zeroshard::ctl
