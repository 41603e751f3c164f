// Hugging Face Llama safetensors <-> the flat FP32 weights of a Llama
// layout (model/llama_manifest.h). The layout's tensor names and shapes are
// Hugging Face's LlamaForCausalLM state_dict's, so a tensor is written and
// read under its own name; a file may also hold the rotary buffers older
// transformers saved (model.layers.N.self_attn.rotary_emb.inv_freq), which
// are skipped, and, with tied embeddings, an lm_head.weight equal to the
// embedding. Anything else, a missing tensor or another shape is refused
// naming it.
#ifndef ZEROSHARD_MODEL_HF_LLAMA_H_
#define ZEROSHARD_MODEL_HF_LLAMA_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/layout.h"
#include "common/model_shape.h"

namespace zeroshard {

// The shape a Llama layout was made for, `heads` as given (the tensors do
// not say it); context, rope_theta and norm_eps are not in the layout and
// keep ModelShape's defaults (ModelArch::ShapeOfLayout takes them as given). INVALID_ARGUMENT when the layout is not one
// MakeLlamaManifest makes.
absl::StatusOr<ModelShape> LlamaShapeOfLayout(const FlatLayout& layout, int heads);

absl::Status WriteHfLlamaSafetensors(const std::string& path, const FlatLayout& layout,
                                     absl::Span<const float> flat,
                                     std::map<std::string, std::string> metadata);
absl::Status CheckHfLlamaSafetensors(const std::string& path, const FlatLayout& layout);
absl::StatusOr<std::vector<float>> ReadHfLlamaSafetensors(const std::string& path,
                                                          const FlatLayout& layout);

}  // namespace zeroshard

#endif  // ZEROSHARD_MODEL_HF_LLAMA_H_
