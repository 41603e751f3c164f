// zeroshard-bench load: many clients at once against 2 zeroshard-server
// processes over mutual TLS (tests/support/shard_load.h): workers gathering
// and pushing their partitions, readers gathering every version, inspectors.
// Prints p50/p99/max latency per call and each server's peak RSS, checks the
// final weights against the scalar AdamW reference bit for bit, and ends
// with the peak RSS over its bound (the same bound as
// tests/integration/load_test.cc: state + pending-gradient cap + 128 MiB).
//
//   zeroshard-bench load [--pushers=48] [--readers=8] [--inspectors=8]
//       [--steps=10] [--units=8] [--unit_elems=393216] [--plaintext]
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "bench/bench.h"
#include "tests/support/shard_load.h"

namespace zeroshard::bench {
namespace {

int RunLoad(const std::vector<std::string>& args) {
  testing::ShardLoadOptions o;
  o.steps = Smoke() ? 2 : 10;
  o.unit_elems = Smoke() ? 16 * 1024 : 384 * 1024;
  if (Smoke()) {
    o.pushers = 4;
    o.readers = 2;
    o.units = 2;
  }
  bool plaintext = false;
  for (const std::string& a : args) {
    absl::string_view v = a;
    uint64_t x = 0;
    auto num = [&](absl::string_view prefix) {
      return absl::ConsumePrefix(&v, prefix) && absl::SimpleAtoi(v, &x);
    };
    if (a == "--plaintext") plaintext = true;
    else if (num("--pushers=") && x > 0) o.pushers = x;
    else if (num("--readers=")) o.readers = x;
    else if (num("--inspectors=")) o.inspectors = x;
    else if (num("--steps=") && x > 0) o.steps = x;
    else if (num("--units=") && x > 0) o.units = x;
    else if (num("--unit_elems=") && x > 0) o.unit_elems = x;
    else {
      std::fprintf(stderr, "load: bad argument '%s'\n", a.c_str());
      return 2;
    }
  }
  const std::string dir =
      (std::filesystem::temp_directory_path() /
       absl::StrCat("zs_load_bench_", getpid())).string();
  std::filesystem::create_directories(dir);
  o.server_binary = SelfDir() + "/zeroshard-server";
  o.work_dir = dir;
  if (!plaintext) {
    o.credentials_dir = dir + "/creds";
    if (absl::Status s = testing::MakeDevCredentials(o.credentials_dir);
        !s.ok()) {
      std::fprintf(stderr, "load: %s\n", s.ToString().c_str());
      return 1;
    }
  }
  absl::StatusOr<testing::ShardLoadReport> r = testing::RunShardLoad(o);
  std::filesystem::remove_all(dir);
  if (!r.ok()) {
    std::fprintf(stderr, "load: %s\n", r.status().ToString().c_str());
    return 1;
  }
  std::printf("load: %u clients (%u workers pushing + gathering BF16, %u "
              "readers gathering FP32, %u inspectors) x 2 servers, %s, %u "
              "steps, %.1f M elements (%.1f MiB FP32)\n",
              o.pushers + o.readers + o.inspectors, o.pushers, o.readers,
              o.inspectors, plaintext ? "plaintext" : "mutual TLS 1.3",
              o.steps, r->total_elems / 1e6, r->total_elems * 4 / 1048576.0);
  std::printf("%s", testing::FormatShardLoadReport(*r).c_str());
  double worst = 0;
  for (size_t k = 0; k < r->server_peak_rss_bytes.size(); ++k) {
    const double bound = 14.0 * r->server_owned_elems[k] +
                         r->server_pending_limit_bytes[k] + (128 << 20);
    worst = std::max(worst, r->server_peak_rss_bytes[k] / bound);
  }
  const bool exact = r->errors == 0 && r->mismatched_elems == 0 &&
                     r->server_errors == 0 && r->versions_ok &&
                     r->adam_step_ok;
  std::printf("load bit_exact=%s errors=%lu\n", exact ? "yes" : "NO",
              static_cast<unsigned long>(r->errors));
  std::printf("(ratio = the highest server peak RSS over its bound: 14 B x "
              "owned elements + pending-gradient cap + 128 MiB)\n");
  std::printf("load ratio=%.2f target=1.0\n", worst);
  return exact ? 0 : 1;
}

ZS_REGISTER_BENCH("load", "64 TLS clients on 2 servers: latency, peak RSS",
                  RunLoad);

}  // namespace
}  // namespace zeroshard::bench
