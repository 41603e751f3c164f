#include "tools/ctl/cluster_file.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"

namespace zeroshard::ctl {

absl::StatusOr<ClusterFile> ReadClusterFile(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const std::string file =
      fs::is_directory(path, ec) ? (fs::path(path) / "cluster.json").string()
                                 : path;
  std::ifstream in(file);
  if (!in) {
    return absl::NotFoundError(absl::StrCat(
        "cannot read ", file, " (a zeroshard-train run writes it into its "
        "--out directory once its servers are up)"));
  }
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json j =
      nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  auto bad = [&](const std::string& why) {
    return absl::DataLossError(absl::StrCat(file, ": ", why));
  };
  if (j.is_discarded() || !j.is_object()) return bad("not a JSON object");
  ClusterFile c;
  const auto servers = j.find("servers");
  if (servers == j.end() || !servers->is_array() || servers->empty()) {
    return bad("no \"servers\" list");
  }
  for (const nlohmann::json& s : *servers) {
    const auto a = s.is_object() ? s.find("address") : s.end();
    if (a == s.end() || !a->is_string() || a->get<std::string>().empty()) {
      return bad("a server without an \"address\"");
    }
    c.servers.push_back(a->get<std::string>());
  }
  if (const auto cred = j.find("credentials"); cred != j.end()) {
    if (!cred->is_string()) return bad("\"credentials\" is not a string");
    c.credentials = cred->get<std::string>();
  }
  const fs::path resolved = fs::path(file).parent_path() / "config.resolved.json";
  if (fs::exists(resolved, ec)) c.resolved_config = resolved.string();
  return c;
}

}  // namespace zeroshard::ctl
