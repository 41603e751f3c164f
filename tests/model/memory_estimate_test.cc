// model/memory_estimate: the ZeRO formulas against the 7B textbook
// example, zeroshard's worker/server split, wire bytes, activations and bad
// input.
#include "model/memory_estimate.h"
#include "model/torch_rank_estimate.h"

#include <cmath>
#include <limits>

#include <gtest/gtest.h>

#include "model/gpt_manifest.h"

namespace zeroshard {
namespace {

// The textbook example: a 7B model in BF16 with Adam on N = 8 GPUs. Per
// GPU under DDP the weights are ~14 GB and the gradients ~14 GB, and the
// ZeRO paper's table (Rajbhandari et al., SC'20, Fig. 1) gives
//   DDP 16Ψ, ZeRO-1 4Ψ + 12Ψ/N, ZeRO-2 2Ψ + 14Ψ/N, ZeRO-3 16Ψ/N,
// so Ψ = 7e9. ZeRO-1 partitions only the optimizer states (FP32 master, m
// and v: 12Ψ = 84 GB), so it is not DDP's 16Ψ = 112 GB, as tables that copy
// the DDP row for it say.
constexpr double kPsi = 7e9;
constexpr int kN = 8;

EstimateInput SevenBillionExample() {
  EstimateInput in;
  in.params = kPsi;
  in.workers = kN;
  in.servers = 4;
  return in;
}

TEST(MemoryEstimateTest, SevenBillionExample) {
  absl::StatusOr<MemoryEstimate> e = EstimateMemory(SevenBillionExample());
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->zero[0].scheme, "DDP");
  EXPECT_DOUBLE_EQ(e->zero[0].per_gpu_bytes, 112e9);           // 16Ψ
  EXPECT_EQ(e->zero[1].scheme, "ZeRO-1");
  EXPECT_DOUBLE_EQ(e->zero[1].per_gpu_bytes, 28e9 + 10.5e9);   // 4Ψ + 12Ψ/N
  EXPECT_NE(e->zero[1].per_gpu_bytes, 16 * kPsi);              // not DDP's
  EXPECT_DOUBLE_EQ(e->zero[2].per_gpu_bytes, 14e9 + 12.25e9);  // 2Ψ + 14Ψ/N
  EXPECT_DOUBLE_EQ(e->zero[3].per_gpu_bytes, 14e9);            // 16Ψ/N
  for (const ZeroStageBytes& z : e->zero) {
    EXPECT_DOUBLE_EQ(z.cluster_bytes, kN * z.per_gpu_bytes) << z.scheme;
  }
  // DDP less the 12Ψ of optimizer state: W + ∇W, ~14 GB each.
  EXPECT_DOUBLE_EQ(e->zero[0].per_gpu_bytes - 12 * kPsi, 14e9 + 14e9);
  EXPECT_NE(e->zero1_note.find("16Ψ"), std::string::npos);
  EXPECT_NE(e->zero1_note.find("4Ψ + 12Ψ/N"), std::string::npos);
}

TEST(MemoryEstimateTest, ZeroshardSplitFollowsDesign) {
  absl::StatusOr<MemoryEstimate> e = EstimateMemory(SevenBillionExample());
  ASSERT_TRUE(e.ok()) << e.status();
  // No shape: model state only (no units, no activations) plus the base.
  const ProcessEstimate& w3 = e->worker[2];
  EXPECT_DOUBLE_EQ(w3.model_state_bytes(), 6 * kPsi / kN);  // 2Ψ/N + 4Ψ/N
  EXPECT_DOUBLE_EQ(w3.total(), 6 * kPsi / kN + kWorkerBaseBytes);
  // ZeRO-2 keeps every unit gathered (2Ψ), ZeRO-1 also its full FP32
  // gradient (4Ψ).
  EXPECT_DOUBLE_EQ(e->worker[1].model_state_bytes(), 6 * kPsi / kN + 2 * kPsi);
  EXPECT_DOUBLE_EQ(e->worker[0].model_state_bytes(), 6 * kPsi / kN + 6 * kPsi);
  for (const ProcessEstimate& s : e->server) {
    EXPECT_DOUBLE_EQ(s.model_state_bytes(), 14 * kPsi / 4);  // 14Ψ/S
    EXPECT_DOUBLE_EQ(s.total(), 18 * kPsi / 4 + kN * kServerGrpcBytesPerWorker +
                                    kServerBaseBytes);
  }
  // BF16 gradients on the wire: a 2Ψ/N copy on the worker, half the
  // buffered bytes on the server.
  EstimateInput in = SevenBillionExample();
  in.grad_wire = CommDataType::kBf16;
  e = EstimateMemory(in);
  ASSERT_TRUE(e.ok());
  EXPECT_DOUBLE_EQ(e->worker[2].model_state_bytes(), 8 * kPsi / kN);
  EXPECT_DOUBLE_EQ(e->server[2].total(), 16 * kPsi / 4 +
                                             kN * kServerGrpcBytesPerWorker +
                                             kServerBaseBytes);
}

TEST(MemoryEstimateTest, WireBytesAreIndependentOfN) {
  for (int n : {1, 2, 8}) {
    EstimateInput in = SevenBillionExample();
    in.workers = n;
    absl::StatusOr<MemoryEstimate> e = EstimateMemory(in);
    ASSERT_TRUE(e.ok());
    // DESIGN.md: Gather 2Ψ and PushGrad 4Ψ in total per step.
    EXPECT_DOUBLE_EQ(n * e->wire.gather_per_worker, 2 * kPsi);
    EXPECT_DOUBLE_EQ(n * e->wire.push_per_worker, 4 * kPsi);
    EXPECT_DOUBLE_EQ(4 * e->wire.per_server_out, 2 * kPsi);
    EXPECT_DOUBLE_EQ(4 * e->wire.per_server_in, 4 * kPsi);
    if (n == 1) {
      EXPECT_EQ(e->wire.allgather_per_worker, 0);
    } else {
      // ZeRO-3: forward and backward all-gather, ring (N-1)/N of 2Ψ each.
      EXPECT_EQ(e->wire.allgathers_per_step, 2);
      EXPECT_DOUBLE_EQ(e->wire.allgather_per_worker, 2 * 2 * kPsi * (n - 1) / n);
      EXPECT_DOUBLE_EQ(e->wire.reduce_scatter_per_worker, 4 * kPsi * (n - 1) / n);
    }
    EXPECT_GT(e->time.serial_s, 0);
    EXPECT_GE(e->time.serial_s, e->time.overlapped_s);
  }
}

TEST(MemoryEstimateTest, ShapeGivesPaddedPsiAndActivations) {
  const GptShape shape{.layers = 8, .heads = 12, .width = 768, .vocab = 256,
                       .context = 256};
  EstimateInput in;
  in.model = shape;
  in.workers = 2;
  in.servers = 2;
  in.micro_batch = 4;
  absl::StatusOr<MemoryEstimate> e = EstimateMemory(in);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_GE(e->params, static_cast<double>(GptParamCount(shape)));
  EXPECT_LT(e->params, GptParamCount(shape) + 10 * 128.0);  // padding only
  const ActivationEstimate& a = e->activations;
  ASSERT_TRUE(a.known);
  // Per block, BF16: 11·M·C·2 + B·H·T²·2 + 4·M·4 with M = B·T.
  const double m = 4 * 256;
  EXPECT_DOUBLE_EQ(a.per_block_internals,
                   11 * m * 768 * 2 + 4 * 12 * 256.0 * 256 * 2 + 16 * m);
  EXPECT_LT(a.every_block, a.none);
  EXPECT_DOUBLE_EQ(a.chosen, a.none);
  in.checkpointing = CheckpointPolicy::kEveryBlock;
  e = EstimateMemory(in);
  ASSERT_TRUE(e.ok());
  EXPECT_DOUBLE_EQ(e->activations.chosen, e->activations.every_block);
  // ZeRO-3 working set: gathered units and unit gradients are counted.
  EXPECT_GT(e->worker[2].total(),
            e->worker[2].model_state_bytes() + a.every_block + kWorkerBaseBytes);
  // Per-block checkpointing recomputes each block's forward: more FLOPs.
  in.checkpointing = CheckpointPolicy::kNone;
  absl::StatusOr<MemoryEstimate> none = EstimateMemory(in);
  ASSERT_TRUE(none.ok());
  EXPECT_GT(e->time.flops_per_worker, none->time.flops_per_worker);
}

// GPT-2 124M on 4 servers: with AdamW its ranges split evenly; with
// Adafactor on every class each tensor is kept whole, so the server
// holding the token embedding (31% of Ψ) owns at least that, and the
// server rows count its range, not Ψ/S.
TEST(MemoryEstimateTest, WholeTensorsSizeTheLargestServer) {
  EstimateInput in;
  in.model = GptShape{.layers = 12, .heads = 12, .width = 768,
                      .vocab = 50257, .context = 1024};
  in.workers = 2;
  in.servers = 4;
  absl::StatusOr<MemoryEstimate> even = EstimateMemory(in);
  ASSERT_TRUE(even.ok()) << even.status();
  EXPECT_DOUBLE_EQ(even->largest_server_params, even->params / 4);
  for (GroupSettings& g : in.param_groups.classes) {
    g.rule = *MakeTensorRule("adafactor", {});
  }
  absl::StatusOr<MemoryEstimate> whole = EstimateMemory(in);
  ASSERT_TRUE(whole.ok()) << whole.status();
  const double wte = 50257.0 * 768;
  EXPECT_GE(whole->largest_server_params, wte);
  EXPECT_LT(whole->largest_server_params, 0.4 * whole->params);
  EXPECT_DOUBLE_EQ(whole->server[2].model_state_bytes(),
                   14 * whole->largest_server_params);
  EXPECT_EQ(whole->server[2].terms[0].formula, "4Ψmax");
  // The embedding is the largest tensor kept whole: its update's copies
  // (master, two slots), gradient and the rule's scratch, 24 bytes each.
  EXPECT_DOUBLE_EQ(whole->largest_whole_tensor, wte);
  bool scratch = false;
  for (const EstimateTerm& t : whole->server[2].terms) {
    if (t.name != "whole-tensor update scratch") continue;
    scratch = true;
    EXPECT_DOUBLE_EQ(t.bytes, 24 * wte);
  }
  EXPECT_TRUE(scratch);
  EXPECT_EQ(even->largest_whole_tensor, 0);
  EXPECT_GT(whole->server[2].total(), even->server[2].total() * 1.2);
}

// Online attention keeps each row's log-sum-exp (B·H·T FP32) instead of the
// probabilities (B·H·T² in the compute dtype): the only per-block change.
TEST(MemoryEstimateTest, OnlineAttentionSavesLseInsteadOfProbabilities) {
  const GptShape shape{.layers = 12, .heads = 12, .width = 768, .vocab = 50304,
                       .context = 1024};
  EstimateInput in;
  in.model = shape;
  in.micro_batch = 8;
  absl::StatusOr<MemoryEstimate> probs = EstimateMemory(in);
  in.online_attention = true;
  absl::StatusOr<MemoryEstimate> online = EstimateMemory(in);
  ASSERT_TRUE(probs.ok() && online.ok());
  const double b = 8, h = 12, t = 1024;
  EXPECT_DOUBLE_EQ(probs->activations.per_block_internals -
                       online->activations.per_block_internals,
                   b * h * t * t * 2 - b * h * t * 4);
  EXPECT_DOUBLE_EQ(probs->activations.block_input,
                   online->activations.block_input);
  // GPT-2-124M at T = 1024, batch 8: the probabilities are 201 MB a block,
  // most of what a block saves; without them the peak is under half.
  EXPECT_LT(online->activations.none, 0.5 * probs->activations.none);
  // fp32 saves probabilities in FP32: twice the BF16 difference.
  in.precision = Precision::kFp32;
  absl::StatusOr<MemoryEstimate> online32 = EstimateMemory(in);
  in.online_attention = false;
  absl::StatusOr<MemoryEstimate> probs32 = EstimateMemory(in);
  ASSERT_TRUE(probs32.ok() && online32.ok());
  EXPECT_DOUBLE_EQ(probs32->activations.per_block_internals -
                       online32->activations.per_block_internals,
                   b * h * t * t * 4 - b * h * t * 4);
}

TEST(MemoryEstimateTest, BadInputIsInvalidArgument) {
  auto bad = [](auto mutate) {
    EstimateInput in = SevenBillionExample();
    mutate(in);
    return EstimateMemory(in).status().code();
  };
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  EXPECT_EQ(bad([](EstimateInput& in) { in.params = 0; }), kInvalid);
  EXPECT_EQ(bad([](EstimateInput& in) { in.params = -7e9; }), kInvalid);
  EXPECT_EQ(bad([](EstimateInput& in) {
              in.params = std::numeric_limits<double>::quiet_NaN();
            }),
            kInvalid);
  EXPECT_EQ(bad([](EstimateInput& in) {
              in.params = std::numeric_limits<double>::infinity();
            }),
            kInvalid);
  EXPECT_EQ(bad([](EstimateInput& in) { in.workers = 0; }), kInvalid);
  EXPECT_EQ(bad([](EstimateInput& in) { in.servers = 0; }), kInvalid);
  EXPECT_EQ(bad([](EstimateInput& in) { in.stage = 0; }), kInvalid);
  EXPECT_EQ(bad([](EstimateInput& in) { in.stage = 4; }), kInvalid);
  EXPECT_EQ(bad([](EstimateInput& in) { in.link_gbps = 0; }), kInvalid);
  EXPECT_EQ(bad([](EstimateInput& in) { in.flops = -1; }), kInvalid);
  EXPECT_EQ(bad([](EstimateInput& in) { in.micro_batch = 0; }), kInvalid);
  EXPECT_EQ(bad([](EstimateInput& in) {
              in.model = GptShape{.layers = 2, .heads = 3, .width = 128};
            }),
            kInvalid);
}

// The PyTorch front-end rank (model/torch_rank_estimate.h): each stage's
// terms by hand from the units' sizes.
TEST(TorchRankEstimateTest, TermsFollowTheStageAndTheRanks) {
  const std::vector<uint64_t> units = {832, 320, 128};  // Ψ 1280
  absl::StatusOr<ProcessEstimate> one =
      EstimateTorchRank(units, 1, 3, Precision::kFp32);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->model_state_bytes(), 4.0 * 1280 + 4.0 * (832 + 320));
  absl::StatusOr<ProcessEstimate> two =
      EstimateTorchRank(units, 2, 3, Precision::kBf16);
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_EQ(two->model_state_bytes(),
            4.0 * 1280 / 2 + 2.0 * (832 + 320) + 4.0 * 832);
  absl::StatusOr<ProcessEstimate> flat =
      EstimateTorchRank(units, 4, 2, Precision::kBf16);
  ASSERT_TRUE(flat.ok()) << flat.status();
  EXPECT_EQ(flat->model_state_bytes(), 2 * 2.0 * 1280);
  // One unit: it alone is gathered.
  EXPECT_EQ(EstimateTorchRank({64}, 1, 3, Precision::kFp32)->model_state_bytes(),
            4.0 * 64 + 4.0 * 64);
  EXPECT_FALSE(EstimateTorchRank({}, 1, 3, Precision::kFp32).ok());
  EXPECT_FALSE(EstimateTorchRank({64, 0}, 1, 3, Precision::kFp32).ok());
  EXPECT_FALSE(EstimateTorchRank({64}, 0, 3, Precision::kFp32).ok());
  EXPECT_FALSE(EstimateTorchRank({64}, 1, 4, Precision::kFp32).ok());
}


// Stage 3's kept units (python/zeroshard/stage3.py's rules), simulated on a
// forward 0,1,2 and backward 2,1,0 trace; each figure worked by hand.
TEST(TorchRankEstimateTest, KeptUnitsFollowTheReuseLiveAndPersistenceRules) {
  const std::vector<uint64_t> units = {10, 20, 30};
  // Nothing kept: the running unit and the one prefetched (1 and 2).
  EXPECT_EQ(SimulatedGatheredPeak(units, {}), 50);
  // DeepSpeed's reuse distance on a small model: all three at once.
  TorchZero3Keep all{.max_reuse_distance = 1000000000};
  EXPECT_EQ(SimulatedGatheredPeak(units, all), 60);
  // At most 25 elements kept: unit 0 stays; 1 and 2 go, and nothing is
  // prefetched past the limit, so 0 and 2 are the most at once.
  TorchZero3Keep capped = all;
  capped.max_live_parameters = 25;
  EXPECT_EQ(SimulatedGatheredPeak(units, capped), 40);
  // Unit 0 persistent, nothing else kept: 0, the running and the next.
  TorchZero3Keep persistent{.persistence_threshold = 15};
  EXPECT_EQ(SimulatedGatheredPeak(units, persistent), 60);
  // The next uses prefetched up to the bucket: with nothing kept, unit 0
  // running while 1 and 2 are in flight.
  TorchZero3Keep bucket{.prefetch_bucket = 1000};
  EXPECT_EQ(SimulatedGatheredPeak(units, bucket), 60);
  // The estimate takes the larger of two units and the simulation.
  EXPECT_EQ(EstimateTorchRank(units, 1, 3, Precision::kFp32, all)->model_state_bytes(),
            4.0 * 60 + 4.0 * 60);
  EXPECT_EQ(EstimateTorchRank(units, 1, 3, Precision::kFp32, capped)->model_state_bytes(),
            4.0 * 60 + 4.0 * 50);
}

}  // namespace
}  // namespace zeroshard
