#include "wire/slot_metadata.h"

#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace zeroshard {

void SetSlotMetadata(grpc::ClientContext* context, uint32_t slot) {
  context->AddMetadata(kSlotMetadataKey, std::to_string(slot));
}

absl::StatusOr<std::optional<uint32_t>> SlotFromMetadata(
    const std::multimap<grpc::string_ref, grpc::string_ref>& metadata) {
  const auto [first, last] = metadata.equal_range(kSlotMetadataKey);
  if (first == last) return std::optional<uint32_t>();
  if (std::next(first) != last) {
    return absl::InvalidArgumentError(
        absl::StrCat("the call names its slot (", kSlotMetadataKey,
                     ") more than once"));
  }
  const std::string text(first->second.data(), first->second.size());
  uint32_t slot = 0;
  if (text.empty() || text.size() > 10 ||
      text.find_first_not_of("0123456789") != std::string::npos ||
      !absl::SimpleAtoi(text, &slot) || slot >= (uint32_t{1} << 31)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the call's ", kSlotMetadataKey, " metadata '", text.substr(0, 32),
        "' is not a slot number"));
  }
  return std::optional<uint32_t>(slot);
}

void SetCopiesMetadata(grpc::ClientContext* context, uint32_t copies) {
  context->AddMetadata(kCopiesMetadataKey, std::to_string(copies));
}

uint32_t CopiesFromMetadata(
    const std::multimap<grpc::string_ref, grpc::string_ref>& metadata) {
  const auto it = metadata.find(kCopiesMetadataKey);
  if (it == metadata.end()) return 1;
  const std::string text(it->second.data(), it->second.size());
  return text == "2" ? 2 : 1;
}

}  // namespace zeroshard
