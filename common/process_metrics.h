// Metrics of the process itself, set at every Render:
//
//   zeroshard_process_resident_memory_bytes  resident set size
//   zeroshard_process_start_time_seconds     start time, Unix seconds
//
//   MetricsRegistry registry;
//   AddProcessMetrics(&registry);
#ifndef ZEROSHARD_COMMON_PROCESS_METRICS_H_
#define ZEROSHARD_COMMON_PROCESS_METRICS_H_

#include <cstdint>

#include "common/metrics.h"

namespace zeroshard {

// Adds a collector to `registry` (for the process's lifetime).
void AddProcessMetrics(MetricsRegistry* registry);

// Resident bytes of this process (/proc/self/statm); 0 when unreadable.
uint64_t ResidentMemoryBytes();

}  // namespace zeroshard

#endif  // ZEROSHARD_COMMON_PROCESS_METRICS_H_
