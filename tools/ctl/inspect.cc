// zeroshard-ctl inspect and health, and the shared table helpers.
#include <algorithm>
#include <thread>
#include <cstdio>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/optimizer_rules.h"
#include "tools/ctl/commands.h"
#include "client/live_run.h"
#include "client/shard_cluster.h"

namespace zeroshard::ctl {
namespace {

std::string ShortKind(const std::string& kind) {
  static const std::map<std::string, std::string> kShort = {
      {"master", "w"}, {"exp_avg", "m"}, {"exp_avg_sq", "v"},
      {"mirror", "bf16"}, {"pending_grads", "grads"}};
  auto it = kShort.find(kind);
  return it == kShort.end() ? kind : it->second;
}

uint64_t Sum(const std::map<std::string, uint64_t>& m) {
  uint64_t s = 0;
  for (const auto& [k, v] : m) s += v;
  return s;
}

// "w / m / v": master, then each slot.
std::string NormsCell(const ServerStatus& r) {
  std::string cell = absl::StrFormat("%.4g", r.master_norm);
  for (const auto& [slot, norm] : r.state_norms) {
    absl::StrAppend(&cell, absl::StrFormat(" / %.4g", norm));
  }
  return cell;
}

nlohmann::json ToJson(int k, const std::string& address,
                      const absl::StatusOr<ServerStatus>& r) {
  nlohmann::json j;
  j["index"] = k;
  j["address"] = address;
  j["ok"] = r.ok();
  if (!r.ok()) {
    j["error"] = r.status().ToString();
    return j;
  }
  j["initialized"] = r->initialized;
  j["server_index"] = r->server_index;
  j["num_servers"] = r->num_servers;
  j["owned_begin"] = r->owned.begin;
  j["owned_end"] = r->owned.end;
  j["total_elems"] = r->total_elems;
  j["chunk_elems"] = r->chunk_elems;
  j["num_chunks"] = r->num_chunks;
  j["min_version"] = r->min_version;
  j["max_version"] = r->max_version;
  j["adam_step"] = r->optimizer_step;
  j["placement"] = r->placement;
  j["pending_grad_bytes"] = r->pending_grad_bytes;
  j["pending_grad_limit_bytes"] = r->pending_grad_limit_bytes;
  j["bytes_by_kind"] = nlohmann::json::object();
  for (const auto& [kind, b] : r->bytes_by_kind) j["bytes_by_kind"][kind] = b;
  j["norms"] = {{"master", r->master_norm}};
  for (const auto& [slot, norm] : r->state_norms) j["norms"][slot] = norm;
  j["state_slots"] = nlohmann::json::array();
  for (const std::string& slot : r->state_slots) j["state_slots"].push_back(slot);
  j["calls"] = nlohmann::json::object();
  for (const auto& [m, n] : r->counters.calls) j["calls"][m] = n;
  j["errors"] = nlohmann::json::object();
  for (const auto& [c, n] : r->counters.errors) j["errors"][c] = n;
  j["bytes_in"] = r->counters.bytes_in;
  j["bytes_out"] = r->counters.bytes_out;
  const OptimizerConfig& o = r->optimizer;
  j["optimizer"] = {{"kind", OptimizerName(o)},
                    {"lr", o.lr},
                    {"beta1", o.beta1},
                    {"beta2", o.beta2},
                    {"eps", o.eps},
                    {"weight_decay", o.weight_decay}};
  // A registered rule's own params (momentum, lr_decay ...), defaults
  // included.
  if (const RuleInfo* rule = RuleOf(o)) {
    for (const RuleParam& p : rule->params) {
      if (!p.common_field()) j["optimizer"][p.name] = RuleParamValue(o, p);
    }
  }
  j["param_groups"] = nlohmann::json::array();
  for (const ResolvedGroup& g : r->param_groups) {
    nlohmann::json group = {{"name", g.name},
                            {"weight_decay", g.weight_decay},
                            {"lr_scale", g.lr_scale},
                            {"ranges", g.ranges.size()},
                            {"elems", g.elems}};
    // A rule for whole tensors: its name and every param of its entry
    // (common/optimizer_rules.h), a choice by its name, none as null.
    if (const RuleInfo* info = FindTensorRule(g.rule.name)) {
      nlohmann::json rule = {{"kind", info->name}};
      for (const RuleParam& p : info->params) {
        const double v = g.rule.Param(p.name);
        switch (p.kind) {
          case RuleParam::Kind::kBool:
            rule[p.name] = v != 0;
            break;
          case RuleParam::Kind::kChoice:
            rule[p.name] = p.choices[static_cast<size_t>(v)];
            break;
          case RuleParam::Kind::kPair:
            rule[p.name] = {g.rule.Param(p.name + "[0]"), g.rule.Param(p.name + "[1]")};
            break;
          case RuleParam::Kind::kNumber:
            rule[p.name] = p.default_is_none && v == p.default_value
                               ? nlohmann::json()
                               : nlohmann::json(v);
            break;
        }
      }
      group["rule"] = std::move(rule);
    }
    j["param_groups"].push_back(std::move(group));
  }
  return j;
}

// One line for the run's parameter groups (every server has the same).
std::string DescribeGroups(const ServerStatus& r) {
  if (r.param_groups.empty()) {
    return absl::StrCat("parameter groups: single (weight_decay ",
                        r.optimizer.weight_decay, " on every tensor)");
  }
  std::vector<std::string> parts;
  for (const ResolvedGroup& g : r.param_groups) {
    if (g.rule.active()) {
      parts.push_back(absl::StrCat(g.name, " ", DescribeTensorRule(g.rule), " (",
                                   g.elems, " elems, each tensor whole)"));
      continue;
    }
    parts.push_back(absl::StrCat(g.name, " weight_decay ", g.weight_decay,
                                 " lr_scale ", g.lr_scale, " (", g.elems,
                                 " elems)"));
  }
  return absl::StrCat("parameter groups: ", absl::StrJoin(parts, "; "));
}

}  // namespace

int RefuseLiveRun(const ShardCluster& cluster, const CtlFlags& flags,
                  const char* command) {
  if (flags.force) return 0;
  const absl::StatusOr<std::optional<LiveRunInfo>> live =
      FindLiveRun(cluster, kLiveRunWindowSeconds);
  if (!live.ok()) {
    std::fprintf(stderr, "%s: %s\n", command, live.status().ToString().c_str());
    return 1;
  }
  if (!live->has_value()) return 0;
  std::fprintf(stderr,
               "%s: the servers serve a live %s: %s would replace the state "
               "it is training and end it. Stop that run first (Ctrl-C its "
               "zeroshard-train or zeroshard-launch, or stop its workers), "
               "or pass --force\n",
               command, DescribeLiveRun(**live).c_str(), command);
  return 2;
}

ShardClientOptions ClientOptions(const CtlFlags& flags) {
  ShardClientOptions o;
  o.call_timeout = flags.timeout;
  o.control_timeout = flags.timeout;
  o.retry.max_total = flags.timeout;
  o.security = flags.security;
  o.run_id = flags.run_id;
  o.replicas = flags.replicas;
  return o;
}

std::string HumanBytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  return u == 0 ? absl::StrFormat("%.0f B", bytes)
                : absl::StrFormat("%.1f %s", bytes, units[u]);
}

void PrintTable(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& row : rows) {
    if (width.size() < row.size()) width.resize(row.size(), 0);
    for (size_t c = 0; c < row.size(); ++c) {
      width[c] = std::max(width[c], row[c].size());
    }
  }
  for (const auto& row : rows) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      const bool last = c + 1 == row.size();
      line += last ? row[c]
                   : absl::StrFormat("%-*s  ", static_cast<int>(width[c]),
                                     row[c]);
    }
    std::printf("%s\n", line.c_str());
  }
}

int RunInspect(const CtlFlags& flags) {
  auto channels = ShardCluster::Connect(flags.servers, ClientOptions(flags));
  if (!channels.ok()) {
    std::fprintf(stderr, "%s\n", channels.status().ToString().c_str());
    return 2;
  }
  auto results = (*channels)->InspectAll();
  int failed = 0;
  for (const auto& r : results) failed += r.ok() ? 0 : 1;
  if (flags.json) {
    nlohmann::json j;
    j["servers"] = nlohmann::json::array();
    for (int k = 0; k < (*channels)->num_servers(); ++k) {
      j["servers"].push_back(ToJson(k, (*channels)->address(k), results[k]));
    }
    std::printf("%s\n", j.dump(2).c_str());
    return failed == 0 ? 0 : 1;
  }
  std::vector<std::vector<std::string>> rows = {
      {"#", "address", "owned range", "elems", "versions", "adam t",
       "placement", "memory", "norm w / state", "calls", "errors"}};
  for (int k = 0; k < (*channels)->num_servers(); ++k) {
    const auto& r = results[k];
    if (!r.ok()) {
      rows.push_back({absl::StrCat(k), (*channels)->address(k),
                      absl::StrCat("ERROR: ", r.status().ToString())});
      continue;
    }
    if (!r->initialized) {
      rows.push_back({absl::StrCat(k), (*channels)->address(k),
                      "(not initialized)"});
      continue;
    }
    std::vector<std::string> mem;
    for (const auto& [kind, b] : r->bytes_by_kind) {
      mem.push_back(absl::StrCat(ShortKind(kind), " ", HumanBytes(b)));
    }
    std::sort(mem.begin(), mem.end());
    std::vector<std::string> errs;
    for (const auto& [code, n] : r->counters.errors) {
      errs.push_back(absl::StrCat(code, "=", n));
    }
    std::sort(errs.begin(), errs.end());
    rows.push_back(
        {absl::StrCat(k), (*channels)->address(k),
         absl::StrCat("[", r->owned.begin, ", ", r->owned.end, ")"),
         absl::StrCat(r->owned.end - r->owned.begin),
         absl::StrCat(r->min_version, "..", r->max_version),
         absl::StrCat(r->optimizer_step), r->placement,
         absl::StrJoin(mem, ", "),
         NormsCell(*r),
         absl::StrCat(Sum(r->counters.calls)),
         errs.empty() ? "0" : absl::StrJoin(errs, " ")});
  }
  PrintTable(rows);
  // With replicas: where each slot's copies are, and whether they stand at
  // one version (a step being applied may stand between them for a moment).
  const int S = (*channels)->num_servers();
  uint32_t replicas = 1;
  for (const auto& r : results) {
    if (r.ok() && r->initialized) replicas = std::max(replicas, r->replicas);
  }
  if (replicas > 1) {
    std::vector<std::vector<std::string>> copies = {
        {"slot", "range", "first copy", "second copy", "same version"}};
    // Both copies of every slot asked at once, so that a running job's
    // steps do not fall between them.
    std::vector<absl::StatusOr<ServerStatus>> firsts(
        S, absl::UnknownError("not asked")),
        seconds(S, absl::UnknownError("not asked"));
    {
      std::vector<std::thread> asks;
      for (int slot = 0; slot < S; ++slot) {
        asks.emplace_back([&, slot] {
          firsts[slot] = (*channels)->InspectCopy(slot, slot);
        });
        asks.emplace_back([&, slot] {
          seconds[slot] = (*channels)->InspectCopy(slot, (slot + 1) % S);
        });
      }
      for (std::thread& t : asks) t.join();
    }
    for (int slot = 0; slot < S; ++slot) {
      const int buddy = (slot + 1) % S;
      auto cell = [&](int k, const absl::StatusOr<ServerStatus>& c) {
        return c.ok() ? absl::StrCat("server ", k, " at ", c->min_version,
                                     "..", c->max_version)
                      : absl::StrCat("server ", k, ": ",
                                     absl::StatusCodeToString(c.status().code()));
      };
      const absl::StatusOr<ServerStatus>& first = firsts[slot];
      const absl::StatusOr<ServerStatus>& second = seconds[slot];
      const bool same = first.ok() && second.ok() &&
                        first->min_version == second->min_version &&
                        first->max_version == second->max_version;
      const std::string range =
          first.ok() ? absl::StrCat("[", first->owned.begin, ", ",
                                    first->owned.end, ")")
          : second.ok() ? absl::StrCat("[", second->owned.begin, ", ",
                                       second->owned.end, ")")
                        : "?";
      copies.push_back({absl::StrCat(slot), range, cell(slot, first),
                        cell(buddy, second),
                        same ? "yes"
                        : (first.ok() && second.ok()) ? "no"
                                                      : "one copy left"});
    }
    std::printf("\n");
    PrintTable(copies);
  }
  for (const auto& r : results) {
    if (r.ok() && r->initialized) {
      std::printf("%s\n", DescribeGroups(*r).c_str());
      break;
    }
  }
  return failed == 0 ? 0 : 1;
}

int RunHealth(const CtlFlags& flags) {
  auto channels = ShardCluster::Connect(flags.servers, ClientOptions(flags));
  if (!channels.ok()) {
    std::fprintf(stderr, "%s\n", channels.status().ToString().c_str());
    return 2;
  }
  auto results = (*channels)->HealthAll();
  int bad = 0;
  std::vector<std::vector<std::string>> rows = {{"#", "address", "status"}};
  for (int k = 0; k < (*channels)->num_servers(); ++k) {
    const auto& r = results[k];
    const std::string s = r.ok() ? *r : absl::StrCat("ERROR: ", r.status().ToString());
    if (!r.ok() || *r != "SERVING") ++bad;
    rows.push_back({absl::StrCat(k), (*channels)->address(k), s});
  }
  PrintTable(rows);
  if (bad > 0) {
    std::fprintf(stderr, "%d of %d servers are not SERVING\n", bad,
                 (*channels)->num_servers());
    return 1;
  }
  return 0;
}

}  // namespace zeroshard::ctl
