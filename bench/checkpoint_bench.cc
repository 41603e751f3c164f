// zeroshard-bench checkpoint: what a coordinated checkpoint costs training
// (docs/DESIGN.md, "Checkpoints").
//
// One worker and 2 in-process shard servers train the step benchmark's shape
// (T=256, 8 blocks, width 512, BF16, ZeRO-3) twice in the same run: once
// without checkpoints, once with a checkpoint armed before every 4th step.
// A checkpoint's cost is not only its own step: the servers' writers read
// the shard and write the files in the background while the steps go on
// (server/shard_snapshot.h), and on this machine servers and worker share the cores. So the
// cost of one checkpoint is the second run's total step time minus the
// first's, per checkpoint, and the figure is
//   (clean step + that cost) / clean step,
// the time of "a step that takes a checkpoint" against one that does not.
// Then the shard files' write path (XXH3 + write + fsync + rename, both
// servers' files at once) against a plain sequential write + fsync of the
// same bytes in the same directory, on an idle machine. Last lines:
//   checkpoint_write ratio=<checkpoint MB/s / plain MB/s> target=0.8 (higher)
//   checkpoint ratio=<step with a checkpoint / clean step> target=1.2 (lower)
//
// Args: [checkpoints, default 4] [directory, default a new one in /tmp].
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "bench/bench.h"
#include "bench/engine_rig.h"
#include "client/shard_cluster.h"
#include "server/shard_checkpoint.h"

namespace zeroshard::bench {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kEvery = 4;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Seconds to write `bytes` to a new file `prefix`plain-write.bin with
// write() in 8 MiB blocks, then fsync: the disk's plain sequential rate.
double PlainWriteSeconds(const std::string& prefix, uint64_t bytes) {
  const std::string path = prefix + "plain-write.bin";
  std::vector<char> block(8 << 20);
  for (size_t i = 0; i < block.size(); ++i) block[i] = static_cast<char>(i * 131);
  const absl::Time t0 = absl::Now();
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return 0;
  uint64_t left = bytes;
  while (left > 0) {
    const size_t n = std::min<uint64_t>(left, block.size());
    if (write(fd, block.data(), n) != static_cast<ssize_t>(n)) break;
    left -= n;
  }
  fsync(fd);
  close(fd);
  const double s = absl::ToDoubleSeconds(absl::Now() - t0);
  fs::remove(path);
  return s;
}

int RunCheckpoint(const std::vector<std::string>& args) {
  const int checkpoints =
      Smoke() ? 1 : args.size() > 0 ? std::max(1, std::atoi(args[0].c_str())) : 4;
  std::string dir = args.size() > 1 ? args[1] : "";
  bool own_dir = false;
  if (dir.empty()) {
    char tmpl[] = "/tmp/zs-ckpt-bench-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) return 1;
    dir = tmpl;
    own_dir = true;
  }
  const GptShape shape =
      Smoke() ? GptShape{.layers = 1, .heads = 2, .width = 64, .vocab = 256,
                         .context = 32}
              : GptShape{.layers = 8, .heads = 8, .width = 512, .vocab = 256,
                         .context = 256};
  const uint64_t steps = 1 + kEvery * checkpoints + 2;
  auto cfg = BenchConfig(shape, "bf16", 3, 2, 1, Smoke() ? 1 : 4, steps);
  auto sampler = cfg.ok() ? BenchSampler(*cfg)
                          : absl::StatusOr<BatchSampler>(cfg.status());
  if (!sampler.ok()) {
    std::fprintf(stderr, "setup: %s\n", sampler.status().ToString().c_str());
    return 1;
  }
  std::printf("checkpoint: GPT T=%d layers=%d heads=%d width=%d vocab=%d, "
              "bf16, ZeRO-3, 2 servers x 1 worker, %llu steps "
              "without checkpoints, then with one every %llu steps (%d), in "
              "%s\n",
              shape.context, shape.layers, shape.heads, shape.width,
              shape.vocab, static_cast<unsigned long long>(steps),
              static_cast<unsigned long long>(kEvery), checkpoints,
              dir.c_str());
  auto base = RunEngineRig(*cfg, *sampler);
  if (!base.ok()) {
    std::fprintf(stderr, "checkpoint: %s\n", base.status().ToString().c_str());
    return 1;
  }

  absl::Mutex mu;
  std::vector<ShardFile> files;
  absl::Status commit_status;
  std::unique_ptr<std::thread> waiter;
  auto join = [&] {
    if (waiter != nullptr) waiter->join();
    waiter.reset();
  };
  RigStepHook hook = [&](uint64_t step,
                         const ShardCluster& servers) -> absl::Status {
    if (step >= steps) {  // the run's end: the wait uses `servers`
      join();
      return absl::OkStatus();
    }
    if (step == 0 || step % kEvery != 0 || step == steps - 1) {
      return absl::OkStatus();
    }
    join();
    if (absl::Status s = servers.ArmCheckpoint(step, dir); !s.ok()) {
      return s;
    }
    waiter = std::make_unique<std::thread>([&, step] {
      auto r = servers.WaitCheckpoint(step, dir, absl::Seconds(600));
      absl::MutexLock lock(&mu);
      if (!r.ok()) {
        commit_status = r.status();
        return;
      }
      files.insert(files.end(), r->begin(), r->end());
    });
    return absl::OkStatus();
  };
  auto run = RunEngineRig(*cfg, *sampler, hook);
  join();
  if (!run.ok() || !commit_status.ok()) {
    std::fprintf(stderr, "checkpoint: %s %s\n", run.status().ToString().c_str(),
                 commit_status.ToString().c_str());
    return 1;
  }
  // Step 0 (warm-up) and the last step (no prefetch) are left out of both.
  std::vector<double> clean, with;
  double base_total = 0, run_total = 0;
  for (size_t i = 1; i + 1 < base->steps.size(); ++i) {
    clean.push_back(base->steps[i].seconds);
    base_total += base->steps[i].seconds;
  }
  for (size_t i = 1; i + 1 < run->steps.size(); ++i) {
    const StepResult& r = run->steps[i];
    run_total += r.seconds;
    if (r.step % kEvery == 0) with.push_back(r.seconds);
    std::printf("  step %2llu %-10s %.3f s (fetch %.3f, compute %.3f, commit "
                "%.3f); without checkpoints %.3f s\n",
                static_cast<unsigned long long>(r.step),
                r.step % kEvery == 0 ? "checkpoint" : "", r.seconds,
                r.fetch_seconds, r.compute_seconds, r.commit_seconds,
                base->steps[i].seconds);
  }
  const size_t taken = files.size() / 2;
  double copy = 0;
  uint64_t bytes = 0;
  for (const auto& f : files) {
    copy = std::max(copy, f.copy_seconds);
    bytes += f.bytes;
  }
  const double cost = taken > 0 ? (run_total - base_total) / taken : 0;
  const double clean_step = Median(clean);

  // The write path alone, both servers' files at once, against the same
  // bytes written plainly, two files at once too; alternated, best of 3
  // each (threads of the training run may still spin for a moment).
  const uint64_t per_server = taken > 0 ? bytes / files.size() : 0;
  const uint64_t n = (per_server > 64 ? per_server - 64 : 0) / 12;
  const uint64_t per_checkpoint = taken > 0 ? bytes / taken : 0;
  std::vector<float> values(n, 0.5f);
  auto shard_write = [&] {
    const absl::Time t0 = absl::Now();
    std::vector<std::thread> writers;
    for (int k = 0; k < 2; ++k) {
      writers.emplace_back([&, k] {
        v1::ShardCheckpointHeader h;
        h.set_server_index(k);
        h.set_num_servers(2);
        h.mutable_owned()->set_length(n);
        h.set_chunk_elems(std::max<uint64_t>(64, (n + 63) / 64 * 64));
        h.add_chunk_versions(0);
        h.add_chunk_adam_steps(0);
        ShardCheckpointContents c{h, values.data(),
                                  {values.data(), values.data()}};
        WriteShardCheckpoint(absl::StrCat(dir, "/write-", k, ".bin"), c)
            .IgnoreError();
      });
    }
    for (auto& t : writers) t.join();
    const double s = absl::ToDoubleSeconds(absl::Now() - t0);
    for (int k = 0; k < 2; ++k) fs::remove(absl::StrCat(dir, "/write-", k, ".bin"));
    return s;
  };
  auto plain_write = [&] {
    const absl::Time t0 = absl::Now();
    std::thread other([&] { PlainWriteSeconds(dir + "/b-", per_checkpoint / 2); });
    PlainWriteSeconds(dir + "/a-", per_checkpoint / 2);
    other.join();
    return absl::ToDoubleSeconds(absl::Now() - t0);
  };
  double write_s = 1e9, plain = 1e9;
  for (int rep = 0; rep < 3; ++rep) {
    plain = std::min(plain, plain_write());
    write_s = std::min(write_s, shard_write());
  }
  const double mbps = write_s > 0 ? per_checkpoint / write_s / 1e6 : 0;
  const double plain_mbps = plain > 0 ? per_checkpoint / plain / 1e6 : 0;

  std::printf("clean step             %8.3f s (median of %zu, run without "
              "checkpoints)\n", clean_step, clean.size());
  std::printf("checkpoint steps       %8.3f s (median of %zu; the copies and "
              "writes spill into later steps)\n", Median(with), with.size());
  std::printf("cost per checkpoint    %8.3f s (all steps with checkpoints - "
              "all without, / %zu)\n", cost, taken);
  std::printf("chunk copies           %8.3f s per server (slowest, summed over "
              "the chunks an update set aside before the writer read them)\n",
              copy);
  std::printf("checkpoint size        %8.1f MB (2 shard files: FP32 master, m, "
              "v)\n", per_checkpoint / 1e6);
  std::printf("shard file write       %8.1f MB/s (XXH3 + write + fsync + "
              "rename, 2 files at once, idle machine)\n", mbps);
  std::printf("plain write + fsync    %8.1f MB/s (same bytes, two files at "
              "once, same directory)\n", plain_mbps);
  std::printf("checkpoint_write ratio=%.3f target=0.8\n",
              plain_mbps > 0 ? mbps / plain_mbps : 0.0);
  std::printf("checkpoint ratio=%.3f target=1.2\n",
              clean_step > 0 ? (clean_step + cost) / clean_step : 0.0);
  if (own_dir) fs::remove_all(dir);
  return 0;
}

const Registrar kCheckpoint(
    "checkpoint",
    "step time with a coordinated checkpoint vs without; write bandwidth vs "
    "a plain write",
    RunCheckpoint);

}  // namespace
}  // namespace zeroshard::bench
