// Text generation from a GPT-2 model's full FP32 weights: forward only, one
// new token at a time, the whole (cropped) context recomputed for each (no
// key/value cache: samples are short and the model is run on the CPU).
//
//   ASSIGN_OR_RETURN(GptGenerator gen,
//                    GptGenerator::Create(layout, shape, flat));  // FP32
//   GenerateOptions o{.max_new_tokens = 32, .temperature = 0.8, .top_k = 40,
//                     .seed = 1};
//   ASSIGN_OR_RETURN(std::vector<int32_t> out, gen.Generate(prompt_ids, o));
//   // out: the new tokens only
//
// Contracts:
// - `flat` holds layout.total_elems() FP32 values (the servers' master
//   weights, e.g. a ReadConsistentSnapshot of the whole space) and must
//   outlive the generator (the layout is copied); the layout must be
//   MakeGptManifest(shape, any partition count).
// - The context is the prompt plus what was generated so far, cropped to its
//   last shape.context tokens (as nanoGPT's generate does).
// - temperature 0 is greedy: the argmax of the logits (the lowest id on a
//   tie). temperature > 0 samples from softmax(logits / temperature) over
//   the top_k largest logits (top_k 0: all of them) with a generator seeded
//   by `seed`: the same weights, prompt and options give the same tokens.
// - Errors (INVALID_ARGUMENT): an empty prompt, a prompt token outside
//   [0, vocab), max_new_tokens < 0, a negative or non-finite temperature,
//   top_k < 0, or weights of the wrong length.
// The computation is the training model's (model/gpt_block.h) in
// FP32, so NextTokenLogits matches the golden forward of
// tests/fixtures/make_generate_golden.py.
#ifndef ZEROSHARD_MODEL_GENERATE_H_
#define ZEROSHARD_MODEL_GENERATE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "model/gpt_manifest.h"
#include "common/layout.h"

namespace zeroshard::model {

struct GenerateOptions {
  int max_new_tokens = 48;
  double temperature = 0.8;  // 0: greedy
  int top_k = 40;            // 0: the whole vocabulary
  uint64_t seed = 1;
};

// INVALID_ARGUMENT naming the option that is out of range.
absl::Status ValidateGenerateOptions(const GenerateOptions& options);

// The token chosen from one position's logits: greedy or sampled as the
// options say; `draw` is a uniform number in [0, 1) (unused when greedy).
int32_t PickToken(absl::Span<const float> logits, const GenerateOptions& options,
                  double draw);

// Sampling from a model with its weights in host memory, whatever the
// architecture: it gives the next token's logits, the loop is shared.
class Generator {
 public:
  virtual ~Generator() = default;

  // The logits [vocab] of the token after `context` (1..shape().context
  // tokens, each in [0, vocab)).
  virtual absl::StatusOr<std::vector<float>> NextTokenLogits(
      absl::Span<const int32_t> context) const = 0;
  virtual const ModelShape& shape() const = 0;

  // The new tokens (max_new_tokens of them) continuing `prompt`; the context
  // is the last shape().context tokens.
  absl::StatusOr<std::vector<int32_t>> Generate(
      absl::Span<const int32_t> prompt, const GenerateOptions& options) const;
};

// GPT-2's (ModelArch::MakeGenerator of "gpt2").
class GptGenerator final : public Generator {
 public:
  static absl::StatusOr<GptGenerator> Create(const FlatLayout& layout,
                                             const GptShape& shape,
                                             absl::Span<const float> flat);

  absl::StatusOr<std::vector<float>> NextTokenLogits(
      absl::Span<const int32_t> context) const override;
  const ModelShape& shape() const override { return shape_; }

 private:
  GptGenerator() = default;
  std::shared_ptr<const FlatLayout> layout_;
  GptShape shape_;
  absl::Span<const float> flat_;
};

}  // namespace zeroshard::model

#endif  // ZEROSHARD_MODEL_GENERATE_H_
