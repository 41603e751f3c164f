// zeroshard-ctl config: resolves a DeepSpeed-style config file ("auto",
// worker and server counts, steps) into the resolved configuration that
// zeroshard-worker reads (common/resolved_config.h), as zeroshard-train does
// for the workers it starts. For workers started by hand or by a deployment.
#include <cstdio>
#include <string>

#include "tools/ctl/commands.h"
#include "common/atomic_file.h"
#include "common/config.h"
#include "common/resolved_config.h"

namespace zeroshard::ctl {

int RunConfig(const CtlFlags& f) {
  if (f.config_path.empty()) {
    std::fprintf(stderr, "config needs --config=FILE\n");
    return 2;
  }
  if (f.num_servers > 0 && !f.servers.empty() &&
      f.num_servers != static_cast<int>(f.servers.size())) {
    std::fprintf(stderr,
                 "config: --num_servers=%d but --servers lists %zu servers\n",
                 f.num_servers, f.servers.size());
    return 2;
  }
  ConfigOverrides overrides;
  if (f.workers > 0) overrides.workers = f.workers;
  if (f.num_servers > 0) {
    overrides.servers = f.num_servers;
  } else if (!f.servers.empty()) {
    overrides.servers = static_cast<int>(f.servers.size());
  }
  if (f.train_steps >= 0) {
    overrides.steps = static_cast<uint64_t>(f.train_steps);
  }
  absl::StatusOr<ParsedConfig> parsed =
      LoadTrainingConfig(f.config_path, overrides);
  if (!parsed.ok()) {
    std::fprintf(stderr, "%s\n", parsed.status().ToString().c_str());
    return 1;
  }
  for (const std::string& w : parsed->warnings) {
    std::fprintf(stderr, "warning: %s\n", w.c_str());
  }
  if (!f.servers.empty()) {
    parsed->config.cluster.server_addresses = f.servers;
  }
  const std::string text = ResolvedConfigJson(parsed->config);
  // What a worker will read must parse: checked before anything is written.
  if (absl::StatusOr<TrainingConfig> back = ParseResolvedConfig(text);
      !back.ok()) {
    std::fprintf(stderr, "%s\n", back.status().ToString().c_str());
    return 1;
  }
  if (f.out.empty() || f.out == "-") {
    std::fputs(text.c_str(), stdout);
    return 0;
  }
  absl::Status s = WriteFileAtomically(f.out, text);
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return 1;
  }
  std::fprintf(stderr, "wrote %s (%d workers, %d servers, %llu steps)\n",
               f.out.c_str(), parsed->config.cluster.workers,
               parsed->config.cluster.servers,
               static_cast<unsigned long long>(parsed->config.cluster.steps));
  return 0;
}

}  // namespace zeroshard::ctl
