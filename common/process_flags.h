// The flags zeroshard-server and zeroshard-worker share, defined once:
// --credentials (the credentials directory, docs/DESIGN.md "Security"),
// --metrics_listen and --metrics_port_file (Prometheus metrics over plain
// HTTP), and serving the metrics as those two say.
//
//   zeroshard::MetricsRegistry registry;
//   if (zeroshard::MetricsRequested()) zeroshard::AddProcessMetrics(&registry);
//   ASSIGN_OR_RETURN(auto http, zeroshard::ServeMetricsFromFlags(&registry));
#ifndef ZEROSHARD_COMMON_PROCESS_FLAGS_H_
#define ZEROSHARD_COMMON_PROCESS_FLAGS_H_

#include <memory>
#include <string>

#include "absl/flags/declare.h"
#include "absl/status/statusor.h"
#include "common/metrics.h"
#include "common/metrics_http.h"

ABSL_DECLARE_FLAG(std::string, credentials);
ABSL_DECLARE_FLAG(std::string, metrics_listen);
ABSL_DECLARE_FLAG(std::string, metrics_port_file);

namespace zeroshard {

// Whether --metrics_listen was given.
bool MetricsRequested();

// Serves `registry` on --metrics_listen (null when it is empty), logs the
// port and writes it to --metrics_port_file (atomically) when that is set.
// Errors name the flag.
absl::StatusOr<std::unique_ptr<MetricsHttpServer>> ServeMetricsFromFlags(
    MetricsRegistry* registry);

}  // namespace zeroshard

#endif  // ZEROSHARD_COMMON_PROCESS_FLAGS_H_
