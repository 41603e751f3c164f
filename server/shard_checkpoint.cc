#include "server/shard_checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <cerrno>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/atomic_file.h"
#include "common/status_macros.h"
#include "optim/quant8.h"
#include "server/xxh3_stream.h"

namespace zeroshard {
namespace {

static_assert(std::endian::native == std::endian::little,
              "shard checkpoints are written little-endian, as in memory");

constexpr size_t kMagicBytes = 8;
constexpr size_t kPrefixBytes = kMagicBytes + 4;  // magic + u32 header size
// Headers are small (two u64 per chunk); anything larger is corruption.
constexpr uint32_t kMaxHeaderBytes = 256u << 20;

uint64_t NumChunks(const v1::ShardCheckpointHeader& h) {
  if (h.chunk_elems() == 0) return 0;
  // Without the `length + chunk - 1` that wraps for a huge chunk size.
  const uint64_t n = h.owned().length(), c = h.chunk_elems();
  return n / c + (n % c != 0);
}

// The header describes itself consistently.
absl::Status CheckHeader(const v1::ShardCheckpointHeader& h) {
  if (h.num_servers() == 0 || h.server_index() >= h.num_servers()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "server ", h.server_index(), " of ", h.num_servers()));
  }
  if (h.chunk_elems() == 0 || h.chunk_elems() % 64 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk_elems ", h.chunk_elems()));
  }
  if (h.owned().offset() + h.owned().length() < h.owned().offset()) {
    return absl::InvalidArgumentError("owned range wraps around");
  }
  if (h.owned().length() > (uint64_t{1} << 40)) {
    return absl::InvalidArgumentError(
        absl::StrCat("owned length ", h.owned().length()));
  }
  const uint64_t chunks = NumChunks(h);
  if (static_cast<uint64_t>(h.chunk_versions_size()) != chunks ||
      static_cast<uint64_t>(h.chunk_adam_steps_size()) != chunks) {
    return absl::InvalidArgumentError(absl::StrCat(
        chunks, " chunks but ", h.chunk_versions_size(), " versions and ",
        h.chunk_adam_steps_size(), " Adam step counts"));
  }
  if (h.state_slot_formats_size() != 0 &&
      h.state_slot_formats_size() != h.state_slots_size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        h.state_slots_size(), " state slots but ", h.state_slot_formats_size(),
        " formats"));
  }
  for (int f : h.state_slot_formats()) {
    if (f < 0 || f > 2) {
      return absl::InvalidArgumentError(absl::StrCat("state slot format ", f));
    }
  }
  if (h.state_slots_size() > 16) {
    return absl::InvalidArgumentError(
        absl::StrCat(h.state_slots_size(), " state slots"));
  }
  for (int k = 0; k < h.state_slots_size(); ++k) {
    const std::string& name = h.state_slots(k);
    if (name.empty() || name.size() > 64 ||
        std::find(h.state_slots().begin(), h.state_slots().begin() + k,
                  name) != h.state_slots().begin() + k) {
      return absl::InvalidArgumentError(absl::StrCat(
          "state slot ", k, " ('", name.substr(0, 64),
          "') is empty, too long or named twice"));
    }
  }
  return absl::OkStatus();
}

// Closes a file descriptor on scope exit.
struct Fd {
  explicit Fd(int f) : fd(f) {}
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  int fd;
};

// Reads exactly n bytes at `offset`; false on error or end of file.
bool PreadAll(int fd, void* out, size_t n, uint64_t offset) {
  char* p = static_cast<char*>(out);
  while (n > 0) {
    const ssize_t r = ::pread(fd, p, n, static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
    offset += static_cast<uint64_t>(r);
  }
  return true;
}

// Bytes of array `which` (0 master, 1 + k slot k), and where it starts
// after the header.
uint64_t ArrayBytes(const v1::ShardCheckpointHeader& h, size_t which) {
  const uint64_t n = h.owned().length();
  if (which == 0) return n * sizeof(float);
  return SlotBytes(ShardCheckpointFormats(h)[which - 1], n);
}
uint64_t ArrayOffset(const v1::ShardCheckpointHeader& h, size_t which) {
  uint64_t at = 0;
  for (size_t a = 0; a < which; ++a) at += ArrayBytes(h, a);
  return at;
}

}  // namespace

std::vector<SlotFormat> ShardCheckpointFormats(
    const v1::ShardCheckpointHeader& header) {
  std::vector<SlotFormat> out(ShardCheckpointSlots(header).size(),
                              SlotFormat::kFp32);
  for (int k = 0; k < header.state_slot_formats_size() &&
                  k < static_cast<int>(out.size());
       ++k) {
    out[k] = static_cast<SlotFormat>(header.state_slot_formats(k));
  }
  return out;
}

std::vector<std::string> ShardCheckpointSlots(
    const v1::ShardCheckpointHeader& header) {
  if (header.state_slots_size() == 0) return {"exp_avg", "exp_avg_sq"};
  return {header.state_slots().begin(), header.state_slots().end()};
}

// The stream's buffer: kStreamBuffer bytes aligned for O_DIRECT, kept for
// the next file once one is done (fresh pages cost a fault each; a few
// writers at once, so a few are kept).
constexpr size_t kStreamBuffer = size_t{4} << 20;
static_assert(kStreamBuffer % kDirectIoAlign == 0);

struct ShardFileStream::Buffer {
  struct Free {
    void operator()(char* p) const { std::free(p); }
  };
  std::unique_ptr<char, Free> bytes;
  size_t filled = 0;

  static absl::Mutex& PoolMu() {
    static absl::Mutex* mu = new absl::Mutex();
    return *mu;
  }
  static std::vector<char*>& Pool() {
    static std::vector<char*>* pool = new std::vector<char*>();
    return *pool;
  }
  Buffer() {
    {
      absl::MutexLock lock(&PoolMu());
      if (!Pool().empty()) {
        bytes.reset(Pool().back());
        Pool().pop_back();
        return;
      }
    }
    bytes.reset(static_cast<char*>(
        std::aligned_alloc(kDirectIoAlign, kStreamBuffer)));
  }
  ~Buffer() {
    if (bytes == nullptr) return;
    absl::MutexLock lock(&PoolMu());
    if (Pool().size() < 4) Pool().push_back(bytes.release());
  }
};

struct ShardFileStream::Hash {
  Xxh3Stream h;
};

ShardFileStream::ShardFileStream(std::string path, AtomicFileWriter file,
                                 uint64_t body)
    : path_(std::move(path)),
      file_(std::move(file)),
      buffer_(std::make_unique<Buffer>()),
      body_(body),
      hash_(std::make_unique<Hash>()) {}

ShardFileStream::~ShardFileStream() = default;

absl::StatusOr<std::unique_ptr<ShardFileStream>> ShardFileStream::Open(
    const std::string& path, const v1::ShardCheckpointHeader& header) {
  if (absl::Status s = CheckHeader(header); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard checkpoint ", path, ": ", s.message()));
  }
  const std::string bytes = header.SerializeAsString();
  if (bytes.size() > kMaxHeaderBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shard checkpoint ", path, ": header of ", bytes.size(), " bytes"));
  }
  absl::StatusOr<AtomicFileWriter> file =
      AtomicFileWriter::Open(path, /*direct=*/true);
  if (!file.ok()) return file.status();
  const size_t arrays = 1 + ShardCheckpointSlots(header).size();
  uint64_t body = 0;
  for (size_t a = 0; a < arrays; ++a) body += ArrayBytes(header, a);
  auto w = std::unique_ptr<ShardFileStream>(
      new ShardFileStream(path, *std::move(file), body));
  if (w->buffer_->bytes == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "shard checkpoint ", path, ": no memory for its write buffer"));
  }
  // The prefix and header go through the buffer too, so that every full
  // buffer lands at an aligned place in the file.
  char prefix[kPrefixBytes];
  std::memcpy(prefix, kShardCheckpointMagic, kMagicBytes);
  const uint32_t header_bytes = static_cast<uint32_t>(bytes.size());
  std::memcpy(prefix + kMagicBytes, &header_bytes, sizeof(header_bytes));
  const std::string head = std::string(prefix, kPrefixBytes) + bytes;
  w->body_ += head.size();
  RETURN_IF_ERROR(w->Append(head.size(), [&](char* dst, uint64_t at, size_t n) {
    std::memcpy(dst, head.data() + at, n);
    return absl::OkStatus();
  }));
  return w;
}

absl::Status ShardFileStream::Flush() {
  Buffer& b = *buffer_;
  if (b.filled == 0) return absl::OkStatus();
  hash_->h.Update(b.bytes.get(), b.filled);
  absl::Status s = file_->Append(b.bytes.get(), b.filled);
  b.filled = 0;
  return s;
}

absl::Status ShardFileStream::Append(
    uint64_t bytes,
    absl::FunctionRef<absl::Status(char* dst, uint64_t at, size_t n)> fill) {
  if (failed_ || !file_.has_value()) {
    return absl::FailedPreconditionError(
        absl::StrCat("shard checkpoint ", path_, ": written after a failure"));
  }
  if (bytes > body_ - appended_) {
    failed_ = true;
    file_.reset();  // removes the temporary file
    return absl::InternalError(absl::StrCat(
        "shard checkpoint ", path_, ": ", appended_ + bytes,
        " bytes appended to a file of ", body_));
  }
  Buffer& b = *buffer_;
  for (uint64_t at = 0; at < bytes;) {
    if (b.filled == kStreamBuffer) {
      if (absl::Status s = Flush(); !s.ok()) {
        failed_ = true;
        return s;
      }
    }
    const size_t n = static_cast<size_t>(
        std::min<uint64_t>(kStreamBuffer - b.filled, bytes - at));
    if (absl::Status s = fill(b.bytes.get() + b.filled, at, n); !s.ok()) {
      failed_ = true;
      file_.reset();
      return s;
    }
    b.filled += n;
    at += n;
  }
  appended_ += bytes;
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> ShardFileStream::Finish() {
  if (failed_ || !file_.has_value()) {
    return absl::FailedPreconditionError(
        absl::StrCat("shard checkpoint ", path_, ": finished after a failure"));
  }
  if (appended_ != body_) {
    failed_ = true;
    file_.reset();
    return absl::InternalError(absl::StrCat("shard checkpoint ", path_, ": ",
                                            appended_, " bytes of ", body_));
  }
  absl::Status s = Flush();
  const uint64_t checksum = hash_->h.Digest();
  if (s.ok()) s = file_->Append(&checksum, sizeof(checksum));
  if (s.ok()) s = file_->Commit();
  file_.reset();
  if (!s.ok()) {
    failed_ = true;
    return s;
  }
  return checksum;
}

absl::StatusOr<uint64_t> WriteShardCheckpoint(
    const std::string& path, const ShardCheckpointContents& c) {
  if (absl::Status s = CheckHeader(c.header); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard checkpoint ", path, ": ", s.message()));
  }
  const uint64_t n = c.header.owned().length();
  const size_t num_slots = ShardCheckpointSlots(c.header).size();
  if (c.slots.size() != num_slots) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shard checkpoint ", path, ": ", c.slots.size(),
        " state arrays for a header that names ", num_slots));
  }
  if (n > 0 && (c.master == nullptr ||
                std::find(c.slots.begin(), c.slots.end(), nullptr) !=
                    c.slots.end())) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard checkpoint ", path, ": an array is missing"));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<ShardFileStream> w,
                   ShardFileStream::Open(path, c.header));
  for (size_t a = 0; a < 1 + num_slots && n > 0; ++a) {
    const char* src = static_cast<const char*>(
        a == 0 ? static_cast<const void*>(c.master) : c.slots[a - 1]);
    RETURN_IF_ERROR(w->Append(ArrayBytes(c.header, a),
                              [&](char* dst, uint64_t at, size_t bytes) {
                                std::memcpy(dst, src + at, bytes);
                                return absl::OkStatus();
                              }));
  }
  return w->Finish();
}

absl::StatusOr<ShardCheckpointInfo> VerifyShardCheckpoint(
    const std::string& path) {
  auto loss = [&path](absl::string_view why) {
    return absl::DataLossError(
        absl::StrCat("shard checkpoint ", path, ": ", why));
  };
  Fd f(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (f.fd < 0) {
    if (errno == ENOENT) {
      return absl::NotFoundError(
          absl::StrCat("shard checkpoint ", path, " is missing"));
    }
    return absl::PermissionDeniedError(absl::StrCat(
        "shard checkpoint ", path, ": cannot open: ", std::strerror(errno)));
  }
  struct stat st;
  if (::fstat(f.fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    return loss("not a regular file");
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  char prefix[kPrefixBytes];
  if (size < kPrefixBytes + sizeof(uint64_t) ||
      !PreadAll(f.fd, prefix, kPrefixBytes, 0)) {
    return loss(absl::StrCat("truncated: ", size, " bytes"));
  }
  if (std::memcmp(prefix, kShardCheckpointMagic, kMagicBytes) != 0) {
    return loss("not a zeroshard shard checkpoint (wrong magic)");
  }
  uint32_t header_bytes;
  std::memcpy(&header_bytes, prefix + kMagicBytes, sizeof(header_bytes));
  if (header_bytes > kMaxHeaderBytes ||
      kPrefixBytes + header_bytes + sizeof(uint64_t) > size) {
    return loss(absl::StrCat("header of ", header_bytes,
                             " bytes does not fit a file of ", size));
  }
  std::string header(header_bytes, '\0');
  if (!PreadAll(f.fd, header.data(), header_bytes, kPrefixBytes)) {
    return loss("cannot read the header");
  }
  // One pass over everything before the checksum, before anything in the
  // header is believed.
  ShardCheckpointInfo info;
  info.arrays_offset = kPrefixBytes + header_bytes;
  Xxh3Stream hash;
  hash.Update(prefix, kPrefixBytes);
  hash.Update(header.data(), header.size());
  std::vector<char> buf(size_t{8} << 20);
  uint64_t at = info.arrays_offset;
  const uint64_t body_end = size - sizeof(uint64_t);
  while (at < body_end) {
    const size_t n = static_cast<size_t>(
        std::min<uint64_t>(buf.size(), body_end - at));
    if (!PreadAll(f.fd, buf.data(), n, at)) return loss("read failed");
    hash.Update(buf.data(), n);
    at += n;
  }
  uint64_t stored;
  if (!PreadAll(f.fd, &stored, sizeof(stored), body_end)) {
    return loss("cannot read the checksum");
  }
  const uint64_t computed = hash.Digest();
  if (stored != computed) {
    return loss(absl::StrCat("checksum mismatch (stored ", stored,
                             ", contents hash to ", computed,
                             "): the file is corrupt"));
  }
  if (!info.header.ParseFromString(header)) {
    return loss("the header does not parse");
  }
  if (absl::Status s = CheckHeader(info.header); !s.ok()) {
    return loss(absl::StrCat("the header is inconsistent: ", s.message()));
  }
  const uint64_t arrays = 1 + ShardCheckpointSlots(info.header).size();
  const uint64_t want = info.arrays_offset +
                        ArrayOffset(info.header, arrays) + sizeof(uint64_t);
  if (size != want) {
    return loss(absl::StrCat(size < want ? "truncated" : "too long", ": ",
                             size, " bytes where the header implies ", want));
  }
  info.checksum = stored;
  info.file_bytes = size;
  info.device = static_cast<uint64_t>(st.st_dev);
  info.inode = static_cast<uint64_t>(st.st_ino);
  return info;
}

namespace {

// Opens the verified file `info` describes and reads `bytes` at `offset`
// (from the first array) into `out`.
absl::Status ReadVerified(const std::string& path,
                          const ShardCheckpointInfo& info, uint64_t offset,
                          void* out, uint64_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  Fd f(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (f.fd < 0) {
    return absl::NotFoundError(absl::StrCat("shard checkpoint ", path,
                                            ": cannot open: ",
                                            std::strerror(errno)));
  }
  // The file that was verified, not one renamed over it since.
  struct stat st;
  if (::fstat(f.fd, &st) != 0 ||
      static_cast<uint64_t>(st.st_dev) != info.device ||
      static_cast<uint64_t>(st.st_ino) != info.inode ||
      static_cast<uint64_t>(st.st_size) != info.file_bytes) {
    return absl::DataLossError(absl::StrCat(
        "shard checkpoint ", path, " was replaced since it was verified"));
  }
  if (!PreadAll(f.fd, out, bytes, info.arrays_offset + offset)) {
    return absl::DataLossError(absl::StrCat(
        "shard checkpoint ", path, ": cannot read ", bytes, " bytes at byte ",
        info.arrays_offset + offset, " (changed since it was verified?)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ReadShardCheckpointRange(const std::string& path,
                                      const ShardCheckpointInfo& info,
                                      size_t which, FlatRange range,
                                      float* out) {
  const FlatRange owned{info.header.owned().offset(),
                        info.header.owned().offset() +
                            info.header.owned().length()};
  if (range.begin > range.end || !owned.Contains(range)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shard checkpoint ", path, ": range [", range.begin, ", ", range.end,
        ") is not inside its owned range [", owned.begin, ", ", owned.end,
        ")"));
  }
  if (which > ShardCheckpointSlots(info.header).size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shard checkpoint ", path, ": no array ", which, " (master and ",
        ShardCheckpointSlots(info.header).size(), " state slots)"));
  }
  if (range.size() == 0) return absl::OkStatus();
  const uint64_t base = ArrayOffset(info.header, which);
  const uint64_t at = range.begin - owned.begin;
  const SlotFormat format =
      which == 0 ? SlotFormat::kFp32 : ShardCheckpointFormats(info.header)[which - 1];
  if (format == SlotFormat::kFp32) {
    return ReadVerified(path, info, base + at * sizeof(float), out,
                        range.size() * sizeof(float));
  }
  // 8-bit: the codes of the range and the scales of the blocks it touches.
  std::vector<uint8_t> codes(range.size());
  RETURN_IF_ERROR(ReadVerified(path, info, base + at, codes.data(), codes.size()));
  const uint64_t first = at / kQ8SlotBlock;
  const uint64_t last = (at + range.size() - 1) / kQ8SlotBlock;
  std::vector<float> absmax(last - first + 1);
  RETURN_IF_ERROR(ReadVerified(path, info,
                               base + owned.size() + first * sizeof(float),
                               absmax.data(), absmax.size() * sizeof(float)));
  const std::array<float, 256>& map = DynamicMap(Quant8MapOf(format));
  for (uint64_t e = 0; e < range.size(); ++e) {
    out[e] = map[codes[e]] * absmax[(at + e) / kQ8SlotBlock - first];
  }
  return absl::OkStatus();
}

absl::Status ReadShardCheckpointImage(const std::string& path,
                                      const ShardCheckpointInfo& info,
                                      size_t slot, void* out) {
  if (slot >= ShardCheckpointSlots(info.header).size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shard checkpoint ", path, ": no state slot ", slot));
  }
  return ReadVerified(path, info, ArrayOffset(info.header, 1 + slot), out,
                      ArrayBytes(info.header, 1 + slot));
}

}  // namespace zeroshard
