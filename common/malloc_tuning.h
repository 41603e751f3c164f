// glibc malloc settings for processes that move large buffers.
//
// With glibc's defaults every allocation above the (dynamic) mmap threshold
// gets a fresh mmap and every free an munmap, so each 1 MiB gRPC message and
// each unit buffer costs page faults on first touch: measured here, pushing
// gradients spent most of its time in page faults, and torch's CPU Adam ran
// ~35x slower. Raising the mmap threshold and the
// trim threshold keeps freed memory in the heap for reuse.
//
// Call once at the top of main(), before threads start.
#ifndef ZEROSHARD_COMMON_MALLOC_TUNING_H_
#define ZEROSHARD_COMMON_MALLOC_TUNING_H_

namespace zeroshard {

// Sets M_MMAP_THRESHOLD 256 MiB, M_TRIM_THRESHOLD 1 GiB, M_TOP_PAD 64 MiB
// unless the environment already sets MALLOC_MMAP_THRESHOLD_ (then the
// user's choice stands). Returns false where mallopt refused.
bool TuneMallocForLargeBuffers();

}  // namespace zeroshard

#endif  // ZEROSHARD_COMMON_MALLOC_TUNING_H_
