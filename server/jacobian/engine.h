// The Jacobian-norm engine (THEORY.md section 6): per input position j, how strongly e_j can move
// an output y, as the squared Frobenius norm ||dy / de_j||_F^2, averaged over input samples.
//
// Method: K_b cotangents at once (one-hot rows for the exact norm, random probes for Hutchinson's
// estimate: Gaussian, Rademacher or orthogonal, jacobian/probes.h) go through one reverse pass: each row yields u^T J_j for every j. Two reverse passes:
//  - the model's own (GPT-2, Qwen2; models::InputReversePass): one forward pass of the sample, its
//    activations shared by all rows, every product one [K_b L, .] matrix product, the top layer on
//    the target row only; the default where a model has one;
//  - autograd (any model, TorchScript included): one forward pass of a batch that repeats the
//    sample K_b times, then torch::autograd::grad with K_b cotangents through the retained graph.
// Work is split into chunks (one cotangent batch of one sample and output); between chunks a
// progress callback may report and cancel. The batch size comes from a memory budget (at most
// half the device's free memory, read at the start) and is halved and retried when allocation
// fails.
// LibTorch only: no gRPC, no density theory (runners and tools combine them).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <torch/types.h>

#include "absl/status/statusor.h"
#include "server/jacobian/batch_plan.h"
#include "server/jacobian/flop_count.h"
#include "server/jobs/jacobian_spec.h"
#include "server/models/model.h"

namespace posbias::jacobian {

// The job contract's enums (jobs/jacobian_spec.h), so a spec reaches the engine without renaming.
using Method = jobs::JacobianMethod;
using Output = jobs::JacobianOutput;  // kLogProb: a scalar, the next token's log-probability.
using InputKind = jobs::JacobianInput;
using Pathway = jobs::Pathway;  // kValueOnly: attention probabilities detached (no score pathway).

struct Progress {
  int64_t chunks_done = 0;
  int64_t chunks_total = 0;
  int64_t samples_done = 0;
  double fraction = 0.0;
};

// What one finished sample contributed, per output: the squared norms per position and, for
// Hutchinson, the variance of their probe mean (from the spread of independent probe units). Enough to resume a measurement exactly.
struct SampleRecord {
  std::vector<std::vector<double>> sq_norm;    // [output][position].
  std::vector<std::vector<double>> probe_var;  // [output][position]; empty for exact.
  std::vector<double> branch_ratio;            // Per layer.
  // compare_pathways: the value pathway's squared norms [output][position] (probe means for
  // Hutchinson, the same probes as sq_norm's); empty otherwise.
  std::vector<std::vector<double>> value_sq_norm;
  // compare_pathways: the score pathway's ||J_full - J_value||^2 [output][position] for the same
  // cotangent rows (the difference taken before squaring); empty otherwise.
  std::vector<std::vector<double>> score_sq_norm;
  // score_next_token: how the model scored the token after the target.
  std::optional<jobs::NextTokenScore> next_token;
};

struct MeasureOptions {
  int64_t length = 128;          // L, positions 1..L.
  int64_t samples = 1;           // S input sequences.
  int64_t target = 0;            // 1-based output position t; 0 = L.
  Output output = Output::kFinalHidden;
  Method method = Method::kExact;
  int64_t probes = 64;           // K, Hutchinson only.
  // Hutchinson's probe rows (jacobian/probes.h): Gaussian, Rademacher or orthogonal blocks.
  jobs::ProbeDistribution probe_distribution = jobs::kDefaultProbeDistribution;
  InputKind input = InputKind::kRandomTokens;
  // kGivenTokens: S lists of at least L ids (L + 1 for kLogProb when t = L: id t + 1 is scored).
  std::vector<std::vector<int64_t>> tokens;
  uint64_t seed = 0;             // Token ids, Gaussian embeddings and probes.
  // kRandomTokens: ids are drawn below this (0 = the model's vocabulary size). A comparison job's
  // other models draw from its first model's vocabulary, so every model sees the same ids.
  int64_t draw_vocab_size = 0;
  double embedding_std = 1.0;    // Standard deviation of Gaussian input embeddings.
  std::string device = "cpu";    // "cpu" or "cuda:N".
  torch::Dtype dtype = torch::kFloat32;  // Forward/backward dtype; norms accumulate in float32.
  int64_t cotangent_batch = 0;   // Rows per backward pass; 0 = from the memory budget (CPU: <= 16).
  int64_t memory_budget_bytes = int64_t{2} << 30;  // For choosing the cotangent batch.
  // Recompute each layer in the backward pass instead of keeping its activations: kAuto turns it on
  // when one batch row's activations would not fit the memory budget (long L; batch_plan.h).
  using Checkpointing = jacobian::Checkpointing;
  Checkpointing checkpointing = Checkpointing::kAuto;
  // Which reverse pass: kAuto = the model's own where it has one (GPT-2, Qwen2), else autograd.
  enum class ReversePass { kAuto, kModel, kAutograd } reverse_pass = ReversePass::kAuto;
  bool keep_samples = false;     // Return per-sample squared norms.
  bool branch_ratios = true;     // Measure ||attn|| / (||residual|| + ||attn||) per layer.
  // Which part of the Jacobian: kFull, or kValueOnly (the attention probabilities detached, in
  // the model's own reverse pass and in autograd alike; TorchScript models cannot detach them).
  Pathway pathway = Pathway::kFull;
  // Each sample both ways (pathway must be kFull; same sample, same probes): the result then
  // holds value_sq_norm and the per-sample ratio ||J_value||^2 / ||J_full||^2 (pathway_ratio).
  bool compare_pathways = false;
  // Also score the token after the target in each sample (its log-probability and rank among the
  // model's logits there, from the measurement's own forward pass; recall jobs): token inputs
  // with the id after the target, not the loss gradient.
  bool score_next_token = false;
  std::function<bool(const Progress&)> progress;  // Return false to cancel (CANCELLED).
  // Resuming: the records of samples 0..n-1 finished earlier (by an interrupted run with the same
  // options); they are not recomputed, and the result equals an uninterrupted run's (inputs and
  // probes are drawn per sample from the seed).
  std::vector<SampleRecord> done_samples;
  // Called after each newly computed sample with its index; returning false cancels.
  std::function<bool(int64_t, const SampleRecord&)> on_sample;
  // One part of a measurement split into sample ranges (parts can run on different workers):
  // only samples first_sample .. end_sample - 1 are computed, done_samples then holds records of
  // samples first_sample, first_sample + 1, ..., and the statistics cover the part's samples.
  // Merging: a run with done_samples = the parts' records in sample order computes nothing and
  // equals the unsplit measurement (inputs and probes are drawn per sample from the seed).
  int64_t first_sample = 0;
  int64_t end_sample = 0;  // 0 = samples.
};

// Statistics over samples of one per-position quantity (index j - 1).
struct PositionStats {
  std::vector<double> mean, std, stderr_mean;
};

// Statistics over samples of one number per sample.
struct ScalarStats {
  double mean = 0, std = 0, stderr_mean = 0;
};

struct MeasureResult {
  int64_t length = 0;
  int64_t target = 0;
  // The token ids used (empty for Gaussian inputs): the given lists, or the L + 1 drawn ids (the
  // last is the next token after position L), so that a run can be replayed with --tokens.
  std::vector<std::vector<int64_t>> tokens;
  // One entry for kFinalHidden / kLogProb; one per layer for kLayerSweep.
  std::vector<PositionStats> sq_norm;
  std::vector<PositionStats> norm;
  // Hutchinson: the estimator's own standard error of sq_norm.mean (probe noise), per position.
  std::vector<std::vector<double>> estimator_stderr;
  std::vector<std::vector<std::vector<double>>> raw;  // [output][sample][position], keep_samples.
  // [sample][position] of the last output (the final hidden state, log-probability, or the top
  // layer of a sweep), always: for resampling over samples (bootstrap intervals of fits).
  std::vector<std::vector<double>> sample_sq_norm;
  std::vector<double> branch_ratio;  // Per layer, mean over samples.
  // compare_pathways, per output (sq_norm then is the full pathway's): the value pathway's squared
  // norms; per sample ||J_value,j||^2 / ||J_full,j||^2 (NaN where ||J_full,j|| = 0, i.e. after the
  // target); and per sample sum_j ||J_value,j||^2 / sum_j ||J_full,j||^2 (1 minus it is the score
  // pathway's share of the total).
  std::vector<PositionStats> value_sq_norm;
  std::vector<PositionStats> pathway_ratio;
  std::vector<ScalarStats> pathway_total_ratio;
  // ... and, per position over samples, score_share = ||J_full - J_value||^2 / ||J_full||^2,
  // interference_share = 2 <J_value, J_score> / ||J_full||^2 (ratio + both = 1) and the cosine of
  // J_value and J_score (NaN where either is 0); the shares of the totals over positions.
  std::vector<PositionStats> pathway_score_share;
  std::vector<PositionStats> pathway_interference_share;
  std::vector<PositionStats> pathway_cosine;
  std::vector<ScalarStats> pathway_total_score_share;
  std::vector<ScalarStats> pathway_total_interference_share;
  // score_next_token: per sample, how the model scored the token after the target.
  std::vector<jobs::NextTokenScore> next_token;
  int64_t vjp_count = 0;             // Vector-Jacobian products (backward rows) computed.
  int64_t cotangent_batch = 0;       // Rows per backward pass actually used.
  bool checkpointed = false;         // Whether activation checkpointing was used.
  // The batch plan's prediction of the memory the measurement holds at its peak (batch_plan.h).
  MemoryPrediction predicted_memory;
  // The matrix products' FLOPs of the samples measured (flop_count.h), through the model's own
  // pass only (autograd's are not counted).
  std::optional<FlopCount> predicted_flops;
  std::string reverse_pass;          // "model" or "autograd": the reverse pass that ran.
  double seconds = 0.0;
  std::string device_name;
  std::string dtype_name;
  std::string torch_version;
};

absl::Status CheckMeasureOptions(const models::DecoderModel& model, const MeasureOptions& options);

absl::StatusOr<MeasureResult> Measure(models::DecoderModel& model, const MeasureOptions& options);

// The token ids Measure draws for kRandomTokens inputs (options.length + 1 per sample, all
// options.samples of them, from options.seed), below `vocab_size`.
std::vector<std::vector<int64_t>> DrawTokenIds(int64_t vocab_size, const MeasureOptions& options);

// The decomposition of ||J_full||^2 per position from ||J_full||^2, ||J_value||^2 and the score
// pathway's ||J_full - J_value||^2 (float64 tensors of one shape): ratio, score_share,
// interference_share (they sum to 1; NaN where ||J_full|| = 0) and the cosine of J_value and
// J_score (NaN where either is 0).
struct PathwayShares {
  torch::Tensor ratio, score_share, interference_share, cosine;
};
PathwayShares SharesOfPathways(const torch::Tensor& full, const torch::Tensor& value, const torch::Tensor& score);

// The torch dtype of a job's compute dtype, and the name of a torch dtype ("other" for others).
torch::Dtype TorchDtype(jobs::ComputeDtype dtype);
std::string TorchDtypeName(torch::Dtype dtype);

}  // namespace posbias::jacobian
