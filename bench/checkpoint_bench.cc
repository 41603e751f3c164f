// zeroshard-bench checkpoint: what a coordinated checkpoint costs training
// (docs/DESIGN.md, "Checkpoints").
//
// One worker and 2 in-process shard servers train the step benchmark's shape
// (T=256, 8 blocks, width 512, BF16, ZeRO-3); every 3rd step a checkpoint is
// armed before the step, so its pushes make each chunk copy itself first,
// and the servers write their shard files in the background while the next
// steps run. Printed: the median time of steps that take a checkpoint, of
// the steps right after (the files are being written), and of clean steps;
// the servers' copy time; and the files' write bandwidth against a plain
// sequential write + fsync of the same bytes in the same directory, in the
// same run. Last lines:
//   checkpoint ratio=<checkpoint step / clean step> target=1.2   (lower is better)
//   checkpoint_write ratio=<checkpoint MB/s / plain MB/s> target=0.8 (higher)
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
#include "client/checkpoint_client.h"

namespace zeroshard::bench {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kEvery = 3;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Seconds to write `bytes` to a new file in `dir` with write() in 8 MiB
// blocks, then fsync: the disk's plain sequential rate.
double PlainWriteSeconds(const std::string& dir, uint64_t bytes) {
  const std::string path = dir + "/plain-write.bin";
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
  const int checkpoints = args.size() > 0 ? std::max(1, std::atoi(args[0].c_str())) : 4;
  std::string dir = args.size() > 1 ? args[1] : "";
  bool own_dir = false;
  if (dir.empty()) {
    char tmpl[] = "/tmp/zs-ckpt-bench-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) return 1;
    dir = tmpl;
    own_dir = true;
  }
  const GptShape shape{.layers = 8, .heads = 8, .width = 512, .vocab = 256,
                       .context = 256};
  const uint64_t steps = 1 + kEvery * checkpoints + 2;
  auto cfg = BenchConfig(shape, "bf16", 3, 2, 1, 4, steps);
  auto sampler = cfg.ok() ? BenchSampler(*cfg)
                          : absl::StatusOr<BatchSampler>(cfg.status());
  if (!sampler.ok()) {
    std::fprintf(stderr, "setup: %s\n", sampler.status().ToString().c_str());
    return 1;
  }
  std::printf("checkpoint: GPT T=256 layers=8 heads=8 width=512 vocab=256 "
              "batch=4, bf16, ZeRO-3, 2 servers x 1 worker, a checkpoint "
              "every %llu steps, %d of them, in %s\n",
              static_cast<unsigned long long>(kEvery), checkpoints,
              dir.c_str());

  absl::Mutex mu;
  std::vector<v1::CheckpointResponse> files;
  absl::Status commit_status;
  std::unique_ptr<std::thread> waiter;
  auto join = [&] {
    if (waiter != nullptr) waiter->join();
    waiter.reset();
  };
  RigStepHook hook = [&](uint64_t step,
                         const ShardChannels& channels) -> absl::Status {
    if (step == 0 || step % kEvery != 0 || step >= steps - 2) {
      return absl::OkStatus();
    }
    join();
    if (absl::Status s = ArmCheckpoint(channels, step, dir, ""); !s.ok()) {
      return s;
    }
    waiter = std::make_unique<std::thread>([&, step] {
      auto r = WaitCheckpoint(channels, step, dir, "", absl::Seconds(600));
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
  std::vector<double> with, after, clean;
  for (const StepResult& r : run->steps) {
    if (r.step == 0 || r.step >= steps - 1) continue;  // warm-up, last
    const uint64_t phase = r.step % kEvery;
    (phase == 0 ? with : phase == 1 ? after : clean).push_back(r.seconds);
    std::printf("  step %2llu %-8s %.3f s (fetch %.3f, compute %.3f, comm "
                "wait %.3f, commit %.3f)\n",
                static_cast<unsigned long long>(r.step),
                phase == 0 ? "ckpt" : phase == 1 ? "writing" : "clean",
                r.seconds, r.fetch_seconds, r.compute_seconds,
                r.comm_wait_seconds, r.commit_seconds);
  }
  double copy = 0, write = 0;
  uint64_t bytes = 0;
  for (const auto& f : files) {
    copy = std::max(copy, f.copy_seconds());
    write = std::max(write, f.write_seconds());
    bytes += f.bytes();
  }
  const uint64_t per_checkpoint = bytes / checkpoints;
  const double plain = PlainWriteSeconds(dir, per_checkpoint);
  std::vector<double> writes;
  for (const auto& f : files) writes.push_back(f.write_seconds());
  // Both servers write at once: one checkpoint's bytes over the slower
  // server's time.
  std::vector<double> per_ckpt_write;
  for (size_t i = 0; i + 1 < files.size(); i += 2) {
    per_ckpt_write.push_back(
        std::max(files[i].write_seconds(), files[i + 1].write_seconds()));
  }
  const double ckpt_write = Median(per_ckpt_write);
  const double mbps = per_checkpoint / ckpt_write / 1e6;
  const double plain_mbps = plain > 0 ? per_checkpoint / plain / 1e6 : 0;
  std::printf("step with a checkpoint %8.3f s (median of %zu)\n", Median(with),
              with.size());
  std::printf("step while writing     %8.3f s (median of %zu)\n", Median(after),
              after.size());
  std::printf("clean step             %8.3f s (median of %zu)\n", Median(clean),
              clean.size());
  std::printf("chunk copies           %8.3f s per server (slowest, summed "
              "over its chunks)\n", copy);
  std::printf("checkpoint size        %8.1f MB (2 shard files: FP32 master, "
              "m, v)\n", per_checkpoint / 1e6);
  std::printf("checkpoint write       %8.1f MB/s (median; both servers at "
              "once)\n", mbps);
  std::printf("plain write + fsync    %8.1f MB/s (same bytes, same "
              "directory)\n", plain_mbps);
  std::printf("checkpoint_write ratio=%.3f target=0.8\n",
              plain_mbps > 0 ? mbps / plain_mbps : 0.0);
  std::printf("checkpoint ratio=%.3f target=1.2\n",
              Median(clean) > 0 ? Median(with) / Median(clean) : 0.0);
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
