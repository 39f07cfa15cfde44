// What a measurement may be asked (CheckMeasureOptions) and the compute dtypes' torch names.
#include <algorithm>
#include <string>

#include <torch/torch.h>

#include "absl/strings/str_cat.h"
#include "server/jacobian/engine.h"
#include "server/limits/limits.h"
#include "server/status/error.h"

namespace posbias::jacobian {

using models::DecoderModel;

torch::Dtype TorchDtype(jobs::ComputeDtype dtype) {
  switch (dtype) {
    case jobs::ComputeDtype::kFloat32: return torch::kFloat32;
    case jobs::ComputeDtype::kBfloat16: return torch::kBFloat16;
    case jobs::ComputeDtype::kFloat16: return torch::kFloat16;
    case jobs::ComputeDtype::kFloat64: return torch::kFloat64;
  }
  return torch::kFloat32;
}

std::string TorchDtypeName(torch::Dtype dtype) {
  for (auto compute : {jobs::ComputeDtype::kFloat32, jobs::ComputeDtype::kBfloat16, jobs::ComputeDtype::kFloat16,
                       jobs::ComputeDtype::kFloat64}) {
    if (TorchDtype(compute) == dtype) return std::string(jobs::DtypeName(compute));
  }
  return "other";
}

namespace {

// The given token ids: one sequence per sample, long enough for the output, every id in the
// model's vocabulary.
absl::Status CheckGivenTokens(const models::ModelConfig& config, const MeasureOptions& options) {
  if (static_cast<int64_t>(options.tokens.size()) != options.samples) {
    return InvalidArgumentError({ErrorReason::kInvalidArgument, "tokens", absl::StrCat(options.tokens.size(), " sequences"),
                                 absl::StrCat("one sequence per sample (", options.samples, ")")});
  }
  const int64_t t = options.target == 0 ? options.length : options.target;
  const bool scores_next = options.output == Output::kLogProb || options.score_next_token;
  const size_t need = options.output == Output::kLossGradient ? options.length + 1
                      : scores_next                          ? std::max(options.length, t + 1)
                                                             : options.length;
  for (size_t s = 0; s < options.tokens.size(); ++s) {
    if (options.tokens[s].size() < need) {
      return InvalidArgumentError({ErrorReason::kInvalidArgument, absl::StrCat("tokens[", s, "]"),
                                   absl::StrCat(options.tokens[s].size(), " ids"), absl::StrCat("at least ", need, " ids")});
    }
    for (size_t j = 0; j < options.tokens[s].size(); ++j) {
      if (options.tokens[s][j] < 0 || options.tokens[s][j] >= config.vocab_size) {
        return InvalidArgumentError({ErrorReason::kInvalidArgument, absl::StrCat("tokens[", s, "][", j, "]"),
                                     std::to_string(options.tokens[s][j]), absl::StrCat("0..", config.vocab_size - 1)});
      }
    }
  }
  return absl::OkStatus();
}

// The loss gradient scores every position's next token: token ids (drawn or given), no target
// of its own, one exact VJP (the model's pass or autograd).
absl::Status CheckLossGradient(const MeasureOptions& options) {
  if (options.output != Output::kLossGradient) return absl::OkStatus();
  if (options.input == InputKind::kGaussianEmbeddings) {
    return InvalidArgumentError({ErrorReason::kInvalidArgument, "input", "gaussian",
                                 "random or given token ids with the loss gradient (its loss scores each next token)"});
  }
  if (options.target != 0 && options.target != options.length) {
    return InvalidArgumentError({ErrorReason::kInvalidPosition, "target", std::to_string(options.target),
                                 "0 (= L) with the loss gradient (the loss sums over all L positions)"});
  }
  if (options.method != Method::kExact) {
    return InvalidArgumentError({ErrorReason::kInvalidArgument, "method", "hutchinson",
                                 "exact with the loss gradient (a scalar output: one VJP per sample)"});
  }
  if (options.compare_pathways || options.pathway != Pathway::kFull) {
    return InvalidArgumentError({ErrorReason::kInvalidArgument, "pathway", "value_only or compare_pathways",
                                 "the full pathway with the loss gradient"});
  }
  return absl::OkStatus();
}

// Scoring the next token needs a target position (not the loss gradient), and a resumed run's
// records must hold their scores.
absl::Status CheckNextTokenScore(const MeasureOptions& options) {
  if (!options.score_next_token) return absl::OkStatus();
  if (options.output == Output::kLossGradient) {
    return InvalidArgumentError({ErrorReason::kInvalidArgument, "output", "loss_gradient",
                                 "final_hidden, layer_sweep or log_prob when the next token is scored (the loss gradient "
                                 "has no target position)"});
  }
  for (const auto& record : options.done_samples) {
    if (!record.next_token) {
      return InvalidArgumentError({ErrorReason::kInvalidArgument, "done_samples", "records without next_token",
                                   "records of a measurement that scored the next token"});
    }
  }
  return absl::OkStatus();
}

// The inputs: given ids as CheckGivenTokens says; drawn ids from within the model's vocabulary.
absl::Status CheckInputs(const models::ModelConfig& config, const MeasureOptions& options) {
  if (options.input == InputKind::kGivenTokens) {
    if (auto status = CheckGivenTokens(config, options); !status.ok()) return status;
  }
  if (options.draw_vocab_size < 0 || options.draw_vocab_size > config.vocab_size) {
    return InvalidArgumentError({ErrorReason::kInvalidArgument, "draw_vocab_size", std::to_string(options.draw_vocab_size),
                                 absl::StrCat("0 (the model's vocabulary) or 1..", config.vocab_size)});
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckMeasureOptions(const DecoderModel& model, const MeasureOptions& options) {
  const auto& config = model.config();
  const int64_t max_length = std::max<int64_t>(config.max_positions, 1);
  if (options.length < 1 || options.length > max_length) {
    return InvalidArgumentError({ErrorReason::kInvalidLength, "length", std::to_string(options.length),
                                 absl::StrCat("1..", max_length, " (the model's positions)")});
  }
  // The service's limits (limits.h) hold for posbias-measure too: one table, no second cap.
  constexpr int64_t kMaxSamples = limits::Default<int64_t>(limits::Limit::kMaxSamples);
  constexpr int64_t kMaxProbes = limits::Default<int64_t>(limits::Limit::kMaxProbes);
  if (options.samples < 1 || options.samples > kMaxSamples) {
    return InvalidArgumentError({ErrorReason::kInvalidArgument, "samples", std::to_string(options.samples),
                                 limits::Range(limits::Limit::kMaxSamples, 1, kMaxSamples)});
  }
  if (options.target < 0 || options.target > options.length) {
    return InvalidArgumentError({ErrorReason::kInvalidPosition, "target", std::to_string(options.target),
                                 absl::StrCat("0 (= L) or 1..", options.length)});
  }
  if (options.method == Method::kHutchinson && (options.probes < 1 || options.probes > kMaxProbes)) {
    return InvalidArgumentError({ErrorReason::kInvalidArgument, "probes", std::to_string(options.probes),
                                 limits::Range(limits::Limit::kMaxProbes, 1, kMaxProbes)});
  }
  if (auto status = CheckInputs(config, options); !status.ok()) return status;
  const int64_t end_sample = options.end_sample > 0 ? options.end_sample : options.samples;
  if (options.first_sample < 0 || options.first_sample >= end_sample || end_sample > options.samples) {
    return InvalidArgumentError({ErrorReason::kInvalidArgument, "sample range",
                                 absl::StrCat("[", options.first_sample, ", ", end_sample, ")"),
                                 absl::StrCat("0 <= first_sample < end_sample <= samples = ", options.samples)});
  }
  if (static_cast<int64_t>(options.done_samples.size()) > end_sample - options.first_sample) {
    return InvalidArgumentError({ErrorReason::kInvalidArgument, "done_samples", std::to_string(options.done_samples.size()),
                                 absl::StrCat("at most the ", end_sample - options.first_sample, " samples of the range")});
  }
  for (const auto& record : options.done_samples) {
    for (const auto& values : record.sq_norm) {
      if (static_cast<int64_t>(values.size()) != options.length) {
        return InvalidArgumentError({ErrorReason::kInvalidArgument, "done_samples", absl::StrCat(values.size(), " positions"),
                                     absl::StrCat(options.length, " positions per output (the checkpoint does not match)")});
      }
    }
  }
  if (options.dtype == torch::kFloat16 && options.device.rfind("cuda", 0) != 0) {
    return InvalidArgumentError({ErrorReason::kInvalidArgument, "dtype", "float16",
                                 "float32, bfloat16 or float64 on the CPU (LibTorch's CPU kernels lack "
                                 "float16 layer norms and matrix products); float16 on cuda:N"});
  }
  if (options.reverse_pass == MeasureOptions::ReversePass::kModel && !models::HasOwnReversePass(model.config().family)) {
    return InvalidArgumentError({ErrorReason::kInvalidArgument, "reverse_pass", "model",
                                 absl::StrCat("auto or autograd (", models::FamilyName(model.config().family),
                                              " models have no own reverse pass; the decoder families have)")});
  }
  if ((options.pathway == Pathway::kValueOnly || options.compare_pathways) &&
      config.family == models::Family::kTorchScript) {
    return InvalidArgumentError({ErrorReason::kInvalidArgument, options.compare_pathways ? "compare_pathways" : "pathway",
                                 options.compare_pathways ? "true" : "value_only",
                                 "full only (a TorchScript module's attention probabilities cannot be detached)"});
  }
  if (options.compare_pathways && options.pathway != Pathway::kFull) {
    return InvalidArgumentError({ErrorReason::kInvalidArgument, "pathway", std::string(jobs::PathwayName(options.pathway)),
                                 "full with compare_pathways (both pathways are measured; the profile is the full one)"});
  }
  if (options.compare_pathways) {
    for (const auto& record : options.done_samples) {
      if (record.value_sq_norm.size() != record.sq_norm.size() || record.score_sq_norm.size() != record.sq_norm.size()) {
        return InvalidArgumentError({ErrorReason::kInvalidArgument, "done_samples",
                                     "records without value_sq_norm and score_sq_norm",
                                     "records of a compare_pathways measurement (both per output)"});
      }
    }
  }
  if (auto status = CheckLossGradient(options); !status.ok()) return status;
  if (auto status = CheckNextTokenScore(options); !status.ok()) return status;
  if (options.input != InputKind::kGaussianEmbeddings && !model.has_token_embedding()) {
    return InvalidArgumentError({ErrorReason::kInvalidArgument, "input", "tokens", "gaussian (this model takes embeddings only)"});
  }
  return absl::OkStatus();
}

}  // namespace posbias::jacobian
