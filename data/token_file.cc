#include "data/token_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"

namespace zeroshard {

// The files are little-endian and read in place.
static_assert(std::endian::native == std::endian::little);

namespace {

absl::Status Corrupt(const std::string& path, const std::string& why) {
  return absl::DataLossError(absl::StrCat("token file ", path, ": ", why));
}

absl::Status WriteAll(const std::string& path, const void* header, size_t header_bytes,
                      absl::Span<const uint16_t> tokens) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return absl::NotFoundError(absl::StrCat("token file ", path, ": cannot create"));
  if (header_bytes > 0) out.write(static_cast<const char*>(header), header_bytes);
  out.write(reinterpret_cast<const char*>(tokens.data()), tokens.size() * sizeof(uint16_t));
  out.close();
  if (!out) return absl::DataLossError(absl::StrCat("token file ", path, ": write failed"));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TokenFile> TokenFile::Open(const std::string& path, DataFormat format,
                                          int vocab) {
  if (format == DataFormat::kBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("token file ", path, ": format \"bytes\" is read as text, not tokens"));
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::NotFoundError(
        absl::StrCat("token file ", path, ": cannot open: ", std::strerror(errno)));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::NotFoundError(absl::StrCat("token file ", path, ": not a regular file"));
  }
  const size_t size = static_cast<size_t>(st.st_size);
  if (size == 0) {
    ::close(fd);
    return Corrupt(path, "the file is empty");
  }
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) {
    return absl::InternalError(
        absl::StrCat("token file ", path, ": mmap failed: ", std::strerror(errno)));
  }
  std::shared_ptr<const void> mapping(p, [size](const void* q) {
    ::munmap(const_cast<void*>(q), size);
  });
  const auto* bytes = static_cast<const uint8_t*>(p);
  int32_t first = 0;
  if (size >= sizeof(first)) std::memcpy(&first, bytes, sizeof(first));
  if (format == DataFormat::kAuto) {
    format = first == kLlmcMagic ? DataFormat::kLlmc : DataFormat::kUint16;
    if (first == kLlmcMagicUint32) format = DataFormat::kLlmc;  // refused below
  }
  size_t header = 0;
  uint64_t count = 0;
  if (format == DataFormat::kLlmc) {
    if (size < kLlmcHeaderBytes) {
      return Corrupt(path, absl::StrCat("llm.c header needs ", kLlmcHeaderBytes,
                                        " bytes, the file has ", size));
    }
    int32_t h[3];
    std::memcpy(h, bytes, sizeof(h));
    if (h[0] == kLlmcMagicUint32) {
      return Corrupt(path, absl::StrCat("llm.c magic ", kLlmcMagicUint32,
                                        " (uint32 tokens, Llama 3) is not supported; "
                                        "only uint16 shards (magic ", kLlmcMagic, ")"));
    }
    if (h[0] != kLlmcMagic) {
      return Corrupt(path, absl::StrCat("bad llm.c header: magic ", h[0], ", expected ",
                                        kLlmcMagic));
    }
    if (h[1] != kLlmcVersion) {
      return Corrupt(path, absl::StrCat("bad llm.c header: version ", h[1], ", expected ",
                                        kLlmcVersion, " (uint16 tokens)"));
    }
    if (h[2] < 0) {
      return Corrupt(path, absl::StrCat("bad llm.c header: token count ", h[2]));
    }
    header = kLlmcHeaderBytes;
    count = static_cast<uint64_t>(h[2]);
    const uint64_t want = header + count * sizeof(uint16_t);
    if (size != want) {
      return Corrupt(path, absl::StrCat("llm.c header says ", count, " tokens (", want,
                                        " bytes with the header), the file has ", size,
                                        " bytes"));
    }
  } else {
    if (size % sizeof(uint16_t) != 0) {
      return Corrupt(path, absl::StrCat("odd length ", size,
                                        " bytes: not an array of uint16 tokens"));
    }
    count = size / sizeof(uint16_t);
  }
  if (count == 0) return Corrupt(path, "no tokens");
  const auto* tokens = reinterpret_cast<const uint16_t*>(bytes + header);
  // A vocabulary above 65535 holds every uint16: nothing to scan.
  const uint64_t scan = vocab > 0xffff ? 0 : count;
  for (uint64_t i = 0; i < scan; ++i) {
    if (tokens[i] >= vocab) {
      return Corrupt(path, absl::StrCat("token ", tokens[i], " at index ", i, " (byte offset ",
                                        header + i * sizeof(uint16_t),
                                        ") is outside the model's vocabulary of ", vocab,
                                        " (zeroshard.model.vocab)"));
    }
  }
  return TokenFile(path, format, std::move(mapping),
                   absl::Span<const uint16_t>(tokens, count));
}

absl::Status WriteLlmcFile(const std::string& path, absl::Span<const uint16_t> tokens) {
  int32_t header[kLlmcHeaderInts] = {};
  header[0] = kLlmcMagic;
  header[1] = kLlmcVersion;
  header[2] = static_cast<int32_t>(tokens.size());
  return WriteAll(path, header, sizeof(header), tokens);
}

absl::Status WriteUint16File(const std::string& path, absl::Span<const uint16_t> tokens) {
  return WriteAll(path, nullptr, 0, tokens);
}

}  // namespace zeroshard
