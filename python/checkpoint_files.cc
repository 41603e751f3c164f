#include "python/checkpoint_files.h"

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/checkpoint_files.h"
#include "common/checkpoint_manifest.h"
#include "python/ext_status.h"

namespace zeroshard {

void BindCheckpointFiles(py::module_& m) {
  m.def(
      "read_checkpoint_masters",
      [](const std::string& dir, std::optional<uint64_t> step) {
        // The newest complete checkpoint of `dir` (or `step`'s): its shard
        // files verified whole against the manifest (size and XXH3-64),
        // then each one's FP32 master array (after the magic, the header's
        // size and the header: docs/formats/shard_checkpoint.md).
        std::vector<uint64_t> steps = Value(ListCheckpoints(dir));
        if (steps.empty()) {
          Raise(absl::NotFoundError(
              absl::StrCat(dir, ": no complete checkpoint")));
        }
        const uint64_t s = step.has_value() ? *step : steps.back();
        const CheckpointManifest man = Value(ReadCheckpointManifest(dir, s));
        Check(VerifyCheckpointFiles(dir, man, /*full=*/true));
        py::array_t<float> out(static_cast<py::ssize_t>(man.total_elems));
        float* dst = out.mutable_data();
        const std::string folder =
            absl::StrCat(dir, "/", CheckpointFolderName(s));
        for (const CheckpointShardEntry& e : man.shards) {
          const std::string path = absl::StrCat(folder, "/", e.file);
          std::ifstream f(path, std::ios::binary);
          char head[12];
          uint32_t header_bytes = 0;
          if (!f.read(head, sizeof(head))) {
            Raise(absl::DataLossError(absl::StrCat(path, ": cut short")));
          }
          std::memcpy(&header_bytes, head + 8, sizeof(header_bytes));
          const uint64_t n = e.owned.size();
          if (12 + uint64_t{header_bytes} + 4 * n + 8 > e.bytes) {
            Raise(absl::DataLossError(absl::StrCat(
                path, ": a header of ", header_bytes, " bytes and ", n,
                " weights do not fit in its ", e.bytes, " bytes")));
          }
          f.seekg(12 + header_bytes);
          if (!f.read(reinterpret_cast<char*>(dst + e.owned.begin),
                      static_cast<std::streamsize>(4 * n))) {
            Raise(absl::DataLossError(absl::StrCat(path, ": cut short")));
          }
        }
        return py::make_tuple(s, out);
      },
      py::arg("dir"), py::arg("step") = py::none(),
      "(step, FP32 masters of the flat space) of a checkpoint folder's "
      "newest complete checkpoint (or `step`'s), every file verified first.");
}

}  // namespace zeroshard
