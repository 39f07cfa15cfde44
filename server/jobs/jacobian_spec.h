// The typed contract of a Jacobian-norm job: what to measure, parsed once from the request (by
// api/job_convert) and read as enums everywhere after, in the store, the runner, the engine
// and posbias-measure. Each enum has one name/parse pair here; the names are the stored JSON's
// words (unchanged since the first stored job), so older queues stay readable.
//
// Torch-free and gRPC-free: the engine (engine-only builds included) uses these enums too.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace posbias::jobs {

// kExact: one cotangent row per output coordinate. kHutchinson: random probes (an estimate).
enum class JacobianMethod { kExact, kHutchinson };
// kFinalHidden: the hidden state after the final norm at the target position. kLayerSweep: the
// residual stream after every layer l = 1..H there. kLogProb: the log-probability of the next token.
// kLossGradient: the next-token loss over the whole sample, L = -sum_{t=1..L} log p(x_{t+1} | x_<=t)
// (THEORY.md section 11), whose squared gradient ||dL/de_j||^2 is the training signal position j's
// embedding receives; it has no target position.
enum class JacobianOutput { kFinalHidden, kLayerSweep, kLogProb, kLossGradient };
// The outputs that are one number (their exact norm is one VJP; Hutchinson has nothing to estimate).
inline bool IsScalarOutput(JacobianOutput output) {
  return output == JacobianOutput::kLogProb || output == JacobianOutput::kLossGradient;
}
// Where the input embeddings come from.
enum class JacobianInput { kRandomTokens, kGivenTokens, kGaussianEmbeddings };
// The forward/backward dtype (norms accumulate in float32, float64 for float64).
enum class ComputeDtype { kFloat32, kBfloat16, kFloat16, kFloat64 };
// Which kind of worker may run the job: kAny, or only a CPU / CUDA worker.
enum class DevicePreference { kAny, kCpu, kCuda };
// Which part of the Jacobian (THEORY.md section 6). kFull: all of it. kValueOnly: the attention
// probabilities held fixed (detached), so an input moves the output only through the values,
// the residual stream and the MLPs, not through the attention scores (the softmax pathway).
// With uniform attention both are the same.
enum class Pathway { kFull, kValueOnly };
// Hutchinson's probe rows u (each with E[u u^T] = I, so every row's ||u^T J||^2 is unbiased).
// kGaussian: u ~ N(0, I_d). kRademacher: independent +-1 entries. kOrthogonal: independent blocks
// of orthonormal rows of a Haar-random d x d rotation, scaled by sqrt(d); a block of all d rows
// gives ||J||_F^2 exactly, so K = d (or any multiple) is exact (ProbeBlockSizes in
// jacobian/probes.h). Jobs stored before the choice existed read as kGaussian, as they ran.
enum class ProbeDistribution { kGaussian, kRademacher, kOrthogonal };
// What a new measurement uses when the request names none (bench/run_probes.sh: the smallest
// relative error at equal VJPs at K = 64 and 256, exact at K = d; docs/user-guide/measuring.md's "Probe
// distributions" table).
inline constexpr ProbeDistribution kDefaultProbeDistribution = ProbeDistribution::kOrthogonal;

// "exact" | "hutchinson"
std::string_view MethodName(JacobianMethod method);
absl::StatusOr<JacobianMethod> ParseMethod(std::string_view name);
// "final_hidden" | "layer_sweep" | "log_prob" | "loss_gradient"
std::string_view OutputName(JacobianOutput output);
absl::StatusOr<JacobianOutput> ParseOutput(std::string_view name);
// "random_tokens" | "given_tokens" | "gaussian_embeddings"
std::string_view InputName(JacobianInput input);
absl::StatusOr<JacobianInput> ParseInput(std::string_view name);
// "float32" | "bfloat16" | "float16" | "float64" (parsing also takes "bf16", "fp16", "fp32", "fp64")
std::string_view DtypeName(ComputeDtype dtype);
absl::StatusOr<ComputeDtype> ParseDtype(std::string_view name);
// "" (any) | "cpu" | "cuda": the store matches it against its workers' kinds.
std::string_view DeviceName(DevicePreference device);
absl::StatusOr<DevicePreference> ParseDevice(std::string_view name);
// "full" | "value_only" (parsing also takes "value-only", posbias-measure's spelling)
std::string_view PathwayName(Pathway pathway);
absl::StatusOr<Pathway> ParsePathway(std::string_view name);
// "gaussian" | "rademacher" | "orthogonal"
std::string_view ProbeDistributionName(ProbeDistribution distribution);
absl::StatusOr<ProbeDistribution> ParseProbeDistribution(std::string_view name);

// How a model scored the token after the target (recall jobs): its log-probability, how many ids
// score strictly higher (`rank`) and how many others score the same (`ties`); the model's top
// token is it alone when both are 0.
struct NextTokenScore {
  double log_prob = 0;
  int64_t rank = 0, ties = 0;
  bool top() const { return rank == 0 && ties == 0; }
};

// What to measure (the typed form of posbias.v1.JacobianNormSpec; stored as JSON).
struct JacobianJobSpec {
  std::string model;
  // The registration the job was submitted for (ModelEntry::uid) and its weights' digest then
  // ("" until computed): the job runs on that registration only. Both "" in jobs stored before
  // uids (they run on the model of that name, as they always did).
  std::string model_uid;
  std::string model_weights_sha256;
  int64_t length = 0;
  int64_t samples = 16;
  int64_t target = 0;                         // 0 = L.
  JacobianInput input = JacobianInput::kRandomTokens;
  std::vector<std::vector<int64_t>> tokens;   // kGivenTokens.
  uint64_t seed = 0;
  double embedding_std = 1.0;                 // kGaussianEmbeddings.
  JacobianOutput output = JacobianOutput::kFinalHidden;
  JacobianMethod method = JacobianMethod::kExact;
  int64_t probes = 64;                        // kHutchinson.
  // kHutchinson. Missing from a stored spec: kGaussian (what such jobs ran with).
  ProbeDistribution probe_distribution = ProbeDistribution::kGaussian;
  ComputeDtype dtype = ComputeDtype::kFloat32;
  DevicePreference device = DevicePreference::kAny;
  bool keep_samples = false;
  bool fit_effective_depth = false;
  Pathway pathway = Pathway::kFull;
  // Measure every sample both ways (pathway then must be kFull) and report the ratio
  // ||J_value||^2 / ||J_full||^2 per position.
  bool compare_pathways = false;
  // Text inputs (tokenized at submission into `tokens`): per sample, the 1-based positions where
  // its documents (or its needle) begin. Empty for every other input.
  std::vector<std::vector<int64_t>> document_starts;
  // NEEDLE text inputs: the sweep's layout, so the result can answer per depth.
  struct NeedleSweep {
    std::vector<double> depths;   // As given, in [0, 1].
    std::vector<int64_t> starts;  // Per depth: the needle's first position, 1-based.
    int64_t needle_tokens = 0;
    // Per sample: {depth index, filler index}; depth index -1 = the filler alone (the baseline).
    std::vector<std::vector<int64_t>> samples;
  };
  std::optional<NeedleSweep> needle_sweep;
  // Recall inputs (text: recall/recall_task.h; token ids: recall/mqar.h), generated at submission
  // into `tokens` (L + 1 ids each, the last the answer): probe s asks at depths[s /
  // probes_per_depth]. The job scores each probe's answer (NextTokenScore) beside its profile, and
  // the result answers per depth.
  struct RecallSweep {
    std::vector<double> depths;
    int64_t probes_per_depth = 0;
    int64_t pairs = 0, key_letters = 0;
    std::string values;                   // Text: the values' alphabet (chance = 1 / its size).
    uint64_t seed = 0;                    // The generator's.
    std::vector<int64_t> pair_starts;     // Per probe: the queried pair's first position, 1-based.
    std::vector<int64_t> pair_tokens;     // Per probe: its key, "=" and value tokens (token ids: 2).
    // Token-id probes: the ranges {first, last} (chance = 1 / the values' count), and the model
    // whose trained task chose them ("" = the request did).
    bool token_ids = false;
    std::vector<int64_t> key_ids, value_ids, filler_ids;
    std::string trained_task_of;
    // 1 / the number of values the answer is drawn from.
    double Chance() const;
    // In words (RecallSummary.probes): "text: 8 key=value pairs, values of 26 characters", or
    // "token ids: 8 pairs, keys 128:192, values 192:256, filler 32:127 (the task m was trained on)".
    std::string Description() const;
  };
  std::optional<RecallSweep> recall;
  // Comparison jobs (THEORY.md section 11): the models measured after `model` on the same inputs
  // and probes, in order; the first model is the reference. `init`: `model`'s own architecture at
  // a seeded Hugging Face initialization (init_seed), built by the runner; otherwise a registered
  // model, bound like `model` (its name as the job names it, its uid and weights' digest then).
  struct VersusModel {
    std::string model;
    bool init = false;
    std::string uid, weights_sha256;
  };
  std::vector<VersusModel> versus;
  uint64_t init_seed = 0;
  // The model the others are paired against: 0 = `model`, i + 1 = versus[i].
  int64_t reference = 0;
};

// The name `versus` gives the first model's architecture at seeded initialization.
inline constexpr char kVersusInit[] = "init";
// Models a comparison job measures besides its first.
inline constexpr size_t kMaxVersusModels = 16;

// Whether the job needs the token after position L: LOG_PROB at T = L scores it, and LOSS_GRADIENT
// scores every position's next token, the last one's included (given tokens then carry L + 1 ids,
// text layouts take it from the text); recall inputs carry their answer there.
inline bool NeedsNextToken(const JacobianJobSpec& spec) {
  if (spec.output == JacobianOutput::kLossGradient || spec.recall) return true;
  return spec.output == JacobianOutput::kLogProb && (spec.target == 0 ? spec.length : spec.target) == spec.length;
}

// A job's units of work are its (model, sample) pairs, numbered model-major: unit m * samples + s
// is sample s of model m (model 0 the first, then `versus` in order). A job without `versus` has
// one unit per sample. A shared store splits a job into parts by ranges of units, so that a
// comparison spreads over workers by model as well as by sample.
inline int64_t WorkUnits(const JacobianJobSpec& spec) {
  return spec.samples * (1 + static_cast<int64_t>(spec.versus.size()));
}
// Samples [begin, end) of one model.
struct SampleRange {
  int64_t begin = 0, end = 0;
  bool empty() const { return end <= begin; }
  int64_t size() const { return empty() ? 0 : end - begin; }
  friend bool operator==(const SampleRange& a, const SampleRange& b) { return a.begin == b.begin && a.end == b.end; }
};
// Per model (index 0 = the first, 1 + i = versus[i]), the samples units [unit_begin, unit_end)
// hold; a model the range misses gets an empty range.
std::vector<SampleRange> SampleRangesOfUnits(const JacobianJobSpec& spec, int64_t unit_begin, int64_t unit_end);

nlohmann::json SpecToJson(const JacobianJobSpec& spec);
// Missing members keep their defaults (older records stay readable); unknown members are ignored
// (newer ones too). A member of the wrong type or an unknown enum name is INVALID_ARGUMENT.
absl::StatusOr<JacobianJobSpec> SpecFromJson(const nlohmann::json& json);

}  // namespace posbias::jobs
