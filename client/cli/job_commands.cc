#include "client/cli/job_commands.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <limits>
#include <iomanip>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/cli/output.h"
#include "client/cli/recall_output.h"
#include "client/cli/svg_plot.h"
#include "nlohmann/json.hpp"

namespace posbias::cli {
namespace {

nlohmann::ordered_json JobJson(const v1::Job& j) {
  const auto& spec = j.spec().jacobian_norm();
  nlohmann::ordered_json json = {
      {"id", j.id()},
      {"state", LowerEnum(v1::JobState_Name(j.state()), "JOB_STATE_")},
      {"progress", j.progress().fraction()},
      {"samples_done", j.progress().samples_done()},
      {"samples_total", j.progress().samples_total()},
      {"attempt", j.attempt()},
      {"device", j.device()},
      {"model", spec.model()},
      {"length", spec.sequence_length()},
      {"samples", spec.samples()},
      {"output", LowerEnum(v1::JacobianOutput_Name(spec.output()), "JACOBIAN_OUTPUT_")},
      {"method", LowerEnum(v1::JacobianMethod_Name(spec.method()), "JACOBIAN_METHOD_")},
      {"probes", spec.probes()},
      {"priority", j.spec().priority()},
      {"request_id", j.request_id()},
      {"labels", std::map<std::string, std::string>(j.labels().begin(), j.labels().end())}};
  // What the measurement keeps besides the full pathway's profile (shown when asked for).
  if (spec.pathway() == v1::JACOBIAN_PATHWAY_VALUE_ONLY) json["pathway"] = "value_only";
  if (spec.compare_pathways()) json["compare_pathways"] = true;
  if (spec.return_raw_samples()) json["raw_samples"] = true;
  if (spec.probe_distribution() != v1::PROBE_DISTRIBUTION_UNSPECIFIED) {
    json["probe_distribution"] = LowerEnum(v1::ProbeDistribution_Name(spec.probe_distribution()), "PROBE_DISTRIBUTION_");
  }
  if (j.progress().has_estimated_seconds_remaining()) {
    json["eta_seconds"] = j.progress().estimated_seconds_remaining();
  }
  if (j.has_error()) {
    json["error"] = {{"reason", v1::ErrorReason_Name(j.error().reason())},
                     {"message", j.error().message()}};
  }
  return json;
}

// A job, or the failed call's error.
int PrintJob(const CliContext& context, const absl::StatusOr<v1::Job>& job) {
  if (!job.ok()) return context.Fail(job.status());
  PrintObject(JobJson(*job), context.format, context.out);
  return 0;
}

// A progress line on stderr: "[#####.....]  42.0 %  samples 3/8  ETA 12 s".
void DrawProgress(std::ostream& err, const v1::Job& job) {
  const double fraction = std::clamp(job.progress().fraction(), 0.0, 1.0);
  const int filled = static_cast<int>(std::round(fraction * 30));
  err << "\r[" << std::string(filled, '#') << std::string(30 - filled, '.') << "] " << std::fixed
      << std::setprecision(1) << 100 * fraction << " %  "
      << LowerEnum(v1::JobState_Name(job.state()), "JOB_STATE_") << "  samples "
      << job.progress().samples_done() << "/" << job.progress().samples_total();
  if (job.progress().has_estimated_seconds_remaining()) {
    err << "  ETA " << static_cast<int64_t>(job.progress().estimated_seconds_remaining()) << " s";
  }
  err << "    " << std::flush;
}

// Follows a job until it ends; returns the last state seen.
absl::StatusOr<v1::Job> Watch(const CliContext& context, const std::string& id) {
  v1::Job last;
  v1::WatchJobRequest request;
  request.set_id(id);
  CallSettings settings;
  settings.timeout = std::chrono::hours(24 * 365);
  auto status = context.client.WatchJob(
      request,
      [&](const v1::WatchJobResponse& message) {
        last = message.job();
        DrawProgress(context.err, last);
        return true;
      },
      settings);
  context.err << "\n";
  if (!status.ok()) return status;
  return last;
}

// ------------------------------------------------------------------------------------- submit

struct SubmitFlags {
  std::string model, method = "exact", output = "final", input = "random", dtype = "float32",
                     device = "any", tokens_file, request_id, text_file, layout = "concatenate", needle, separator,
                     boundary_token = "none", question;
  // Recall inputs: depths, probes per depth, and the generator's options (0 / "" = the server's).
  std::vector<double> recall_depths;
  uint32_t recall_probes = 16, recall_pairs = 0, recall_key_letters = 0;
  std::string recall_values;
  std::optional<uint64_t> recall_seed;
  bool truncate = false, raw = false, compare_pathways = false;
  std::string pathway = "full", probe_distribution;  // "" = the server's default.
  uint32_t length = 0, samples = 0, probes = 64;
  std::optional<uint32_t> target;
  std::optional<uint64_t> seed;
  int32_t priority = 0;
  double time_limit = 0;
  std::vector<std::string> labels;
  bool wait = false;
  std::vector<std::string> versus;  // Comparison jobs: models after --model, "init" for its seeded init.
  std::optional<uint64_t> init_seed;
  std::string reference;
};

// --text-file: one sample per line, a JSON string (one document), a list of strings or
// {"documents": [...]}; --layout concatenate | boundaries:B1,B2,... | needle:D1,D2,...
absl::Status SetTextInput(const SubmitFlags& flags, v1::TextInput* text) {
  std::ifstream in(flags.text_file, std::ios::binary);
  if (!in) return absl::InvalidArgumentError("--text-file: cannot read " + flags.text_file);
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const auto json = nlohmann::json::parse(line, nullptr, false);
    const nlohmann::json documents = json.is_object() && json.contains("documents") ? json["documents"]
                                     : json.is_string()                              ? nlohmann::json::array({json})
                                                                                     : json;
    if (!documents.is_array() || documents.empty() ||
        !std::all_of(documents.begin(), documents.end(), [](const auto& d) { return d.is_string(); })) {
      return absl::InvalidArgumentError(absl::StrCat("--text-file line ", number,
                                                     ": expected a JSON string, a list of strings or {\"documents\": [...]}"));
    }
    auto* sample = text->add_samples();
    for (const auto& document : documents) sample->add_documents(document.get<std::string>());
  }
  const std::string& layout = flags.layout;
  const size_t colon = layout.find(':');
  const std::string kind = layout.substr(0, colon);
  std::vector<std::string> values;
  if (colon != std::string::npos) values = absl::StrSplit(layout.substr(colon + 1), ',');
  if (kind == "concatenate" && colon == std::string::npos) {
    text->set_layout(v1::TEXT_LAYOUT_CONCATENATE);
  } else if (kind == "boundaries" && !values.empty()) {
    text->set_layout(v1::TEXT_LAYOUT_FIXED_BOUNDARIES);
    for (const auto& value : values) {
      uint32_t position = 0;
      if (!absl::SimpleAtoi(value, &position)) return absl::InvalidArgumentError("--layout boundaries: " + value + " is not a position");
      text->add_boundaries(position);
    }
  } else if (kind == "needle" && !values.empty()) {
    text->set_layout(v1::TEXT_LAYOUT_NEEDLE);
    for (const auto& value : values) {
      double depth = 0;
      if (!absl::SimpleAtod(value, &depth)) return absl::InvalidArgumentError("--layout needle: " + value + " is not a depth");
      text->add_needle_depths(depth);
    }
  } else {
    return absl::InvalidArgumentError("--layout " + layout + ": allowed concatenate, boundaries:B1,B2,... or needle:D1,D2,...");
  }
  text->set_needle(flags.needle);
  text->set_question(flags.question);
  text->set_separator(flags.separator);
  text->set_truncate(flags.truncate);
  if (flags.boundary_token == "eos") {
    text->set_boundary_token(v1::TEXT_BOUNDARY_TOKEN_EOS);
  } else if (flags.boundary_token == "bos") {
    text->set_boundary_token(v1::TEXT_BOUNDARY_TOKEN_BOS);
  } else if (flags.boundary_token != "none") {
    return absl::InvalidArgumentError("--boundary-token " + flags.boundary_token + ": allowed eos, bos or none");
  }
  return absl::OkStatus();
}

// The input sequences: --text-file, --tokens, else Gaussian embeddings or random tokens (with --seed).
absl::Status SetInput(const SubmitFlags& flags, v1::JacobianNormSpec* spec) {
  if (!flags.recall_depths.empty()) {
    if (!flags.text_file.empty() || !flags.tokens_file.empty()) {
      return absl::InvalidArgumentError("--recall: allowed without --text-file and --tokens (it is the input)");
    }
    auto* recall = spec->mutable_input()->mutable_recall();
    for (double depth : flags.recall_depths) recall->add_depths(depth);
    recall->set_probes_per_depth(flags.recall_probes);
    recall->set_pairs(flags.recall_pairs);
    recall->set_key_letters(flags.recall_key_letters);
    recall->set_values(flags.recall_values);
    if (flags.recall_seed) recall->set_seed(*flags.recall_seed);
    return absl::OkStatus();
  }
  if (!flags.text_file.empty()) return SetTextInput(flags, spec->mutable_input()->mutable_text());
  if (!flags.tokens_file.empty()) {
    std::ifstream in(flags.tokens_file);
    const auto json = nlohmann::json::parse(in, nullptr, false);
    if (json.is_discarded() || !json.is_array()) {
      return absl::InvalidArgumentError("--tokens: expected a JSON list of token id lists");
    }
    for (size_t s = 0; s < json.size(); ++s) {
      const auto& row = json[s];
      if (!row.is_array() || !std::all_of(row.begin(), row.end(), [](const auto& id) { return id.is_number_unsigned(); })) {
        return absl::InvalidArgumentError("--tokens: expected a JSON list of token id lists");
      }
      // Ids travel as uint32: a larger one is refused here, never wrapped into another id.
      for (size_t i = 0; i < row.size(); ++i) {
        if (row[i].get<uint64_t>() > std::numeric_limits<uint32_t>::max()) {
          return absl::InvalidArgumentError(absl::StrCat("--tokens: sample ", s + 1, ", id ", i + 1, " is ",
                                                         row[i].get<uint64_t>(), "; token ids are 0..",
                                                         std::numeric_limits<uint32_t>::max(),
                                                         " (and below the model's vocabulary size)"));
        }
      }
      auto* sequence = spec->mutable_input()->mutable_given_tokens()->add_sequences();
      for (const auto& id : row) sequence->add_token_ids(id.get<uint32_t>());
      // L + 1 ids: the last is the next token (scored by the log-probability output at T = L).
      if (sequence->token_ids_size() == static_cast<int>(flags.length) + 1) {
        sequence->set_next_token_id(sequence->token_ids(sequence->token_ids_size() - 1));
        sequence->mutable_token_ids()->RemoveLast();
      }
    }
  } else if (flags.input == "gaussian") {
    auto* gaussian = spec->mutable_input()->mutable_gaussian_embeddings();
    if (flags.seed) gaussian->set_seed(*flags.seed);
  } else if (flags.seed) {
    spec->mutable_input()->mutable_random_tokens()->set_seed(*flags.seed);
  }
  return absl::OkStatus();
}

// The measurement: model, length, samples, method, target, output, dtype and input.
absl::Status SetSpec(const SubmitFlags& flags, v1::JacobianNormSpec* spec) {
  const bool hutchinson = flags.method == "hutchinson";
  spec->set_model(flags.model);
  spec->set_sequence_length(flags.length);
  spec->set_samples(flags.samples);
  spec->set_method(hutchinson ? v1::JACOBIAN_METHOD_HUTCHINSON : v1::JACOBIAN_METHOD_EXACT);
  spec->set_probes(hutchinson ? flags.probes : 0);
  if (hutchinson) {
    spec->set_probe_distribution(flags.probe_distribution == "gaussian"     ? v1::PROBE_DISTRIBUTION_GAUSSIAN
                                 : flags.probe_distribution == "rademacher" ? v1::PROBE_DISTRIBUTION_RADEMACHER
                                 : flags.probe_distribution == "orthogonal" ? v1::PROBE_DISTRIBUTION_ORTHOGONAL
                                                                            : v1::PROBE_DISTRIBUTION_UNSPECIFIED);
  }
  if (flags.target) spec->set_target_position(*flags.target);
  spec->set_output(flags.output == "layers"    ? v1::JACOBIAN_OUTPUT_LAYER_SWEEP
                   : flags.output == "logprob" ? v1::JACOBIAN_OUTPUT_LOG_PROB
                   : flags.output == "loss"    ? v1::JACOBIAN_OUTPUT_LOSS_GRADIENT
                                               : v1::JACOBIAN_OUTPUT_FINAL_HIDDEN);
  spec->set_dtype(flags.dtype == "bfloat16"  ? v1::BFLOAT16
                  : flags.dtype == "float16" ? v1::FLOAT16
                  : flags.dtype == "float64" ? v1::FLOAT64
                                             : v1::FLOAT32);
  if (flags.pathway == "value-only") spec->set_pathway(v1::JACOBIAN_PATHWAY_VALUE_ONLY);
  spec->set_compare_pathways(flags.compare_pathways);
  spec->set_return_raw_samples(flags.raw);
  for (const auto& model : flags.versus) spec->add_versus(model);
  if (flags.init_seed) spec->set_init_seed(*flags.init_seed);
  spec->set_reference(flags.reference);
  return SetInput(flags, spec);
}

absl::StatusOr<v1::SubmitJobRequest> SubmitRequest(const SubmitFlags& flags, std::ostream& err) {
  v1::SubmitJobRequest request;
  auto* job = request.mutable_spec();
  if (auto status = SetSpec(flags, job->mutable_jacobian_norm()); !status.ok()) return status;
  job->set_priority(flags.priority);
  job->set_device(flags.device == "cpu"    ? v1::DEVICE_CPU
                  : flags.device == "cuda" ? v1::DEVICE_CUDA
                                           : v1::DEVICE_PREFERENCE_UNSPECIFIED);
  if (flags.time_limit > 0) {
    job->mutable_time_limit()->set_seconds(static_cast<int64_t>(flags.time_limit));
  }
  if (!ParseLabels(flags.labels, request.mutable_labels(), err)) {
    return absl::InvalidArgumentError("bad --label");
  }
  request.set_request_id(flags.request_id);
  return request;
}

int RunSubmit(const CliContext& context, const SubmitFlags& flags) {
  auto request = SubmitRequest(flags, context.err);
  if (!request.ok()) return context.UsageError(request.status().message());
  auto job = context.client.SubmitJob(*request);
  if (!job.ok()) return context.Fail(job.status());
  if (flags.wait) {
    auto last = Watch(context, job->id());
    if (!last.ok()) return context.Fail(last.status());
    *job = *last;
  }
  PrintObject(JobJson(*job), context.format, context.out);
  return job->state() == v1::JOB_STATE_FAILED ? kExitServerError : 0;
}

CommandRun DefineSubmit(CLI::App& command) {
  auto f = std::make_shared<SubmitFlags>();
  command.add_option("--model", f->model, "Registered model name")->required();
  command.add_option("--versus", f->versus,
                     "A comparison job: more models measured on the same inputs, compared with --model (comma-separated "
                     "registered names in order, e.g. a training trajectory; init = --model's architecture at seeded "
                     "initialization)")
      ->delimiter(',');
  command.add_option("--reference", f->reference,
                     "With --versus: the model the others are compared with (--model, or an entry of --versus such as "
                     "init; default --model)");
  command.add_option("--init-seed", f->init_seed,
                     "The seed of init in --versus (default: the seed a posbias-train checkpoint records, else 0)");
  command.add_option("--length,-L", f->length, "Sequence length L")->required();
  command.add_option("--samples,-S", f->samples, "Input samples (default 16)");
  command.add_option("--method", f->method, "exact or hutchinson")
      ->check(CLI::IsMember({"exact", "hutchinson"}))
      ->capture_default_str();
  command.add_option("--probes", f->probes, "Hutchinson probes K, 1..4096")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  command.add_option("--probe-distribution", f->probe_distribution,
                     "With --method hutchinson: gaussian, rademacher or orthogonal (default: the server's, orthogonal)")
      ->check(CLI::IsMember({"gaussian", "rademacher", "orthogonal"}));
  command.add_option("--seed", f->seed, "Input seed (default: drawn by the server)");
  command.add_option("--target", f->target, "Output position t (default L)");
  command.add_option("--output", f->output, "final, layers, logprob or loss (the gradient of the next-token loss over the sample)")
      ->check(CLI::IsMember({"final", "layers", "logprob", "loss"}))
      ->capture_default_str();
  command.add_option("--input", f->input, "random or gaussian")
      ->check(CLI::IsMember({"random", "gaussian"}))
      ->capture_default_str();
  command.add_option("--tokens", f->tokens_file, "JSON list of token id lists (one per sample)");
  command.add_option("--text-file", f->text_file,
                     "JSON lines of texts, one sample each (a string, a list of documents or {\"documents\": [...]}), "
                     "tokenized by the model's tokenizer");
  command.add_option("--layout", f->layout, "With --text-file: concatenate, boundaries:B1,B2,... or needle:D1,D2,...")
      ->capture_default_str();
  command.add_option("--needle", f->needle, "With --layout needle: the needle text");
  command.add_option("--question", f->question,
                     "With --layout needle: a text after the haystack, ending at position L (the output position)");
  command.add_option("--separator", f->separator, "With --layout concatenate: between documents (default: EOS)");
  command.add_flag("--truncate", f->truncate, "With --layout concatenate: cut texts longer than L tokens to L");
  command.add_option("--boundary-token", f->boundary_token,
                     "With --layout boundaries or needle: eos, bos or none, put at each document start (boundaries) "
                     "or after each filler document (needle)")
      ->capture_default_str();
  command.add_option("--recall", f->recall_depths,
                     "Associative-recall probes with the queried pair at these depths, e.g. 0,0.25,0.5,0.75,1 (the "
                     "result answers recall accuracy by depth)")
      ->delimiter(',');
  command.add_option("--recall-probes", f->recall_probes, "With --recall: probes per depth")->capture_default_str();
  command.add_option("--recall-pairs", f->recall_pairs, "With --recall: key=value pairs per probe (default 8)");
  command.add_option("--recall-key-letters", f->recall_key_letters, "With --recall: letters per key (default 3)");
  command.add_option("--recall-values", f->recall_values, "With --recall: the values' alphabet (default a-z)");
  command.add_option("--recall-seed", f->recall_seed, "With --recall: the generator's seed (default 0)");
  command.add_option("--dtype", f->dtype, "float32, bfloat16, float16 or float64")
      ->capture_default_str();
  command.add_option("--pathway", f->pathway,
                     "full or value-only: the value pathway alone (no gradient through the attention probabilities)")
      ->check(CLI::IsMember({"full", "value-only"}))
      ->capture_default_str();
  command.add_flag("--compare-pathways", f->compare_pathways,
                   "Measure the value pathway beside the full one (same samples and probes): score and "
                   "interference shares per position");
  command.add_flag("--raw", f->raw, "Keep every sample's values (GetJobResult include_raw_samples)");
  command.add_option("--device", f->device, "any, cpu or cuda")
      ->check(CLI::IsMember({"any", "cpu", "cuda"}))
      ->capture_default_str();
  command.add_option("--priority", f->priority, "-100..100, higher first")->capture_default_str();
  command.add_option("--time-limit", f->time_limit, "Seconds; 0 = none")->capture_default_str();
  command.add_option("--label", f->labels, "KEY=VALUE (repeatable)");
  command.add_option("--request-id", f->request_id,
                     "Idempotency key: a retry returns the same job");
  command.add_flag("--wait", f->wait, "Show progress until the job ends");
  return RunWith(f, RunSubmit);
}

// ------------------------------------------------------------------------------------- result

// The whole typed result: every page of GetJobResult joined (positions, the measured statistics
// and the theory curves' profiles); the first page's other members as they came.
absl::StatusOr<v1::GetJobResultResponse> WholeResult(const CliContext& context, const std::string& id) {
  v1::GetJobResultRequest request;
  request.set_id(id);
  request.set_omit_layer_profiles(true);
  auto first = context.client.GetJobResult(request);
  if (!first.ok()) return first.status();
  v1::GetJobResultResponse whole = *std::move(first);
  auto* result = whole.mutable_jacobian_norm();
  std::string token = whole.next_page_token();
  while (!token.empty()) {
    request.set_page_token(token);
    auto page = context.client.GetJobResult(request);
    if (!page.ok()) return page.status();
    const auto& more = page->jacobian_norm();
    result->mutable_positions()->MergeFrom(more.positions());
    auto* stats = result->mutable_profile()->mutable_stats();
    stats->mutable_sq_norm_mean()->MergeFrom(more.profile().stats().sq_norm_mean());
    stats->mutable_sq_norm_stderr()->MergeFrom(more.profile().stats().sq_norm_stderr());
    for (int m = 0; m < result->comparison_size() && m < more.comparison_size(); ++m) {
      result->mutable_comparison(m)->mutable_sq_norm_mean()->MergeFrom(more.comparison(m).sq_norm_mean());
      result->mutable_comparison(m)->mutable_sq_norm_stderr()->MergeFrom(more.comparison(m).sq_norm_stderr());
    }
    auto* curves = result->mutable_profile()->mutable_theory()->mutable_curves();
    for (int c = 0; c < curves->size() && c < more.profile().theory().curves_size(); ++c) {
      curves->Mutable(c)->mutable_profile()->MergeFrom(more.profile().theory().curves(c).profile());
    }
    token = page->next_page_token();
  }
  return whole;
}

std::vector<double> Doubles(const google::protobuf::RepeatedField<double>& values) {
  return {values.begin(), values.end()};
}

std::string ModelName(v1::ProfileModel model) { return LowerEnum(v1::ProfileModel_Name(model), ""); }

// The theory curve of `model` with fitted alpha, or nullptr.
const v1::JobTheoryCurve* FittedCurve(const v1::JacobianNormResult& result, v1::ProfileModel model) {
  for (const auto& curve : result.profile().theory().curves()) {
    if (curve.model() == model && curve.alpha_source() == v1::THEORY_ALPHA_SOURCE_FITTED) return &curve;
  }
  return nullptr;
}

// The measured means and standard errors, with each theory fit's alpha and metrics as extras.
void PrintResultTable(const CliContext& context, const v1::JacobianNormResult& result) {
  const auto& stats = result.profile().stats();
  Table table;
  table.columns = {{"position", std::vector<double>(result.positions().begin(), result.positions().end()), true},
                   {"sq_norm_mean", Doubles(stats.sq_norm_mean())},
                   {"sq_norm_stderr", Doubles(stats.sq_norm_stderr())}};
  for (const auto& fit : result.profile().theory().fits()) {
    if (fit.has_error()) continue;
    const std::string model = ModelName(fit.model());
    table.extras[model + "_alpha"] = fit.alpha();
    table.extras[model + "_rmse_log"] = fit.rmse_log();
    if (const auto* curve = FittedCurve(result, fit.model())) table.extras[model + "_spearman"] = curve->metrics().spearman();
  }
  PrintResult(table, context.format, context.out);
}

// One line of the comparison table: a model's shares and its paired ratio against the reference.
template <typename Bands>
void PrintBands(const CliContext& context, const std::string& label, const Bands& m) {
  std::string ratio = "(reference)";
  if (m.has_middle_log_ratio()) {
    ratio = absl::StrFormat("%+.4f +- %.4f [%+.4f, %+.4f]", m.middle_log_ratio().mean(), m.middle_log_ratio().stderr(),
                            m.middle_log_ratio().low(), m.middle_log_ratio().high());
  }
  context.out << absl::StrFormat("%-24s %.4f +- %-10.4f %.4f +- %-10.4f %.4f +- %-10.4f %-34s %8.4f\n", label,
                                 m.middle().mean(), m.middle().stderr(), m.first().mean(), m.first().stderr(),
                                 m.last().mean(), m.last().stderr(), ratio, m.spearman());
}

// A comparison job: one line per model, its shares and its paired ratios against the first; then
// the same over the context alone (positions 1..T-1, the target's own left out).
void PrintComparison(const CliContext& context, const v1::JacobianNormResult& result) {
  if (result.comparison_size() == 0) return;
  const auto header = [&](const char* title) {
    context.out << title << "\n"
                << absl::StrFormat("%-24s %-20s %-20s %-20s %-34s %8s\n", "model", "middle share (+- se)",
                                   "first weight (+- se)", "last weight (+- se)", "log middle / reference's [95 %]",
                                   "spearman");
  };
  header("all positions 1..T:");
  for (const auto& m : result.comparison()) PrintBands(context, m.model(), m);
  if (result.comparison(0).has_context()) {
    header("the context alone, positions 1..T-1 (last weight: position T-1):");
    for (const auto& m : result.comparison()) {
      if (m.has_context()) PrintBands(context, m.model(), m.context());
    }
  }
  // Text inputs: every model's spikes at the document starts, named.
  for (const auto& m : result.comparison()) {
    if (m.boundary_spikes_size() == 0) continue;
    context.out << "boundary spikes of " << m.model() << ":";
    for (const auto& spike : m.boundary_spikes()) {
      context.out << " at " << spike.position() << " " << absl::StrFormat("%.3g", spike.ratio());
      if (spike.has_ratio_mean()) context.out << absl::StrFormat(" (per sample %.3g +- %.2g)", spike.ratio_mean(), spike.ratio_stderr());
      context.out << ";";
    }
    context.out << "\n";
  }
}

// A needle sweep: the needle span's share against depth, with its standard-error band, beside the
// same positions' share with the filler alone; written next to the profile plot as
// <plot>-needle.svg.
int PlotNeedleSweep(const CliContext& context, const std::string& measured, const v1::JacobianNormResult& result) {
  if (result.needle_sweep_size() == 0) return 0;
  PlotSeries share{.label = "needle span's share", .x = {}, .y = {}, .markers = true};
  PlotSeries high{.label = "share +- standard error", .x = {}, .y = {}, .markers = false, .dashed = true, .line = true,
                  .color = 7};
  PlotSeries low = high;
  low.label = "";
  PlotSeries alone{.label = "same positions, filler alone", .x = {}, .y = {}, .markers = true, .dashed = true};
  for (const auto& d : result.needle_sweep()) {
    for (PlotSeries* series : {&share, &high, &low, &alone}) series->x.push_back(d.depth());
    share.y.push_back(d.share_mean());
    high.y.push_back(d.share_mean() + d.share_stderr());
    low.y.push_back(d.share_mean() - d.share_stderr());
    alone.y.push_back(d.baseline_share_mean());
  }
  std::string path = context.plot;
  if (path.size() > 4 && path.compare(path.size() - 4, 4, ".svg") == 0) path.resize(path.size() - 4);
  path += "-needle.svg";
  std::string error;
  const std::string svg = RenderSvgPlot({share, high, low, alone},
                                        {.title = "needle sweep of " + measured,
                                         .x_label = "needle depth",
                                         .y_label = "share of sum_j ||J_j||^2",
                                         .log_y = false},
                                        &error);
  std::ofstream(path) << svg;
  if (svg.empty()) return context.UsageError("cannot draw the needle plot: " + error);
  context.err << "needle plot written to " << path << "\n";
  return 0;
}

// A path beside --plot: <plot>-<suffix>.svg.
std::string PlotPathBeside(const std::string& plot, const std::string& suffix) {
  std::string path = plot;
  if (path.size() > 4 && path.compare(path.size() - 4, 4, ".svg") == 0) path.resize(path.size() - 4);
  return path + "-" + suffix + ".svg";
}

// What a plot's title names: the model measured (the report's `model.weights`), then the job.
std::string Measured(const v1::GetJobResultResponse& whole) {
  const auto report = nlohmann::json::parse(whole.report_json(), nullptr, false);
  std::string model;
  if (report.is_object() && report.contains("model") && report["model"].is_object() &&
      report["model"].contains("weights") && report["model"]["weights"].is_string()) {
    model = report["model"]["weights"].get<std::string>();
  }
  return model.empty() ? "job " + whole.id() : model + " (job " + whole.id() + ")";
}

// A comparison job: every model's profile, normalized to sum 1 over the positions, with its
// standard-error band, overlaid (<plot>-comparison.svg); and each model's middle share with its
// standard error against its place in the job (<plot>-middle.svg: a training trajectory's
// checkpoints in order).
int PlotComparison(const CliContext& context, const v1::JacobianNormResult& result) {
  if (result.comparison_size() == 0) return 0;
  const std::vector<double> positions(result.positions().begin(), result.positions().end());
  std::vector<PlotSeries> profiles;
  PlotSeries middle{.label = "middle 80 % share", .x = {}, .y = {}, .markers = true};
  PlotSeries high{.label = "+- standard error", .x = {}, .y = {}, .markers = false, .dashed = true, .line = true, .color = 7};
  PlotSeries low = high;
  low.label = "";
  for (int m = 0; m < result.comparison_size(); ++m) {
    const auto& compared = result.comparison(m);
    double total = 0;
    for (double v : compared.sq_norm_mean()) total += v;
    PlotSeries profile{.label = compared.model(), .x = positions, .y = Doubles(compared.sq_norm_mean()), .markers = false};
    PlotSeries band{.label = "", .x = positions, .y = {}, .markers = false, .dashed = true, .line = true, .color = m};
    PlotSeries band_low = band;
    profile.color = m;
    for (size_t j = 0; j < profile.y.size() && total > 0; ++j) {
      const double se = j < static_cast<size_t>(compared.sq_norm_stderr_size()) ? compared.sq_norm_stderr(static_cast<int>(j)) : 0;
      band.y.push_back((profile.y[j] + se) / total);
      band_low.y.push_back((profile.y[j] - se) / total);
      profile.y[j] /= total;
    }
    profiles.push_back(std::move(profile));
    profiles.push_back(std::move(band));
    profiles.push_back(std::move(band_low));
    for (PlotSeries* series : {&middle, &high, &low}) series->x.push_back(m);
    middle.y.push_back(compared.middle().mean());
    high.y.push_back(compared.middle().mean() + compared.middle().stderr());
    low.y.push_back(compared.middle().mean() - compared.middle().stderr());
  }
  std::vector<std::string> names;
  for (const auto& compared : result.comparison()) names.push_back(compared.model());
  const std::string against = absl::StrJoin(std::vector<std::string>(names.begin() + 1, names.end()), ", ");
  std::string error;
  const std::string overlay =
      RenderSvgPlot(profiles, {.title = "position profiles: " + names[0] + " against " + against, .x_label = "position j",
                               .y_label = "share of sum_j ||J_j||^2 (+- standard error)"}, &error);
  const std::string trajectory =
      RenderSvgPlot({middle, high, low}, {.title = "middle 80 % share by model (reference " + names[0] + ")",
                                          .x_label = "model, in the job's order", .y_label = "middle 80 % share of sum_j ||J_j||^2",
                                          .log_y = false, .x_categories = names}, &error);
  if (overlay.empty() || trajectory.empty()) return context.UsageError("cannot draw the comparison plots: " + error);
  std::ofstream(PlotPathBeside(context.plot, "comparison")) << overlay;
  std::ofstream(PlotPathBeside(context.plot, "middle")) << trajectory;
  context.err << "comparison plots written to " << PlotPathBeside(context.plot, "comparison") << " and "
              << PlotPathBeside(context.plot, "middle") << "\n";
  return 0;
}

// Draws the measured means, their standard-error band and the fitted theory curves (on the
// measured scale: the same total as the measured means) to --plot.
int PlotResult(const CliContext& context, const std::string& measured, const v1::JacobianNormResult& result) {
  const std::vector<double> positions(result.positions().begin(), result.positions().end());
  const auto& stats = result.profile().stats();
  const std::vector<double> mean = Doubles(stats.sq_norm_mean());
  std::vector<PlotSeries> series = {
      {.label = "measured ||dy/de_j||^2", .x = positions, .y = mean, .markers = true}};
  const std::vector<double> stderr_of_mean = Doubles(stats.sq_norm_stderr());
  if (stderr_of_mean.size() == mean.size()) {  // The band, drawn as its two edges (mean +- stderr).
    PlotSeries upper{.label = "measured +- standard error", .x = positions, .y = mean, .markers = false, .dashed = true,
                     .line = true, .color = 7};
    PlotSeries lower = upper;
    lower.label = "";  // One band, one legend entry.
    for (size_t j = 0; j < mean.size(); ++j) {
      upper.y[j] = mean[j] + stderr_of_mean[j];
      lower.y[j] = mean[j] - stderr_of_mean[j];  // <= 0 is not drawn on the log axis.
    }
    series.push_back(std::move(upper));
    series.push_back(std::move(lower));
  }
  for (const auto& curve : result.profile().theory().curves()) {
    if (curve.alpha_source() != v1::THEORY_ALPHA_SOURCE_FITTED || curve.profile_size() != result.positions_size()) continue;
    std::vector<double> y = Doubles(curve.profile());
    for (double& v : y) v *= stats.sq_norm_total();
    char label[96];
    std::snprintf(label, sizeof(label), "%s, H %u, alpha %.3f", ModelName(curve.model()).c_str(),
                  curve.routing().depth(), curve.routing().alpha());
    series.push_back(PlotSeries{.label = label, .x = positions, .y = y, .dashed = true});
  }
  // Text inputs: the positions where samples have a document (or its needle) begin.
  PlotSeries starts{.label = "document starts", .x = {}, .y = {}, .markers = true, .dashed = false, .line = false};
  for (const auto& spike : result.boundary_spikes()) {
    if (spike.position() < 1 || spike.position() > mean.size()) continue;
    starts.x.push_back(static_cast<double>(spike.position()));
    starts.y.push_back(mean[spike.position() - 1]);
  }
  if (!starts.x.empty()) series.push_back(std::move(starts));
  std::string error;
  const std::string svg = RenderSvgPlot(series,
                                        {.title = "position profile of " + measured,
                                         .x_label = "position j",
                                         .y_label = "squared Jacobian norm at j, mean over samples"},
                                        &error);
  std::ofstream(context.plot) << svg;
  if (svg.empty()) return context.UsageError("cannot draw the plot: " + error);
  context.err << "plot written to " << context.plot << "\n";
  if (int code = PlotComparison(context, result); code != 0) return code;
  if (const std::string failed = PlotRecall(context.plot, measured, result, context.err); !failed.empty()) {
    return context.UsageError(failed);
  }
  return PlotNeedleSweep(context, measured, result);
}

// --------------------------------------------------------- get, watch, cancel, rm, result

struct JobIdFlags {
  std::string id;
  bool force = false;  // rm
};

std::shared_ptr<JobIdFlags> AddId(CLI::App& command) {
  auto flags = std::make_shared<JobIdFlags>();
  command.add_option("id", flags->id, "Job id")->required();
  return flags;
}

int RunGet(const CliContext& context, const JobIdFlags& flags) {
  v1::GetJobRequest request;
  request.set_id(flags.id);
  return PrintJob(context, context.client.GetJob(request));
}

int RunWatch(const CliContext& context, const JobIdFlags& flags) {
  return PrintJob(context, Watch(context, flags.id));
}

int RunCancel(const CliContext& context, const JobIdFlags& flags) {
  v1::CancelJobRequest request;
  request.set_id(flags.id);
  return PrintJob(context, context.client.CancelJob(request));
}

int RunRm(const CliContext& context, const JobIdFlags& flags) {
  v1::DeleteJobRequest request;
  request.set_id(flags.id);
  request.set_force(flags.force);
  return context.ReportDeleted(context.client.DeleteJob(request).status(), "job", flags.id);
}

int RunResult(const CliContext& context, const JobIdFlags& flags) {
  auto whole = WholeResult(context, flags.id);
  if (!whole.ok()) return context.Fail(whole.status());
  const auto& result = whole->jacobian_norm();
  if (context.format == Format::kJson) {
    // The report as the server wrote it (posbias-measure's document), with the text inputs'
    // document starts, which only the typed result holds.
    auto report = nlohmann::ordered_json::parse(whole->report_json(), nullptr, false);
    if (report.is_object() && result.document_starts_size() > 0) {
      auto& starts = report["document_starts"] = nlohmann::ordered_json::array();
      for (const auto& marks : result.document_starts()) {
        starts.push_back(std::vector<uint32_t>(marks.positions().begin(), marks.positions().end()));
      }
    }
    context.out << (report.is_discarded() ? whole->report_json() : report.dump(2)) << "\n";
  } else {
    PrintResultTable(context, result);
    PrintComparison(context, result);
    // A comparison names every model's spikes above; otherwise the job's model's, here.
    const auto& spikes = result.boundary_spikes();
    for (int i = 0; result.comparison_size() == 0 && i < spikes.size(); ++i) {
      const auto& spike = spikes[i];
      context.out << "boundary at " << spike.position() << ": spike ratio " << spike.ratio();
      if (spike.has_ratio_mean()) {
        context.out << "; per sample " << spike.ratio_mean() << " +- " << spike.ratio_stderr() << " (n = " << spike.samples()
                    << ")";
      }
      context.out << "\n";
    }
    if (result.needle_sweep_size() > 0) {
      context.out << "needle depth  start  share of sum ||J||^2 (+- se)  filler alone (+- se)  fillers\n";
      for (const auto& d : result.needle_sweep()) {
        context.out << absl::StrFormat("%12.4g  %5u  %12.6g +- %-12.4g  %10.6g +- %-10.4g  %7u\n", d.depth(), d.start(),
                                       d.share_mean(), d.share_stderr(), d.baseline_share_mean(),
                                       d.baseline_share_stderr(), d.fillers());
      }
    }
    PrintRecall(context.out, result);
  }
  return context.plot.empty() ? 0 : PlotResult(context, Measured(*whole), result);
}

CommandRun DefineGet(CLI::App& command) { return RunWith(AddId(command), RunGet); }
CommandRun DefineWatch(CLI::App& command) { return RunWith(AddId(command), RunWatch); }
CommandRun DefineCancel(CLI::App& command) { return RunWith(AddId(command), RunCancel); }
CommandRun DefineResult(CLI::App& command) { return RunWith(AddId(command), RunResult); }

CommandRun DefineRm(CLI::App& command) {
  auto flags = AddId(command);
  command.add_flag("--force", flags->force, "Delete even if it is queued or running");
  return RunWith(flags, RunRm);
}

// --------------------------------------------------------------------------------------- list

struct ListFlags {
  std::vector<std::string> states;
  std::string model;
};

int RunList(const CliContext& context, const ListFlags& flags) {
  v1::ListJobsRequest request;
  request.set_model(flags.model);
  for (const std::string& name : flags.states) {
    v1::JobState state;
    if (!v1::JobState_Parse("JOB_STATE_" + absl::AsciiStrToUpper(name), &state) || state == v1::JOB_STATE_UNSPECIFIED) {
      return context.UsageError("--state " + name +
                                " is invalid: allowed queued, running, cancelling, succeeded, "
                                "failed, cancelled");
    }
    request.add_states(state);
  }
  nlohmann::ordered_json items = nlohmann::ordered_json::array();
  const absl::Status status = FetchAllPages(
      request, [&](const v1::ListJobsRequest& page) { return context.client.ListJobs(page); },
      [&](const v1::ListJobsResponse& page) {
        for (const auto& job : page.jobs()) items.push_back(JobJson(job));
      });
  if (!status.ok()) return context.Fail(status);
  PrintList(items, {"id", "state", "progress", "model", "length", "samples", "method"},
            context.format, context.out);
  return 0;
}

CommandRun DefineList(CLI::App& command) {
  auto flags = std::make_shared<ListFlags>();
  command.add_option("--state", flags->states,
                     "queued, running, cancelling, succeeded, failed or cancelled (repeatable, or comma-separated: "
                     "jobs in any of them)")
      ->delimiter(',');
  command.add_option("--model", flags->model, "Only jobs on this model");
  return RunWith(flags, RunList);
}

// -------------------------------------------------------------------------------------- quota

struct NoFlags {};

int RunQuota(const CliContext& context, const NoFlags&) {
  auto quota = context.client.GetQuota();
  if (!quota.ok()) return context.Fail(quota.status());
  nlohmann::ordered_json json = {
      {"principal", quota->principal()},
      {"tenant", quota->tenant()},
      {"role", LowerEnum(v1::AccessRole_Name(quota->role()), "ACCESS_ROLE_")},
      {"queued_jobs", quota->queued_jobs()},
      {"max_queued_jobs", quota->max_queued_jobs()},
      {"running_jobs", quota->running_jobs()},
      {"max_running_jobs", quota->max_running_jobs()}};
  // 0 = no quota of the principal's own (the server's limits still hold): in a table, said in
  // words; JSON keeps the number.
  if (context.format == Format::kTable) {
    for (const char* key : {"max_queued_jobs", "max_running_jobs"}) {
      if (json[key] == 0) json[key] = "no limit of its own";
    }
  }
  PrintObject(json, context.format, context.out);
  return 0;
}

CommandRun DefineQuota(CLI::App&) { return RunWith(std::make_shared<NoFlags>(), RunQuota); }

// The subcommands of `jobs`, in the order --help lists them: a new one is one more row.
constexpr CommandSpec kJobCommands[] = {
    {"submit", "Submit a Jacobian-norm job", DefineSubmit},
    {"get", "Show a job", DefineGet},
    {"watch", "Follow a job with a progress bar until it ends", DefineWatch},
    {"cancel", "Cancel a job (a running one stops at its next chunk)", DefineCancel},
    {"rm", "Delete a job", DefineRm},
    {"result", "Print a finished job's result (--plot FILE.svg draws it)", DefineResult},
    {"list", "List jobs, newest first", DefineList},
    {"quota", "Your principal, tenant and role; your job quotas and what you use of them", DefineQuota},
};

}  // namespace

CommandRun DefineJobCommands(CLI::App& jobs) { return AddCommands(jobs, kJobCommands); }

}  // namespace posbias::cli
