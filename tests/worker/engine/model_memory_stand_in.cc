#include "tests/worker/engine/model_memory_stand_in.h"

#include <cstdint>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/page_aligned.h"
#include "common/status_macros.h"

namespace zeroshard::testing {
namespace {

// Writes the model made that have not reached memory yet: the content each
// destination will hold.
using Writes = std::map<float*, std::vector<float>>;

void Apply(const Writes& writes) {
  for (const auto& [dst, values] : writes) {
    std::memcpy(dst, values.data(), values.size() * sizeof(float));
  }
}

class StandInFence final : public model::ModelFence {
 public:
  StandInFence(Writes writes, std::shared_ptr<StandInFence> previous,
               StandInRecord* record)
      : writes_(std::move(writes)),
        previous_(std::move(previous)),
        record_(record) {}
  absl::Status Wait() override {
    record_->CountFenceWait();
    absl::MutexLock lock(&mu_);
    if (done_) return absl::OkStatus();
    if (previous_ != nullptr) RETURN_IF_ERROR(previous_->Wait());
    previous_.reset();
    Apply(writes_);
    writes_.clear();
    done_ = true;
    return absl::OkStatus();
  }

 private:
  absl::Mutex mu_;
  Writes writes_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<StandInFence> previous_ ABSL_GUARDED_BY(mu_);
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  StandInRecord* const record_;
};

}  // namespace

void StandInRecord::Violation(std::string what) {
  absl::MutexLock lock(&mu_);
  if (violations_.size() < 20) violations_.push_back(std::move(what));
}

std::vector<std::string> StandInRecord::violations() const {
  absl::MutexLock lock(&mu_);
  return violations_;
}

class StandInMemory final : public model::ModelMemory {
 public:
  explicit StandInMemory(StandInRecord* record) : record_(record) {}
  ~StandInMemory() override {
    absl::MutexLock lock(&mu_);
    if (!blocks_.empty()) {
      record_->Violation(absl::StrCat(blocks_.size(),
                                      " allocations never freed"));
    }
    if (!pinned_.empty()) {
      record_->Violation(absl::StrCat(pinned_.size(),
                                      " host ranges never unpinned"));
    }
    for (auto& [p, bytes] : blocks_) delete[] p;
  }

  const char* name() const override { return "stand-in"; }
  bool host_addressable() const override { return true; }

  absl::StatusOr<void*> Allocate(size_t bytes) override {
    if (bytes == 0) return absl::InvalidArgumentError("0 bytes");
    auto* p = new uint8_t[bytes];
    std::memset(p, 0xFF, bytes);  // NaN as FP32 and BF16
    absl::MutexLock lock(&mu_);
    blocks_[p] = bytes;
    return static_cast<void*>(p);
  }

  void Free(void* p) override {
    absl::MutexLock lock(&mu_);
    auto it = blocks_.find(static_cast<uint8_t*>(p));
    if (it == blocks_.end()) {
      record_->Violation("Free of memory not allocated here (or twice)");
      return;
    }
    // Deferred writes into it are dropped.
    const uint8_t* end = it->first + it->second;
    for (auto w = pending_.begin(); w != pending_.end();) {
      const auto* d = reinterpret_cast<const uint8_t*>(w->first);
      w = d >= it->first && d < end ? pending_.erase(w) : std::next(w);
    }
    delete[] it->first;
    blocks_.erase(it);
  }

  absl::Status PinHost(void* host, size_t bytes) override {
    absl::MutexLock lock(&mu_);
    // cudaHostRegister locks whole pages: a range sharing a page with one
    // pinned already is refused as registered already.
    const uintptr_t page = HostPageBytes();
    const uintptr_t lo = reinterpret_cast<uintptr_t>(host) / page;
    const uintptr_t hi = (reinterpret_cast<uintptr_t>(host) + bytes + page - 1) / page;
    for (const auto& [p, n] : pinned_) {
      const uintptr_t plo = reinterpret_cast<uintptr_t>(p) / page;
      const uintptr_t phi = (reinterpret_cast<uintptr_t>(p) + n + page - 1) / page;
      if (lo < phi && plo < hi) {
        record_->Violation("PinHost of a range that shares a page with a pinned one");
      }
    }
    if (!pinned_.emplace(static_cast<uint8_t*>(host), bytes).second) {
      record_->Violation("PinHost of a range pinned already");
    }
    return absl::OkStatus();
  }
  void UnpinHost(void* host) override {
    absl::MutexLock lock(&mu_);
    if (pinned_.erase(static_cast<uint8_t*>(host)) != 1) {
      record_->Violation("UnpinHost of a range not pinned");
    }
  }

  absl::Status CopyToModel(void* dst, const void* host,
                           size_t bytes) override {
    Check(dst, bytes, "CopyToModel");
    CheckPinned(host, bytes, "CopyToModel");
    std::memcpy(dst, host, bytes);
    record_->CountCopy(bytes, 0);
    return absl::OkStatus();
  }
  absl::Status CopyFromModel(void* host, const void* src,
                             size_t bytes) override {
    Check(src, bytes, "CopyFromModel");
    CheckPinned(host, bytes, "CopyFromModel");
    std::memcpy(host, src, bytes);
    record_->CountCopy(0, bytes);
    return absl::OkStatus();
  }
  absl::Status Zero(void* p, size_t bytes) override {
    Check(p, bytes, "Zero");
    if (bytes % sizeof(float) != 0) {
      record_->Violation("Zero of a size that is not FP32 elements");
      std::memset(p, 0, bytes);
      return absl::OkStatus();
    }
    absl::MutexLock lock(&mu_);
    pending_[static_cast<float*>(p)].assign(bytes / sizeof(float), 0.0f);
    return absl::OkStatus();
  }
  absl::StatusOr<std::shared_ptr<model::ModelFence>> Fence() override {
    record_->SeeTimeout(timeout());
    absl::MutexLock lock(&mu_);
    last_fence_ = std::make_shared<StandInFence>(std::move(pending_),
                                                 last_fence_, record_);
    pending_.clear();
    return std::shared_ptr<model::ModelFence>(last_fence_);
  }

  // Every copy is to or from page-locked host memory.
  void CheckPinned(const void* p, size_t bytes, const char* what) {
    absl::MutexLock lock(&mu_);
    const auto* b = static_cast<const uint8_t*>(p);
    auto it = pinned_.upper_bound(const_cast<uint8_t*>(b));
    if (it == pinned_.begin() ||
        (--it, b + bytes > it->first + it->second)) {
      record_->Violation(absl::StrCat(what, ": ", bytes,
                                      " bytes of host memory not pinned"));
    }
  }

  // The model's side.
  void Check(const void* p, size_t bytes, const char* what) {
    absl::MutexLock lock(&mu_);
    const auto* b = static_cast<const uint8_t*>(p);
    auto it = blocks_.upper_bound(const_cast<uint8_t*>(b));
    if (it == blocks_.begin() ||
        (--it, b + bytes > it->first + it->second)) {
      record_->Violation(absl::StrCat(what, ": ", bytes,
                                      " bytes outside model memory"));
    }
  }
  // The values the model accumulates into for `grad`: what it will hold
  // once the model's earlier work has run.
  std::vector<float> Base(absl::Span<float> grad) {
    Check(grad.data(), grad.size() * sizeof(float), "gradient");
    std::shared_ptr<StandInFence> last;
    {
      absl::MutexLock lock(&mu_);
      auto it = pending_.find(grad.data());
      if (it != pending_.end() && it->second.size() == grad.size()) {
        return it->second;
      }
      if (it != pending_.end()) {
        record_->Violation("a gradient span overlapping a pending write");
      }
      last = last_fence_;
    }
    // The model's own earlier work (behind a fence nobody waited for yet)
    // comes first on its stream.
    if (last != nullptr) (void)last->Wait();
    return std::vector<float>(grad.begin(), grad.end());
  }
  void Defer(absl::Span<float> grad, std::vector<float> values) {
    absl::MutexLock lock(&mu_);
    pending_[grad.data()] = std::move(values);
  }
  void Synchronize() {
    std::shared_ptr<StandInFence> last;
    {
      absl::MutexLock lock(&mu_);
      last = last_fence_;
      Apply(pending_);
      pending_.clear();
    }
    if (last != nullptr) (void)last->Wait();
  }

 private:
  StandInRecord* const record_;
  absl::Mutex mu_;
  std::map<uint8_t*, size_t> blocks_ ABSL_GUARDED_BY(mu_);
  std::map<uint8_t*, size_t> pinned_ ABSL_GUARDED_BY(mu_);
  Writes pending_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<StandInFence> last_fence_ ABSL_GUARDED_BY(mu_);
};

namespace {

class StandInModel final : public model::UnitModel {
 public:
  StandInModel(std::unique_ptr<model::UnitModel> inner, StandInRecord* record)
      : inner_(std::move(inner)), mem_(record), record_(record) {}
  ~StandInModel() override { mem_.Synchronize(); }

  int num_blocks() const override { return inner_->num_blocks(); }
  DType param_dtype() const override { return inner_->param_dtype(); }
  const model::CheckpointPolicy& policy() const override {
    return inner_->policy();
  }
  const char* device_name() const override { return "stand-in"; }
  model::ModelMemory* memory_space() override { return &mem_; }
  absl::Status Synchronize() override {
    mem_.Synchronize();
    return absl::OkStatus();
  }

  absl::Status Begin(int batch, int seq, absl::Span<const int32_t> tokens,
                     absl::Span<const int32_t> targets) override {
    return inner_->Begin(batch, seq, tokens, targets);
  }
  absl::Status EmbeddingForward(const model::UnitParams& p) override {
    Params(p);
    return inner_->EmbeddingForward(p);
  }
  absl::Status BlockForward(int l, const model::UnitParams& p) override {
    Params(p);
    return inner_->BlockForward(l, p);
  }
  absl::StatusOr<double> FinalForwardBackward(
      const model::UnitParams& pf, const model::UnitParams& pe,
      float loss_scale, absl::Span<float> final_grad,
      absl::Span<float> embedding_grad) override {
    Params(pf);
    Params(pe);
    std::vector<float> gf = mem_.Base(final_grad);
    std::vector<float> ge = mem_.Base(embedding_grad);
    ASSIGN_OR_RETURN(double loss, inner_->FinalForwardBackward(
                                      pf, pe, loss_scale, absl::MakeSpan(gf),
                                      absl::MakeSpan(ge)));
    mem_.Defer(final_grad, std::move(gf));
    mem_.Defer(embedding_grad, std::move(ge));
    return loss;
  }
  absl::StatusOr<double> FinalForwardLoss(
      const model::UnitParams& pf, const model::UnitParams& pe) override {
    Params(pf);
    Params(pe);
    return inner_->FinalForwardLoss(pf, pe);
  }
  bool NeedsRecompute(int l) const override { return inner_->NeedsRecompute(l); }
  int RecomputeStart(int l) const override { return inner_->RecomputeStart(l); }
  absl::Status RecomputeBlock(int j, const model::UnitParams& p) override {
    Params(p);
    return inner_->RecomputeBlock(j, p);
  }
  absl::Status BlockBackward(int l, const model::UnitParams& p,
                             absl::Span<float> grad) override {
    Params(p);
    std::vector<float> g = mem_.Base(grad);
    RETURN_IF_ERROR(inner_->BlockBackward(l, p, absl::MakeSpan(g)));
    mem_.Defer(grad, std::move(g));
    return absl::OkStatus();
  }
  absl::Status EmbeddingBackward(absl::Span<float> grad) override {
    std::vector<float> g = mem_.Base(grad);
    RETURN_IF_ERROR(inner_->EmbeddingBackward(absl::MakeSpan(g)));
    mem_.Defer(grad, std::move(g));
    return absl::OkStatus();
  }
  const model::ActivationMemory& memory() const override {
    return inner_->memory();
  }
  void ResetPeak() override { inner_->ResetPeak(); }

 private:
  void Params(const model::UnitParams& p) {
    record_->CountModelCall();
    mem_.Check(p.data, p.length * DTypeSize(p.dtype), "unit parameters");
  }

  std::unique_ptr<model::UnitModel> inner_;
  StandInMemory mem_;
  StandInRecord* const record_;
};

}  // namespace

ModelFactory StandInModelFactory(StandInRecord* record) {
  return [record](const FlatLayout& layout, const GptShape& shape,
                  DType param_dtype, const model::CheckpointPolicy& policy)
             -> absl::StatusOr<std::unique_ptr<model::UnitModel>> {
    ASSIGN_OR_RETURN(std::unique_ptr<model::UnitModel> inner,
                     MakeCpuModel(layout, shape, param_dtype, policy));
    return std::unique_ptr<model::UnitModel>(
        new StandInModel(std::move(inner), record));
  };
}

}  // namespace zeroshard::testing
