// Hugging Face GPT-2 weights <-> zeroshard's flat FP32 weights, and
// safetensors files of them that transformers' GPT2LMHeadModel loads.
//
// Names. model/gpt_manifest.h names every tensor as Hugging Face's
// GPT2Model state dict does, so the map is the identity: wte.weight
// [vocab, C], wpe.weight [context, C], h.{i}.ln_1.weight/bias [C],
// h.{i}.attn.c_attn.weight [C, 3C] + bias [3C], h.{i}.attn.c_proj.weight
// [C, C] + bias, h.{i}.ln_2.*, h.{i}.mlp.c_fc.weight [C, 4C] + bias [4C],
// h.{i}.mlp.c_proj.weight [4C, C] + bias [C], ln_f.weight/bias. Files are
// written with these names, as the hub's GPT-2 files are; on input the
// GPT2LMHeadModel spelling "transformer.<name>" is accepted too.
//
// Orientation: no transposes. HF stores the four projections as Conv1D,
// weight [in, out] with y = x @ W + b. zeroshard's kernels do the same:
// model/kernels/cpu/linear.h computes y[M,out] = x[M,in] W[in,out] + b on
// the row-major [in, out] matrix the manifest declares, and the golden test
// (tests/fixtures/make_gpt_golden.py, torch's `a @ w[...c_attn.weight]`)
// checks the model against exactly that. c_attn's 3C outputs are [q | k | v]
// in both (model/kernels/cpu/attention.h; HF splits them the same way).
// wte and wpe are embedding tables [rows, C] in both; the LM head is tied to
// wte (logits = ln_f(x) wte^T) and is not stored.
//
// On input, besides the parameters, two kinds of entry are accepted and
// skipped: h.{i}.attn.bias and h.{i}.attn.masked_bias, the causal-mask
// buffers that the hub's gpt2 checkpoints carry (not parameters), and
// lm_head.weight when it equals wte.weight bit for bit (a tied head saved
// twice). Anything else missing, extra, repeated or of another shape is
// INVALID_ARGUMENT naming the tensor. The flat weights cover the whole
// padded space (FlatLayout::total_elems()); padding is not exported and is
// zero on import.
//
//   ASSIGN_OR_RETURN(FlatLayout layout, FlatLayout::Create(manifest, S, N));
//   RETURN_IF_ERROR(WriteHfSafetensors("model.safetensors", layout, flat,
//                                      {{"zeroshard_step", "30"}}));
//   ASSIGN_OR_RETURN(std::vector<float> back,
//                    ReadHfSafetensors("model.safetensors", layout));
#ifndef ZEROSHARD_MODEL_HF_GPT2_H_
#define ZEROSHARD_MODEL_HF_GPT2_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/layout.h"
#include "common/model_shape.h"
#include "common/safetensors.h"

namespace zeroshard {

// OK when `layout`'s manifest is the one MakeGptManifest makes for some
// shape (the tensors, names, shapes and units this mapping assumes);
// INVALID_ARGUMENT otherwise.
absl::Status CheckGpt2Layout(const FlatLayout& layout);
// The shape of a GPT-2 layout (CheckGpt2Layout first), with `heads` as
// given: the tensors' shapes do not say it.
absl::StatusOr<ModelShape> Gpt2ShapeOfLayout(const FlatLayout& layout,
                                             int heads);

// The HF tensors of flat weights (flat.size() == layout.total_elems()),
// in manifest order. The views point into `flat` (no copy: no tensor needs
// a transpose), so `flat` must outlive them.
absl::StatusOr<std::vector<SafetensorsTensorView>> HfGpt2TensorsFromFlat(
    const FlatLayout& layout, absl::Span<const float> flat);

// The flat weights (total_elems(), padding zero) of a set of HF tensors.
// `source` names them in errors (e.g. the file).
absl::StatusOr<std::vector<float>> FlatFromHfGpt2Tensors(
    const FlatLayout& layout, absl::Span<const SafetensorsTensor> tensors,
    absl::string_view source = "HF GPT-2 tensors");

// Writes the flat weights as a safetensors file of HF GPT-2 tensors (F32),
// atomically. "format": "pt" is added to the metadata unless it has a
// "format" (transformers refuses a file without it).
absl::Status WriteHfSafetensors(const std::string& path,
                                const FlatLayout& layout,
                                absl::Span<const float> flat,
                                std::map<std::string, std::string> metadata = {});

// Validates a file's header against the layout (names, shapes, dtypes that
// read as FP32) without reading tensor data.
absl::Status CheckHfSafetensors(const std::string& path,
                                const FlatLayout& layout);

// Reads a file of HF GPT-2 tensors (F32, BF16 or F16) into flat FP32
// weights for `layout`.
absl::StatusOr<std::vector<float>> ReadHfSafetensors(const std::string& path,
                                                     const FlatLayout& layout);

}  // namespace zeroshard

#endif  // ZEROSHARD_MODEL_HF_GPT2_H_
