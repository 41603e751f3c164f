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
                             std::unique_ptr<SnapshotArrays> arrays)
    : step_(step),
      directory_(std::move(directory)),
      num_chunks_(num_chunks),
      header_(std::move(header)),
      adam_t_(num_chunks, 0),
      copied_(std::make_unique<std::atomic<bool>[]>(num_chunks)),
      remaining_(num_chunks),
      arrays_(std::move(arrays)) {
  const uint64_t n = header_.owned().length();
  const size_t count = 1 + ShardCheckpointSlots(header_).size();
  if (arrays_ == nullptr || arrays_->n != n || arrays_->a.size() != count) {
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

ShardSnapshot::~ShardSnapshot() {
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

bool ShardSnapshot::Capture(const ShardStore& store, size_t c,
                            uint64_t adam_t) {
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
  RunAtIdlePriority();
  const absl::Time t0 = absl::Now();
  const std::string path = FilePath();
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(),
                                      ec);
  if (ec) {
    Complete(absl::PermissionDeniedError(absl::StrCat(
        "checkpoint: cannot create ",
        std::filesystem::path(path).parent_path().string(), ": ",
        ec.message())));
    return;
  }
  ShardCheckpointContents contents{header_, arrays_->a[0].get(), {}};
  for (size_t k = 1; k < arrays_->a.size(); ++k) {
    contents.slots.push_back(arrays_->a[k].get());
  }
  absl::StatusOr<uint64_t> sum = WriteShardCheckpoint(path, contents);
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
