// zeroshard-ctl: inspect, health, layout, init and smoke-test a zeroshard
// cluster, and resolve a config for hand-started workers. See
// tools/ctl/commands.h for the subcommands.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/command_line.h"
#include "common/optimizer_rules.h"
#include "common/resolved_config.h"
#include "tools/ctl/cluster_file.h"
#include "tools/ctl/commands.h"
#include "client/shard_cluster.h"

ABSL_FLAG(std::string, servers, "", "Shard servers, HOST:PORT,... in index order");
ABSL_FLAG(std::string, cluster, "",
          "a zeroshard-train run's --out directory (or its cluster.json): "
          "its servers, and its credentials unless --credentials is given");
ABSL_FLAG(absl::Duration, timeout, absl::Seconds(30), "Deadline of each call");
ABSL_FLAG(std::string, credentials, "",
          "credentials directory (ca.pem, <role>.pem/.key, <role>.token); "
          "empty: none (servers started with --no_auth)");
ABSL_FLAG(std::string, role, "",
          "worker, ctl or admin (default: ctl for inspect and health, admin "
          "otherwise)");
ABSL_FLAG(std::string, run_id, "ctl", "init / smoke: the run id");
ABSL_FLAG(bool, json, false, "inspect/layout/sample: print JSON");
ABSL_FLAG(int, layers, 4, "model layers");
ABSL_FLAG(int, heads, 4, "attention heads");
ABSL_FLAG(int, width, 128, "model width (channels)");
ABSL_FLAG(int, vocab, 256, "vocabulary size");
ABSL_FLAG(int, context, 128, "context length");
ABSL_FLAG(std::string, arch, "gpt2",
          "model architecture (zeroshard.model.arch; known: gpt2, llama)");
ABSL_FLAG(int, kv_heads, 0, "llama: key/value heads (0: heads)");
ABSL_FLAG(int, mlp_width, 0, "llama: the MLP's width (0: 2/3 of 4 x width, "
                             "rounded up to a multiple of 256)");
ABSL_FLAG(double, rope_theta, 10000, "llama: the rotary embedding's base");
ABSL_FLAG(double, norm_eps, 1e-5, "llama: RMSNorm's epsilon");
ABSL_FLAG(bool, tie_embeddings, false, "llama: the head shares the token embedding");
ABSL_FLAG(int, workers, 0, "Workers (layout/init: partition count, default 1; "
                           "smoke: simulated workers, default the manifest's)");
ABSL_FLAG(int, num_servers, 0, "layout: servers (default: len(--servers) or 1)");
ABSL_FLAG(int, replicas, 0,
          "copies of each server's slot, 1 or 2 (zeroshard.replicas): init "
          "makes them, and every command that writes (smoke, restore, ...) "
          "must give 2 on a cluster that keeps 2; estimate: 0 is the "
          "config's, else 1");
ABSL_FLAG(std::string, keep_whole, "",
          "layout: parameter classes kept whole on one server, as a rule that "
          "needs whole matrices keeps them (matrices,embeddings,biases,norms)");
ABSL_FLAG(uint64_t, seed, 1, "init: weight seed; smoke: gradient seed; "
          "sample: sampling seed");
ABSL_FLAG(double, init_std, 0, "init: std of the normal init (0: 0.02)");
ABSL_FLAG(uint64_t, chunk_elems, 0, "init: elements per version chunk (0: server default)");
ABSL_FLAG(std::string, optimizer, "adamw",
          "init: a registered rule by name (adamw, adam, lion, adamw8bit, "
          "adam8bit, sgd, adagrad): --lr, --beta1, --beta2, --eps and "
          "--weight_decay as given, its other params at their defaults");
ABSL_FLAG(double, lr, 1e-3, "init: learning rate");
ABSL_FLAG(double, beta1, 0.9, "init: Adam beta1");
ABSL_FLAG(double, beta2, 0.999, "init: Adam beta2");
ABSL_FLAG(double, eps, 1e-8, "init: Adam eps");
ABSL_FLAG(double, weight_decay, 0.01, "init: weight decay");
ABSL_FLAG(std::string, param_groups, "default",
          "init: default (no decay on biases and norms), single (torch's one "
          "group) or a JSON object as zeroshard.param_groups");
ABSL_FLAG(int, steps, 5, "smoke: steps to push");
ABSL_FLAG(bool, force, false,
          "init, restore: go on although a run pushed to the servers within "
          "the last minute (it is live, and this ends it)");
ABSL_FLAG(std::string, config, "", "config: the DeepSpeed-style file to resolve; "
          "sample: the run's file (heads, zeroshard.sample)");
ABSL_FLAG(int64_t, train_steps, -1, "config: optimizer steps (-1: the file's)");
ABSL_FLAG(std::string, out, "-", "config: where to write (-: stdout); "
          "export: the file; inspect --tensor: a .npy of --state");
ABSL_FLAG(std::string, dir, "", "checkpoint/restore/list: checkpoint directory");
ABSL_FLAG(int64_t, step, -1, "checkpoint/restore: the step (-1: current / newest)");
ABSL_FLAG(std::string, format, "safetensors", "export: safetensors or f32");
ABSL_FLAG(std::string, tensor, "", "inspect: one tensor, e.g. h.0.attn.c_attn.weight");
ABSL_FLAG(std::string, state, "", "inspect --tensor: master or one of the "
          "optimizer's state slots (AdamW: exp_avg, exp_avg_sq; default: "
          "all of them)");

namespace zeroshard::ctl {

ModelShape ShapeFromFlags() {
  return ModelShape{.layers = absl::GetFlag(FLAGS_layers),
                    .heads = absl::GetFlag(FLAGS_heads),
                    .width = absl::GetFlag(FLAGS_width),
                    .vocab = absl::GetFlag(FLAGS_vocab),
                    .context = absl::GetFlag(FLAGS_context),
                    .arch = absl::GetFlag(FLAGS_arch),
                    .kv_heads = absl::GetFlag(FLAGS_kv_heads),
                    .mlp_width = absl::GetFlag(FLAGS_mlp_width),
                    .rope_theta = absl::GetFlag(FLAGS_rope_theta),
                    .norm_eps = absl::GetFlag(FLAGS_norm_eps),
                    .tie_embeddings = absl::GetFlag(FLAGS_tie_embeddings)};
}

}  // namespace zeroshard::ctl

namespace {

constexpr char kUsage[] =
    "zeroshard-ctl COMMAND [flags]\n"
    "  inspect  --servers=...  [--json]   state of every server, as a table\n"
    "           (--cluster=OUT in place of --servers and --credentials: a\n"
    "           zeroshard-train run's servers and tokens, any command)\n"
    "  health   --servers=...             grpc.health.v1 check; exit 1 unless "
    "all SERVING\n"
    "  layout   [--num_servers=S] [--workers=N] [shape flags] [--json]\n"
    "           [--keep_whole=matrices,...]\n"
    "  init     --servers=... [shape flags] [--workers=N] [--seed] [--lr] ... [--force]\n"
    "           [--param_groups=default|single|JSON]\n"
    "  smoke    --servers=... [--steps=K] [--workers=N]\n"
    "  config   --config=FILE [--workers=N] [--num_servers=S | --servers=...]\n"
    "           [--train_steps=K] [--out=FILE]   the resolved configuration\n"
    "           that zeroshard-worker reads\n"
    "  inspect  --servers=... --tensor=NAME [--state=S] [--out=FILE.npy]\n"
    "           one tensor of a consistent snapshot: shape, norm, min, max\n"
    "  export   --servers=... --out=FILE [--format=safetensors|f32]\n"
    "           the master weights at one step, without pausing training\n"
    "  sample   --servers=... (--heads=H | --config=FILE) [--prompt=TEXT|ids:ID,...]\n"
    "           [--max_new_tokens=N] [--temperature=T] [--top_k=K] [--seed=S]\n"
    "           [--vocab_file=vocab.json --merges_file=merges.txt] [--json]\n"
    "           text generated from the servers' weights, without pausing training\n"
    "  checkpoint --servers=... --dir=DIR [--step=S]   coordinated checkpoint\n"
    "  restore  --servers=... --dir=DIR [--step=S] [--force]\n"
    "  list     --dir=DIR                 checkpoints in DIR (offline)\n"
    "  estimate (--params=PSI | --config=FILE | shape flags) --workers=N\n"
    "           --servers=S [--stage=1|2|3] [--precision=bf16|fp16|fp32]\n"
    "           [--micro_batch=B] [--checkpointing=none|every_block|every_k]\n"
    "           [--link_gbps] [--mem_gbps] [--flops] [--device_gb=G] [--json]\n"
    "           memory per GPU under DDP/ZeRO-1/2/3, per worker and server,\n"
    "           activations, wire bytes and step time, and with --device_gb\n"
    "           whether a worker fits (offline; --servers is a count)\n"
    "shape flags: --arch --layers --heads --width --vocab --context";

}  // namespace

int main(int argc, char** argv) {
  using namespace zeroshard;
  const CommandLine cl = ParseProgramFlags(argc, argv, "zeroshard-ctl", kUsage);
  if (cl.exit_code.has_value()) return *cl.exit_code;
  const std::vector<char*>& positional = cl.positional;
  if (positional.size() != 2) {
    std::fprintf(stderr, "%s\n", kUsage);
    return 2;
  }
  const std::string command = positional[1];
  static const std::vector<std::string> kCommands = {
      "inspect", "health", "layout", "init", "smoke", "export", "sample",
      "checkpoint", "restore", "list", "config", "estimate"};
  if (std::find(kCommands.begin(), kCommands.end(), command) == kCommands.end()) {
    const std::string near = NearestName(command, kCommands);
    std::fprintf(stderr, "zeroshard-ctl: unknown command '%s'%s\n%s\n",
                 command.c_str(),
                 near.empty() ? "" : ("; did you mean '" + near + "'?").c_str(),
                 kUsage);
    return 2;
  }
  // Offline, and --servers is a count: reads its flags itself.
  if (command == "estimate") return ctl::RunEstimate(cl);
  ctl::CtlFlags f;
  std::string servers = absl::GetFlag(FLAGS_servers);
  std::string credentials = absl::GetFlag(FLAGS_credentials);
  if (const std::string cluster = absl::GetFlag(FLAGS_cluster); !cluster.empty()) {
    if (!servers.empty()) {
      std::fprintf(stderr, "give --cluster or --servers, not both\n");
      return 2;
    }
    absl::StatusOr<ctl::ClusterFile> file = ctl::ReadClusterFile(cluster);
    if (!file.ok()) {
      std::fprintf(stderr, "--cluster: %s\n", file.status().ToString().c_str());
      return 2;
    }
    servers = absl::StrJoin(file->servers, ",");
    if (credentials.empty()) credentials = file->credentials;
    if (!file->resolved_config.empty()) {
      absl::StatusOr<TrainingConfig> run = LoadResolvedConfig(file->resolved_config);
      if (!run.ok()) {
        std::fprintf(stderr, "--cluster: %s\n", run.status().ToString().c_str());
        return 2;
      }
      f.run = *std::move(run);
    }
  }
  if (!servers.empty()) {
    auto list = ParseServerList(servers);
    if (!list.ok()) {
      std::fprintf(stderr, "--servers: %s\n", list.status().ToString().c_str());
      return 2;
    }
    f.servers = *list;
  }
  f.timeout = absl::GetFlag(FLAGS_timeout);
  f.run_id = absl::GetFlag(FLAGS_run_id);
  if (const std::string& dir = credentials; !dir.empty()) {
    std::string role_name = absl::GetFlag(FLAGS_role);
    if (role_name.empty()) {
      const bool reads_only =
          command == "health" ||
          (command == "inspect" && absl::GetFlag(FLAGS_tensor).empty());
      role_name = reads_only ? "ctl" : "admin";
    }
    auto security = LoadClientCredentials(dir, role_name);
    if (!security.ok()) {
      const bool bad_role = role_name != "worker" && role_name != "ctl" &&
                            role_name != "admin";
      std::fprintf(stderr, "%s: %s\n", bad_role ? "--role" : "--credentials",
                   security.status().ToString().c_str());
      return 2;
    }
    f.security = *std::move(security);
  }
  f.json = absl::GetFlag(FLAGS_json);
  f.shape = zeroshard::ctl::ShapeFromFlags();
  f.workers = absl::GetFlag(FLAGS_workers);
  f.num_servers = absl::GetFlag(FLAGS_num_servers);
  f.replicas = std::max(1, absl::GetFlag(FLAGS_replicas));
  f.seed = absl::GetFlag(FLAGS_seed);
  f.init_std = absl::GetFlag(FLAGS_init_std);
  f.chunk_elems = absl::GetFlag(FLAGS_chunk_elems);
  f.steps = absl::GetFlag(FLAGS_steps);
  f.config_path = absl::GetFlag(FLAGS_config);
  f.train_steps = absl::GetFlag(FLAGS_train_steps);
  f.out = absl::GetFlag(FLAGS_out);
  f.dir = absl::GetFlag(FLAGS_dir);
  f.force = absl::GetFlag(FLAGS_force);
  if (absl::GetFlag(FLAGS_step) >= 0) f.step = absl::GetFlag(FLAGS_step);
  f.format = absl::GetFlag(FLAGS_format);
  f.tensor = absl::GetFlag(FLAGS_tensor);
  f.state = absl::GetFlag(FLAGS_state);
  for (absl::string_view name :
       absl::StrSplit(absl::GetFlag(FLAGS_keep_whole), ',', absl::SkipEmpty())) {
    const std::optional<TensorClass> c = TensorClassFromName(name);
    if (c.has_value()) {
      f.keep_whole[static_cast<int>(*c)] = true;
    } else {
      std::fprintf(stderr,
                   "--keep_whole: '%.*s' is not a parameter class (matrices, "
                   "embeddings, biases, norms)\n",
                   static_cast<int>(name.size()), name.data());
      return 2;
    }
  }
  const std::string opt = absl::GetFlag(FLAGS_optimizer);
  if (const RuleInfo* rule = FindRule(opt)) {
    f.optimizer.kind = rule->kind;
    if (rule->kind == OptimizerKind::kRule) {
      f.optimizer.rule = rule->name;  // its other params at their defaults
    }
  } else {
    std::fprintf(stderr, "--optimizer must be a registered rule (%s), not '%s'\n",
                 RegisteredRuleNames().c_str(), opt.c_str());
    return 2;
  }
  f.optimizer.lr = absl::GetFlag(FLAGS_lr);
  f.optimizer.beta1 = absl::GetFlag(FLAGS_beta1);
  f.optimizer.beta2 = absl::GetFlag(FLAGS_beta2);
  f.optimizer.eps = absl::GetFlag(FLAGS_eps);
  f.optimizer.weight_decay = absl::GetFlag(FLAGS_weight_decay);
  {
    std::string g = absl::GetFlag(FLAGS_param_groups);
    if (g == "default" || g == "single") g = "\"" + g + "\"";
    absl::StatusOr<ParamGroups> groups = ParseParamGroups(g);
    if (!groups.ok()) {
      std::fprintf(stderr, "--param_groups: %s\n",
                   std::string(groups.status().message()).c_str());
      return 2;
    }
    f.param_groups = *groups;
  }
  if (f.timeout <= absl::ZeroDuration()) {
    std::fprintf(stderr, "--timeout must be positive\n");
    return 2;
  }
  if (f.workers < 0 || f.num_servers < 0 || f.steps < 0) {
    std::fprintf(stderr, "--workers, --num_servers and --steps must be >= 0\n");
    return 2;
  }
  const bool needs_servers =
      command != "layout" && command != "config" && command != "list";
  if (needs_servers && f.servers.empty()) {
    std::fprintf(stderr, "%s needs --servers=HOST:PORT,... or --cluster=OUT\n",
                 command.c_str());
    return 2;
  }
  if (command == "inspect" && !f.tensor.empty()) {
    return ctl::RunInspectTensor(f);
  }
  if (command == "inspect") return ctl::RunInspect(f);
  if (command == "export") return ctl::RunExport(f);
  if (command == "sample") return ctl::RunSample(f, cl);
  if (command == "checkpoint") return ctl::RunCheckpoint(f);
  if (command == "restore") return ctl::RunRestore(f);
  if (command == "list") return ctl::RunList(f);
  if (command == "health") return ctl::RunHealth(f);
  if (command == "layout") return ctl::RunLayout(f);
  if (command == "init") return ctl::RunInit(f);
  if (command == "smoke") return ctl::RunSmoke(f);
  if (command == "config") return ctl::RunConfig(f);
  return 2;  // not reached: every name of kCommands is dispatched above
}
