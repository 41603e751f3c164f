#include "common/process_metrics.h"

#include <unistd.h>

#include <cstdio>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace zeroshard {

uint64_t ResidentMemoryBytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  unsigned long long size = 0, resident = 0;
  const int n = std::fscanf(f, "%llu %llu", &size, &resident);
  std::fclose(f);
  if (n != 2) return 0;
  return resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

void AddProcessMetrics(MetricsRegistry* registry) {
  const double start = absl::ToUnixMicros(absl::Now()) * 1e-6;
  registry->gauge("zeroshard_process_start_time_seconds",
                  "When the process started (its metrics registry was "
                  "set up), in Unix seconds.")
      .Set(start);
  registry->AddCollector([registry] {
    registry
        ->gauge("zeroshard_process_resident_memory_bytes",
                "Resident set size of the process.")
        .Set(static_cast<double>(ResidentMemoryBytes()));
  });
}

}  // namespace zeroshard
