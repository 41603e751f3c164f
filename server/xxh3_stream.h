// One streaming XXH3-64 hash (libxxhash): the checksum of a shard
// checkpoint file, and the digest two copies of a slot compare
// (docs/DESIGN.md, "Replicas").
//
//   Xxh3Stream h;
//   h.Update(data, bytes);
//   uint64_t d = h.Digest();
#ifndef ZEROSHARD_SERVER_XXH3_STREAM_H_
#define ZEROSHARD_SERVER_XXH3_STREAM_H_

#include <xxhash.h>

#include <cstddef>
#include <cstdint>
#include <new>

namespace zeroshard {

class Xxh3Stream {
 public:
  Xxh3Stream() : state_(XXH3_createState()) {
    if (state_ == nullptr) throw std::bad_alloc();
    XXH3_64bits_reset(state_);
  }
  ~Xxh3Stream() { XXH3_freeState(state_); }
  Xxh3Stream(const Xxh3Stream&) = delete;
  Xxh3Stream& operator=(const Xxh3Stream&) = delete;

  void Update(const void* p, size_t n) { XXH3_64bits_update(state_, p, n); }
  uint64_t Digest() const { return XXH3_64bits_digest(state_); }

 private:
  XXH3_state_t* state_;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_SERVER_XXH3_STREAM_H_
