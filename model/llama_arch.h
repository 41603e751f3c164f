// The "llama" architecture of the registry (model/arch.h): Llama-shaped
// decoders (Llama 2/3, Qwen, Mistral, SmolLM) on the CPU path, from
// zeroshard.model's arch, layers, heads, kv_heads, width, mlp_width, vocab,
// context, rope_theta, norm_eps and tie_embeddings.
#ifndef ZEROSHARD_MODEL_LLAMA_ARCH_H_
#define ZEROSHARD_MODEL_LLAMA_ARCH_H_

#include "model/arch.h"

namespace zeroshard::model {

const ModelArch& LlamaArch();

}  // namespace zeroshard::model

#endif  // ZEROSHARD_MODEL_LLAMA_ARCH_H_
