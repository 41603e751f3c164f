// A small ModelShard for the fuzz targets that drive the server's
// validators directly: two units (a 40x8 matrix and a 100-vector, padded to
// the flat alignment), chunks of 128 elements, server `index` of `servers`.
#ifndef ZEROSHARD_TESTS_FUZZ_FUZZ_SHARD_H_
#define ZEROSHARD_TESTS_FUZZ_FUZZ_SHARD_H_

#include <cstdio>
#include <cstdlib>
#include <memory>

#include "proto/zeroshard/v1/shard.pb.h"
#include "server/model_shard.h"
#include "server/shared_regions.h"

namespace zeroshard::fuzz {

inline v1::ModelManifest FuzzManifest() {
  v1::ModelManifest m;
  m.set_partition_count(1);
  v1::UnitSpec* a = m.add_units();
  a->set_name("a");
  v1::TensorSpec* w = a->add_tensors();
  w->set_name("a.w");
  w->add_shape(40);
  w->add_shape(8);
  w->mutable_init()->set_kind(v1::InitRule::NORMAL);
  w->mutable_init()->set_std_divisor(1.0);
  w->set_param_class(v1::MATRIX);
  v1::UnitSpec* b = m.add_units();
  b->set_name("b");
  v1::TensorSpec* v = b->add_tensors();
  v->set_name("b.v");
  v->add_shape(100);
  v->mutable_init()->set_kind(v1::InitRule::NORMAL);
  v->mutable_init()->set_std_divisor(1.0);
  v->set_param_class(v1::NORM);
  return m;
}

inline v1::InitRequest FuzzInit(uint32_t servers, uint32_t index) {
  v1::InitRequest r;
  *r.mutable_manifest() = FuzzManifest();
  r.set_num_servers(servers);
  r.set_server_index(index);
  v1::OptimizerConfig* o = r.mutable_optimizer();
  o->set_kind(v1::OptimizerConfig::ADAMW);
  o->set_lr(1e-2);
  o->set_beta1(0.9);
  o->set_beta2(0.999);
  o->set_eps(1e-8);
  o->set_weight_decay(0.1);
  r.mutable_init()->set_seed(7);
  r.set_chunk_elems(128);
  r.set_run_id("fuzz-run");
  return r;
}

// Aborts when the fixed shard cannot be built: the harness is broken.
inline std::shared_ptr<ModelShard> FuzzShard(uint32_t servers = 1,
                                             uint32_t index = 0) {
  auto state = ModelShard::Create(FuzzInit(servers, index), {index, servers},
                                  Placement::kHost);
  if (!state.ok()) {
    std::fprintf(stderr, "fuzz: cannot build the test shard: %s\n",
                 state.status().ToString().c_str());
    std::abort();
  }
  return std::shared_ptr<ModelShard>(*std::move(state));
}

// The fuzzers' shared-memory regions: one of 4 pages, open for the whole
// process (its id in `*id`). Aborts when it cannot be made.
inline const SharedRegions& FuzzRegions(uint64_t* id) {
  static SharedRegions* const regions = new SharedRegions();
  static const uint64_t region = [] {
    absl::StatusOr<SharedRegions::Opened> r =
        regions->Open(4 * 4096, 4 * 4096, 4 * 4096);
    if (!r.ok()) {
      std::fprintf(stderr, "fuzz: cannot open a region: %s\n",
                   r.status().ToString().c_str());
      std::abort();
    }
    return r->id;
  }();
  *id = region;
  return *regions;
}

}  // namespace zeroshard::fuzz

#endif  // ZEROSHARD_TESTS_FUZZ_FUZZ_SHARD_H_
