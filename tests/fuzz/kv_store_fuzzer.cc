// The rendezvous key-value store (server/kv_store.h): any sequence of Set,
// Get, WaitForKeys, CancelWait, Missing, RetainOnlyRun and Usage calls, for
// a few runs and attempts, with default or tiny limits.
// Input: a flags byte (bit 0: tiny limits), then one operation per
// opcode byte; keys, values and run ids are records (fuzz_util.h).
// Checked: every waiter is woken at most once and never after a successful
// CancelWait; a run never holds more keys or bytes than its limits.
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "server/kv_store.h"
#include "tests/fuzz/fuzz_util.h"

namespace zeroshard::fuzz {
namespace {

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "kv_store: %s\n", what);
  std::abort();
}

struct WaiterLog {
  int wakes = 0;
  bool cancelled = false;
};

void Run(const uint8_t* data, size_t size) {
  FuzzInput in(data, size);
  const uint8_t flags = in.Byte();
  KvStore::Limits limits;
  if (flags & 1) {
    limits.max_keys_per_run = 4;
    limits.max_value_bytes = 64;
    limits.max_bytes_per_run = 256;
    limits.max_runs = 2;
  }
  std::map<uint64_t, WaiterLog> log;  // outlives the store: wakes write here
  std::vector<uint64_t> ids;
  std::vector<std::string> runs = {"run-a", "run-b", "run-c"};
  KvStore kv(limits);
  auto scope = [&]() {
    const uint8_t b = in.Byte();
    KvScope s;
    if (b % 4 == 3) {
      s.run_id = std::string(in.Record());
      runs.push_back(s.run_id);
    } else {
      s.run_id = runs[b % 4];
    }
    s.attempt = (b >> 2) % 4;
    return s;
  };
  auto pick_id = [&]() -> uint64_t {
    const uint8_t b = in.Byte();
    return ids.empty() ? b : ids[b % ids.size()];
  };
  for (int op = 0; op < 256 && !in.empty(); ++op) {
    switch (in.Byte() % 7) {
      case 0: {
        KvScope s = scope();
        std::string key(in.Record());
        std::string value(in.Record());
        (void)kv.Set(s, key, std::move(value));
        break;
      }
      case 1: {
        KvScope s = scope();
        (void)kv.Get(s, std::string(in.Record()));
        break;
      }
      case 2: {
        KvScope s = scope();
        std::vector<std::string> keys(in.Byte() % 5);
        for (std::string& k : keys) k = std::string(in.Record());
        if (!KvStore::ValidateKeys(keys).ok()) break;
        // The id is known only after the call; a wake during the call
        // (never expected: it returns 0 instead) is caught by the check.
        auto slot = std::make_shared<uint64_t>(0);
        absl::StatusOr<uint64_t> id =
            kv.WaitForKeys(s, keys, [&log, slot](absl::Status) {
              if (*slot == 0) Fail("woken during WaitForKeys");
              WaiterLog& w = log[*slot];
              if (w.cancelled) Fail("woken after a successful CancelWait");
              if (++w.wakes > 1) Fail("woken twice");
            });
        if (id.ok() && *id != 0) {
          if (log.count(*id)) Fail("a waiter id was reused");
          *slot = *id;
          log[*id];
          ids.push_back(*id);
        }
        break;
      }
      case 3: {
        const uint64_t id = pick_id();
        if (kv.CancelWait(id)) {
          auto it = log.find(id);
          if (it == log.end()) Fail("cancelled an unknown waiter");
          if (it->second.wakes > 0) Fail("cancelled a waiter already woken");
          it->second.cancelled = true;
        }
        break;
      }
      case 4:
        (void)kv.Missing(pick_id());
        break;
      case 5:
        kv.RetainOnlyRun(scope().run_id);
        break;
      case 6: {
        const KvStore::RunUsage u = kv.Usage(scope().run_id);
        if (u.keys > limits.max_keys_per_run ||
            u.bytes > limits.max_bytes_per_run) {
          Fail("a run holds more than its limits");
        }
        break;
      }
    }
  }
}

}  // namespace
}  // namespace zeroshard::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  zeroshard::fuzz::Run(data, size);
  return 0;
}
