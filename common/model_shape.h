// The shape of a model as the configuration gives it: which architecture
// (a name in model/arch.h's registry, "gpt2" by default) and the sizes every
// decoder-only transformer has. What the sizes mean for one architecture, and
// what else it checks, is that architecture's (ModelArch::Validate).
//
//   ModelShape shape{.layers = 4, .heads = 4, .width = 128, .vocab = 256,
//                    .context = 128};  // arch "gpt2"
//   RETURN_IF_ERROR(ValidateModelShape(shape));
#ifndef ZEROSHARD_COMMON_MODEL_SHAPE_H_
#define ZEROSHARD_COMMON_MODEL_SHAPE_H_

#include <string>

#include "absl/status/status.h"

namespace zeroshard {

struct ModelShape {
  int layers = 4;
  int heads = 4;
  int width = 128;   // channels C; must be divisible by heads
  int vocab = 256;
  int context = 128; // maximum sequence length T
  std::string arch = "gpt2";  // the architecture's name (model/arch.h)
  // Llama's (arch "llama", model/llama_arch.h); GPT-2 refuses them set.
  int kv_heads = 0;       // key/value heads; 0: heads (multi-head)
  int mlp_width = 0;      // the MLP's hidden width F; 0: the arch's default
  double rope_theta = 10000;
  double norm_eps = 1e-5;
  bool tie_embeddings = false;  // the head shares the token embedding
  friend bool operator==(const ModelShape&, const ModelShape&) = default;
};

// Whether `shape` sets any of Llama's keys away from their defaults; the
// first such key's name, for errors ("kv_heads"), or empty.
std::string FirstLlamaKeySet(const ModelShape& shape);

// The checks that hold for every architecture: a name of lowercase letters,
// digits, '-' and '_'; every size positive and bounded; width % heads == 0.
absl::Status ValidateModelShape(const ModelShape& shape);

}  // namespace zeroshard

#endif  // ZEROSHARD_COMMON_MODEL_SHAPE_H_
