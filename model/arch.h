// A model architecture, and the registry of them (docs/ARCHITECTURE.md,
// "model"). Everything that depends on which model is trained goes through
// a ModelArch found by the configuration's name (`zeroshard.model.arch`):
// the manifest the servers receive (with each tensor's init rule and
// parameter class, so the servers need no model knowledge), the parameter
// count, the CPU model the engine drives, the activation estimate, and the
// Hugging Face safetensors names. GPT-2 ("gpt2", model/gpt2_arch.cc) and
// Llama ("llama", model/llama_arch.cc, CPU path only so far) are the
// architectures today; adding one is a class here and a line in arch.cc's
// table (its CUDA model is a case of model/cuda/device_arch.h).
//
//   ASSIGN_OR_RETURN(const model::ModelArch* arch,
//                    model::FindArch(config.cluster.model.arch));
//   ASSIGN_OR_RETURN(ModelManifest m,
//                    arch->Manifest(config.cluster.model, workers));
#ifndef ZEROSHARD_MODEL_ARCH_H_
#define ZEROSHARD_MODEL_ARCH_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/config.h"
#include "common/dtype.h"
#include "common/layout.h"
#include "common/model_shape.h"
#include "model/checkpoint_policy.h"
#include "model/generate.h"
#include "model/memory_estimate.h"
#include "model/unit_model.h"

namespace zeroshard::model {

class ModelArch {
 public:
  virtual ~ModelArch() = default;

  // The name the configuration uses ("gpt2").
  virtual absl::string_view name() const = 0;
  // One line for --help and errors.
  virtual absl::string_view description() const = 0;

  // ValidateModelShape and this architecture's own conditions.
  virtual absl::Status Validate(const ModelShape& shape) const = 0;
  // Its tensors, grouped into units, padded for `partitions` workers; each
  // tensor carries its init rule and parameter class. Its `arch` is name().
  virtual absl::StatusOr<ModelManifest> Manifest(const ModelShape& shape,
                                                 uint32_t partitions) const = 0;
  // Parameters (tensor elements, without padding).
  virtual uint64_t ParamCount(const ModelShape& shape) const = 0;
  // The shape a layout of this architecture was made for (a server's, from
  // Discover); what its tensors do not say (GPT-2: heads; Llama: heads,
  // context, rope_theta, norm_eps) as `given` says it; INVALID_ARGUMENT when
  // the layout is not one Manifest makes.
  virtual absl::StatusOr<ModelShape> ShapeOfLayout(const FlatLayout& layout,
                                                   const ModelShape& given) const = 0;

  // The CPU model the engine drives over `layout` (made from Manifest).
  virtual absl::StatusOr<std::unique_ptr<UnitModel>> MakeCpuModel(
      const FlatLayout& layout, const ModelShape& shape, DType param_dtype,
      const CheckpointPolicy& policy) const = 0;

  // Sampling from flat FP32 weights (flat.size() == layout.total_elems(),
  // which must outlive the generator).
  virtual absl::StatusOr<std::unique_ptr<Generator>> MakeGenerator(
      const FlatLayout& layout, const ModelShape& shape,
      absl::Span<const float> flat) const = 0;

  // One worker's activation peak (model/memory_estimate.h).
  virtual ActivationEstimate EstimateActivations(
      const ModelShape& shape, int micro_batch, int seq, Precision precision,
      zeroshard::CheckpointPolicy policy, int k,
      bool online_attention) const = 0;

  // Hugging Face safetensors of the flat FP32 weights (flat.size() ==
  // layout.total_elems()): write, check a file against the layout, read.
  virtual absl::Status WriteHfSafetensors(
      const std::string& path, const FlatLayout& layout,
      absl::Span<const float> flat,
      const std::map<std::string, std::string>& metadata) const = 0;
  virtual absl::Status CheckHfSafetensors(const std::string& path,
                                          const FlatLayout& layout) const = 0;
  virtual absl::StatusOr<std::vector<float>> ReadHfSafetensors(
      const std::string& path, const FlatLayout& layout) const = 0;
};

// The architecture of that name; NOT_FOUND naming the known ones otherwise.
absl::StatusOr<const ModelArch*> FindArch(absl::string_view name);
// The registered names, sorted.
std::vector<std::string> ArchNames();

// FindArch(shape.arch), then its Validate.
absl::StatusOr<const ModelArch*> ArchForShape(const ModelShape& shape);
// The architecture a manifest names (ModelManifest::arch); NOT_FOUND when it
// names none or an unknown one.
absl::StatusOr<const ModelArch*> ArchOfManifest(const ModelManifest& manifest);

}  // namespace zeroshard::model

#endif  // ZEROSHARD_MODEL_ARCH_H_
