// safetensors files: a bit-exact round trip of fresh random tensors, a
// header an independent parser reads as the format says, and every
// malformed file refused with the right code, naming the file and the
// tensor at fault.
#include "common/safetensors.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "gtest/gtest.h"
#include "tests/support/test_files.h"

namespace zeroshard {
namespace {

using nlohmann::json;
using testing::ReadFile;
using testing::WriteFile;

uint32_t Seed() {
  const uint32_t seed = std::random_device{}();
  std::printf("seed %u\n", seed);
  return seed;
}

// A file of `header` (dumped as is, no padding) and `data`.
std::string RawFile(const std::string& header, const std::string& data) {
  const uint64_t n = header.size();
  std::string out(reinterpret_cast<const char*>(&n), 8);
  return out + header + data;
}

std::string Floats(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}

class SafetensorsTest : public ::testing::Test {
 protected:
  std::string Path(const std::string& name) { return dir_ + "/" + name; }
  // Writes the bytes and opens them.
  absl::StatusOr<SafetensorsReader> OpenBytes(const std::string& bytes) {
    EXPECT_TRUE(WriteFile(Path("f.safetensors"), bytes));
    return SafetensorsReader::Open(Path("f.safetensors"));
  }
  // Expects `bytes` refused with `code`, the message naming the file and
  // containing `what`.
  void ExpectRefused(const std::string& bytes, absl::StatusCode code,
                     const std::string& what) {
    absl::StatusOr<SafetensorsReader> r = OpenBytes(bytes);
    ASSERT_FALSE(r.ok()) << what;
    EXPECT_EQ(r.status().code(), code) << r.status();
    EXPECT_NE(r.status().message().find(Path("f.safetensors")),
              std::string::npos)
        << r.status();
    EXPECT_NE(r.status().message().find(what), std::string::npos)
        << "want '" << what << "' in: " << r.status();
  }

  std::string dir_ = testing::MakeTempDir("zs_safetensors_");
};

TEST_F(SafetensorsTest, RoundTripOfRandomTensorsIsBitExact) {
  std::mt19937 rng(Seed());
  for (int round = 0; round < 20; ++round) {
    const int count = 1 + static_cast<int>(rng() % 6);
    std::vector<std::vector<int64_t>> shapes;
    std::vector<std::vector<float>> values;
    std::vector<std::string> names;
    for (int i = 0; i < count; ++i) {
      std::vector<int64_t> shape;
      const int rank = static_cast<int>(rng() % 4);  // 0: a scalar
      uint64_t n = 1;
      for (int d = 0; d < rank; ++d) {
        shape.push_back(static_cast<int64_t>(rng() % 7));  // 0 allowed
        n *= shape.back();
      }
      std::vector<float> v(n);
      for (float& x : v) {
        const uint32_t bits = static_cast<uint32_t>(rng());
        std::memcpy(&x, &bits, 4);  // any pattern, NaNs included
      }
      shapes.push_back(shape);
      values.push_back(std::move(v));
      names.push_back(absl::StrCat("t", rng() % 1000, ".", i));
    }
    std::vector<SafetensorsTensorView> views;
    for (int i = 0; i < count; ++i) {
      views.push_back({names[i], shapes[i], values[i]});
    }
    const std::map<std::string, std::string> meta = {
        {"format", "pt"}, {"round", std::to_string(round)}};
    const std::string path = Path("r.safetensors");
    ASSERT_TRUE(WriteSafetensors(path, views, meta).ok());

    std::map<std::string, std::string> meta_back;
    absl::StatusOr<std::vector<SafetensorsTensor>> back =
        ReadSafetensorsFp32(path, &meta_back);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(meta_back, meta);
    ASSERT_EQ(back->size(), static_cast<size_t>(count));
    std::map<std::string, const SafetensorsTensor*> by_name;
    for (const SafetensorsTensor& t : *back) by_name[t.name] = &t;
    for (int i = 0; i < count; ++i) {
      ASSERT_TRUE(by_name.count(names[i])) << names[i];
      const SafetensorsTensor& t = *by_name[names[i]];
      EXPECT_EQ(t.shape, shapes[i]) << names[i];
      ASSERT_EQ(t.data.size(), values[i].size()) << names[i];
      // memcmp's pointers must not be null, even for 0 bytes (UBSan).
      if (values[i].empty()) continue;
      EXPECT_EQ(std::memcmp(t.data.data(), values[i].data(),
                            values[i].size() * 4),
                0)
          << names[i];
    }
  }
}

TEST_F(SafetensorsTest, IndependentParserSeesTheFormat) {
  const std::vector<float> a = {1, 2, 3, 4, 5, 6};
  const std::vector<float> b = {-0.5f};
  const std::string path = Path("x.safetensors");
  ASSERT_TRUE(
      WriteSafetensors(path, {{"a", {2, 3}, a}, {"b.weight", {1}, b}},
                       {{"format", "pt"}})
          .ok());
  const std::string raw = ReadFile(path);
  ASSERT_GE(raw.size(), 8u);
  uint64_t n = 0;
  std::memcpy(&n, raw.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  ASSERT_LE(8 + n, raw.size());
  const std::string header = raw.substr(8, n);
  EXPECT_EQ(header.front(), '{');
  const size_t close = header.rfind('}');
  EXPECT_EQ(header.find_first_not_of(' ', close + 1), std::string::npos)
      << "padding must be spaces";
  const json h = json::parse(header);
  EXPECT_EQ(h["__metadata__"], json({{"format", "pt"}}));
  EXPECT_EQ(h["a"]["dtype"], "F32");
  EXPECT_EQ(h["a"]["shape"], json({2, 3}));
  EXPECT_EQ(h["b.weight"]["shape"], json({1}));
  const std::string data = raw.substr(8 + n);
  EXPECT_EQ(data.size(), 7u * 4);
  for (const auto& [name, want] :
       std::map<std::string, std::vector<float>>{{"a", a}, {"b.weight", b}}) {
    const uint64_t begin = h[name]["data_offsets"][0];
    const uint64_t end = h[name]["data_offsets"][1];
    ASSERT_EQ(end - begin, want.size() * 4) << name;
    EXPECT_EQ(data.substr(begin, end - begin), Floats(want)) << name;
  }
}

TEST_F(SafetensorsTest, ReadsBf16AndF16AsFp32Exactly) {
  const std::vector<float> want = {1.0f, -2.5f, 0.15625f, 65504.0f};
  std::string bf, hf;
  for (float f : want) {
    const uint16_t b = FloatToBf16(f), h = FloatToFp16(f);
    bf.append(reinterpret_cast<const char*>(&b), 2);
    hf.append(reinterpret_cast<const char*>(&h), 2);
  }
  const json header = {
      {"b", {{"dtype", "BF16"}, {"shape", {2, 2}}, {"data_offsets", {0, 8}}}},
      {"h", {{"dtype", "F16"}, {"shape", {4}}, {"data_offsets", {8, 16}}}},
      {"i", {{"dtype", "I64"}, {"shape", {1}}, {"data_offsets", {16, 24}}}}};
  absl::StatusOr<SafetensorsReader> r =
      OpenBytes(RawFile(header.dump(), bf + hf + std::string(8, '\0')));
  ASSERT_TRUE(r.ok()) << r.status();
  std::vector<float> out(4);
  ASSERT_TRUE(r->ReadFp32(*r->index().Find("b"), absl::MakeSpan(out)).ok());
  for (int i = 0; i < 4; ++i) EXPECT_EQ(out[i], Bf16ToFloat(FloatToBf16(want[i])));
  ASSERT_TRUE(r->ReadFp32(*r->index().Find("h"), absl::MakeSpan(out)).ok());
  for (int i = 0; i < 4; ++i) EXPECT_EQ(out[i], want[i]);  // all exact in F16
  // I64 is a valid dtype of the format, but not one that reads as weights.
  std::vector<float> one(1);
  absl::Status s = r->ReadFp32(*r->index().Find("i"), absl::MakeSpan(one));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("'i'"), std::string::npos) << s;
  // A destination of the wrong size.
  s = r->ReadFp32(*r->index().Find("h"), absl::MakeSpan(one));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
}

json Entry(const std::string& dtype, std::vector<int64_t> shape,
           uint64_t begin, uint64_t end) {
  return {{"dtype", dtype}, {"shape", shape}, {"data_offsets", {begin, end}}};
}

TEST_F(SafetensorsTest, ValidFileOpens) {
  // The baseline the refusals below change one thing of.
  const json h = {{"a", Entry("F32", {2}, 0, 8)}, {"b", Entry("F32", {1}, 8, 12)}};
  EXPECT_TRUE(OpenBytes(RawFile(h.dump(), std::string(12, 'x'))).ok());
}

TEST_F(SafetensorsTest, TruncatedFileIsDataLoss) {
  ExpectRefused("", absl::StatusCode::kDataLoss, "fewer than the 8");
  ExpectRefused(std::string(5, '\0'), absl::StatusCode::kDataLoss,
                "fewer than the 8");
  // Cut inside the data buffer: the tensors no longer fit.
  const json h = {{"a", Entry("F32", {2}, 0, 8)}, {"b", Entry("F32", {1}, 8, 12)}};
  ExpectRefused(RawFile(h.dump(), std::string(10, 'x')),
                absl::StatusCode::kDataLoss, "tensor 'b'");
  // Every cut of a real file is refused as DATA_LOSS.
  const std::vector<float> v(50, 1.5f);
  const std::string path = Path("whole.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, {{"w", {5, 10}, v}, {"z", {}, {&v[0], 1}}})
                  .ok());
  const std::string whole = ReadFile(path);
  std::mt19937 rng(Seed());
  for (int i = 0; i < 40; ++i) {
    const size_t cut = rng() % whole.size();
    absl::StatusOr<SafetensorsReader> r = OpenBytes(whole.substr(0, cut));
    ASSERT_FALSE(r.ok()) << "cut at " << cut;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss) << r.status();
  }
}

TEST_F(SafetensorsTest, HeaderLengthBeyondFileIsDataLoss) {
  std::string bytes = RawFile("{}", "");
  const uint64_t huge = 1000;
  std::memcpy(bytes.data(), &huge, 8);
  ExpectRefused(bytes, absl::StatusCode::kDataLoss,
                "header length 1000 runs past the end");
  const uint64_t max = UINT64_MAX;
  std::memcpy(bytes.data(), &max, 8);
  ExpectRefused(bytes, absl::StatusCode::kDataLoss, "runs past the end");
}

TEST_F(SafetensorsTest, OverlappingOffsetsAreDataLoss) {
  const json h = {{"a", Entry("F32", {2}, 0, 8)}, {"b", Entry("F32", {2}, 4, 12)}};
  ExpectRefused(RawFile(h.dump(), std::string(12, 'x')),
                absl::StatusCode::kDataLoss, "tensor 'b'");
  ExpectRefused(RawFile(h.dump(), std::string(12, 'x')),
                absl::StatusCode::kDataLoss, "overlap tensor 'a'");
}

TEST_F(SafetensorsTest, HolesAndTrailingBytesAreDataLoss) {
  const json gap = {{"a", Entry("F32", {1}, 0, 4)}, {"b", Entry("F32", {1}, 8, 12)}};
  ExpectRefused(RawFile(gap.dump(), std::string(12, 'x')),
                absl::StatusCode::kDataLoss, "tensor 'b'");
  const json h = {{"a", Entry("F32", {1}, 0, 4)}};
  ExpectRefused(RawFile(h.dump(), std::string(8, 'x')),
                absl::StatusCode::kDataLoss, "end at byte 4 of a data buffer of 8");
}

TEST_F(SafetensorsTest, OffsetsOutsideTheBufferAreDataLoss) {
  const json h = {{"a", Entry("F32", {4}, 0, 16)}};
  ExpectRefused(RawFile(h.dump(), std::string(8, 'x')),
                absl::StatusCode::kDataLoss, "tensor 'a'");
  const json reversed = {{"a", Entry("F32", {0}, 8, 4)}};
  ExpectRefused(RawFile(reversed.dump(), std::string(8, 'x')),
                absl::StatusCode::kDataLoss, "tensor 'a'");
  const json fraction = {{"a", {{"dtype", "F32"}, {"shape", {1}},
                                {"data_offsets", {0.0, 4.5}}}}};
  ExpectRefused(RawFile(fraction.dump(), std::string(4, 'x')),
                absl::StatusCode::kDataLoss, "tensor 'a'");
}

TEST_F(SafetensorsTest, BadDtypeIsDataLoss) {
  const json h = {{"a", Entry("F33", {1}, 0, 4)}};
  ExpectRefused(RawFile(h.dump(), std::string(4, 'x')),
                absl::StatusCode::kDataLoss, "tensor 'a'");
  ExpectRefused(RawFile(h.dump(), std::string(4, 'x')),
                absl::StatusCode::kDataLoss, "not a safetensors dtype");
  const json number = {{"a", {{"dtype", 7}, {"shape", {1}},
                              {"data_offsets", {0, 4}}}}};
  ExpectRefused(RawFile(number.dump(), std::string(4, 'x')),
                absl::StatusCode::kDataLoss, "tensor 'a'");
}

TEST_F(SafetensorsTest, ShapeMismatchIsDataLoss) {
  const json h = {{"w", Entry("F32", {2, 3}, 0, 20)}};
  ExpectRefused(RawFile(h.dump(), std::string(20, 'x')),
                absl::StatusCode::kDataLoss, "tensor 'w'");
  ExpectRefused(RawFile(h.dump(), std::string(20, 'x')),
                absl::StatusCode::kDataLoss, "needs 24 bytes");
  const json bf = {{"w", Entry("BF16", {2, 3}, 0, 24)}};  // F32's size
  ExpectRefused(RawFile(bf.dump(), std::string(24, 'x')),
                absl::StatusCode::kDataLoss, "needs 12 bytes");
  const json negative = {{"w", Entry("F32", {-1, 3}, 0, 0)}};
  ExpectRefused(RawFile(negative.dump(), ""), absl::StatusCode::kDataLoss,
                "tensor 'w'");
  // 2^32 * 2^32 elements: the product overflows; never trusted.
  const json overflow = {
      {"w", Entry("F32", {int64_t{1} << 32, int64_t{1} << 32}, 0, 0)}};
  ExpectRefused(RawFile(overflow.dump(), ""), absl::StatusCode::kDataLoss,
                "overflows");
}

TEST_F(SafetensorsTest, DuplicateNameIsDataLoss) {
  const std::string header =
      R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
      R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})";
  ExpectRefused(RawFile(header, std::string(8, 'x')),
                absl::StatusCode::kDataLoss, "tensor 'a'");
  ExpectRefused(RawFile(header, std::string(8, 'x')),
                absl::StatusCode::kDataLoss, "appears twice");
  // A tensor name repeated inside a nested object is not a duplicate.
  const std::string nested =
      R"({"__metadata__":{"a":"x"},"a":{"dtype":"F32","shape":[1],)"
      R"("data_offsets":[0,4]}})";
  EXPECT_TRUE(OpenBytes(RawFile(nested, std::string(4, 'x'))).ok());
}

TEST_F(SafetensorsTest, MalformedHeadersAreDataLoss) {
  ExpectRefused(RawFile("[1, 2]", ""), absl::StatusCode::kDataLoss,
                "does not start with '{'");
  ExpectRefused(RawFile(" {}", ""), absl::StatusCode::kDataLoss,
                "does not start with '{'");
  ExpectRefused(RawFile("{\"a\": ", ""), absl::StatusCode::kDataLoss,
                "not a JSON object");
  ExpectRefused(RawFile("{} x", ""), absl::StatusCode::kDataLoss,
                "not a JSON object");
  ExpectRefused(RawFile(R"({"a": 3})", ""), absl::StatusCode::kDataLoss,
                "tensor 'a'");
  ExpectRefused(
      RawFile(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[0,0],"x":1}})",
              ""),
      absl::StatusCode::kDataLoss, "unknown key");
  ExpectRefused(RawFile(R"({"a":{"dtype":"F32","shape":[0]}})", ""),
                absl::StatusCode::kDataLoss, "tensor 'a'");
  ExpectRefused(RawFile(R"({"__metadata__":{"k":1}})", ""),
                absl::StatusCode::kDataLoss, "__metadata__");
  // Padding spaces and an empty file of tensors are fine.
  EXPECT_TRUE(OpenBytes(RawFile("{}      ", "")).ok());
}

TEST_F(SafetensorsTest, MissingFileAndDirectory) {
  absl::StatusOr<SafetensorsReader> r =
      SafetensorsReader::Open(Path("absent.safetensors"));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound) << r.status();
  r = SafetensorsReader::Open(dir_);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
}

TEST_F(SafetensorsTest, WriterRefusesBadTensorsAndLeavesNoFile) {
  const std::vector<float> v(6, 1.0f);
  const std::string path = Path("bad.safetensors");
  absl::Status s = WriteSafetensors(path, {{"a", {2, 2}, v}});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("'a'"), std::string::npos) << s;
  s = WriteSafetensors(path, {{"a", {6}, v}, {"a", {6}, v}});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  s = WriteSafetensors(path, {{"__metadata__", {6}, v}});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  s = WriteSafetensors(path, {{"a", {-6}, v}});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_EQ(ReadFile(path), "");
  EXPECT_FALSE(SafetensorsReader::Open(path).ok());
}

}  // namespace
}  // namespace zeroshard
