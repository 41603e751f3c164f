#include "common/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <tuple>
#include <utility>

#include <nlohmann/json.hpp>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/atomic_file.h"
#include "common/dtype.h"
#include "common/json_integer.h"
#include "common/status_macros.h"

namespace zeroshard {
namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; add a byte swap here");

using json = nlohmann::json;

struct DTypeInfo {
  SafetensorsDType dtype;
  const char* name;
  size_t size;
};

constexpr DTypeInfo kDTypes[] = {
    {SafetensorsDType::kBool, "BOOL", 1},
    {SafetensorsDType::kU8, "U8", 1},
    {SafetensorsDType::kI8, "I8", 1},
    {SafetensorsDType::kF8E4M3, "F8_E4M3", 1},
    {SafetensorsDType::kF8E5M2, "F8_E5M2", 1},
    {SafetensorsDType::kI16, "I16", 2},
    {SafetensorsDType::kU16, "U16", 2},
    {SafetensorsDType::kF16, "F16", 2},
    {SafetensorsDType::kBF16, "BF16", 2},
    {SafetensorsDType::kI32, "I32", 4},
    {SafetensorsDType::kU32, "U32", 4},
    {SafetensorsDType::kF32, "F32", 4},
    {SafetensorsDType::kF64, "F64", 8},
    {SafetensorsDType::kI64, "I64", 8},
    {SafetensorsDType::kU64, "U64", 8},
};

const DTypeInfo* FindDType(absl::string_view name) {
  for (const DTypeInfo& d : kDTypes) {
    if (name == d.name) return &d;
  }
  return nullptr;
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// Product of the dimensions times `elem_size`, or false on overflow.
bool ByteCount(const std::vector<int64_t>& shape, size_t elem_size,
               uint64_t* numel, uint64_t* bytes) {
  uint64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return false;
    if (__builtin_mul_overflow(n, static_cast<uint64_t>(d), &n)) return false;
  }
  uint64_t b = 0;
  if (__builtin_mul_overflow(n, static_cast<uint64_t>(elem_size), &b)) {
    return false;
  }
  *numel = n;
  *bytes = b;
  return true;
}

absl::Status Corrupt(absl::string_view file, absl::string_view what) {
  return absl::DataLossError(
      absl::StrCat(file, ": not a valid safetensors file: ", what));
}

absl::Status BadTensor(absl::string_view file, absl::string_view name,
                       absl::string_view what) {
  return absl::DataLossError(absl::StrCat(
      file, ": not a valid safetensors file: tensor '", name, "': ", what));
}

// One header entry -> SafetensorsEntry.
absl::StatusOr<SafetensorsEntry> ParseEntry(const std::string& name,
                                            const json& v, uint64_t data_bytes,
                                            absl::string_view file) {
  if (name.empty()) return Corrupt(file, "a tensor has an empty name");
  if (!v.is_object()) return BadTensor(file, name, "entry is not an object");
  for (const auto& [key, unused] : v.items()) {
    if (key != "dtype" && key != "shape" && key != "data_offsets") {
      return BadTensor(file, name, absl::StrCat("unknown key \"", key, "\""));
    }
  }
  if (!v.contains("dtype") || !v.contains("shape") ||
      !v.contains("data_offsets")) {
    return BadTensor(file, name,
                     "entry needs \"dtype\", \"shape\" and \"data_offsets\"");
  }
  const json& dt = v["dtype"];
  const DTypeInfo* info =
      dt.is_string() ? FindDType(dt.get_ref<const std::string&>()) : nullptr;
  if (info == nullptr) {
    return BadTensor(file, name,
                     absl::StrCat("dtype ", dt.dump(),
                                  " is not a safetensors dtype"));
  }
  SafetensorsEntry e;
  e.name = name;
  e.dtype = info->dtype;
  const json& shape = v["shape"];
  if (!shape.is_array()) return BadTensor(file, name, "shape is not a list");
  for (const json& d : shape) {
    int64_t dim = 0;
    if (ReadJsonInteger(d, &dim) != JsonInteger::kOk || dim < 0) {
      return BadTensor(file, name,
                       absl::StrCat("shape ", shape.dump(),
                                    " has a dimension that is not an integer "
                                    "in [0, 2^63)"));
    }
    e.shape.push_back(dim);
  }
  const json& offsets = v["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2 ||
      ReadJsonInteger(offsets[0], &e.begin) != JsonInteger::kOk ||
      ReadJsonInteger(offsets[1], &e.end) != JsonInteger::kOk) {
    return BadTensor(file, name,
                     absl::StrCat("data_offsets ", offsets.dump(),
                                  " is not [begin, end] in unsigned integers"));
  }
  if (e.begin > e.end || e.end > data_bytes) {
    return BadTensor(file, name,
                     absl::StrCat("data_offsets [", e.begin, ", ", e.end,
                                  ") lie outside the data buffer of ",
                                  data_bytes, " bytes"));
  }
  uint64_t bytes = 0;
  if (!ByteCount(e.shape, info->size, &e.numel, &bytes)) {
    return BadTensor(file, name,
                     absl::StrCat("shape ", ShapeText(e.shape),
                                  " overflows 64 bits"));
  }
  if (bytes != e.end - e.begin) {
    return BadTensor(file, name,
                     absl::StrCat("shape ", ShapeText(e.shape), " of ",
                                  info->name, " needs ", bytes,
                                  " bytes; data_offsets [", e.begin, ", ",
                                  e.end, ") hold ", e.end - e.begin));
  }
  return e;
}

}  // namespace

absl::string_view SafetensorsDTypeName(SafetensorsDType dtype) {
  for (const DTypeInfo& d : kDTypes) {
    if (d.dtype == dtype) return d.name;
  }
  return "?";
}

size_t SafetensorsDTypeSize(SafetensorsDType dtype) {
  for (const DTypeInfo& d : kDTypes) {
    if (d.dtype == dtype) return d.size;
  }
  return 0;
}

const SafetensorsEntry* SafetensorsIndex::Find(absl::string_view name) const {
  for (const SafetensorsEntry& e : tensors) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

absl::StatusOr<SafetensorsIndex> ParseSafetensorsHeader(
    absl::string_view header, uint64_t data_bytes, absl::string_view file) {
  if (header.empty() || header.front() != '{') {
    return Corrupt(file, "the header does not start with '{'");
  }
  // nlohmann keeps the last of two equal keys; the callback sees each one.
  absl::flat_hash_set<std::string> seen;
  std::string duplicate;
  const json::parser_callback_t on_event =
      [&](int depth, json::parse_event_t event, json& parsed) {
        if (depth == 1 && event == json::parse_event_t::key &&
            parsed.is_string()) {
          std::string key = parsed.get<std::string>();
          if (!seen.insert(key).second && duplicate.empty()) {
            duplicate = std::move(key);
          }
        }
        return true;
      };
  const json root = json::parse(header.begin(), header.end(), on_event,
                                /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) {
    return Corrupt(file, "the header is not a JSON object");
  }
  if (!duplicate.empty()) {
    return BadTensor(file, duplicate, "the name appears twice in the header");
  }
  SafetensorsIndex index;
  index.data_bytes = data_bytes;
  for (const auto& [name, v] : root.items()) {
    if (name == "__metadata__") {
      if (!v.is_object()) return Corrupt(file, "__metadata__ is not an object");
      for (const auto& [key, value] : v.items()) {
        if (!value.is_string()) {
          return Corrupt(file, absl::StrCat("__metadata__ \"", key,
                                            "\" is not a string"));
        }
        index.metadata[key] = value.get<std::string>();
      }
      continue;
    }
    ASSIGN_OR_RETURN(SafetensorsEntry e, ParseEntry(name, v, data_bytes, file));
    index.tensors.push_back(std::move(e));
  }
  std::sort(index.tensors.begin(), index.tensors.end(),
            [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
              return std::tie(a.begin, a.end, a.name) <
                     std::tie(b.begin, b.end, b.name);
            });
  // The entries tile [0, data_bytes): each starts where the previous ended.
  uint64_t expected = 0;
  const SafetensorsEntry* previous = nullptr;
  for (const SafetensorsEntry& e : index.tensors) {
    if (e.begin < expected) {
      return BadTensor(file, e.name,
                       absl::StrCat("data_offsets [", e.begin, ", ", e.end,
                                    ") overlap tensor '", previous->name,
                                    "' [", previous->begin, ", ",
                                    previous->end, ")"));
    }
    if (e.begin > expected) {
      return BadTensor(file, e.name,
                       absl::StrCat("data_offsets [", e.begin, ", ", e.end,
                                    ") leave bytes [", expected, ", ", e.begin,
                                    ") of the data buffer unused"));
    }
    expected = e.end;
    previous = &e;
  }
  if (expected != data_bytes) {
    return Corrupt(file, absl::StrCat("the tensors end at byte ", expected,
                                      " of a data buffer of ", data_bytes,
                                      " bytes"));
  }
  return index;
}

absl::StatusOr<std::string> SafetensorsHeader(
    absl::Span<const SafetensorsTensorView> tensors,
    const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json root = nlohmann::ordered_json::object();
  if (!metadata.empty()) root["__metadata__"] = metadata;
  absl::flat_hash_set<std::string> names;
  uint64_t offset = 0;
  for (const SafetensorsTensorView& t : tensors) {
    if (t.name.empty() || t.name == "__metadata__") {
      return absl::InvalidArgumentError(absl::StrCat(
          "safetensors: a tensor cannot be named \"", t.name, "\""));
    }
    if (!names.insert(t.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("safetensors: tensor '", t.name, "' given twice"));
    }
    uint64_t numel = 0, bytes = 0;
    if (!ByteCount(t.shape, sizeof(float), &numel, &bytes) ||
        numel != t.data.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "safetensors: tensor '", t.name, "' has shape ", ShapeText(t.shape),
          " and ", t.data.size(), " values"));
    }
    root[t.name] = {{"dtype", "F32"},
                    {"shape", t.shape},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string header = root.dump();
  header.append((8 - header.size() % 8) % 8, ' ');
  return header;
}

absl::Status WriteSafetensors(
    const std::string& path, absl::Span<const SafetensorsTensorView> tensors,
    const std::map<std::string, std::string>& metadata) {
  ASSIGN_OR_RETURN(const std::string header,
                   SafetensorsHeader(tensors, metadata));
  const uint64_t length = header.size();  // little-endian (static_assert)
  ASSIGN_OR_RETURN(AtomicFileWriter w, AtomicFileWriter::Open(path));
  RETURN_IF_ERROR(w.Append(&length, sizeof(length)));
  RETURN_IF_ERROR(w.Append(header.data(), header.size()));
  for (const SafetensorsTensorView& t : tensors) {
    if (!t.data.empty()) {
      RETURN_IF_ERROR(w.Append(t.data.data(), t.data.size() * sizeof(float)));
    }
  }
  return w.Commit();
}

SafetensorsReader::SafetensorsReader(SafetensorsReader&& other) noexcept
    : path_(std::move(other.path_)),
      fd_(std::exchange(other.fd_, -1)),
      index_(std::move(other.index_)) {}

SafetensorsReader& SafetensorsReader::operator=(
    SafetensorsReader&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    index_ = std::move(other.index_);
  }
  return *this;
}

SafetensorsReader::~SafetensorsReader() {
  if (fd_ >= 0) ::close(fd_);
}

absl::Status SafetensorsReader::ReadBytes(uint64_t offset, void* dst,
                                          size_t bytes,
                                          const std::string& what) const {
  char* p = static_cast<char*>(dst);
  while (bytes > 0) {
    const ssize_t r = ::pread(fd_, p, bytes, static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      return absl::DataLossError(absl::StrCat(path_, ": reading ", what, ": ",
                                              std::strerror(errno)));
    }
    if (r == 0) {
      return absl::DataLossError(absl::StrCat(
          path_, ": ", what, " is cut short at byte ", offset,
          " (the file shrank while being read)"));
    }
    p += r;
    offset += static_cast<uint64_t>(r);
    bytes -= static_cast<size_t>(r);
  }
  return absl::OkStatus();
}

absl::StatusOr<SafetensorsReader> SafetensorsReader::Open(
    const std::string& path) {
  // O_NONBLOCK: a FIFO in the file's place is refused below, not waited on.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    const std::string what =
        absl::StrCat("cannot open safetensors file ", path, ": ",
                     std::strerror(errno));
    if (errno == ENOENT) return absl::NotFoundError(what);
    return absl::PermissionDeniedError(what);
  }
  SafetensorsReader reader(path, fd, SafetensorsIndex());
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a regular file"));
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < 8) {
    return Corrupt(path, absl::StrCat("the file has ", size,
                                      " bytes, fewer than the 8 of the header "
                                      "length"));
  }
  uint64_t length = 0;  // little-endian (static_assert)
  RETURN_IF_ERROR(reader.ReadBytes(0, &length, sizeof(length), "the header length"));
  if (length > size - 8) {
    return Corrupt(path, absl::StrCat("the header length ", length,
                                      " runs past the end of the file (",
                                      size, " bytes)"));
  }
  if (length > kMaxSafetensorsHeaderBytes) {
    return Corrupt(path, absl::StrCat("the header length ", length,
                                      " exceeds the limit of ",
                                      kMaxSafetensorsHeaderBytes, " bytes"));
  }
  std::string header(length, '\0');
  RETURN_IF_ERROR(reader.ReadBytes(8, header.data(), header.size(), "the header"));
  ASSIGN_OR_RETURN(reader.index_,
                   ParseSafetensorsHeader(header, size - 8 - length, path));
  reader.index_.data_offset = 8 + length;
  return reader;
}

absl::Status SafetensorsReader::ReadFp32(const SafetensorsEntry& entry,
                                         absl::Span<float> out) const {
  if (out.size() != entry.numel) {
    return absl::InvalidArgumentError(absl::StrCat(
        path_, ": tensor '", entry.name, "' has ", entry.numel,
        " elements; the destination holds ", out.size()));
  }
  if (entry.end > index_.data_bytes || entry.begin > entry.end ||
      entry.end - entry.begin != entry.numel * SafetensorsDTypeSize(entry.dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(
        path_, ": tensor '", entry.name, "' is not an entry of this file"));
  }
  const std::string what = absl::StrCat("tensor '", entry.name, "'");
  const uint64_t base = index_.data_offset + entry.begin;
  switch (entry.dtype) {
    case SafetensorsDType::kF32:
      return ReadBytes(base, out.data(), out.size() * sizeof(float), what);
    case SafetensorsDType::kBF16:
    case SafetensorsDType::kF16: {
      // Widened in blocks, so the temporary stays small.
      constexpr uint64_t kBlock = 1 << 20;
      std::vector<uint16_t> half(std::min<uint64_t>(kBlock, entry.numel));
      for (uint64_t i = 0; i < entry.numel; i += kBlock) {
        const uint64_t n = std::min<uint64_t>(kBlock, entry.numel - i);
        RETURN_IF_ERROR(ReadBytes(base + 2 * i, half.data(), 2 * n, what));
        if (entry.dtype == SafetensorsDType::kBF16) {
          Bf16ToFloatArray(half.data(), out.data() + i, n);
        } else {
          Fp16ToFloatArray(half.data(), out.data() + i, n);
        }
      }
      return absl::OkStatus();
    }
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          path_, ": tensor '", entry.name, "' has dtype ",
          SafetensorsDTypeName(entry.dtype),
          "; only F32, BF16 and F16 read as FP32"));
  }
}

absl::StatusOr<std::vector<SafetensorsTensor>> ReadSafetensorsFp32(
    const std::string& path, std::map<std::string, std::string>* metadata) {
  ASSIGN_OR_RETURN(SafetensorsReader reader, SafetensorsReader::Open(path));
  std::vector<SafetensorsTensor> out;
  out.reserve(reader.index().tensors.size());
  for (const SafetensorsEntry& e : reader.index().tensors) {
    SafetensorsTensor t{e.name, e.shape, std::vector<float>(e.numel)};
    RETURN_IF_ERROR(reader.ReadFp32(e, absl::MakeSpan(t.data)));
    out.push_back(std::move(t));
  }
  if (metadata != nullptr) *metadata = reader.index().metadata;
  return out;
}

}  // namespace zeroshard
