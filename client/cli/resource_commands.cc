#include "client/cli/resource_commands.h"

#include <chrono>
#include <cmath>
#include <iomanip>
#include <fstream>
#include <map>
#include <thread>

#include "absl/strings/ascii.h"
#include "client/cli/output.h"
#include "client/cli/svg_plot.h"
#include "nlohmann/json.hpp"

namespace posbias::cli {
namespace {

constexpr int kExitServerError = 1;
constexpr int kExitUsage = 2;

std::string LowerEnum(const std::string& name, const std::string& prefix) {
  return absl::AsciiStrToLower(name.rfind(prefix, 0) == 0 ? name.substr(prefix.size()) : name);
}

nlohmann::ordered_json ModelJson(const v1::Model& m) {
  const auto& c = m.config();
  return {{"name", m.name()}, {"family", LowerEnum(v1::ModelFamily_Name(m.family()), "MODEL_FAMILY_")},
          {"state", LowerEnum(v1::ModelState_Name(m.state()), "MODEL_STATE_")}, {"builtin", m.builtin()},
          {"layers", c.num_layers()}, {"width", c.hidden_size()}, {"heads", c.num_heads()},
          {"kv_heads", c.num_kv_heads()}, {"mlp_width", c.mlp_width()}, {"vocab", c.vocab_size()},
          {"max_positions", c.max_positions()}, {"parameters", m.parameter_count()},
          {"init", m.init().name()}, {"seed", m.init().seed()}, {"weights_sha256", m.weights_sha256()},
          {"active_jobs", m.active_job_count()},
          {"error", m.has_error() ? nlohmann::ordered_json{{"reason", v1::ErrorReason_Name(m.error().reason())},
                                                           {"message", m.error().message()}}
                                  : nlohmann::ordered_json(nullptr)}};
}

nlohmann::ordered_json JobJson(const v1::Job& j) {
  const auto& spec = j.spec().jacobian_norm();
  nlohmann::ordered_json json = {
      {"id", j.id()}, {"state", LowerEnum(v1::JobState_Name(j.state()), "JOB_STATE_")},
      {"progress", j.progress().fraction()}, {"samples_done", j.progress().samples_done()},
      {"samples_total", j.progress().samples_total()}, {"attempt", j.attempt()}, {"device", j.device()},
      {"model", spec.model()}, {"length", spec.sequence_length()}, {"samples", spec.samples()},
      {"method", LowerEnum(v1::JacobianMethod_Name(spec.method()), "JACOBIAN_METHOD_")},
      {"probes", spec.probes()}, {"priority", j.spec().priority()}, {"request_id", j.request_id()},
      {"labels", std::map<std::string, std::string>(j.labels().begin(), j.labels().end())}};
  if (j.progress().has_estimated_seconds_remaining()) json["eta_seconds"] = j.progress().estimated_seconds_remaining();
  if (j.has_error()) json["error"] = {{"reason", v1::ErrorReason_Name(j.error().reason())}, {"message", j.error().message()}};
  return json;
}

int Fail(const ResourceContext& context, const absl::Status& status) {
  const std::string reason = ErrorReason(status);
  *context.err << "error: " << absl::StatusCodeToString(status.code()) << (reason.empty() ? "" : " [" + reason + "]")
               << " " << status.message() << "\n";
  return kExitServerError;
}

void PrintObject(const ResourceContext& context, const nlohmann::ordered_json& json) {
  if (context.format == "json") {
    *context.out << json.dump(2) << "\n";
    return;
  }
  for (const auto& [key, value] : json.items()) *context.out << key << ": " << (value.is_string() ? value.get<std::string>() : value.dump()) << "\n";
}

void PrintList(const ResourceContext& context, const nlohmann::ordered_json& items, const std::vector<std::string>& columns) {
  if (context.format == "json") {
    *context.out << items.dump(2) << "\n";
    return;
  }
  const std::string separator = context.format == "csv" ? "," : "  ";
  for (size_t c = 0; c < columns.size(); ++c) *context.out << (c ? separator : "") << columns[c];
  *context.out << "\n";
  for (const auto& item : items) {
    for (size_t c = 0; c < columns.size(); ++c) {
      const auto& value = item[columns[c]];
      *context.out << (c ? separator : "") << (value.is_string() ? value.get<std::string>() : value.dump());
    }
    *context.out << "\n";
  }
}

bool ParseLabels(const std::vector<std::string>& items, google::protobuf::Map<std::string, std::string>* out,
                 std::ostream& err) {
  for (const auto& item : items) {
    const auto equals = item.find('=');
    if (equals == std::string::npos || equals == 0) {
      err << "error: --label " << item << " is invalid: allowed KEY=VALUE\n";
      return false;
    }
    (*out)[item.substr(0, equals)] = item.substr(equals + 1);
  }
  return true;
}

// A progress line on stderr: "[#####.....]  42.0 %  samples 3/8  ETA 12 s".
void DrawProgress(std::ostream& err, const v1::Job& job) {
  const double fraction = std::clamp(job.progress().fraction(), 0.0, 1.0);
  const int filled = static_cast<int>(std::round(fraction * 30));
  err << "\r[" << std::string(filled, '#') << std::string(30 - filled, '.') << "] " << std::fixed
      << std::setprecision(1) << 100 * fraction << " %  " << LowerEnum(v1::JobState_Name(job.state()), "JOB_STATE_")
      << "  samples " << job.progress().samples_done() << "/" << job.progress().samples_total();
  if (job.progress().has_estimated_seconds_remaining()) {
    err << "  ETA " << static_cast<int64_t>(job.progress().estimated_seconds_remaining()) << " s";
  }
  err << "    " << std::flush;
}

// Follows a job until it ends; returns the last state seen.
absl::StatusOr<v1::Job> Watch(const ResourceContext& context, const std::string& id) {
  v1::Job last;
  v1::WatchJobRequest request;
  request.set_id(id);
  CallSettings settings;
  settings.timeout = std::chrono::hours(24 * 365);
  auto status = context.client->WatchJob(request, [&](const v1::WatchJobResponse& message) {
    last = message.job();
    DrawProgress(*context.err, last);
    return true;
  }, settings);
  *context.err << "\n";
  if (!status.ok()) return status;
  return last;
}

}  // namespace

class ResourceCommands {
 public:
  // models
  CLI::App *models = nullptr, *m_register = nullptr, *m_list = nullptr, *m_get = nullptr, *m_rm = nullptr,
           *m_export = nullptr;
  std::string name, arch = "gpt2", preset, checkpoint, torchscript, file, request_id;
  std::optional<uint32_t> layers, width, heads, kv_heads, mlp_width, vocab, max_positions;
  std::optional<double> rope_theta, alpha;
  uint64_t seed = 0;
  bool no_position_encoding = false, uniform_attention = false, no_mlp = false, force = false;
  std::vector<std::string> labels;
  // jobs
  CLI::App *jobs = nullptr, *j_submit = nullptr, *j_get = nullptr, *j_watch = nullptr, *j_list = nullptr,
           *j_cancel = nullptr, *j_rm = nullptr, *j_result = nullptr;
  std::string id, model, method = "exact", output = "final", input = "random", dtype = "float32", device = "any",
      tokens_file, state_filter;
  uint32_t length = 0, samples = 0, probes = 64;
  std::optional<uint32_t> target;
  std::optional<uint64_t> job_seed;
  int32_t priority = 0;
  double time_limit = 0;
  bool wait = false;
};

std::shared_ptr<ResourceCommands> AddResourceCommands(CLI::App& app) {
  auto c = std::make_shared<ResourceCommands>();
  c->models = app.add_subcommand("models", "The model registry: register, list, get, rm, export");
  c->models->require_subcommand(1);
  c->m_register = c->models->add_subcommand("register", "Register a model (preset + overrides + seed, checkpoint or TorchScript)");
  auto* r = c->m_register;
  r->add_option("name", c->name, "Model name ([a-z0-9-], up to 63 characters)")->required();
  r->add_option("--arch", c->arch, "gpt2, qwen2 or cesaro (base shape)")->capture_default_str();
  r->add_option("--preset", c->preset, "Start from a preset instead of --arch");
  r->add_option("--layers", c->layers, "Number of layers H");
  r->add_option("--width", c->width, "Hidden size d (also a TorchScript model's width)");
  r->add_option("--heads", c->heads, "Attention heads");
  r->add_option("--kv-heads", c->kv_heads, "Key/value heads (qwen2)");
  r->add_option("--mlp-width", c->mlp_width, "MLP width");
  r->add_option("--vocab", c->vocab, "Vocabulary size");
  r->add_option("--max-positions", c->max_positions, "Maximum positions");
  r->add_option("--rope-theta", c->rope_theta, "Rotary base (qwen2)");
  r->add_option("--alpha", c->alpha, "Attention weight of the cesaro architecture");
  r->add_flag("--no-position-encoding", c->no_position_encoding, "No learned positions / no rotation");
  r->add_flag("--uniform-attention", c->uniform_attention, "Attention logits forced to zero");
  r->add_flag("--no-mlp", c->no_mlp, "MLP blocks off");
  r->add_option("--seed", c->seed, "Initialization seed")->capture_default_str();
  r->add_option("--checkpoint", c->checkpoint, "Hugging Face checkpoint under the server's model root");
  r->add_option("--torchscript", c->torchscript, "TorchScript file under the server's model root (needs --width)");
  r->add_option("--label", c->labels, "KEY=VALUE (repeatable)");
  r->add_option("--request-id", c->request_id, "Idempotency key for retries");
  c->m_list = c->models->add_subcommand("list", "List models (built-in presets included)");
  c->m_get = c->models->add_subcommand("get", "Show one model");
  c->m_get->add_option("name", c->name, "Model name")->required();
  c->m_rm = c->models->add_subcommand("rm", "Delete a model");
  c->m_rm->add_option("name", c->name, "Model name")->required();
  c->m_rm->add_flag("--force", c->force, "Delete even if queued or running jobs use it");
  c->m_export = c->models->add_subcommand("export", "Write a model's weights as safetensors (Hugging Face names)");
  c->m_export->add_option("name", c->name, "Model name")->required();
  c->m_export->add_option("file", c->file, "Output .safetensors file")->required();

  c->jobs = app.add_subcommand("jobs", "Jacobian-norm measurement jobs: submit, get, watch, list, cancel, rm, result");
  c->jobs->require_subcommand(1);
  c->j_submit = c->jobs->add_subcommand("submit", "Submit a Jacobian-norm job");
  auto* s = c->j_submit;
  s->add_option("--model", c->model, "Registered model name")->required();
  s->add_option("--length,-L", c->length, "Sequence length L")->required();
  s->add_option("--samples,-S", c->samples, "Input samples (default 16)");
  s->add_option("--method", c->method, "exact or hutchinson")->check(CLI::IsMember({"exact", "hutchinson"}))->capture_default_str();
  s->add_option("--probes", c->probes, "Hutchinson probes K")->capture_default_str();
  s->add_option("--seed", c->job_seed, "Input seed (default: drawn by the server)");
  s->add_option("--target", c->target, "Output position t (default L)");
  s->add_option("--output", c->output, "final, layers or logprob")->check(CLI::IsMember({"final", "layers", "logprob"}))->capture_default_str();
  s->add_option("--input", c->input, "random or gaussian")->check(CLI::IsMember({"random", "gaussian"}))->capture_default_str();
  s->add_option("--tokens", c->tokens_file, "JSON list of token id lists (one per sample)");
  s->add_option("--dtype", c->dtype, "float32, bfloat16, float16 or float64")->capture_default_str();
  s->add_option("--device", c->device, "any, cpu or cuda")->check(CLI::IsMember({"any", "cpu", "cuda"}))->capture_default_str();
  s->add_option("--priority", c->priority, "-100..100, higher first")->capture_default_str();
  s->add_option("--time-limit", c->time_limit, "Seconds; 0 = none")->capture_default_str();
  s->add_option("--label", c->labels, "KEY=VALUE (repeatable)");
  s->add_option("--request-id", c->request_id, "Idempotency key: a retry returns the same job");
  s->add_flag("--wait", c->wait, "Show progress until the job ends");
  for (auto** sub : {&c->j_get, &c->j_watch, &c->j_cancel, &c->j_rm, &c->j_result}) {
    const char* name = sub == &c->j_get ? "get" : sub == &c->j_watch ? "watch" : sub == &c->j_cancel ? "cancel"
                       : sub == &c->j_rm ? "rm" : "result";
    const char* help = sub == &c->j_get ? "Show a job" : sub == &c->j_watch ? "Follow a job with a progress bar until it ends"
                       : sub == &c->j_cancel ? "Cancel a job (a running one stops at its next chunk)"
                       : sub == &c->j_rm ? "Delete a job" : "Print a finished job's result (--plot FILE.svg draws it)";
    *sub = c->jobs->add_subcommand(name, help);
    (*sub)->add_option("id", c->id, "Job id")->required();
  }
  c->j_rm->add_flag("--force", c->force, "Delete even if it is queued or running");
  c->j_list = c->jobs->add_subcommand("list", "List jobs, newest first");
  c->j_list->add_option("--state", c->state_filter, "queued, running, cancelling, succeeded, failed or cancelled");
  c->j_list->add_option("--model", c->model, "Only jobs on this model");
  return c;
}

namespace {

int RunModels(ResourceCommands& c, const ResourceContext& context) {
  if (*c.m_register) {
    v1::RegisterModelRequest request;
    request.set_name(c.name);
    if (!c.checkpoint.empty()) {
      request.mutable_checkpoint()->set_path(c.checkpoint);
    } else if (!c.torchscript.empty()) {
      request.mutable_torchscript()->set_path(c.torchscript);
      request.mutable_torchscript()->mutable_shape()->set_hidden_size(c.width.value_or(0));
    } else {
      auto* preset = request.mutable_preset();
      preset->set_preset(c.preset.empty() ? c.arch : c.preset);
      preset->set_init_seed(c.seed);
      auto* o = preset->mutable_overrides();
      if (c.layers) o->set_num_layers(*c.layers);
      if (c.width) o->set_hidden_size(*c.width);
      if (c.heads) o->set_num_heads(*c.heads);
      if (c.kv_heads) o->set_num_kv_heads(*c.kv_heads);
      if (c.mlp_width) o->set_mlp_width(*c.mlp_width);
      if (c.vocab) o->set_vocab_size(*c.vocab);
      if (c.max_positions) o->set_max_positions(*c.max_positions);
      if (c.rope_theta) o->set_rope_theta(*c.rope_theta);
      if (c.alpha) o->set_cesaro_alpha(*c.alpha);
    }
    request.mutable_ablations()->set_no_position_encoding(c.no_position_encoding);
    request.mutable_ablations()->set_uniform_attention(c.uniform_attention);
    request.mutable_ablations()->set_no_mlp(c.no_mlp);
    if (!ParseLabels(c.labels, request.mutable_labels(), *context.err)) return kExitUsage;
    request.set_request_id(c.request_id);
    CallSettings settings;
    settings.timeout = std::chrono::minutes(30);
    auto model = context.client->RegisterModel(request, settings);
    if (!model.ok()) return Fail(context, model.status());
    PrintObject(context, ModelJson(*model));
    return 0;
  }
  if (*c.m_list) {
    nlohmann::ordered_json items = nlohmann::ordered_json::array();
    v1::ListModelsRequest request;
    do {
      auto page = context.client->ListModels(request);
      if (!page.ok()) return Fail(context, page.status());
      for (const auto& m : page->models()) items.push_back(ModelJson(m));
      request.set_page_token(page->next_page_token());
    } while (!request.page_token().empty());
    PrintList(context, items, {"name", "family", "state", "layers", "width", "parameters", "builtin"});
    return 0;
  }
  if (*c.m_get) {
    v1::GetModelRequest request;
    request.set_name(c.name);
    auto model = context.client->GetModel(request);
    if (!model.ok()) return Fail(context, model.status());
    PrintObject(context, ModelJson(*model));
    return 0;
  }
  if (*c.m_rm) {
    v1::DeleteModelRequest request;
    request.set_name(c.name);
    request.set_force(c.force);
    auto deleted = context.client->DeleteModel(request);
    if (!deleted.ok()) return Fail(context, deleted.status());
    *context.err << "deleted model " << c.name << "\n";
    return 0;
  }
  v1::ExportModelRequest request;
  request.set_name(c.name);
  std::ofstream file(c.file, std::ios::binary | std::ios::trunc);
  if (!file) {
    *context.err << "error: cannot write " << c.file << "\n";
    return kExitUsage;
  }
  uint64_t bytes = 0;
  auto status = context.client->ExportModel(request, [&](const v1::ExportModelResponse& message) {
    if (message.has_chunk()) file.write(message.chunk().data(), static_cast<std::streamsize>(message.chunk().size())), bytes += message.chunk().size();
    return static_cast<bool>(file);
  });
  if (!status.ok()) return Fail(context, status);
  *context.err << "wrote " << bytes << " bytes to " << c.file << "\n";
  return 0;
}

absl::StatusOr<v1::SubmitJobRequest> SubmitRequest(const ResourceCommands& c, std::ostream& err) {
  v1::SubmitJobRequest request;
  auto* spec = request.mutable_spec()->mutable_jacobian_norm();
  spec->set_model(c.model);
  spec->set_sequence_length(c.length);
  spec->set_samples(c.samples);
  spec->set_method(c.method == "hutchinson" ? v1::JACOBIAN_METHOD_HUTCHINSON : v1::JACOBIAN_METHOD_EXACT);
  spec->set_probes(c.method == "hutchinson" ? c.probes : 0);
  if (c.target) spec->set_target_position(*c.target);
  spec->set_output(c.output == "layers" ? v1::JACOBIAN_OUTPUT_LAYER_SWEEP
                   : c.output == "logprob" ? v1::JACOBIAN_OUTPUT_LOG_PROB : v1::JACOBIAN_OUTPUT_FINAL_HIDDEN);
  spec->set_dtype(c.dtype == "bfloat16" ? v1::BFLOAT16 : c.dtype == "float16" ? v1::FLOAT16
                  : c.dtype == "float64" ? v1::FLOAT64 : v1::FLOAT32);
  if (!c.tokens_file.empty()) {
    std::ifstream in(c.tokens_file);
    const auto json = nlohmann::json::parse(in, nullptr, false);
    if (json.is_discarded() || !json.is_array()) return absl::InvalidArgumentError("--tokens: expected a JSON list of token id lists");
    for (const auto& row : json) {
      auto* sequence = spec->mutable_input()->mutable_given_tokens()->add_sequences();
      for (const auto& id : row) sequence->add_token_ids(id.get<uint32_t>());
    }
  } else if (c.input == "gaussian") {
    auto* gaussian = spec->mutable_input()->mutable_gaussian_embeddings();
    if (c.job_seed) gaussian->set_seed(*c.job_seed);
  } else if (c.job_seed) {
    spec->mutable_input()->mutable_random_tokens()->set_seed(*c.job_seed);
  }
  request.mutable_spec()->set_priority(c.priority);
  request.mutable_spec()->set_device(c.device == "cpu" ? v1::DEVICE_CPU : c.device == "cuda" ? v1::DEVICE_CUDA
                                                                                          : v1::DEVICE_PREFERENCE_UNSPECIFIED);
  if (c.time_limit > 0) {
    request.mutable_spec()->mutable_time_limit()->set_seconds(static_cast<int64_t>(c.time_limit));
  }
  if (!ParseLabels(c.labels, request.mutable_labels(), err)) return absl::InvalidArgumentError("bad --label");
  request.set_request_id(c.request_id);
  return request;
}

int PrintResult(const ResourceContext& context, const v1::GetJobResultResponse& response) {
  const auto report = nlohmann::ordered_json::parse(response.report_json(), nullptr, false);
  if (context.format == "json") {
    *context.out << report.dump(2) << "\n";
  } else {
    Table table;
    std::vector<double> positions, mean, stderr_values;
    for (const auto& p : report["positions"]) positions.push_back(p.get<double>());
    for (const auto& v : report["sq_norm_mean"]) mean.push_back(v.get<double>());
    for (const auto& v : report["sq_norm_stderr"]) stderr_values.push_back(v.get<double>());
    table.columns = {{"position", positions, true}, {"sq_norm_mean", mean}, {"sq_norm_stderr", stderr_values}};
    if (report.contains("theory") && report["theory"].contains("fits")) {
      for (const auto& fit : report["theory"]["fits"]) {
        table.extras[fit["model"].get<std::string>() + "_alpha"] = fit["alpha"];
        table.extras[fit["model"].get<std::string>() + "_rmse_log"] = fit["metrics"]["rmse_log"];
        table.extras[fit["model"].get<std::string>() + "_spearman"] = fit["metrics"]["spearman"];
      }
    }
    PrintResult(table, context.format == "csv" ? Format::kCsv : Format::kTable, *context.out);
  }
  if (!context.plot.empty()) {
    std::vector<double> positions, mean;
    for (const auto& p : report["positions"]) positions.push_back(p.get<double>());
    for (const auto& v : report["sq_norm_mean"]) mean.push_back(v.get<double>());
    std::vector<PlotSeries> series = {{.label = "measured ||dy/de_j||^2", .x = positions, .y = mean, .markers = true}};
    // The fitted theory curves, from the density service at the fitted alpha, on the measured scale.
    double total = 0;
    for (double v : mean) total += v;
    const auto& theory = report["theory"];
    for (const auto& fit : theory.value("fits", nlohmann::ordered_json::array())) {
      v1::EvaluateDiscreteRequest discrete;
      discrete.mutable_model()->set_depth(theory.value("depth", 1u));
      discrete.mutable_model()->set_alpha(fit.value("alpha", 0.5));
      discrete.set_length(positions.size());
      const bool coherent = fit.value("model", "") == "coherent";
      discrete.add_profiles(coherent ? v1::COHERENT : v1::INCOHERENT);
      auto curve = context.client->EvaluateDiscrete(discrete);
      if (!curve.ok()) continue;
      std::vector<double> y;
      for (double v : coherent ? curve->coherent() : curve->incoherent()) y.push_back(coherent ? v * v : v);
      double sum = 0;
      for (double v : y) sum += v;
      for (double& v : y) v *= sum > 0 ? total / sum : 0;
      char label[96];
      std::snprintf(label, sizeof(label), "%s, H %u, alpha %.3f", coherent ? "coherent" : "incoherent",
                    theory.value("depth", 1u), fit.value("alpha", 0.0));
      series.push_back({.label = label, .x = positions, .y = y, .dashed = true});
    }
    std::string error;
    const std::string svg = RenderSvgPlot(series, {.title = "measured position profile " + response.id(),
                                                   .x_label = "position j", .y_label = "squared Jacobian norm"}, &error);
    std::ofstream(context.plot) << svg;
    if (svg.empty()) {
      *context.err << "error: cannot draw the plot: " << error << "\n";
      return kExitUsage;
    }
    *context.err << "plot written to " << context.plot << "\n";
  }
  return 0;
}

int RunJobs(ResourceCommands& c, const ResourceContext& context) {
  if (*c.j_submit) {
    auto request = SubmitRequest(c, *context.err);
    if (!request.ok()) {
      *context.err << "error: " << request.status().message() << "\n";
      return kExitUsage;
    }
    auto job = context.client->SubmitJob(*request);
    if (!job.ok()) return Fail(context, job.status());
    if (c.wait) {
      auto last = Watch(context, job->id());
      if (!last.ok()) return Fail(context, last.status());
      *job = *last;
    }
    PrintObject(context, JobJson(*job));
    return job->state() == v1::JOB_STATE_FAILED ? kExitServerError : 0;
  }
  if (*c.j_list) {
    v1::ListJobsRequest request;
    request.set_model(c.model);
    if (!c.state_filter.empty()) {
      v1::JobState state;
      if (!v1::JobState_Parse("JOB_STATE_" + absl::AsciiStrToUpper(c.state_filter), &state)) {
        *context.err << "error: --state " << c.state_filter << " is invalid: allowed queued, running, cancelling, succeeded, failed, cancelled\n";
        return kExitUsage;
      }
      request.add_states(state);
    }
    nlohmann::ordered_json items = nlohmann::ordered_json::array();
    do {
      auto page = context.client->ListJobs(request);
      if (!page.ok()) return Fail(context, page.status());
      for (const auto& job : page->jobs()) items.push_back(JobJson(job));
      request.set_page_token(page->next_page_token());
    } while (!request.page_token().empty());
    PrintList(context, items, {"id", "state", "progress", "model", "length", "samples", "method"});
    return 0;
  }
  if (*c.j_get || *c.j_watch) {
    absl::StatusOr<v1::Job> job;
    if (*c.j_watch) {
      job = Watch(context, c.id);
    } else {
      v1::GetJobRequest request;
      request.set_id(c.id);
      job = context.client->GetJob(request);
    }
    if (!job.ok()) return Fail(context, job.status());
    PrintObject(context, JobJson(*job));
    return 0;
  }
  if (*c.j_cancel) {
    v1::CancelJobRequest request;
    request.set_id(c.id);
    auto job = context.client->CancelJob(request);
    if (!job.ok()) return Fail(context, job.status());
    PrintObject(context, JobJson(*job));
    return 0;
  }
  if (*c.j_rm) {
    v1::DeleteJobRequest request;
    request.set_id(c.id);
    request.set_force(c.force);
    auto deleted = context.client->DeleteJob(request);
    if (!deleted.ok()) return Fail(context, deleted.status());
    *context.err << "deleted job " << c.id << "\n";
    return 0;
  }
  v1::GetJobResultRequest request;
  request.set_id(c.id);
  auto result = context.client->GetJobResult(request);
  if (!result.ok()) return Fail(context, result.status());
  return PrintResult(context, *result);
}

}  // namespace

int RunResourceCommands(ResourceCommands& commands, const ResourceContext& context) {
  if (*commands.models) return RunModels(commands, context);
  if (*commands.jobs) return RunJobs(commands, context);
  return -1;
}

}  // namespace posbias::cli
