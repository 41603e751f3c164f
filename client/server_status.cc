#include "client/server_status.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace zeroshard {

std::vector<std::string> ClusterView::StateNames() const {
  std::vector<std::string> names = {kMasterState};
  names.insert(names.end(), state_slots.begin(), state_slots.end());
  return names;
}

absl::Status ClusterView::CheckStateName(const std::string& name) const {
  const std::vector<std::string> names = StateNames();
  if (std::find(names.begin(), names.end(), name) != names.end()) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "state '", name, "' is not one of ", absl::StrJoin(names, ", ")));
}

}  // namespace zeroshard
