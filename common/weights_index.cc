#include "common/weights_index.h"

#include <utility>

#include <nlohmann/json.hpp>

namespace zeroshard {

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

std::string WeightsIndexPath(const std::string& path) {
  constexpr char kExt[] = ".f32";
  if (path.size() > 4 && path.compare(path.size() - 4, 4, kExt) == 0) {
    return path.substr(0, path.size() - 4) + ".json";
  }
  return path + ".json";
}

}  // namespace zeroshard
