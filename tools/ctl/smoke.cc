// zeroshard-ctl smoke: K steps of deterministic pseudo-random gradients pushed
// by N simulated workers (threads), each gathering its partition at the next
// version afterwards; checks that every element is applied once per step and
// that versions advance.
#include <cstdio>
#include <thread>

#include "absl/strings/str_cat.h"
#include "tools/ctl/commands.h"
#include "client/live_run.h"
#include "common/init_values.h"

namespace zeroshard::ctl {
namespace {

struct WorkerStep {
  absl::Status status;
  PushResult push;
  GatherResult gather;
};

// Even steps send the coefficient in the commit, odd steps up front.
WorkerStep RunWorker(ShardCluster& client, uint32_t worker, uint64_t step,
                     uint64_t seed) {
  WorkerStep out;
  const FlatLayout& L = client.layout();
  std::vector<FlatRange> ranges = L.WorkerRanges(worker);
  uint64_t elems = 0;
  for (const FlatRange& r : ranges) elems += r.size();
  std::vector<float> grads(elems);
  std::vector<GradSpan> spans;
  uint64_t at = 0;
  for (const FlatRange& r : ranges) {
    for (uint64_t i = 0; i < r.size(); ++i) {
      grads[at + i] = 1e-3f * CounterNormal(seed * 1000003 + step, r.begin + i);
    }
    spans.push_back({r, DType::kFp32, grads.data() + at});
    at += r.size();
  }
  const StepCommit commit{1.0, false};
  auto pushed = client.PushGrad(step, worker, spans, commit, step % 2 == 1);
  if (!pushed.ok()) {
    out.status = pushed.status();
    return out;
  }
  out.push = *pushed;
  std::vector<uint16_t> params(elems);
  auto gathered = client.Gather(ranges, DType::kBf16, step + 1, params.data(),
                                params.size() * sizeof(uint16_t));
  if (!gathered.ok()) {
    out.status = gathered.status();
    return out;
  }
  out.gather = *gathered;
  return out;
}

}  // namespace

int RunSmoke(const CtlFlags& flags) {
  auto channels = ShardCluster::Connect(flags.servers, ClientOptions(flags));
  if (!channels.ok()) {
    std::fprintf(stderr, "smoke: %s\n", channels.status().ToString().c_str());
    return 2;
  }
  // The manifest and the current step come from the servers.
  uint64_t start = 0;
  ModelManifest m;
  auto inspected = (*channels)->InspectAll();
  for (size_t k = 0; k < inspected.size(); ++k) {
    const auto& r = inspected[k];
    if (!r.ok()) {
      std::fprintf(stderr, "smoke: %s\n", r.status().ToString().c_str());
      return 1;
    }
    if (!r->initialized) {
      std::fprintf(stderr, "smoke: server %zu at %s is not initialized (run "
                   "zeroshard-ctl init first)\n", k, flags.servers[k].c_str());
      return 1;
    }
    if (r->min_version != r->max_version ||
        (k > 0 && r->min_version != start)) {
      std::fprintf(stderr, "smoke: versions disagree (server %zu at %llu..%llu)"
                   "; a step is half done\n", k,
                   static_cast<unsigned long long>(r->min_version),
                   static_cast<unsigned long long>(r->max_version));
      return 1;
    }
    start = r->min_version;
    if (k == 0) m = r->manifest;
  }
  const uint32_t workers =
      flags.workers > 0 ? flags.workers : std::max<uint32_t>(m.partition_count, 1);
  auto layout = FlatLayout::Create(m, flags.servers.size(), workers);
  if (!layout.ok()) {
    std::fprintf(stderr, "smoke: %s\n", layout.status().ToString().c_str());
    return 2;
  }
  auto client =
      ShardCluster::Connect(flags.servers, ClientOptions(flags), *layout);
  if (!client.ok()) {
    std::fprintf(stderr, "smoke: %s\n", client.status().ToString().c_str());
    return 2;
  }
  for (uint64_t step = start; step < start + flags.steps; ++step) {
    const absl::Time t0 = absl::Now();
    std::vector<WorkerStep> results(workers);
    std::vector<std::thread> threads;
    for (uint32_t w = 0; w < workers; ++w) {
      threads.emplace_back([&, w] {
        results[w] = RunWorker(**client, w, step, flags.seed);
      });
    }
    for (auto& t : threads) t.join();
    PushResult push;
    GatherResult gather;
    for (uint32_t w = 0; w < workers; ++w) {
      if (!results[w].status.ok()) {
        std::fprintf(stderr, "smoke: step %llu worker %u: %s\n",
                     static_cast<unsigned long long>(step), w,
                     results[w].status.ToString().c_str());
        return 1;
      }
      push.applied_elems += results[w].push.applied_elems;
      push.duplicate_elems += results[w].push.duplicate_elems;
      push.chunks_completed += results[w].push.chunks_completed;
      MergeGatherResult(results[w].gather, w == 0, &gather);
    }
    const double ms = absl::ToDoubleMilliseconds(absl::Now() - t0);
    std::printf("step %llu: %u workers pushed %s fp32 (%s), applied %llu "
                "elems, %llu chunks completed; gathered %s bf16 at versions "
                "%llu..%llu (%.1f ms)\n",
                static_cast<unsigned long long>(step), workers,
                HumanBytes(4.0 * layout->total_elems()).c_str(),
                step % 2 == 1 ? "coefficient up front" : "commit last",
                static_cast<unsigned long long>(push.applied_elems),
                static_cast<unsigned long long>(push.chunks_completed),
                HumanBytes(static_cast<double>(gather.bytes)).c_str(),
                static_cast<unsigned long long>(gather.min_version),
                static_cast<unsigned long long>(gather.max_version), ms);
    std::fflush(stdout);
    if (push.applied_elems + push.duplicate_elems != layout->total_elems()) {
      std::fprintf(stderr, "smoke: step %llu applied %llu + %llu duplicate "
                   "elements, expected %llu\n",
                   static_cast<unsigned long long>(step),
                   static_cast<unsigned long long>(push.applied_elems),
                   static_cast<unsigned long long>(push.duplicate_elems),
                   static_cast<unsigned long long>(layout->total_elems()));
      return 1;
    }
    if (gather.min_version < step + 1) {
      std::fprintf(stderr, "smoke: gathered version %llu after step %llu\n",
                   static_cast<unsigned long long>(gather.min_version),
                   static_cast<unsigned long long>(step));
      return 1;
    }
  }
  // Its pushes are done: not a live run for init or restore
  // (client/live_run.h).
  if (absl::Status s = MarkRunEnded(**client, (*client)->options().run_id,
                                    (*client)->options().attempt,
                                    start + flags.steps);
      !s.ok()) {
    std::fprintf(stderr, "smoke: could not mark the end of its pushes: %s\n",
                 s.ToString().c_str());
  }
  std::printf("smoke: %d steps OK (versions %llu -> %llu)\n", flags.steps,
              static_cast<unsigned long long>(start),
              static_cast<unsigned long long>(start + flags.steps));
  return 0;
}

}  // namespace zeroshard::ctl
