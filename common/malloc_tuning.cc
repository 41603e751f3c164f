#include "common/malloc_tuning.h"

#include <malloc.h>

#include <cstdlib>

namespace zeroshard {

bool TuneMallocForLargeBuffers() {
  if (std::getenv("MALLOC_MMAP_THRESHOLD_") != nullptr) return true;
  bool ok = mallopt(M_MMAP_THRESHOLD, 256 << 20) == 1;
  ok = mallopt(M_TRIM_THRESHOLD, 1 << 30) == 1 && ok;
  ok = mallopt(M_TOP_PAD, 64 << 20) == 1 && ok;
  return ok;
}

}  // namespace zeroshard
