#include "client/cli/job_submit.h"

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
#include "client/cli/job_watch.h"
#include "client/cli/output.h"
#include "client/cli/recall_output.h"
#include "client/cli/svg_plot.h"
#include "nlohmann/json.hpp"

namespace posbias::cli {
namespace {

struct SubmitFlags {
  std::string model, method = "exact", output = "final", input = "random", dtype = "float32",
                     device = "any", tokens_file, request_id, text_file, layout = "concatenate", needle, separator,
                     boundary_token = "none", question;
  // Recall inputs: depths, probes per depth, and the generator's options (0 / "" = the server's).
  std::vector<double> recall_depths;
  uint32_t recall_probes = 16, recall_pairs = 0, recall_key_letters = 0;
  std::string recall_values, recall_kind;  // recall_kind: "" = the server's choice, "text" or "token-ids".
  std::vector<int64_t> recall_key_ids, recall_value_ids, recall_filler_ids;
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
    const bool ranges = !flags.recall_key_ids.empty() || !flags.recall_value_ids.empty() || !flags.recall_filler_ids.empty();
    if (flags.recall_kind == "text") {
      if (ranges) return absl::InvalidArgumentError("--recall-key-ids, --recall-value-ids, --recall-filler-ids: allowed with token-id probes, not --recall-kind text");
      recall->set_text(true);
    } else if (flags.recall_kind == "token-ids" || ranges) {
      auto* ids = recall->mutable_token_ids();
      const auto set = [](const std::vector<int64_t>& range, v1::IdRange* out) {
        if (range.size() == 2) {
          out->set_first(range[0]);
          out->set_last(range[1]);
        }
      };
      set(flags.recall_key_ids, ids->mutable_key_ids());
      set(flags.recall_value_ids, ids->mutable_value_ids());
      set(flags.recall_filler_ids, ids->mutable_filler_ids());
    }
    return absl::OkStatus();
  }
  if (!flags.text_file.empty()) return SetTextInput(flags, spec->mutable_input()->mutable_text());
  if (!flags.tokens_file.empty()) {
    std::ifstream in(flags.tokens_file);
    if (!in) {
      return absl::InvalidArgumentError(absl::StrCat("--tokens ", flags.tokens_file,
                                                     ": cannot read the file (--tokens takes a file holding a JSON "
                                                     "list of token id lists, e.g. [[1, 2, 3], [4, 5, 6]])"));
    }
    const auto json = nlohmann::json::parse(in, nullptr, false);
    const std::string expected = absl::StrCat("--tokens ", flags.tokens_file,
                                              ": the file does not hold a JSON list of token id lists (e.g. "
                                              "[[1, 2, 3], [4, 5, 6]], ids >= 0)");
    if (json.is_discarded() || !json.is_array()) return absl::InvalidArgumentError(expected);
    for (size_t s = 0; s < json.size(); ++s) {
      const auto& row = json[s];
      if (!row.is_array() || !std::all_of(row.begin(), row.end(), [](const auto& id) { return id.is_number_unsigned(); })) {
        return absl::InvalidArgumentError(expected);
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

}  // namespace

// --recall and its options: the probes' depths, count and generator, text or token ids.
void DefineRecallFlags(CLI::App& command, const std::shared_ptr<SubmitFlags>& f) {
  command.add_option("--recall", f->recall_depths,
                     "Associative-recall probes with the queried pair at these depths, e.g. 0,0.25,0.5,0.75,1 (the "
                     "result answers recall accuracy by depth)")
      ->delimiter(',');
  command.add_option("--recall-probes", f->recall_probes, "With --recall: probes per depth")->capture_default_str();
  command.add_option("--recall-pairs", f->recall_pairs, "With --recall: key=value pairs per probe (default 8)");
  command.add_option("--recall-key-letters", f->recall_key_letters, "With --recall: letters per key (default 3)");
  command.add_option("--recall-values", f->recall_values, "With --recall: the values' alphabet (default a-z)");
  command.add_option("--recall-seed", f->recall_seed, "With --recall: the generator's seed (default 0)");
  command.add_option("--recall-kind", f->recall_kind,
                     "With --recall: text (key=value words) or token-ids (single-id keys and values); default: the "
                     "task a posbias-train --task recall checkpoint was trained on, else text")
      ->check(CLI::IsMember({"text", "token-ids"}));
  command.add_option("--recall-key-ids", f->recall_key_ids, "With --recall token-ids: the keys' ids FIRST,LAST (LAST excluded)")
      ->expected(2)->delimiter(',');
  command.add_option("--recall-value-ids", f->recall_value_ids, "With --recall token-ids: the values' ids FIRST,LAST")
      ->expected(2)->delimiter(',');
  command.add_option("--recall-filler-ids", f->recall_filler_ids, "With --recall token-ids: the filler's ids FIRST,LAST")
      ->expected(2)->delimiter(',');
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
  DefineRecallFlags(command, f);
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

}  // namespace posbias::cli
