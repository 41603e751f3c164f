#include "common/data_files.h"

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace zeroshard {
namespace {

bool HasGlobChars(const std::string& p) {
  return p.find_first_of("*?[") != std::string::npos;
}

absl::Status CheckReadable(const std::string& path, const std::string& key) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    const std::string why = absl::StrCat("config key \"", key, "\": ", path,
                                         ": ", std::strerror(err));
    if (err == EACCES || err == EPERM) return absl::PermissionDeniedError(why);
    return absl::NotFoundError(why);
  }
  struct stat st {};
  const bool regular = fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  close(fd);
  if (!regular) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config key \"", key, "\": ", path, " is not a regular file"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ExpandDataPaths(
    const std::vector<std::string>& patterns, const std::string& key) {
  std::vector<std::string> out;
  for (const std::string& p : patterns) {
    if (!HasGlobChars(p)) {
      out.push_back(p);
      continue;
    }
    glob_t g{};
    const int rc = ::glob(p.c_str(), GLOB_ERR, nullptr, &g);
    if (rc == 0) {
      for (size_t i = 0; i < g.gl_pathc; ++i) out.push_back(g.gl_pathv[i]);
    }
    globfree(&g);
    if (rc != 0) {
      return absl::NotFoundError(absl::StrCat("config key \"", key,
                                              "\": pattern ", p,
                                              " matches no file"));
    }
  }
  return out;
}

absl::Status CheckDataFiles(const DataConfig& data) {
  const struct {
    const std::vector<std::string>* patterns;
    const char* key;
  } lists[] = {{&data.paths, data.paths_key.c_str()},
               {&data.validation_paths, "zeroshard.data.validation"}};
  for (const auto& l : lists) {
    ASSIGN_OR_RETURN(std::vector<std::string> files,
                     ExpandDataPaths(*l.patterns, l.key));
    for (const std::string& f : files) RETURN_IF_ERROR(CheckReadable(f, l.key));
  }
  return absl::OkStatus();
}

}  // namespace zeroshard
