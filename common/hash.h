// Small hashes. SplitMix64's finalizer: a fast bijection on 64-bit words,
// the building block of every counter-based random number in zeroshard
// (initial weights, data sampling); values depend only on the input, never on
// call order. Fnv1a64: a cheap fingerprint of bytes (configs, corpora) for
// agreement checks, not for security.
#ifndef ZEROSHARD_COMMON_HASH_H_
#define ZEROSHARD_COMMON_HASH_H_

#include <cstdint>
#include <string_view>

namespace zeroshard {

inline uint64_t SplitMix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// 64-bit FNV-1a of `bytes`.
inline uint64_t Fnv1a64(std::string_view bytes) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace zeroshard

#endif  // ZEROSHARD_COMMON_HASH_H_
