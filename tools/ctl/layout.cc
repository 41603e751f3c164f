// zeroshard-ctl layout (offline) and init.
#include <algorithm>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "tools/ctl/commands.h"
#include "common/param_groups.h"
#include "common/status_macros.h"
#include "model/arch.h"

namespace zeroshard::ctl {
namespace {

// FP32 master + m + v and the BF16 mirror.
constexpr uint64_t kServerBytesPerElem = 14;

absl::StatusOr<FlatLayout> GptLayout(const CtlFlags& flags, uint32_t servers) {
  if (flags.run.has_value()) {
    // --cluster=OUT: the run's own layout (its model, servers and workers,
    // and the tensors its parameter groups keep whole).
    const TrainingConfig& run = *flags.run;
    ASSIGN_OR_RETURN(const model::ModelArch* arch,
                     model::ArchForShape(run.cluster.model));
    ASSIGN_OR_RETURN(ModelManifest manifest,
                     arch->Manifest(run.cluster.model, run.cluster.workers));
    MarkWholeTensors(run.param_groups, &manifest);
    return FlatLayout::Create(manifest, run.cluster.servers, run.cluster.workers);
  }
  const uint32_t workers = flags.workers > 0 ? flags.workers : 1;
  ASSIGN_OR_RETURN(const model::ModelArch* arch,
                   model::ArchForShape(flags.shape));
  auto manifest = arch->Manifest(flags.shape, workers);
  if (!manifest.ok()) return manifest.status();
  for (UnitSpec& u : manifest->units) {
    for (TensorSpec& t : u.tensors) {
      t.keep_whole = flags.keep_whole[static_cast<int>(t.param_class)];
    }
  }
  return FlatLayout::Create(*manifest, servers, workers);
}

std::string Range(const FlatRange& r) {
  return absl::StrCat("[", r.begin, ", ", r.end, ")");
}

// The largest server's share over the mean share, minus 1: 0 is a perfect
// balance, 0.05 a largest server 5 % above the mean.
double Imbalance(const FlatLayout& L) {
  uint64_t most = 0;
  for (uint32_t k = 0; k < L.num_servers(); ++k) {
    most = std::max(most, L.ServerRange(k).size());
  }
  const double mean =
      static_cast<double>(L.total_elems()) / L.num_servers();
  return mean > 0 ? most / mean - 1 : 0;
}

int WholeTensors(const FlatLayout& L) {
  int n = 0;
  for (const TensorInfo& t : L.tensors()) n += t.keep_whole ? 1 : 0;
  return n;
}

}  // namespace

int RunLayout(const CtlFlags& flags) {
  const uint32_t servers =
      flags.num_servers > 0 ? flags.num_servers
                            : std::max<size_t>(flags.servers.size(), 1);
  // --cluster=OUT: the run's own shape.
  const GptShape shape = flags.run.has_value() ? flags.run->cluster.model : flags.shape;
  auto layout = GptLayout(flags, servers);
  if (!layout.ok()) {
    std::fprintf(stderr, "layout: %s\n", layout.status().ToString().c_str());
    return 2;
  }
  const FlatLayout& L = *layout;
  if (flags.json) {
    nlohmann::json j;
    j["shape"] = {{"arch", shape.arch}, {"layers", shape.layers}, {"heads", shape.heads},
                  {"width", shape.width}, {"vocab", shape.vocab},
                  {"context", shape.context}};
    j["num_servers"] = L.num_servers();
    j["num_workers"] = L.num_workers();
    j["total_elems"] = L.total_elems();
    j["param_elems"] = L.param_elems();
    j["whole_tensors"] = WholeTensors(L);
    j["imbalance"] = Imbalance(L);
    for (const UnitInfo& u : L.units()) {
      j["units"].push_back({{"name", u.name}, {"offset", u.offset},
                            {"numel", u.numel}, {"padded", u.padded},
                            {"per_worker", u.padded / L.num_workers()}});
    }
    for (const TensorInfo& t : L.tensors()) {
      j["tensors"].push_back({{"name", t.name}, {"offset", t.offset},
                              {"numel", t.numel},
                              {"class", TensorClassName(t.param_class)},
                              {"keep_whole", t.keep_whole}});
    }
    for (uint32_t k = 0; k < L.num_servers(); ++k) {
      const FlatRange r = L.ServerRange(k);
      j["servers"].push_back({{"index", k}, {"begin", r.begin},
                              {"end", r.end}, {"elems", r.size()},
                              {"state_bytes", r.size() * kServerBytesPerElem}});
    }
    for (uint32_t w = 0; w < L.num_workers(); ++w) {
      const uint64_t elems = L.WorkerElems(w);
      j["workers"].push_back({{"index", w}, {"elems", elems}});
    }
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("%s layers=%d heads=%d width=%d vocab=%d context=%d\n",
              shape.arch.c_str(), shape.layers, shape.heads, shape.width,
              shape.vocab, shape.context);
  std::printf(
      "%llu parameters, padded flat length %llu (%.2f%% padding), "
      "%u servers, %u workers\n",
      static_cast<unsigned long long>(L.param_elems()),
      static_cast<unsigned long long>(L.total_elems()),
      100.0 * (L.total_elems() - L.param_elems()) / L.total_elems(),
      L.num_servers(), L.num_workers());
  if (WholeTensors(L) > 0) {
    std::printf("%d tensors kept whole on one server\n", WholeTensors(L));
  }
  std::printf("largest server: %.2f%% above the mean share\n\n",
              100.0 * Imbalance(L));
  std::vector<std::vector<std::string>> units = {
      {"unit", "tensors", "flat range", "numel", "padded", "per worker"}};
  for (const UnitInfo& u : L.units()) {
    units.push_back({u.name, absl::StrCat(u.tensors.size()), Range(u.range()),
                     absl::StrCat(u.numel), absl::StrCat(u.padded),
                     absl::StrCat(u.padded / L.num_workers())});
  }
  PrintTable(units);
  std::printf("\n");
  std::vector<std::vector<std::string>> srv = {
      {"server", "owned range", "elems", "state (w, m, v fp32 + bf16)",
       "units"}};
  for (uint32_t k = 0; k < L.num_servers(); ++k) {
    const FlatRange r = L.ServerRange(k);
    std::vector<std::string> names;
    for (const UnitInfo& u : L.units()) {
      if (!Intersect(r, u.range()).empty()) names.push_back(u.name);
    }
    std::string touched =
        names.size() <= 3 ? absl::StrJoin(names, ",")
                          : absl::StrCat(names.front(), " .. ", names.back(),
                                         " (", names.size(), ")");
    srv.push_back({absl::StrCat(k), Range(r), absl::StrCat(r.size()),
                   HumanBytes(r.size() * kServerBytesPerElem), touched});
  }
  PrintTable(srv);
  std::printf("\n");
  std::vector<std::vector<std::string>> wrk = {
      {"worker", "elems", "bf16 partition", "fp32 grad shard"}};
  for (uint32_t w = 0; w < L.num_workers(); ++w) {
    const uint64_t elems = L.WorkerElems(w);
    wrk.push_back({absl::StrCat(w), absl::StrCat(elems),
                   HumanBytes(elems * 2.0), HumanBytes(elems * 4.0)});
  }
  PrintTable(wrk);
  return 0;
}

int RunInit(const CtlFlags& flags) {
  auto layout = GptLayout(flags, flags.servers.size());
  if (!layout.ok()) {
    std::fprintf(stderr, "init: %s\n", layout.status().ToString().c_str());
    return 2;
  }
  auto client =
      ShardCluster::Connect(flags.servers, ClientOptions(flags), *layout);
  if (!client.ok()) {
    std::fprintf(stderr, "init: %s\n", client.status().ToString().c_str());
    return 2;
  }
  if (int rc = RefuseLiveRun(**client, flags, "init"); rc != 0) return rc;
  InitOptions opt;
  opt.optimizer = flags.optimizer;
  opt.param_groups = flags.param_groups;
  opt.seed = flags.seed;
  opt.init_std = flags.init_std;
  opt.chunk_elems = flags.chunk_elems;
  opt.num_workers = static_cast<uint32_t>(std::max(flags.workers, 0));
  opt.replicas = static_cast<uint32_t>(flags.replicas);
  auto r = (*client)->Init(opt);
  if (!r.ok()) {
    std::fprintf(stderr, "init failed: %s\n", r.status().ToString().c_str());
    return 1;
  }
  std::printf("initialized a GPT of %llu parameters (%llu flat elements) on "
              "%zu servers for %u workers\n",
              static_cast<unsigned long long>(layout->param_elems()),
              static_cast<unsigned long long>(layout->total_elems()),
              flags.servers.size(), layout->num_workers());
  for (size_t k = 0; k < r->size(); ++k) {
    const auto& resp = (*r)[k];
    std::printf("  server %zu at %s owns [%llu, %llu)%s\n", k,
                flags.servers[k].c_str(),
                static_cast<unsigned long long>(resp.owned.begin),
                static_cast<unsigned long long>(resp.owned.end),
                resp.already_initialized ? " (already initialized)" : "");
  }
  return 0;
}

}  // namespace zeroshard::ctl
