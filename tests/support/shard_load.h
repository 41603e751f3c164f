// A bounded load on a cluster of real zeroshard-server processes: P workers
// that gather the whole model (BF16) at each step's version and push their
// own partition of every unit, R readers that gather it in FP32 at every
// version, and I inspectors (role ctl) calling Inspect until the workers are
// done, all at once, for a fixed number of steps. Shared by
// tests/integration/load_test.cc (which asserts on the report) and
// `zeroshard-bench load` (which prints it).
//
//   ShardLoadOptions o;
//   o.server_binary = BinDir() + "/zeroshard-server";
//   o.credentials_dir = dir + "/creds";   // MakeDevCredentials(dir + "/creds")
//   o.work_dir = dir;
//   ASSIGN_OR_RETURN(ShardLoadReport r, RunShardLoad(o));
//   // r.errors == 0, r.mismatched_elems == 0, r.server_peak_rss_bytes ...
//
// The gradients are a pure function of (seed, step, flat index), zero on
// padding; steps cycle through coefficients 1, 0.5, 0.25, alternate FP32 and
// BF16 pushes and the coefficient up front or at the commit, and the third
// step is skipped. The reference is optim/'s scalar AdamW
// (AdamUpdateReference) over the whole flat space in one process, from the
// same seeded init: every element has exactly one pusher, so the servers
// must end with the reference's master weights bit for bit. Every reader's
// last gather (version = steps) and a final admin gather are compared.
#ifndef ZEROSHARD_TESTS_SUPPORT_SHARD_LOAD_H_
#define ZEROSHARD_TESTS_SUPPORT_SHARD_LOAD_H_

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace zeroshard::testing {

struct ShardLoadOptions {
  // The zeroshard-server program.
  std::string server_binary;
  // Credentials (wire/credentials.h) for servers (--credentials) and
  // clients (worker, ctl, admin); empty: plaintext, servers --no_auth.
  std::string credentials_dir;
  // Where port files and server logs go (must exist).
  std::string work_dir;
  int num_servers = 2;
  // Clients: pushers (the run's workers), readers and inspectors.
  uint32_t pushers = 48;
  uint32_t readers = 8;
  uint32_t inspectors = 8;
  uint32_t steps = 6;
  // The model: `units` units of `unit_elems` elements each (one tensor
  // each); the partition count is `pushers`.
  int units = 8;
  uint64_t unit_elems = 96 * 1024;
  uint64_t seed = 1;
  // Pause of each inspector between its calls.
  absl::Duration inspect_interval = absl::Milliseconds(5);
  absl::Duration call_timeout = absl::Seconds(60);
};

// Latencies of one kind of call, in microseconds, as the client saw it
// (Gather and PushGrad span both servers: one stream to each in parallel).
struct CallLatency {
  std::string name;
  uint64_t count = 0;
  double p50_us = 0;
  double p99_us = 0;
  double max_us = 0;
};

struct ShardLoadReport {
  uint64_t total_elems = 0;   // the padded flat space
  uint64_t state_bytes = 0;   // master + m + v + BF16 mirror, all servers
  absl::Duration wall;        // from the first call to the last
  // Calls that failed, and the first few messages.
  uint64_t calls = 0;
  uint64_t errors = 0;
  std::vector<std::string> error_samples;
  // Elements of the final weights (admin gather and every reader's last
  // gather) that differ from the reference, bitwise.
  uint64_t mismatched_elems = 0;
  // Per server, at the end: VmHWM and VmRSS (/proc/<pid>/status) after
  // Init and at the end, and its Inspect.
  std::vector<uint64_t> server_rss_after_init_bytes;
  std::vector<uint64_t> server_peak_rss_bytes;
  std::vector<uint64_t> server_owned_elems;
  std::vector<uint64_t> server_pending_limit_bytes;
  // Inspect's view at the end: all equal the expected value when true.
  bool versions_ok = false;  // min = max version = steps on every server
  bool adam_step_ok = false; // adam_step = non-skipped steps
  uint64_t pending_grad_bytes_left = 0;
  uint64_t server_errors = 0;  // summed counters().errors
  uint64_t duplicate_elems = 0;  // from the pushes' replies
  std::vector<CallLatency> latencies;  // Gather, PushGrad, Inspect
};

// Runs the load; a non-OK status only when it could not run (a server did
// not start, Init failed). Failed calls during the load are counted in the
// report. The servers are stopped before it returns.
absl::StatusOr<ShardLoadReport> RunShardLoad(const ShardLoadOptions& options);

// Runs scripts/make-dev-credentials.sh (found in the working directory or
// two levels above the running program) into `dir`.
absl::Status MakeDevCredentials(const std::string& dir);

// A "VmHWM" / "VmRSS" line of /proc/<pid>/status, in bytes (0 if absent).
uint64_t ProcStatusBytes(pid_t pid, const std::string& field);

// One table: name, count, p50, p99, max; then the peak RSS per server.
std::string FormatShardLoadReport(const ShardLoadReport& report);

}  // namespace zeroshard::testing

#endif  // ZEROSHARD_TESTS_SUPPORT_SHARD_LOAD_H_
