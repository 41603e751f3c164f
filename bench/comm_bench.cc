// zeroshard-bench comm: worker collectives on Gloo/TCP, 2 ranks as threads.
//
// For units of 4 MiB and 64 MiB: the ring all-gather (in place) and ring
// reduce-scatter (FP32 sum) of GlooWorkerGroup, against Gloo's own ring
// all-reduce of the same unit (the peer: what a reduce-scatter built on
// all-reduce would cost) and against raw TCP over loopback moving the same
// bytes both ways at once (this machine's limit: every collective here moves
// unit/2 bytes each way). Ratio: raw TCP time / reduce-scatter time at 64 MiB.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include <gloo/allreduce.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>

#include "bench/bench.h"
#include "common/rendezvous.h"
#include "comm/collectives.h"
#include "comm/gloo_store.h"

namespace zeroshard::bench {
namespace {

double Seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
      .count();
}

// Median seconds of `reps` runs of `op` on two threads, timed on rank 0 and
// started together by a barrier of `sync`.
double TimeTwoRanks(int reps, const std::function<void(int)>& setup,
                    const std::function<void(int)>& op,
                    const std::function<void(int)>& sync) {
  std::vector<double> times;
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      setup(rank);
      op(rank);  // warm-up
      for (int i = 0; i < reps; ++i) {
        sync(rank);
        const auto t0 = std::chrono::steady_clock::now();
        op(rank);
        if (rank == 0) times.push_back(Seconds(t0));
      }
    });
  }
  for (auto& t : threads) t.join();
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// Raw TCP on 127.0.0.1: `bytes` each way at once over two connections, in
// 1 MiB writes. Returns the median seconds.
double RawDuplexTcp(size_t bytes, int reps) {
  auto connected_pair = [](int fds[2]) {
    int listener = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    listen(listener, 1);
    getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len);
    fds[0] = socket(AF_INET, SOCK_STREAM, 0);
    connect(fds[0], reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    fds[1] = accept(listener, nullptr, nullptr);
    close(listener);
  };
  int a[2], b[2];
  connected_pair(a);
  connected_pair(b);
  std::vector<char> out1(bytes, 1), out2(bytes, 2), in1(bytes), in2(bytes);
  auto send_all = [](int fd, const char* p, size_t n) {
    while (n > 0) {
      ssize_t k = write(fd, p, std::min<size_t>(n, 1 << 20));
      if (k <= 0) return;
      p += k;
      n -= k;
    }
  };
  auto recv_all = [](int fd, char* p, size_t n) {
    while (n > 0) {
      ssize_t k = read(fd, p, n);
      if (k <= 0) return;
      p += k;
      n -= k;
    }
  };
  std::vector<double> times;
  for (int r = 0; r <= reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    std::thread t1([&] { send_all(a[0], out1.data(), bytes); });
    std::thread t2([&] { recv_all(a[1], in1.data(), bytes); });
    std::thread t3([&] { send_all(b[1], out2.data(), bytes); });
    recv_all(b[0], in2.data(), bytes);
    t1.join();
    t2.join();
    t3.join();
    if (r > 0) times.push_back(Seconds(t0));
  }
  for (int fd : {a[0], a[1], b[0], b[1]}) close(fd);
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

int RunCommBench(const std::vector<std::string>& args) {
  InMemoryRendezvousStore store;
  GroupOptions options;
  options.group = "bench";
  options.timeout = absl::Seconds(120);
  std::unique_ptr<WorkerGroup> groups[2];
  std::shared_ptr<gloo::Context> gloo_ctx[2];
  {
    std::vector<std::thread> threads;
    for (int rank = 0; rank < 2; ++rank) {
      threads.emplace_back([&, rank] {
        auto g = CreateWorkerGroup("gloo", rank, 2, &store, options);
        if (!g.ok()) {
          std::fprintf(stderr, "comm bench: %s\n", g.status().ToString().c_str());
          std::abort();
        }
        groups[rank] = std::move(*g);
        // A plain Gloo context for the peer measurement.
        gloo::transport::tcp::attr attr;
        attr.hostname = "127.0.0.1";
        auto dev = gloo::transport::tcp::CreateDevice(attr);
        auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, 2);
        GlooRendezvousStore gs(&store, "bench-peer/", "bench-peer",
                               absl::Seconds(60));
        ctx->connectFullMesh(gs, dev);
        gloo_ctx[rank] = ctx;
      });
    }
    for (auto& t : threads) t.join();
  }
  auto sync = [&](int rank) { (void)groups[rank]->Barrier(); };
  auto check = [](absl::Status s) {
    if (!s.ok()) {
      std::fprintf(stderr, "comm bench: %s\n", s.ToString().c_str());
      std::abort();
    }
  };
  double ratio = 0;
  std::printf("2 ranks (threads), gloo/tcp on 127.0.0.1; median times\n");
  std::printf("%8s %-26s %9s %9s\n", "unit", "operation", "ms", "GB/s*");
  const std::vector<size_t> sizes_mib =
      Smoke() ? std::vector<size_t>{1} : std::vector<size_t>{4, 64};
  for (size_t mib : sizes_mib) {
    const size_t bytes = mib << 20;
    const size_t floats = bytes / 4;
    const int reps = mib <= 4 ? 20 : 5;
    std::vector<float> unit[2], part[2];
    auto setup = [&](int r) {
      unit[r].assign(floats, 1.0f + r);
      part[r].assign(floats / 2, 0.0f);
    };
    const double ag = TimeTwoRanks(reps, setup, [&](int r) {
      check(groups[r]->AllGatherInPlace(absl::MakeSpan(
          reinterpret_cast<uint8_t*>(unit[r].data()), bytes)));
    }, sync);
    const double rs = TimeTwoRanks(reps, setup, [&](int r) {
      check(groups[r]->ReduceScatter(unit[r], absl::MakeSpan(part[r]), 1.0f));
    }, sync);
    const double ar = TimeTwoRanks(reps, setup, [&](int r) {
      gloo::AllreduceOptions opts(gloo_ctx[r]);
      opts.setOutput(unit[r].data(), floats);
      opts.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(
          &gloo::sum<float>));
      opts.setTag(7);
      gloo::allreduce(opts);
    }, sync);
    const double raw = RawDuplexTcp(bytes / 2, reps);
    auto row = [&](const char* name, double sec) {
      std::printf("%5zu MiB %-26s %9.2f %9.2f\n", mib, name, sec * 1e3,
                  bytes / sec / 1e9);
    };
    row("all-gather (ring)", ag);
    row("reduce-scatter (ring)", rs);
    row("gloo::allreduce (peer)", ar);
    row("raw TCP, unit/2 each way", raw);
    std::printf("%5zu MiB reduce-scatter vs gloo all-reduce: %.2fx faster; "
                "vs raw TCP: %.2f of the limit\n",
                mib, ar / rs, raw / rs);
    if (mib == sizes_mib.back()) ratio = raw / rs;
  }
  std::printf("* GB/s = unit bytes / time\n");
  std::printf("comm ratio=%.2f target=0.5\n", ratio);
  return 0;
}

}  // namespace

ZS_REGISTER_BENCH("comm",
                  "worker collectives (gloo): all-gather / reduce-scatter vs "
                  "gloo all-reduce and raw TCP",
                  RunCommBench);

}  // namespace zeroshard::bench
