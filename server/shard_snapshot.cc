#include "server/shard_snapshot.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/checkpoint_manifest.h"
#include "optim/quant8.h"
#include "server/shard_checkpoint.h"

namespace zeroshard {
namespace {

// Background copies and the file write run under SCHED_IDLE: on a host
// whose cores also train (a local cluster), they take only the cycles
// training leaves. (A copy holds its chunk's lock for one chunk, ~0.5 ms at
// the default size; an update or Gather of that chunk may wait that long.)
// Where it is refused, the thread keeps its priority.
void RunAtIdlePriority() {
  sched_param p{};
  p.sched_priority = 0;
  pthread_setschedparam(pthread_self(), SCHED_IDLE, &p);
}

}  // namespace

ShardSnapshot::ShardSnapshot(uint64_t step, std::string directory,
                             v1::ShardCheckpointHeader header,
                             size_t num_chunks,
                             std::unique_ptr<SnapshotArrays> arrays,
                             const ShardStore* stream_from)
    : step_(step),
      directory_(std::move(directory)),
      num_chunks_(num_chunks),
      header_(std::move(header)),
      adam_t_(num_chunks, 0),
      copied_(std::make_unique<std::atomic<bool>[]>(num_chunks)),
      remaining_(num_chunks),
      arrays_(std::move(arrays)),
      stream_(directory_.empty() ? nullptr : stream_from) {
  const uint64_t n = header_.owned().length();
  const size_t count = 1 + ShardCheckpointSlots(header_).size();
  if (stream_ != nullptr) {
    arrays_.reset();
    formats_ = ShardCheckpointFormats(header_);
    pieces_.push_back({0, false});
    for (size_t k = 0; k < formats_.size(); ++k) {
      pieces_.push_back({1 + k, false});
      if (formats_[k] != SlotFormat::kFp32) pieces_.push_back({1 + k, true});
    }
    aside_.resize(num_chunks);
    pieces_read_ = std::make_unique<uint32_t[]>(num_chunks);
    safe_ = std::make_unique<std::atomic<bool>[]>(num_chunks);
    for (size_t c = 0; c < num_chunks; ++c) safe_[c].store(false);
  } else if (arrays_ == nullptr || arrays_->n != n || arrays_->a.size() != count) {
    arrays_ = std::make_unique<SnapshotArrays>();
    arrays_->n = n;
    arrays_->a.resize(count);
    constexpr size_t kAlign = 64;
    const std::vector<SlotFormat> formats = ShardCheckpointFormats(header_);
    for (size_t k = 0; k < count; ++k) {  // filled by Capture
      auto& a = arrays_->a[k];
      const uint64_t image =
          k == 0 ? n * sizeof(float) : SlotBytes(formats[k - 1], n);
      const size_t bytes =
          std::max<size_t>(kAlign, (image + kAlign - 1) / kAlign * kAlign);
      a.reset(static_cast<float*>(std::aligned_alloc(kAlign, bytes)));
      if (a == nullptr) {
        arrays_.reset();
        break;
      }
    }
  }
  for (size_t c = 0; c < num_chunks; ++c) copied_[c].store(false);
  header_.set_step(step);
}

void ShardSnapshot::RunInBackground(std::function<void()> work) {
  background_ = std::make_unique<std::thread>([work = std::move(work)] {
    RunAtIdlePriority();
    work();
  });
}

ShardSnapshot::~ShardSnapshot() { Abandon(); }

void ShardSnapshot::Abandon() {
  stopping_ = true;
  if (background_ != nullptr && background_->joinable()) {
    if (background_->get_id() == std::this_thread::get_id()) {
      background_->detach();
    } else {
      background_->join();
    }
  }
  if (writer_ != nullptr && writer_->joinable()) {
    if (writer_->get_id() == std::this_thread::get_id()) {
      writer_->detach();  // the last reference dropped by the writer itself
    } else {
      writer_->join();
    }
  }
}

std::string ShardSnapshot::FilePath() const {
  return (std::filesystem::path(directory_) / CheckpointFolderName(step_) /
          ShardFileName(header_.server_index(), header_.num_servers()))
      .string();
}

uint64_t ShardSnapshot::PieceBytes(const Piece& p, uint64_t n) const {
  if (p.array == 0) return n * sizeof(float);
  if (p.scales) return Q8Blocks(n) * sizeof(float);
  return formats_[p.array - 1] == SlotFormat::kFp32 ? n * sizeof(float) : n;
}

const char* ShardSnapshot::LivePiece(const Piece& p,
                                     const ShardStore::ChunkArrays& a) {
  if (p.array == 0) return reinterpret_cast<const char*>(a.master);
  const size_t k = p.array - 1;
  if (a.slots[k] != nullptr) return reinterpret_cast<const char*>(a.slots[k]);
  return p.scales ? reinterpret_cast<const char*>(a.absmax[k])
                  : reinterpret_cast<const char*>(a.codes[k]);
}

bool ShardSnapshot::Capture(const ShardStore& store, size_t c,
                            uint64_t adam_t, bool before_update) {
  if (stream_ != nullptr) {
    if (copied_[c].load(std::memory_order_acquire) &&
        (!before_update || safe_[c].load(std::memory_order_acquire) ||
         reading_done_.load(std::memory_order_acquire))) {
      return false;
    }
    bool marked_now = false;
    const absl::Time t0 = absl::Now();
    const absl::Status locked =
        store.WithChunkLocked(c, [&](const ShardStore::ChunkArrays& a) {
          if (!copied_[c].load(std::memory_order_relaxed)) {
            adam_t_[c] = adam_t;
            marked_now = true;
          }
          if (before_update && !safe_[c].load(std::memory_order_relaxed) &&
              !reading_done_.load(std::memory_order_relaxed)) {
            // The chunk as it is at step(): set aside before the update.
            const uint64_t n = a.range.size();
            uint64_t bytes = 0;
            for (const Piece& p : pieces_) bytes += PieceBytes(p, n);
            aside_[c] = std::make_unique_for_overwrite<char[]>(bytes);
            char* at = aside_[c].get();
            for (const Piece& p : pieces_) {
              const uint64_t b = PieceBytes(p, n);
              std::memcpy(at, LivePiece(p, a), b);
              at += b;
            }
            safe_[c].store(true, std::memory_order_release);
            copy_nanos_ += absl::ToInt64Nanoseconds(absl::Now() - t0);
          }
          if (marked_now) copied_[c].store(true, std::memory_order_release);
        });
    if (!locked.ok()) {
      Complete(locked);
      return false;
    }
    return marked_now &&
           remaining_.fetch_sub(1, std::memory_order_acq_rel) == 1;
  }
  if (copied_[c].load(std::memory_order_acquire)) return false;
  bool copied_now = false;
  const absl::Time t0 = absl::Now();
  const absl::Status copied = store.WithChunkLocked(c, [&](const ShardStore::ChunkArrays& a) {
    // Checked again under the lock: only the first thread copies, and it
    // does so before any update of this step can take the lock.
    if (copied_[c].load(std::memory_order_relaxed)) return;
    const size_t i = a.range.begin - header_.owned().offset();
    const size_t n = a.range.size();
    const size_t bytes = n * sizeof(float);
    std::memcpy(arrays_->a[0].get() + i, a.master, bytes);
    for (size_t k = 0; k + 1 < arrays_->a.size(); ++k) {
      if (a.slots[k] != nullptr) {
        std::memcpy(arrays_->a[1 + k].get() + i, a.slots[k], bytes);
        continue;
      }
      // An 8-bit image: codes, then the scales (chunks hold whole blocks).
      char* image = reinterpret_cast<char*>(arrays_->a[1 + k].get());
      std::memcpy(image + i, a.codes[k], n);
      std::memcpy(image + arrays_->n + i / kQ8SlotBlock * sizeof(float),
                  a.absmax[k], Q8Blocks(n) * sizeof(float));
    }
    adam_t_[c] = adam_t;
    copied_[c].store(true, std::memory_order_release);
    copied_now = true;
  });
  if (!copied.ok()) {
    // The store lost its device state: this snapshot cannot be taken.
    Complete(copied);
    return false;
  }
  if (!copied_now) return false;
  copy_nanos_ += absl::ToInt64Nanoseconds(absl::Now() - t0);
  return remaining_.fetch_sub(1, std::memory_order_acq_rel) == 1;
}

void ShardSnapshot::Values(size_t which, FlatRange range, float* out) const {
  const uint64_t at = range.begin - header_.owned().offset();
  const float* array = arrays_->a[which].get();
  const std::vector<SlotFormat> formats = ShardCheckpointFormats(header_);
  if (which == 0 || formats[which - 1] == SlotFormat::kFp32) {
    std::memcpy(out, array + at, range.size() * sizeof(float));
    return;
  }
  const uint8_t* codes = reinterpret_cast<const uint8_t*>(array);
  const float* absmax = reinterpret_cast<const float*>(
      reinterpret_cast<const char*>(array) + arrays_->n);
  const std::array<float, 256>& map =
      DynamicMap(Quant8MapOf(formats[which - 1]));
  for (uint64_t e = 0; e < range.size(); ++e) {
    out[e] = map[codes[at + e]] * absmax[(at + e) / kQ8SlotBlock];
  }
}

void ShardSnapshot::Finish() {
  header_.clear_chunk_versions();
  header_.clear_chunk_adam_steps();
  for (size_t c = 0; c < num_chunks_; ++c) {
    header_.add_chunk_versions(step_);
    header_.add_chunk_adam_steps(adam_t_[c]);
  }
  if (directory_.empty()) {
    SnapshotResult r;
    r.copy_seconds = copy_nanos_.load() * 1e-9;
    Complete(r);
    return;
  }
  writer_ = std::make_unique<std::thread>([this] { Write(); });
}

void ShardSnapshot::Write() {
  // A streaming writer keeps its priority: at idle priority on cores that
  // train it would read nothing before the step's updates come, and each
  // update would set its chunk aside (fresh memory) instead.
  if (stream_ == nullptr) RunAtIdlePriority();
  const absl::Time t0 = absl::Now();
  const std::string path = FilePath();
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(),
                                      ec);
  if (ec) {
    ReleaseChunks();
    Complete(absl::PermissionDeniedError(absl::StrCat(
        "checkpoint: cannot create ",
        std::filesystem::path(path).parent_path().string(), ": ",
        ec.message())));
    return;
  }
  absl::StatusOr<uint64_t> sum;
  if (stream_ != nullptr) {
    sum = StreamWrite(path);
  } else {
    ShardCheckpointContents contents{header_, arrays_->a[0].get(), {}};
    for (size_t k = 1; k < arrays_->a.size(); ++k) {
      contents.slots.push_back(arrays_->a[k].get());
    }
    sum = WriteShardCheckpoint(path, contents);
  }
  if (!sum.ok()) {
    Complete(sum.status());
    return;
  }
  // The copy has served its purpose: its bytes per owned element go back.
  arrays_.reset();
  SnapshotResult r;
  r.path = path;
  r.checksum = *sum;
  r.bytes = std::filesystem::file_size(path, ec);
  r.copy_seconds = copy_nanos_.load() * 1e-9;
  r.write_seconds = absl::ToDoubleSeconds(absl::Now() - t0);
  Complete(r);
}

absl::StatusOr<uint64_t> ShardSnapshot::StreamWrite(const std::string& path) {
  absl::StatusOr<std::unique_ptr<ShardFileStream>> w =
      ShardFileStream::Open(path, header_);
  if (!w.ok()) {
    ReleaseChunks();
    return w.status();
  }
  // Piece by piece in the file's order; each part of a piece read under
  // its chunk's lock, from the copy set aside if an update came first.
  for (size_t p = 0; p < pieces_.size(); ++p) {
    const Piece& piece = pieces_[p];
    for (size_t c = 0; c < num_chunks_; ++c) {
      const uint64_t n = stream_->ChunkRange(c).size();
      const uint64_t bytes = PieceBytes(piece, n);
      uint64_t aside_at = 0;
      for (size_t q = 0; q < p; ++q) aside_at += PieceBytes(pieces_[q], n);
      absl::Status s = (*w)->Append(
          bytes, [&](char* dst, uint64_t at, size_t part) -> absl::Status {
            if (stopping_.load()) {
              return absl::CancelledError(
                  "checkpoint: the shard was replaced while it was written");
            }
            return stream_->WithChunkLocked(
                c, [&](const ShardStore::ChunkArrays& a) {
                  const char* src = aside_[c] != nullptr
                                        ? aside_[c].get() + aside_at
                                        : LivePiece(piece, a);
                  std::memcpy(dst, src + at, part);
                  if (at + part == bytes &&
                      ++pieces_read_[c] == pieces_.size()) {
                    safe_[c].store(true, std::memory_order_release);
                  }
                });
          });
      if (!s.ok()) {
        ReleaseChunks();
        return s;
      }
    }
  }
  ReleaseChunks();
  return (*w)->Finish();
}

void ShardSnapshot::ReleaseChunks() {
  if (stream_ == nullptr || reading_done_.exchange(true)) return;
  // Under each chunk's lock: a capture that looked before reading_done_
  // was set has finished with its chunk's copy.
  for (size_t c = 0; c < num_chunks_; ++c) {
    std::unique_ptr<char[]> aside;
    (void)stream_->WithChunkLocked(
        c, [&](const ShardStore::ChunkArrays&) { aside = std::move(aside_[c]); });
  }
  if (chunks_read_) chunks_read_();
}

void ShardSnapshot::Complete(absl::StatusOr<SnapshotResult> result) {
  absl::flat_hash_map<
      uint64_t, std::function<void(const absl::StatusOr<SnapshotResult>&)>>
      waiters;
  {
    absl::MutexLock lock(&mu_);
    if (result_.has_value()) return;  // the first result stands
    result_ = result;
    waiters.swap(waiters_);
  }
  for (auto& [id, done] : waiters) done(result);
}

uint64_t ShardSnapshot::AddWaiter(
    std::function<void(const absl::StatusOr<SnapshotResult>&)> done) {
  std::optional<absl::StatusOr<SnapshotResult>> now;
  {
    absl::MutexLock lock(&mu_);
    if (!result_.has_value()) {
      const uint64_t id = next_waiter_++;
      waiters_.emplace(id, std::move(done));
      return id;
    }
    now = result_;
  }
  done(*now);
  return 0;
}

bool ShardSnapshot::CancelWaiter(uint64_t id) {
  absl::MutexLock lock(&mu_);
  return waiters_.erase(id) > 0;
}

std::optional<absl::StatusOr<SnapshotResult>> ShardSnapshot::result() const {
  absl::MutexLock lock(&mu_);
  return result_;
}

}  // namespace zeroshard
