#include "client/train/weights_export.h"

#include <bit>
#include <cstdio>
#include <memory>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "client/shard_client.h"
#include "common/status_macros.h"

namespace zeroshard {
namespace {

absl::Status WriteAtomically(const std::string& path, const void* data,
                             size_t bytes) {
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) return absl::PermissionDeniedError("cannot create " + tmp);
  const bool ok = std::fwrite(data, 1, bytes, f) == bytes;
  if (std::fclose(f) != 0 || !ok) {
    std::remove(tmp.c_str());
    return absl::DataLossError("cannot write " + tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::DataLossError("cannot rename " + tmp + " to " + path);
  }
  return absl::OkStatus();
}

}  // namespace

std::string WeightsIndexJson(const FlatLayout& layout, int64_t version) {
  nlohmann::json j;
  j["format"] = "zeroshard-weights-v1";
  j["dtype"] = "float32";
  j["step"] = version;
  j["total_elems"] = layout.total_elems();
  j["param_elems"] = layout.param_elems();
  j["num_workers"] = layout.num_workers();
  j["num_servers"] = layout.num_servers();
  nlohmann::json tensors = nlohmann::json::array();
  for (const TensorInfo& t : layout.tensors()) {
    tensors.push_back({{"name", t.name},
                       {"shape", t.shape},
                       {"offset", t.offset},
                       {"numel", t.numel},
                       {"unit", layout.units()[t.unit].name}});
  }
  j["tensors"] = std::move(tensors);
  return j.dump(1) + "\n";
}

absl::Status ExportWeights(const std::vector<std::string>& servers,
                           const FlatLayout& layout, int64_t version,
                           const std::string& dir, absl::Duration timeout) {
  static_assert(std::endian::native == std::endian::little,
                "weights.f32 is little-endian; add a byte swap here");
  ShardClientOptions options;
  options.call_timeout = timeout;
  options.control_timeout = timeout;
  ASSIGN_OR_RETURN(std::unique_ptr<ShardClient> client,
                   ShardClient::Create(servers, layout, options));
  std::vector<float> weights(layout.total_elems());
  const FlatRange all{0, layout.total_elems()};
  absl::StatusOr<GatherResult> g =
      client->Gather({&all, 1}, DType::kFp32, version, weights.data(),
                     weights.size() * sizeof(float));
  if (!g.ok()) {
    return absl::Status(g.status().code(),
                        absl::StrCat("gathering the final weights: ",
                                     g.status().message()));
  }
  RETURN_IF_ERROR(WriteAtomically(dir + "/weights.f32", weights.data(),
                                  weights.size() * sizeof(float)));
  const std::string index = WeightsIndexJson(layout, version);
  return WriteAtomically(dir + "/weights.json", index.data(), index.size());
}

}  // namespace zeroshard
