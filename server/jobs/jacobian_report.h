// The report of one Jacobian-norm measurement, typed: what posbias-measure prints, what a job
// stores as its result and what GetJobResult pages through. Its JSON keys are spelled once, in
// jacobian_report.cc's member lists, which ReportToJson and ReportFromJson both walk (the
// `report_json` clients read; key order as printed).
//
// Reading is strict: a member the report always had that is missing or of the wrong type is
// DATA_LOSS naming it (no silent defaults). Members added later are std::optional, so results
// stored by older servers stay readable. Non-finite numbers are written as JSON null and read back
// as NaN. Torch-free and gRPC-free.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "server/density/comparison.h"
#include "server/jobs/jacobian_spec.h"

namespace posbias::jobs {

// A measured profile against one theory profile: the density room's metrics, one struct (and one
// proto message, posbias.v1.FitMetrics) for both.
using ReportMetrics = density::ComparisonMetrics;

enum class TheoryModel { kCoherent, kIncoherent };  // "coherent" | "incoherent"

// Alpha fitted at the model's depth; the lambda interval is a bootstrap over samples.
struct FixedDepthFit {
  TheoryModel model = TheoryModel::kCoherent;
  double alpha = 0, lambda = 0;
  std::optional<double> lambda_sample_low, lambda_sample_high;
  std::optional<int64_t> bootstrap_resamples;
  ReportMetrics metrics;
  std::vector<double> profile;  // The fitted theory at positions 1..t, normalized to sum 1.
};

struct RidgePoint {
  int64_t depth = 0;
  double alpha = 0, rmse_log = 0;
};

// Depth and alpha fitted together (THEORY.md section 8): the best depth, the ridge over depths
// and lambda's ridge interval.
struct EffectiveDepthFit {
  TheoryModel model = TheoryModel::kCoherent;
  int64_t depth = 0;
  double alpha = 0, lambda = 0, lambda_low = 0, lambda_high = 0;
  double lambda_sample_low = 0, lambda_sample_high = 0;
  ReportMetrics metrics;
  std::vector<RidgePoint> ridge;
  std::vector<double> profile;
};

// The theory under the measured per-layer branch ratios alpha_l. The incoherent model is absent
// (and its profile empty) when the layers' attention windows differ: it is then a sum over the
// 2^H subsets of layers, which the density room does not compute.
struct MeasuredAlphaTheory {
  std::vector<double> alpha;
  ReportMetrics coherent;
  std::optional<ReportMetrics> incoherent;
  std::vector<double> coherent_profile, incoherent_profile;
};

struct TheoryComparison {
  int64_t depth = 0;
  std::string quantity = "squared_norm";
  // Which fits failed and why ("; "-separated); the fits that did not fail are still reported.
  std::optional<std::string> note;
  std::optional<std::vector<FixedDepthFit>> fits;   // Absent (with a note) when they failed.
  std::optional<std::vector<EffectiveDepthFit>> effective_depth_fits;
  std::optional<MeasuredAlphaTheory> measured_alpha_schedule;
  // Jobs: whether GetJobResult reports the effective-depth fits (asked for, or unknown depth).
  std::optional<bool> fit_effective_depth;
};

struct ReportModel {
  std::string family, preset;
  int64_t layers = 0, width = 0, heads = 0, kv_heads = 0, mlp_width = 0, vocab = 0, max_positions = 0;
  double norm_eps = 0, rope_theta = 0, cesaro_alpha = 0;
  bool tie_embeddings = false, no_position_encoding = false, uniform_attention = false, no_mlp = false;
  int64_t parameters = 0;
  std::string weights, init_recipe;
  std::optional<std::string> weights_sha256, source;  // Jobs: the registered model's provenance.
  std::optional<std::string> uid;                     // Jobs: the registration measured (ModelEntry::uid).
  std::optional<int64_t> sliding_window;              // Mistral's attention window (the theory's too).
};

struct ReportMeasurement {
  int64_t length = 0, target = 0, samples = 0;
  JacobianMethod method = JacobianMethod::kExact;
  int64_t probes = 0;
  JacobianOutput output = JacobianOutput::kFinalHidden;
  uint64_t seed = 0;
  JacobianInput input = JacobianInput::kRandomTokens;
  std::string embedding;  // What e_j is, in words.
  std::string dtype, device, torch_version;
  double seconds = 0;
  int64_t vjp_count = 0, cotangent_batch = 0;
  bool checkpointed = false;
  std::string reverse_pass;  // "model" | "autograd"
  // The profile's pathway (the full one under compare_pathways); absent in reports older than it.
  std::optional<Pathway> pathway;
  // Hutchinson's probe rows; absent for exact, and in reports older than the choice (Gaussian).
  std::optional<ProbeDistribution> probe_distribution;
};

struct LayerProfile {
  int64_t layer = 0;
  std::vector<double> sq_norm_mean, sq_norm_stderr;
};

// compare_pathways: the value pathway (attention probabilities detached) next to the report's
// profile, which is the full Jacobian's; statistics over samples, positions 1..L.
struct PathwayComparison {
  std::vector<double> value_sq_norm_mean, value_sq_norm_std, value_sq_norm_stderr;
  // Per sample ||J_value,j||^2 / ||J_full,j||^2 (null where ||J_full,j|| = 0: after the target).
  std::vector<double> ratio_mean, ratio_std, ratio_stderr;
  // Per sample sum_j ||J_value,j||^2 / sum_j ||J_full,j||^2. 1 minus it is NOT the score
  // pathway's share: it holds the interference term too (THEORY.md section 9).
  double total_ratio_mean = 0, total_ratio_std = 0, total_ratio_stderr = 0;
  // Per sample ||J_full,j - J_value,j||^2 / ||J_full,j||^2 (the score pathway's share) and
  // 2 <J_value,j, J_score,j> / ||J_full,j||^2 (the interference share; ratio + both = 1), and the
  // cosine of J_value,j and J_score,j; null where undefined. Empty in reports written before them.
  std::vector<double> score_share_mean, score_share_std, score_share_stderr;
  std::vector<double> interference_share_mean, interference_share_std, interference_share_stderr;
  std::vector<double> cosine_mean, cosine_std, cosine_stderr;
  // The same shares of the totals over positions, per sample.
  double total_score_share_mean = 0, total_score_share_std = 0, total_score_share_stderr = 0;
  double total_interference_share_mean = 0, total_interference_share_std = 0, total_interference_share_stderr = 0;
};

// Text inputs: the spike at a document start (boundary_spikes.h says how it is computed).
struct BoundarySpike {
  int64_t position = 0;  // b, 1-based.
  double ratio = 0;      // r(b) of the mean profile over the samples starting a document at b.
  // Each of those samples' own r(b): mean, standard deviation (n - 1) and standard error; unset in
  // reports stored before them (then `ratio` is over every sample, at positions all samples share).
  std::optional<double> ratio_mean, ratio_std, ratio_stderr;
  std::optional<int64_t> samples;
};

// A needle sweep at one depth (needle_sweep.h says how the shares are computed).
struct NeedleDepth {
  double depth = 0;
  int64_t start = 0, tokens = 0;  // The needle's first position (1-based) and its tokens.
  int64_t fillers = 0;            // Fillers with both a needle and a baseline sample.
  double share_mean = 0, share_std = 0, share_stderr = 0;
  double baseline_share_mean = 0, baseline_share_std = 0, baseline_share_stderr = 0;
};

// Recall jobs (recall_sweep.h says how each is computed).
struct RecallDepth {
  double depth = 0;
  int64_t probes = 0, correct = 0;
  double accuracy = 0, accuracy_low = 0, accuracy_high = 0;  // k / n and its 95 % Clopper-Pearson interval.
  double log_prob_mean = 0, log_prob_std = 0, log_prob_stderr = 0;
  double pair_share_mean = 0, pair_share_stderr = 0;                  // Of positions 1..T.
  double pair_context_share_mean = 0, pair_context_share_stderr = 0;  // Of positions 1..T-1.
};
struct RecallCorrelation {
  double r = 0, low = 0, high = 0;
  int64_t cells = 0;
};
struct RecallSummary {
  double chance = 0;  // 1 / the number of values.
  std::string probes;  // RecallSweep::Description().
  std::vector<RecallDepth> depths;
  // Across depths: mean pair_context_share against accuracy.
  std::optional<RecallCorrelation> share_accuracy;
};

// Comparison jobs: one model against the reference (statistics/jacobian_comparison.h says how).
struct ShareEstimate {
  double mean = 0, std = 0, stderr = 0;
};
struct PairedLogRatio {
  double mean = 0, std = 0, stderr = 0, low = 0, high = 0;
  int64_t samples = 0;
};
// A model's band statistics: its shares, and against the reference its paired log ratios (absent
// for the reference itself) and the Spearman correlation of the mean profiles.
struct BandStatistics {
  ShareEstimate leading, middle, trailing, first, last;
  std::optional<PairedLogRatio> middle_log_ratio, first_log_ratio, last_log_ratio;
  double spearman = 1;
};
struct ComparedModel {
  std::string model;  // As the job names it ("init": the reference's architecture at seeded init).
  std::string uid, weights_sha256;
  std::vector<double> sq_norm_mean, sq_norm_stderr;  // Positions 1..T.
  BandStatistics bands;  // Over positions 1..T (in the report's JSON, beside the fields above).
  std::optional<std::vector<BoundarySpike>> boundary_spikes;
  // The same over the context alone (positions 1..T-1); absent below 4 positions and in reports
  // stored before it.
  std::optional<BandStatistics> context;
  std::optional<RecallSummary> recall;  // Recall jobs.
};

struct ReportJob {
  std::string id;
  int64_t attempt = 0, resumed_samples = 0, parts = 0;
};

struct JacobianReport {
  ReportModel model;
  ReportMeasurement measurement;
  std::vector<std::vector<int64_t>> tokens;  // [sample][position]; L + 1 ids when drawn.
  std::vector<int64_t> positions;            // 1..L.
  std::vector<double> sq_norm_mean, sq_norm_std, sq_norm_stderr, norm_mean, norm_std, norm_stderr;
  std::optional<std::vector<double>> sq_norm_estimator_stderr;  // Hutchinson.
  std::optional<std::vector<LayerProfile>> layers;              // Layer sweeps.
  std::optional<PathwayComparison> pathways;                    // compare_pathways.
  std::optional<std::vector<BoundarySpike>> boundary_spikes;    // Text inputs with document starts.
  std::optional<std::vector<NeedleDepth>> needle_sweep;         // NEEDLE text inputs.
  std::optional<std::vector<ComparedModel>> comparison;         // Comparison jobs, reference first.
  std::optional<RecallSummary> recall;                          // Recall jobs: the first model's.
  std::optional<RecallCorrelation> recall_correlation;          // Recall comparisons: over models x depths.
  std::vector<double> branch_ratio;                             // Per layer.
  TheoryComparison theory;
  std::optional<std::vector<std::vector<double>>> raw;          // [sample][position], kept samples.
  std::optional<ReportJob> job;
};

std::string_view TheoryModelName(TheoryModel model);

nlohmann::ordered_json ReportToJson(const JacobianReport& report);
absl::StatusOr<JacobianReport> ReportFromJson(const nlohmann::json& json);
// Parses the JSON text first (DATA_LOSS when it is not JSON).
absl::StatusOr<JacobianReport> ReportFromText(const std::string& text);

}  // namespace posbias::jobs
