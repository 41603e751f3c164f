// The Hugging Face GPT-2 mapping: flat weights -> safetensors -> flat
// weights is exact; an independent reader (the JSON header parsed here, the
// raw bytes read here) finds HF's names and Conv1D [in, out] shapes with
// the flat weights' values in them; and a set of tensors that is not
// exactly the model's is refused naming the tensor.
#include "model/hf_gpt2.h"

#include <cstdint>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "model/gpt_manifest.h"
#include "gtest/gtest.h"
#include "tests/support/test_files.h"

namespace zeroshard {
namespace {

using nlohmann::json;

const GptShape kShape{.layers = 2, .heads = 2, .width = 8, .vocab = 13,
                          .context = 5};

FlatLayout MakeLayout(uint32_t servers, uint32_t workers) {
  absl::StatusOr<ModelManifest> m = MakeGptManifest(kShape, workers);
  EXPECT_TRUE(m.ok()) << m.status();
  absl::StatusOr<FlatLayout> l = FlatLayout::Create(*m, servers, workers);
  EXPECT_TRUE(l.ok()) << l.status();
  return *l;
}

// Random weights on the tensors, zero padding.
std::vector<float> RandomFlat(const FlatLayout& layout, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> flat(layout.total_elems(), 0.0f);
  for (const TensorInfo& t : layout.tensors()) {
    for (uint64_t i = 0; i < t.numel; ++i) flat[t.offset + i] = normal(rng);
  }
  return flat;
}

uint32_t Seed() {
  const uint32_t seed = std::random_device{}();
  std::printf("seed %u\n", seed);
  return seed;
}

// HF GPT2Model's name -> shape for kShape, written out from the HF model
// definition (Conv1D weight = [nx, nf] = [in, out]), not from the manifest.
std::map<std::string, std::vector<int64_t>> HfShapes() {
  const int64_t C = kShape.width;
  std::map<std::string, std::vector<int64_t>> s = {
      {"wte.weight", {kShape.vocab, C}},
      {"wpe.weight", {kShape.context, C}},
      {"ln_f.weight", {C}},
      {"ln_f.bias", {C}}};
  for (int i = 0; i < kShape.layers; ++i) {
    const std::string p = absl::StrCat("h.", i, ".");
    s[p + "ln_1.weight"] = {C};
    s[p + "ln_1.bias"] = {C};
    s[p + "attn.c_attn.weight"] = {C, 3 * C};  // in C, out q|k|v
    s[p + "attn.c_attn.bias"] = {3 * C};
    s[p + "attn.c_proj.weight"] = {C, C};
    s[p + "attn.c_proj.bias"] = {C};
    s[p + "ln_2.weight"] = {C};
    s[p + "ln_2.bias"] = {C};
    s[p + "mlp.c_fc.weight"] = {C, 4 * C};      // in C, out 4C
    s[p + "mlp.c_fc.bias"] = {4 * C};
    s[p + "mlp.c_proj.weight"] = {4 * C, C};    // in 4C, out C
    s[p + "mlp.c_proj.bias"] = {C};
  }
  return s;
}

// The tensors of a flat vector, owning copies, optionally renamed.
std::vector<SafetensorsTensor> Owned(const FlatLayout& layout,
                                     const std::vector<float>& flat,
                                     const std::string& prefix = "") {
  std::vector<SafetensorsTensor> out;
  for (const TensorInfo& t : layout.tensors()) {
    out.push_back({prefix + t.name, t.shape,
                   std::vector<float>(flat.begin() + t.offset,
                                      flat.begin() + t.offset + t.numel)});
  }
  return out;
}

SafetensorsTensor* Find(std::vector<SafetensorsTensor>& v,
                        const std::string& name) {
  for (SafetensorsTensor& t : v) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

void ExpectInvalid(const absl::StatusOr<std::vector<float>>& r,
                   const std::string& what) {
  ASSERT_FALSE(r.ok()) << "want an error naming " << what;
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument)
      << r.status();
  EXPECT_NE(r.status().message().find(what), std::string::npos)
      << "want '" << what << "' in: " << r.status();
}

class HfGpt2Test : public ::testing::Test {
 protected:
  std::string dir_ = testing::MakeTempDir("zs_hf_gpt2_");
};

TEST_F(HfGpt2Test, FileRoundTripIsExactForEveryLayout) {
  const uint32_t seed = Seed();
  for (auto [servers, workers] : {std::pair{1u, 1u}, {2u, 2u}, {3u, 4u}}) {
    const FlatLayout layout = MakeLayout(servers, workers);
    const std::vector<float> flat = RandomFlat(layout, seed + workers);
    const std::string path = dir_ + "/m.safetensors";
    ASSERT_TRUE(WriteHfSafetensors(path, layout, flat, {{"step", "7"}}).ok());
    ASSERT_TRUE(CheckHfSafetensors(path, layout).ok());
    absl::StatusOr<std::vector<float>> back = ReadHfSafetensors(path, layout);
    ASSERT_TRUE(back.ok()) << back.status();
    ASSERT_EQ(back->size(), flat.size());
    EXPECT_EQ(std::memcmp(back->data(), flat.data(), flat.size() * 4), 0)
        << servers << " servers, " << workers << " workers";
    // The file holds the parameters only, so any layout of the same model
    // reads it: padding differs with the worker count.
    const FlatLayout other = MakeLayout(1, 1);
    absl::StatusOr<std::vector<float>> as_other = ReadHfSafetensors(path, other);
    ASSERT_TRUE(as_other.ok()) << as_other.status();
    for (const TensorInfo& t : other.tensors()) {
      const TensorInfo& mine = layout.tensors()[*layout.FindTensor(t.name)];
      EXPECT_EQ(std::memcmp(as_other->data() + t.offset,
                            flat.data() + mine.offset, t.numel * 4),
                0)
          << t.name;
    }
  }
}

TEST_F(HfGpt2Test, IndependentReaderSeesHfNamesShapesAndValues) {
  const FlatLayout layout = MakeLayout(2, 2);
  const std::vector<float> flat = RandomFlat(layout, Seed());
  const std::string path = dir_ + "/m.safetensors";
  ASSERT_TRUE(WriteHfSafetensors(path, layout, flat, {{"step", "7"}}).ok());

  const std::string raw = testing::ReadFile(path);
  ASSERT_GE(raw.size(), 8u);
  uint64_t n = 0;
  std::memcpy(&n, raw.data(), 8);
  ASSERT_LE(8 + n, raw.size());
  const json header = json::parse(raw.substr(8, n));
  const std::string data = raw.substr(8 + n);
  EXPECT_EQ(header["__metadata__"]["format"], "pt");  // transformers needs it
  EXPECT_EQ(header["__metadata__"]["step"], "7");

  const std::map<std::string, std::vector<int64_t>> want = HfShapes();
  size_t tensors = 0;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    ++tensors;
    ASSERT_TRUE(want.count(name)) << "unexpected name " << name;
    EXPECT_EQ(name.rfind("transformer.", 0), std::string::npos) << name;
    EXPECT_EQ(entry["dtype"], "F32") << name;
    const std::vector<int64_t> shape = entry["shape"];
    EXPECT_EQ(shape, want.at(name)) << name;
    const uint64_t begin = entry["data_offsets"][0];
    const uint64_t end = entry["data_offsets"][1];
    ASSERT_LE(end, data.size()) << name;
    // Element [i][j] of HF's row-major tensor (for Conv1D weights: input i,
    // output j, used as x @ W) is the flat weight at offset + i * cols + j:
    // zeroshard's matrices are [in, out] too, so nothing is transposed.
    const TensorInfo& t = layout.tensors()[*layout.FindTensor(name)];
    const uint64_t rows = shape.size() == 2 ? shape[0] : 1;
    const uint64_t cols = shape.back();
    ASSERT_EQ(end - begin, rows * cols * 4) << name;
    for (uint64_t i = 0; i < rows; ++i) {
      for (uint64_t j = 0; j < cols; ++j) {
        float v;
        std::memcpy(&v, data.data() + begin + 4 * (i * cols + j), 4);
        ASSERT_EQ(v, flat[t.offset + i * cols + j])
            << name << "[" << i << "][" << j << "]";
      }
    }
  }
  EXPECT_EQ(tensors, want.size());
}

TEST_F(HfGpt2Test, InMemoryRoundTripAcceptsTheTransformerPrefix) {
  const FlatLayout layout = MakeLayout(2, 2);
  const std::vector<float> flat = RandomFlat(layout, Seed());
  absl::StatusOr<std::vector<SafetensorsTensorView>> views =
      HfGpt2TensorsFromFlat(layout, flat);
  ASSERT_TRUE(views.ok()) << views.status();
  EXPECT_EQ(views->size(), layout.tensors().size());
  for (const std::string prefix : {"", "transformer."}) {
    absl::StatusOr<std::vector<float>> back =
        FlatFromHfGpt2Tensors(layout, Owned(layout, flat, prefix));
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(std::memcmp(back->data(), flat.data(), flat.size() * 4), 0);
  }
  // Mixed spellings are fine as long as no tensor comes twice.
  std::vector<SafetensorsTensor> mixed = Owned(layout, flat);
  mixed[0].name = "transformer." + mixed[0].name;
  EXPECT_TRUE(FlatFromHfGpt2Tensors(layout, mixed).ok());
}

TEST_F(HfGpt2Test, RefusesMissingExtraRepeatedAndMisshapedTensors) {
  const FlatLayout layout = MakeLayout(1, 2);
  const std::vector<float> flat = RandomFlat(layout, Seed());

  std::vector<SafetensorsTensor> missing = Owned(layout, flat);
  missing.erase(missing.begin() + 5);
  ExpectInvalid(FlatFromHfGpt2Tensors(layout, missing, "src"),
                "missing tensor '" + layout.tensors()[5].name + "'");

  std::vector<SafetensorsTensor> extra = Owned(layout, flat);
  extra.push_back({"h.2.ln_1.weight", {8}, std::vector<float>(8)});
  ExpectInvalid(FlatFromHfGpt2Tensors(layout, extra, "src"),
                "tensor 'h.2.ln_1.weight'");

  std::vector<SafetensorsTensor> twice = Owned(layout, flat);
  twice.push_back(twice[3]);
  twice.back().name = "transformer." + twice.back().name;
  ExpectInvalid(FlatFromHfGpt2Tensors(layout, twice, "src"),
                "tensor 'transformer." + twice[3].name + "': given twice");

  // A Linear-style [out, in] matrix is refused, with a hint.
  std::vector<SafetensorsTensor> transposed = Owned(layout, flat);
  Find(transposed, "h.1.mlp.c_fc.weight")->shape = {32, 8};
  ExpectInvalid(FlatFromHfGpt2Tensors(layout, transposed, "src"),
                "tensor 'h.1.mlp.c_fc.weight': has shape [32, 8]");
  ExpectInvalid(FlatFromHfGpt2Tensors(layout, transposed, "src"),
                "transposed?");

  std::vector<SafetensorsTensor> short_data = Owned(layout, flat);
  Find(short_data, "ln_f.bias")->data.pop_back();
  ExpectInvalid(FlatFromHfGpt2Tensors(layout, short_data, "src"),
                "tensor 'ln_f.bias'");

  // A mask buffer of a block the model does not have is an extra tensor.
  std::vector<SafetensorsTensor> far_mask = Owned(layout, flat);
  far_mask.push_back({"h.2.attn.bias", {1}, {1.0f}});
  ExpectInvalid(FlatFromHfGpt2Tensors(layout, far_mask, "src"),
                "tensor 'h.2.attn.bias'");
}

TEST_F(HfGpt2Test, HubExtrasMaskBuffersAndATiedHead) {
  const FlatLayout layout = MakeLayout(1, 1);
  const std::vector<float> flat = RandomFlat(layout, Seed());
  std::vector<SafetensorsTensor> hub = Owned(layout, flat, "transformer.");
  for (int i = 0; i < kShape.layers; ++i) {
    hub.push_back({absl::StrCat("h.", i, ".attn.bias"), {1, 1, 5, 5},
                   std::vector<float>(25, 1.0f)});
    hub.push_back({absl::StrCat("transformer.h.", i, ".attn.masked_bias"), {},
                   {-1e4f}});
  }
  hub.push_back(*Find(hub, "transformer.wte.weight"));
  hub.back().name = "lm_head.weight";
  absl::StatusOr<std::vector<float>> back = FlatFromHfGpt2Tensors(layout, hub);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(std::memcmp(back->data(), flat.data(), flat.size() * 4), 0);

  hub.back().data[3] += 1.0f;  // an untied head
  ExpectInvalid(FlatFromHfGpt2Tensors(layout, hub),
                "tensor 'lm_head.weight': differs from wte.weight");
}

TEST_F(HfGpt2Test, FileErrorsNameTheFileAndTensor) {
  const FlatLayout layout = MakeLayout(1, 1);
  const std::vector<float> flat = RandomFlat(layout, Seed());
  std::vector<SafetensorsTensor> tensors = Owned(layout, flat);
  Find(tensors, "h.0.attn.c_proj.weight")->shape = {4, 16};
  std::vector<SafetensorsTensorView> views;
  for (const SafetensorsTensor& t : tensors) {
    views.push_back({t.name, t.shape, t.data});
  }
  const std::string path = dir_ + "/bad.safetensors";
  ASSERT_TRUE(WriteSafetensors(path, views).ok());
  absl::Status s = CheckHfSafetensors(path, layout);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find(path), std::string::npos) << s;
  EXPECT_NE(s.message().find("'h.0.attn.c_proj.weight'"), std::string::npos)
      << s;
  ExpectInvalid(ReadHfSafetensors(path, layout), "h.0.attn.c_proj.weight");
  // Wrong model size: a layout of another width finds every shape wrong.
  ASSERT_TRUE(WriteHfSafetensors(path, layout, flat).ok());
  GptShape wide = kShape;
  wide.width = 16;
  absl::StatusOr<FlatLayout> other =
      FlatLayout::Create(*MakeGptManifest(wide, 1), 1, 1);
  ASSERT_TRUE(other.ok());
  ExpectInvalid(ReadHfSafetensors(path, *other), "tensor 'wte.weight'");
  // A missing file is NOT_FOUND.
  EXPECT_EQ(ReadHfSafetensors(dir_ + "/absent", layout).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(HfGpt2Test, ReadsBf16Files) {
  const FlatLayout layout = MakeLayout(1, 1);
  std::vector<float> flat = RandomFlat(layout, Seed());
  // Weights a BF16 file can hold exactly.
  for (float& x : flat) x = Bf16ToFloat(FloatToBf16(x));
  json header = json::object();
  std::string data;
  for (const TensorInfo& t : layout.tensors()) {
    header[t.name] = {{"dtype", "BF16"},
                      {"shape", t.shape},
                      {"data_offsets", {data.size(), data.size() + 2 * t.numel}}};
    for (uint64_t i = 0; i < t.numel; ++i) {
      const uint16_t b = FloatToBf16(flat[t.offset + i]);
      data.append(reinterpret_cast<const char*>(&b), 2);
    }
  }
  const std::string h = header.dump();
  const uint64_t n = h.size();
  const std::string path = dir_ + "/bf16.safetensors";
  ASSERT_TRUE(testing::WriteFile(
      path, std::string(reinterpret_cast<const char*>(&n), 8) + h + data));
  absl::StatusOr<std::vector<float>> back = ReadHfSafetensors(path, layout);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(std::memcmp(back->data(), flat.data(), flat.size() * 4), 0);
}

TEST_F(HfGpt2Test, OnlyGpt2LayoutsAndWholeFlatSpaces) {
  ModelManifest m;
  m.units.push_back({"embedding", {{"wte.weight", {13, 8}}, {"wpe.weight", {5, 8}}}});
  m.units.push_back({"block_0", {{"h.0.ln_1.weight", {8}}}});
  m.units.push_back({"final", {{"ln_f.weight", {8}}, {"ln_f.bias", {8}}}});
  absl::StatusOr<FlatLayout> odd = FlatLayout::Create(m, 1, 1);
  ASSERT_TRUE(odd.ok()) << odd.status();
  EXPECT_EQ(CheckGpt2Layout(*odd).code(), absl::StatusCode::kInvalidArgument);
  std::vector<float> flat(odd->total_elems());
  EXPECT_FALSE(HfGpt2TensorsFromFlat(*odd, flat).ok());

  const FlatLayout layout = MakeLayout(1, 1);
  EXPECT_TRUE(CheckGpt2Layout(layout).ok());
  std::vector<float> short_flat(layout.total_elems() - 1);
  EXPECT_EQ(HfGpt2TensorsFromFlat(layout, short_flat).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace zeroshard
