// Init validation: ModelShard::Normalize and ModelShard::Create
// (server/model_shard.h) with any InitRequest, manifest included.
// Input: the request's protobuf bytes.
//
// Create allocates 14 bytes per owned element for a valid request, bounded
// only by the machine's memory (ShardStore::Create); so that a legitimately
// large model does not count as a crash here, Create runs only when the
// layout gives this server at most kMaxFuzzOwnedElems elements (or when the
// layout is refused, which must refuse Create too). Likewise FlatLayout
// keeps 8 bytes per server, so num_servers is capped at kMaxFuzzServers
// (the server's own --num_servers must equal it anyway).
// Checked: Normalize is idempotent (a normalized request normalizes to
// itself); Create agrees with FlatLayout about validity and the owned range.
#include <cstdio>
#include <cstdlib>

#include "common/layout.h"
#include "server/model_shard.h"
#include "tests/fuzz/fuzz_util.h"
#include "wire/proto_convert.h"

namespace zeroshard::fuzz {
namespace {

constexpr uint64_t kMaxFuzzOwnedElems = uint64_t{1} << 20;
constexpr uint32_t kMaxFuzzServers = 1 << 16;

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "init: %s\n", what);
  std::abort();
}

void Run(const uint8_t* data, size_t size) {
  QuietProtobuf();
  v1::InitRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return;
  absl::StatusOr<v1::InitRequest> normal = ModelShard::Normalize(request);
  if (!normal.ok()) {
    if (ModelShard::Create(request, {0, 1}, Placement::kHost).ok()) {
      Fail("Create accepted what Normalize refused");
    }
    return;
  }
  absl::StatusOr<v1::InitRequest> again = ModelShard::Normalize(*normal);
  if (!again.ok()) Fail("a normalized request does not normalize");
  // Compared as bytes: DescribeConflict would call a NaN field (which
  // Create then refuses) a conflict with itself.
  if (normal->SerializeAsString() != again->SerializeAsString()) {
    Fail("Normalize is not idempotent");
  }
  const uint32_t servers = normal->num_servers();
  const uint32_t index = normal->server_index();
  if (servers == 0 || index >= servers) {
    if (ModelShard::Create(request, {index, servers}, Placement::kHost).ok()) {
      Fail("Create accepted a server index outside [0, num_servers)");
    }
    return;
  }
  if (servers > kMaxFuzzServers) return;  // see the file comment
  const ModelManifest manifest = FromProto(normal->manifest());
  absl::StatusOr<FlatLayout> layout =
      FlatLayout::Create(manifest, servers, normal->num_workers());
  if (layout.ok() && layout->ServerRange(index).size() > kMaxFuzzOwnedElems) {
    return;  // valid but large: see the file comment
  }
  absl::StatusOr<std::unique_ptr<ModelShard>> shard =
      ModelShard::Create(request, {index, servers}, Placement::kHost);
  if (!layout.ok()) {
    if (shard.ok()) Fail("Create accepted a manifest FlatLayout refuses");
    return;
  }
  if (shard.ok() && !((*shard)->owned() == layout->ServerRange(index))) {
    Fail("the owned range differs from the layout's");
  }
}

}  // namespace
}  // namespace zeroshard::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  zeroshard::fuzz::Run(data, size);
  return 0;
}
