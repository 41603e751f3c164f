// Gather planning (server/gather_reactor.h PlanGather): any GatherRequest
// against server 1 of 2 of a small shard (so the owned range does not start
// at 0), with one shared-memory region open, which a request naming an odd
// region id is pointed at. Input: the request's protobuf bytes.
// Checked: an accepted plan has every range inside the owned range and the
// non-empty ranges pairwise disjoint, a dtype of FP32 or BF16 and
// messages of at most kMaxGatherMessageBytes holding at least one element.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "server/gather_reactor.h"
#include "tests/fuzz/fuzz_shard.h"
#include "tests/fuzz/fuzz_util.h"

namespace zeroshard::fuzz {
namespace {

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "gather_plan: %s\n", what);
  std::abort();
}

void Run(const uint8_t* data, size_t size) {
  QuietProtobuf();
  static const std::shared_ptr<ModelShard> state = FuzzShard(2, 1);
  uint64_t region = 0;
  const SharedRegions* regions = &FuzzRegions(&region);
  v1::GatherRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return;
  if (request.region() % 2 == 1) request.set_region(region);
  absl::StatusOr<GatherPlan> plan = PlanGather(*state, request, regions);
  if (!plan.ok()) return;
  if (request.region() != 0) {
    uint64_t bytes = 0;
    for (const FlatRange& r : plan->ranges) {
      bytes += r.size() * DTypeSize(plan->dtype);
    }
    const uint8_t* begin = plan->region->data() + SharedMemory::kDataOffset;
    const uint8_t* end = plan->region->data() + plan->region->size();
    if (plan->region_at < begin || plan->region_at > end ||
        bytes > static_cast<uint64_t>(end - plan->region_at)) {
      Fail("accepted a gather that does not fit its region");
    }
  }
  const FlatRange own = state->owned();
  if (plan->dtype != DType::kFp32 && plan->dtype != DType::kBf16) {
    Fail("accepted a dtype other than FP32 or BF16");
  }
  const uint64_t esize = DTypeSize(plan->dtype);
  // A gather into a region sends no data: one message per server chunk.
  if (plan->elems_per_message == 0 ||
      (request.region() == 0 &&
       plan->elems_per_message * esize > kMaxGatherMessageBytes)) {
    Fail("message size out of bounds");
  }
  std::vector<FlatRange> ranges;
  for (const FlatRange& r : plan->ranges) {
    if (r.end < r.begin || r.begin < own.begin || r.end > own.end) {
      Fail("accepted a range outside the owned range");
    }
    if (!r.empty()) ranges.push_back(r);
  }
  std::sort(
      ranges.begin(), ranges.end(),
      [](const FlatRange& a, const FlatRange& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].begin < ranges[i - 1].end)
      Fail("accepted overlapping ranges");
  }
}

}  // namespace
}  // namespace zeroshard::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  zeroshard::fuzz::Run(data, size);
  return 0;
}
