// The subcommands of zeroshard-ctl. Each takes the parsed flags, prints to
// stdout (errors to stderr) and returns the process exit code: 0 success,
// 1 a failed operation (unreachable server, not SERVING, bad state), 2 a usage
// error.
#ifndef ZEROSHARD_TOOLS_CTL_COMMANDS_H_
#define ZEROSHARD_TOOLS_CTL_COMMANDS_H_

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "client/shard_cluster.h"
#include "model/gpt_manifest.h"
#include "common/command_line.h"
#include "common/config.h"
#include "common/optimizer_config.h"
#include "common/param_groups.h"

namespace zeroshard::ctl {

// The model shape of the shape flags (--arch, --layers, ..., and Llama's
// --kv_heads, --mlp_width, --rope_theta, --norm_eps, --tie_embeddings).
ModelShape ShapeFromFlags();

struct CtlFlags {
  std::vector<std::string> servers;
  absl::Duration timeout = absl::Seconds(30);
  // Who the tool is on the wire (--credentials, --role); null: no
  // credentials (servers started with --no_auth).
  std::shared_ptr<const ClientSecurity> security;
  // init / smoke: the run the servers are initialised for.
  std::string run_id;
  bool json = false;
  GptShape shape;
  int workers = 1;
  int num_servers = 0;  // layout: 0 means len(servers), else 1
  int replicas = 1;     // --replicas (ShardClientOptions::replicas)
  // layout: the parameter classes (TensorClass order) kept on one server.
  std::array<bool, kNumTensorClasses> keep_whole{};
  uint64_t seed = 1;
  double init_std = 0;
  uint64_t chunk_elems = 0;
  OptimizerConfig optimizer;
  ParamGroups param_groups;  // init: --param_groups
  int steps = 5;
  // config: the DeepSpeed-style file, steps override (-1: the file's) and
  // output path (empty or "-": stdout).
  std::string config_path;
  int64_t train_steps = -1;
  std::string out;
  // checkpoint / restore / list: the checkpoint directory and step (unset:
  // the servers' current one / the newest).
  std::string dir;
  std::optional<uint64_t> step;
  // export: safetensors or f32. inspect: --tensor and --state.
  std::string format = "safetensors";
  std::string tensor;
  std::string state;
  // init / restore: go on although a run pushed to the servers lately.
  bool force = false;
  // --cluster=OUT of a run that wrote its resolved configuration: what the
  // run trains (its model, servers, workers, parameter groups, sampling),
  // for the commands that would otherwise ask for it again.
  std::optional<TrainingConfig> run;
};

// Client options derived from the flags (deadlines from --timeout).
ShardClientOptions ClientOptions(const CtlFlags& flags);

// For the commands that replace the servers' state (init, restore): 0 when
// no run pushed to `cluster` within kLiveRunWindowSeconds (or --force was
// given); otherwise says which run and how to stop it, and returns 2.
int RefuseLiveRun(const ShardCluster& cluster, const CtlFlags& flags,
                  const char* command);

int RunInspect(const CtlFlags& flags);
int RunHealth(const CtlFlags& flags);
int RunLayout(const CtlFlags& flags);
int RunInit(const CtlFlags& flags);
int RunSmoke(const CtlFlags& flags);
int RunConfig(const CtlFlags& flags);
// checkpoint_commands.cc
int RunCheckpoint(const CtlFlags& flags);
int RunRestore(const CtlFlags& flags);
int RunList(const CtlFlags& flags);
// snapshot_commands.cc: a consistent copy read while training runs.
int RunExport(const CtlFlags& flags);
int RunInspectTensor(const CtlFlags& flags);
// estimate.cc: offline; reads its own flags (--servers is a count there).
int RunEstimate(const CommandLine& command_line);
// sample.cc: text generated from the servers' weights; reads its own flags
// (--prompt, --max_new_tokens, ...) and which flags were given.
int RunSample(const CtlFlags& flags, const CommandLine& command_line);

// "1.5 MiB".
std::string HumanBytes(double bytes);

// Prints rows as columns padded to their widest cell, two spaces apart.
void PrintTable(const std::vector<std::vector<std::string>>& rows);

}  // namespace zeroshard::ctl

#endif  // ZEROSHARD_TOOLS_CTL_COMMANDS_H_
