#include "tools/train/run_sample.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "client/shard_cluster.h"
#include "common/atomic_file.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "model/arch.h"

namespace zeroshard {
namespace {

absl::Status AsConfigError(const absl::Status& s) {
  return absl::Status(s.code(), absl::StrCat("config key \"zeroshard.sample\": ", s.message()));
}

struct Sampled {
  uint64_t step = 0;
  std::string text;
  size_t new_tokens = 0;
};

absl::StatusOr<Sampled> Sample(const RunSamplePlan& plan,
                               const std::vector<std::string>& servers,
                               const FlatLayout& layout,
                               const ShardClientOptions& options,
                               absl::Duration timeout) {
  ASSIGN_OR_RETURN(std::unique_ptr<ShardCluster> channels,
                   ShardCluster::Connect(servers, options));
  // With replicas, a server the workers left answers with an older step (a
  // replacement restored, not yet caught up, when the run ended): its
  // slots' other copies are read.
  RETURN_IF_ERROR(channels->LeaveStaleCopies());
  SnapshotReadOptions read;
  read.timeout = timeout;
  ASSIGN_OR_RETURN(ConsistentSnapshot snap,
                   channels->ReadConsistentSnapshot(layout, {0, layout.total_elems()},
                                          {kMasterState}, read));
  ASSIGN_OR_RETURN(const model::ModelArch* arch, model::ArchForShape(plan.shape));
  ASSIGN_OR_RETURN(std::unique_ptr<model::Generator> gen,
                   arch->MakeGenerator(layout, plan.shape, snap.arrays[0]));
  ASSIGN_OR_RETURN(std::vector<int32_t> out, gen->Generate(plan.prompt_ids, plan.options));
  std::vector<int32_t> all = plan.prompt_ids;
  all.insert(all.end(), out.begin(), out.end());
  return Sampled{snap.step, plan.text.Render(all), out.size()};
}

}  // namespace

absl::StatusOr<std::optional<RunSamplePlan>> PlanRunSample(const TrainingConfig& config) {
  const SampleConfig& c = config.cluster.sample;
  if (!c.enabled) return std::optional<RunSamplePlan>();
  const GptShape& shape = config.cluster.model;
  absl::StatusOr<SampleText> text = SampleText::Create(shape.vocab, c.vocab, c.merges);
  if (!text.ok()) return AsConfigError(text.status());
  const std::string prompt = c.prompt.empty() ? text->DefaultPrompt() : c.prompt;
  absl::StatusOr<std::vector<int32_t>> ids = text->EncodePrompt(prompt);
  if (!ids.ok()) return AsConfigError(ids.status());
  const model::GenerateOptions options{.max_new_tokens = c.max_new_tokens,
                                       .temperature = c.temperature,
                                       .top_k = c.top_k,
                                       .seed = c.seed};
  if (absl::Status s = model::ValidateGenerateOptions(options); !s.ok()) {
    return AsConfigError(s);
  }
  return std::optional<RunSamplePlan>(RunSamplePlan{
      *std::move(text), prompt, *std::move(ids), options, shape});
}

void PrintRunSample(const RunSamplePlan& plan, const std::vector<std::string>& servers,
                    const FlatLayout& layout, const ShardClientOptions& options,
                    absl::Duration timeout, const std::string& out_dir, std::FILE* out) {
  const absl::Time t0 = absl::Now();
  absl::StatusOr<Sampled> s = Sample(plan, servers, layout, options, timeout);
  if (!s.ok()) {
    ZS_LOG(WARNING) << "the closing sample failed (the run itself is done): " << s.status();
    return;
  }
  const std::string path = out_dir + "/sample.txt";
  if (absl::Status w = WriteFileAtomically(path, s->text + "\n"); !w.ok()) {
    ZS_LOG(WARNING) << "cannot write " << path << ": " << w;
  }
  const model::GenerateOptions& o = plan.options;
  std::fprintf(out,
               "sample at step %llu (%s prompt \"%s\", %zu new tokens, %s, seed %llu, "
               "%.1f s; also in %s):\n%s\n",
               static_cast<unsigned long long>(s->step), plan.text.kind_name(),
               EscapeForTerminal(plan.prompt).c_str(), s->new_tokens,
               o.temperature == 0
                   ? "greedy"
                   : absl::StrFormat("temperature %g, top_k %d", o.temperature, o.top_k)
                         .c_str(),
               static_cast<unsigned long long>(o.seed),
               absl::ToDoubleSeconds(absl::Now() - t0), path.c_str(), s->text.c_str());
  std::fflush(out);
}

}  // namespace zeroshard
