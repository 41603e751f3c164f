#include "server/shard_store.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/init_values.h"
#include "common/status_macros.h"

namespace zeroshard {

absl::StatusOr<std::unique_ptr<ShardStore>> ShardStore::Create(
    FlatRange owned, uint64_t chunk_elems, Placement placement) {
  if (chunk_elems == 0 || chunk_elems % kFlatAlignment != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "chunk_elems (", chunk_elems, ") must be a positive multiple of ",
        kFlatAlignment));
  }
  if (owned.end < owned.begin) {
    return absl::InvalidArgumentError("owned range ends before it begins");
  }
  // 14 bytes per element (master, m, v, mirror). Refuse what this machine
  // cannot hold rather than be killed while filling it.
  const unsigned __int128 need =
      static_cast<unsigned __int128>(owned.size()) * 14;
  const unsigned __int128 have =
      static_cast<unsigned __int128>(sysconf(_SC_PHYS_PAGES)) *
      static_cast<unsigned __int128>(sysconf(_SC_PAGESIZE));
  if (have > 0 && need > have) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the owned range of ", owned.size(), " elements needs ",
        static_cast<uint64_t>(need), " bytes of state; this machine has ",
        static_cast<uint64_t>(have), " bytes of memory (add servers)"));
  }
  std::unique_ptr<ShardStore> store(new ShardStore());
  store->owned_ = owned;
  store->chunk_elems_ = chunk_elems;
  store->num_chunks_ = (owned.size() + chunk_elems - 1) / chunk_elems;
  store->placement_ = placement;
  const size_t n = owned.size();
  ASSIGN_OR_RETURN(store->master_buf_, StateBuffer::Allocate(placement, 4 * n));
  ASSIGN_OR_RETURN(store->exp_avg_buf_,
                   StateBuffer::Allocate(placement, 4 * n));
  ASSIGN_OR_RETURN(store->exp_avg_sq_buf_,
                   StateBuffer::Allocate(placement, 4 * n));
  ASSIGN_OR_RETURN(store->mirror_buf_, StateBuffer::Allocate(placement, 2 * n));
  store->master_ = static_cast<float*>(store->master_buf_.data());
  store->exp_avg_ = static_cast<float*>(store->exp_avg_buf_.data());
  store->exp_avg_sq_ = static_cast<float*>(store->exp_avg_sq_buf_.data());
  store->mirror_ = static_cast<uint16_t*>(store->mirror_buf_.data());
  store->chunk_mu_ = std::make_unique<absl::Mutex[]>(store->num_chunks_);
  return store;
}

FlatRange ShardStore::ChunkRange(size_t c) const {
  const uint64_t begin = owned_.begin + c * chunk_elems_;
  return {begin, std::min(owned_.end, begin + chunk_elems_)};
}

size_t ShardStore::ChunkOf(uint64_t offset) const {
  return (offset - owned_.begin) / chunk_elems_;
}

void ShardStore::FillSeeded(const FlatLayout& layout, uint64_t seed,
                            double std) {
  // Chunk by chunk, so that each page is first touched by its fill.
  for (size_t c = 0; c < num_chunks_; ++c) {
    const FlatRange r = ChunkRange(c);
    absl::MutexLock lock(&chunk_mu_[c]);
    FillInitialValues(layout, seed, std, r, master_ + (r.begin - owned_.begin));
  }
  FinishFill();
}

void ShardStore::FillZeros() {
  if (owned_.size() > 0) {
    std::memset(master_, 0, owned_.size() * sizeof(float));
  }
  FinishFill();
}

void ShardStore::FinishFill() {
  for (size_t c = 0; c < num_chunks_; ++c) {
    const FlatRange r = ChunkRange(c);
    const size_t i = r.begin - owned_.begin;
    absl::MutexLock lock(&chunk_mu_[c]);
    std::memset(exp_avg_ + i, 0, r.size() * sizeof(float));
    std::memset(exp_avg_sq_ + i, 0, r.size() * sizeof(float));
    FloatToBf16Array(master_ + i, mirror_ + i, r.size());
  }
}

void ShardStore::ApplyUpdatesInChunk(size_t c,
                                     absl::Span<const ChunkUpdate> updates,
                                     OptimizerPool* pool) {
  auto apply = [&](size_t lo, size_t hi) {
    for (size_t k = lo; k < hi; ++k) {
      const ChunkUpdate& u = updates[k];
      const size_t i = u.range.begin - owned_.begin;
      AdamUpdate(u.step, u.grad,
                 {.master = master_ + i,
                  .exp_avg = exp_avg_ + i,
                  .exp_avg_sq = exp_avg_sq_ + i,
                  .mirror = mirror_ + i,
                  .n = u.range.size()});
    }
  };
  absl::MutexLock lock(&chunk_mu_[c]);
  if (pool == nullptr || updates.size() < 2) {
    apply(0, updates.size());
  } else {
    pool->ParallelFor(updates.size(), 1, apply);
  }
}

void ShardStore::Read(FlatRange range, DType dtype, void* out) const {
  const size_t i = range.begin - owned_.begin;
  absl::MutexLock lock(&chunk_mu_[ChunkOf(range.begin)]);
  if (dtype == DType::kBf16) {
    std::memcpy(out, mirror_ + i, range.size() * sizeof(uint16_t));
  } else {
    std::memcpy(out, master_ + i, range.size() * sizeof(float));
  }
}

void ShardStore::ForEachChunkRun(
    FlatRange range, absl::FunctionRef<void(size_t, size_t, size_t)> f) {
  uint64_t pos = range.begin;
  while (pos < range.end) {
    const size_t c = ChunkOf(pos);
    const uint64_t end = std::min(range.end, ChunkRange(c).end);
    absl::MutexLock lock(&chunk_mu_[c]);
    f(pos - owned_.begin, pos - range.begin, end - pos);
    pos = end;
  }
}

void ShardStore::WriteWeights(FlatRange range, DType dtype, const void* data) {
  ForEachChunkRun(range, [&](size_t i, size_t src, size_t n) {
    if (dtype == DType::kBf16) {
      Bf16ToFloatArray(static_cast<const uint16_t*>(data) + src, master_ + i,
                       n);
    } else {
      std::memcpy(master_ + i, static_cast<const float*>(data) + src,
                  n * sizeof(float));
    }
    FloatToBf16Array(master_ + i, mirror_ + i, n);
  });
}

void ShardStore::WriteState(FlatRange range, const float* master,
                            const float* exp_avg, const float* exp_avg_sq) {
  ForEachChunkRun(range, [&](size_t i, size_t src, size_t n) {
    std::memcpy(master_ + i, master + src, n * sizeof(float));
    std::memcpy(exp_avg_ + i, exp_avg + src, n * sizeof(float));
    std::memcpy(exp_avg_sq_ + i, exp_avg_sq + src, n * sizeof(float));
    FloatToBf16Array(master_ + i, mirror_ + i, n);
  });
}

void ShardStore::WithChunkLocked(
    size_t c, absl::FunctionRef<void(const ChunkArrays&)> f) const {
  const FlatRange r = ChunkRange(c);
  const size_t i = r.begin - owned_.begin;
  absl::MutexLock lock(&chunk_mu_[c]);
  f({r, master_ + i, exp_avg_ + i, exp_avg_sq_ + i});
}

bool ShardStore::TryAddPendingGradBytes(uint64_t bytes) {
  const int64_t limit = static_cast<int64_t>(pending_grad_limit());
  int64_t now = pending_grad_bytes_.load();
  do {
    if (bytes > static_cast<uint64_t>(limit) ||
        now > limit - static_cast<int64_t>(bytes)) {
      return false;
    }
  } while (!pending_grad_bytes_.compare_exchange_weak(
      now, now + static_cast<int64_t>(bytes)));
  return true;
}

StateNorms ShardStore::Norms() const {
  double sm = 0, sa = 0, sq = 0;
  for (size_t c = 0; c < num_chunks_; ++c) {
    const FlatRange r = ChunkRange(c);
    const size_t i = r.begin - owned_.begin;
    absl::MutexLock lock(&chunk_mu_[c]);
    for (size_t k = i; k < i + r.size(); ++k) {
      sm += static_cast<double>(master_[k]) * master_[k];
      sa += static_cast<double>(exp_avg_[k]) * exp_avg_[k];
      sq += static_cast<double>(exp_avg_sq_[k]) * exp_avg_sq_[k];
    }
  }
  return {std::sqrt(sm), std::sqrt(sa), std::sqrt(sq)};
}

std::map<std::string, uint64_t> ShardStore::BytesByKind() const {
  return {{"master", master_buf_.bytes()},
          {"exp_avg", exp_avg_buf_.bytes()},
          {"exp_avg_sq", exp_avg_sq_buf_.bytes()},
          {"mirror", mirror_buf_.bytes()},
          {"pending_grads", pending_grad_bytes()}};
}

}  // namespace zeroshard
