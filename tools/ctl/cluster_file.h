// A zeroshard-train run's OUT/cluster.json, read for zeroshard-ctl
// --cluster: the servers' addresses in index order and the directory of the
// run's credentials.
//
//   ASSIGN_OR_RETURN(ClusterFile c, ReadClusterFile("out/main"));
//   // c.servers = {"127.0.0.1:40123", ...}; c.credentials = ".../credentials"
#ifndef ZEROSHARD_TOOLS_CTL_CLUSTER_FILE_H_
#define ZEROSHARD_TOOLS_CTL_CLUSTER_FILE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace zeroshard::ctl {

struct ClusterFile {
  std::vector<std::string> servers;  // HOST:PORT, by index
  std::string credentials;           // "" when the run had none
  // The run's config.resolved.json beside cluster.json; "" when absent.
  std::string resolved_config;
};

// `path`: the run's --out directory or the cluster.json itself. NOT_FOUND
// when there is none (the run has not started its servers, or is another
// directory); DATA_LOSS when it does not parse or lists no server.
absl::StatusOr<ClusterFile> ReadClusterFile(const std::string& path);

}  // namespace zeroshard::ctl

#endif  // ZEROSHARD_TOOLS_CTL_CLUSTER_FILE_H_
