#include "server/text/recall_input.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/recall/mqar.h"
#include "server/recall/recall_task.h"
#include "server/status/error.h"

namespace posbias::text {
namespace {

absl::Status FieldError(const std::string& field, const std::string& value, const std::string& allowed,
                        ErrorReason reason = ErrorReason::kInvalidArgument) {
  return InvalidArgumentError({reason, "spec.jacobian_norm.input.recall." + field, value, allowed});
}

absl::Status CheckRecallRequest(const v1::RecallInput& input, const jobs::JacobianJobSpec& spec, int64_t max_samples) {
  if (input.depths().empty() || input.depths_size() > kMaxRecallDepths) {
    return FieldError("depths", absl::StrCat(input.depths_size(), " depths"), absl::StrCat("1..", kMaxRecallDepths, " depths"));
  }
  for (int d = 0; d < input.depths_size(); ++d) {
    if (!(input.depths(d) >= 0.0 && input.depths(d) <= 1.0)) {
      return FieldError(absl::StrCat("depths[", d, "]"), absl::StrCat(input.depths(d)), "a fraction in [0, 1]");
    }
  }
  const int64_t samples = int64_t{input.probes_per_depth()} * input.depths_size();
  if (input.probes_per_depth() < 1 || samples > max_samples) {
    return FieldError("probes_per_depth", absl::StrCat(input.probes_per_depth()),
                      absl::StrCat(">= 1, with depths x probes_per_depth <= ", max_samples, " samples"));
  }
  if (spec.target != 0 && spec.target != spec.length) {
    return InvalidArgumentError({ErrorReason::kInvalidPosition, "spec.jacobian_norm.target_position",
                                 absl::StrCat(spec.target), "0 (= L) with recall inputs (the answer follows position L)"});
  }
  if (spec.output == jobs::JacobianOutput::kLossGradient) {
    return InvalidArgumentError({ErrorReason::kInvalidArgument, "spec.jacobian_norm.output", "LOSS_GRADIENT",
                                 "FINAL_HIDDEN, LAYER_SWEEP or LOG_PROB with recall inputs (the loss has no query position)"});
  }
  return absl::OkStatus();
}

recall::TaskOptions TaskOptionsOf(const v1::RecallInput& input, int64_t length) {
  recall::TaskOptions options;
  options.length = length;
  if (input.pairs() != 0) options.pairs = input.pairs();
  if (input.key_letters() != 0) options.key_letters = input.key_letters();
  if (!input.values().empty()) options.values = input.values();
  return options;
}

}  // namespace

absl::StatusOr<LaidOutText> LayOutRecall(const tokenizer::Tokenizer& tokenizer, const v1::RecallInput& input,
                                         const jobs::JacobianJobSpec& spec, int64_t max_samples) {
  if (auto status = CheckRecallRequest(input, spec, max_samples); !status.ok()) return status;
  const recall::TaskOptions options = TaskOptionsOf(input, spec.length);
  if (auto status = recall::CheckTaskOptions(options); !status.ok()) {
    return WithMessage(status, absl::StrCat("spec.jacobian_norm.input.recall: ", status.message()));
  }
  const recall::Tokenize tokenize = [&](std::string_view text) -> absl::StatusOr<std::vector<int64_t>> {
    auto encoding = tokenizer.Encode(text);
    if (!encoding.ok()) return encoding.status();
    return std::vector<int64_t>(encoding->ids.begin(), encoding->ids.end());
  };
  LaidOutText laid_out;
  jobs::JacobianJobSpec::RecallSweep sweep;
  sweep.depths.assign(input.depths().begin(), input.depths().end());
  sweep.probes_per_depth = input.probes_per_depth();
  sweep.pairs = options.pairs;
  sweep.key_letters = options.key_letters;
  sweep.values = options.values;
  sweep.seed = input.seed();
  for (int64_t i = 0; i < sweep.probes_per_depth * static_cast<int64_t>(sweep.depths.size()); ++i) {
    const double depth = sweep.depths[static_cast<size_t>(i / sweep.probes_per_depth)];
    auto probe = recall::MakeProbe(options, depth, recall::ProbeSeed(sweep.seed, static_cast<uint64_t>(i)), tokenize);
    if (!probe.ok()) return WithMessage(probe.status(), absl::StrCat("spec.jacobian_norm.input.recall: ", probe.status().message()));
    sweep.pair_starts.push_back(probe->pair_start);
    sweep.pair_tokens.push_back(probe->pair_tokens);
    laid_out.tokens.push_back(std::move(probe->tokens));
  }
  laid_out.recall = std::move(sweep);
  return laid_out;
}

bool AsksTokenIds(const v1::RecallInput& input, const registry::ModelEntry& model) {
  return input.has_token_ids() || (!input.text() && model.trained_recall.has_value());
}

namespace {

// The probes' options: the model's trained task unless the request sets token_ids, then the
// request's pairs and ranges over those.
absl::StatusOr<recall::MqarOptions> TokenIdOptions(const v1::RecallInput& input, const registry::ModelEntry& model,
                                                   int64_t length) {
  if (input.has_token_ids() && input.text()) {
    return FieldError("text", "true", "false when token_ids is set (token-id probes or text probes, not both)");
  }
  if (input.key_letters() != 0) return FieldError("key_letters", absl::StrCat(input.key_letters()), "0 with token-id probes (keys are single ids)");
  if (!input.values().empty()) return FieldError("values", input.values(), "empty with token-id probes (see token_ids.value_ids)");
  recall::MqarOptions options;
  if (!input.has_token_ids() && model.trained_recall) options = *model.trained_recall;
  options.length = length;
  options.placement = recall::Placement::kUniform;
  if (input.pairs() != 0) options.pairs = input.pairs();
  const auto& ids = input.token_ids();
  const auto take = [](const v1::IdRange& range, recall::IdRange& out) {
    if (range.first() != 0 || range.last() != 0) out = {range.first(), range.last()};
  };
  if (input.has_token_ids()) {
    take(ids.key_ids(), options.keys);
    take(ids.value_ids(), options.values);
    take(ids.filler_ids(), options.filler);
  }
  const std::string field = "spec.jacobian_norm.input.recall.";
  const recall::MqarNames names{field + "pairs", field + "token_ids.key_ids", field + "token_ids.value_ids",
                                field + "token_ids.filler_ids"};
  if (auto status = recall::CheckMqarOptions(options, model.config.vocab_size, names, /*for_probes=*/true); !status.ok()) {
    return status;
  }
  return options;
}

}  // namespace

absl::StatusOr<LaidOutText> LayOutTokenIdRecall(const v1::RecallInput& input, const registry::ModelEntry& model,
                                                const jobs::JacobianJobSpec& spec, int64_t max_samples) {
  if (auto status = CheckRecallRequest(input, spec, max_samples); !status.ok()) return status;
  auto options = TokenIdOptions(input, model, spec.length);
  if (!options.ok()) return options.status();
  LaidOutText laid_out;
  jobs::JacobianJobSpec::RecallSweep sweep;
  sweep.depths.assign(input.depths().begin(), input.depths().end());
  sweep.probes_per_depth = input.probes_per_depth();
  sweep.pairs = options->pairs;
  sweep.seed = input.seed();
  sweep.token_ids = true;
  sweep.key_ids = {options->keys.first, options->keys.last};
  sweep.value_ids = {options->values.first, options->values.last};
  sweep.filler_ids = {options->filler.first, options->filler.last};
  if (!input.has_token_ids()) sweep.trained_task_of = model.name;
  for (int64_t i = 0; i < sweep.probes_per_depth * static_cast<int64_t>(sweep.depths.size()); ++i) {
    const double depth = sweep.depths[static_cast<size_t>(i / sweep.probes_per_depth)];
    recall::MqarRow probe = recall::MakeMqarProbe(*options, depth, recall::ProbeSeed(sweep.seed, static_cast<uint64_t>(i)));
    sweep.pair_starts.push_back(probe.key_positions.front());
    sweep.pair_tokens.push_back(2);
    laid_out.tokens.push_back(std::move(probe.tokens));
  }
  laid_out.recall = std::move(sweep);
  return laid_out;
}

}  // namespace posbias::text
