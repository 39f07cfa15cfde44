#include "client/cli/model_commands.h"

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/cli/output.h"
#include "nlohmann/json.hpp"

namespace posbias::cli {
namespace {

// Whether the model's weights are a seeded initialization (a preset's), not loaded from a file.
bool Seeded(const v1::Model& m) { return m.source().kind_case() == v1::ModelSource::kPreset; }

// "token ids: 8 pairs, keys 128:192, values 192:256, filler 32:127, L = 128".
std::string TrainedRecallText(const v1::TrainedRecallTask& task) {
  const auto range = [](const v1::IdRange& ids) { return absl::StrCat(ids.first(), ":", ids.last()); };
  const auto& ids = task.token_ids();
  return absl::StrCat("token ids: ", task.pairs(), " pairs, keys ", range(ids.key_ids()), ", values ", range(ids.value_ids()),
                      ", filler ", range(ids.filler_ids()), ", L = ", task.length());
}

nlohmann::ordered_json ModelJson(const v1::Model& m) {
  const auto& c = m.config();
  const nlohmann::ordered_json error =
      m.has_error() ? nlohmann::ordered_json{{"reason", v1::ErrorReason_Name(m.error().reason())},
                                             {"message", m.error().message()}}
                    : nlohmann::ordered_json(nullptr);
  return {{"name", m.name()},
          {"tenant", m.tenant()},
          {"uid", m.uid()},
          {"family", LowerEnum(v1::ModelFamily_Name(m.family()), "MODEL_FAMILY_")},
          {"state", LowerEnum(v1::ModelState_Name(m.state()), "MODEL_STATE_")},
          {"builtin", m.builtin()},
          {"layers", c.num_layers()},
          {"width", c.hidden_size()},
          {"heads", c.num_heads()},
          {"kv_heads", c.num_kv_heads()},
          {"head_dim", c.head_dim()},
          {"mlp_width", c.mlp_width()},
          {"vocab", c.vocab_size()},
          {"max_positions", c.max_positions()},
          // 0 until the model was built (a built-in preset before its first job): not known yet.
          {"parameters", m.parameter_count() > 0 ? nlohmann::ordered_json(m.parameter_count()) : nullptr},
          {"init", m.init().name()},
          // A seed only where one made the weights (not a checkpoint's, an upload's or TorchScript's).
          {"seed", Seeded(m) ? nlohmann::ordered_json(m.init().seed()) : nullptr},
          {"weights_sha256", m.weights_sha256()},
          {"has_tokenizer", m.has_tokenizer()},
          // A posbias-train --task recall checkpoint: what recall jobs ask it by default.
          {"trained_recall", m.has_trained_recall() ? nlohmann::ordered_json(TrainedRecallText(m.trained_recall()))
                                                    : nlohmann::ordered_json(nullptr)},
          {"active_jobs", m.active_job_count()},
          {"error", error}};
}

// ----------------------------------------------------------------------------------- register


struct RegisterFlags {
  std::string name, arch = "gpt2", preset, checkpoint, torchscript, request_id, tokenizer;
  std::optional<uint32_t> layers, width, heads, kv_heads, mlp_width, vocab, max_positions;
  std::optional<double> rope_theta, alpha;
  std::optional<uint32_t> sliding_window;
  uint64_t seed = 0;
  bool no_position_encoding = false, uniform_attention = false, no_mlp = false;
  std::vector<std::string> labels;
};

// Where the weights come from: a checkpoint, a TorchScript file, or a preset with overrides.
void SetSource(const RegisterFlags& flags, v1::RegisterModelRequest* request) {
  if (!flags.checkpoint.empty()) {
    request->mutable_checkpoint()->set_path(flags.checkpoint);
    return;
  }
  if (!flags.torchscript.empty()) {
    request->mutable_torchscript()->set_path(flags.torchscript);
    request->mutable_torchscript()->mutable_shape()->set_hidden_size(flags.width.value_or(0));
    return;
  }
  auto* preset = request->mutable_preset();
  preset->set_preset(flags.preset.empty() ? flags.arch : flags.preset);
  preset->set_init_seed(flags.seed);
  preset->set_tokenizer_path(flags.tokenizer);
  auto* o = preset->mutable_overrides();
  if (flags.layers) o->set_num_layers(*flags.layers);
  if (flags.width) o->set_hidden_size(*flags.width);
  if (flags.heads) o->set_num_heads(*flags.heads);
  if (flags.kv_heads) o->set_num_kv_heads(*flags.kv_heads);
  if (flags.mlp_width) o->set_mlp_width(*flags.mlp_width);
  if (flags.vocab) o->set_vocab_size(*flags.vocab);
  if (flags.max_positions) o->set_max_positions(*flags.max_positions);
  if (flags.rope_theta) o->set_rope_theta(*flags.rope_theta);
  if (flags.alpha) o->set_cesaro_alpha(*flags.alpha);
  if (flags.sliding_window) o->set_sliding_window(*flags.sliding_window);
}

int RunRegister(const CliContext& context, const RegisterFlags& flags) {
  v1::RegisterModelRequest request;
  request.set_name(flags.name);
  SetSource(flags, &request);
  request.mutable_ablations()->set_no_position_encoding(flags.no_position_encoding);
  request.mutable_ablations()->set_uniform_attention(flags.uniform_attention);
  request.mutable_ablations()->set_no_mlp(flags.no_mlp);
  if (!ParseLabels(flags.labels, request.mutable_labels(), context.err)) return kExitUsage;
  request.set_request_id(flags.request_id);
  CallSettings settings;
  settings.timeout = std::chrono::minutes(30);
  auto model = context.client.RegisterModel(request, settings);
  if (!model.ok()) return context.Fail(model.status());
  PrintObject(ModelJson(*model), context.format, context.out);
  return 0;
}

// The families --arch builds, from the API's ModelFamily enum (all but UNSPECIFIED and TORCHSCRIPT,
// which is loaded, not built), as "gpt2, qwen2, ... or gpt_neox".
std::string BuiltFamiliesText() {
  const auto* families = v1::ModelFamily_descriptor();
  std::vector<std::string> names;
  for (int i = 0; i < families->value_count(); ++i) {
    const int number = families->value(i)->number();
    if (number == v1::MODEL_FAMILY_UNSPECIFIED || number == v1::MODEL_FAMILY_TORCHSCRIPT) continue;
    names.push_back(LowerEnum(families->value(i)->name(), "MODEL_FAMILY_"));
  }
  std::string text;
  for (size_t i = 0; i < names.size(); ++i) text += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  return text;
}

CommandRun DefineRegister(CLI::App& command) {
  auto f = std::make_shared<RegisterFlags>();
  command.add_option("name", f->name, "Model name ([a-z0-9-], up to 63 characters)")->required();
  command.add_option("--arch", f->arch, BuiltFamiliesText() + " (base shape)")
      ->capture_default_str();
  command.add_option("--preset", f->preset, "Start from a preset instead of --arch");
  command.add_option("--layers", f->layers, "Number of layers H");
  command.add_option("--width", f->width, "Hidden size d (also a TorchScript model's width)");
  command.add_option("--heads", f->heads, "Attention heads");
  command.add_option("--kv-heads", f->kv_heads, "Key/value heads (qwen2)");
  command.add_option("--mlp-width", f->mlp_width, "MLP width");
  command.add_option("--vocab", f->vocab, "Vocabulary size");
  command.add_option("--max-positions", f->max_positions, "Maximum positions");
  command.add_option("--rope-theta", f->rope_theta, "Rotary base (every rotary family: all built families but gpt2 and cesaro)");
  command.add_option("--sliding-window", f->sliding_window, "Attention window of the sliding layers (0 = full causal)");
  command.add_option("--alpha", f->alpha, "Attention weight of the cesaro architecture");
  command.add_flag("--no-position-encoding", f->no_position_encoding,
                   "No learned positions / no rotation");
  command.add_flag("--uniform-attention", f->uniform_attention, "Attention logits forced to zero");
  command.add_flag("--no-mlp", f->no_mlp, "MLP blocks off");
  command.add_option("--seed", f->seed, "Initialization seed")->capture_default_str();
  command.add_option("--tokenizer", f->tokenizer,
                     "With a preset: a directory under the server's model root with tokenizer files (text inputs)");
  command.add_option("--checkpoint", f->checkpoint,
                     "Hugging Face checkpoint under the server's model root");
  command.add_option("--torchscript", f->torchscript,
                     "TorchScript file under the server's model root (needs --width)");
  command.add_option("--label", f->labels, "KEY=VALUE (repeatable)");
  command.add_option("--request-id", f->request_id, "Idempotency key for retries");
  return RunWith(f, RunRegister);
}

// ------------------------------------------------------------------------------------- list

struct NoFlags {};

int RunList(const CliContext& context, const NoFlags&) {
  nlohmann::ordered_json items = nlohmann::ordered_json::array();
  const absl::Status status = FetchAllPages(
      v1::ListModelsRequest(),
      [&](const v1::ListModelsRequest& request) { return context.client.ListModels(request); },
      [&](const v1::ListModelsResponse& page) {
        for (const auto& m : page.models()) items.push_back(ModelJson(m));
      });
  if (!status.ok()) return context.Fail(status);
  PrintList(items, {"name", "family", "state", "layers", "width", "parameters", "builtin"},
            context.format, context.out);
  return 0;
}

CommandRun DefineList(CLI::App&) { return RunWith(std::make_shared<NoFlags>(), RunList); }

// ------------------------------------------------------------------------- get, rm, export

struct NamedModelFlags {
  std::string name;
  bool force = false;  // rm
  std::string file;    // export
};

std::shared_ptr<NamedModelFlags> AddName(CLI::App& command) {
  auto flags = std::make_shared<NamedModelFlags>();
  command.add_option("name", flags->name, "Model name")->required();
  return flags;
}

int RunGet(const CliContext& context, const NamedModelFlags& flags) {
  v1::GetModelRequest request;
  request.set_name(flags.name);
  auto model = context.client.GetModel(request);
  if (!model.ok()) return context.Fail(model.status());
  PrintObject(ModelJson(*model), context.format, context.out);
  return 0;
}

int RunRm(const CliContext& context, const NamedModelFlags& flags) {
  v1::DeleteModelRequest request;
  request.set_name(flags.name);
  request.set_force(flags.force);
  auto deleted = context.client.DeleteModel(request);
  if (deleted.ok()) {
    // With --force: the jobs that were bound to the model end with it.
    for (const std::string& id : deleted->cancelled_job_ids()) context.err << "cancelled job " << id << "\n";
  }
  return context.ReportDeleted(deleted.status(), "model", flags.name);
}

int RunExport(const CliContext& context, const NamedModelFlags& flags) {
  v1::ExportModelRequest request;
  request.set_name(flags.name);
  std::ofstream file(flags.file, std::ios::binary | std::ios::trunc);
  if (!file) return context.UsageError("cannot write " + flags.file);
  uint64_t bytes = 0;
  auto status = context.client.ExportModel(request, [&](const v1::ExportModelResponse& message) {
    if (message.has_chunk()) {
      file.write(message.chunk().data(), static_cast<std::streamsize>(message.chunk().size()));
      bytes += message.chunk().size();
    }
    return static_cast<bool>(file);
  });
  if (!status.ok()) return context.Fail(status);
  context.err << "wrote " << bytes << " bytes to " << flags.file << "\n";
  return 0;
}

// ------------------------------------------------------------------------------------- upload

struct UploadFlags {
  std::string name, path, request_id;
  std::vector<std::string> labels;
};

// Reads a whole file; nullopt when it cannot be read.
std::optional<std::string> ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A checkpoint from this machine (what posbias-train writes: a folder with model.safetensors and
// config.json, or the .safetensors file with config.json beside it) sent to the server, which
// registers it in the caller's namespace: no server restart, no shared folder.
int RunUpload(const CliContext& context, const UploadFlags& flags) {
  namespace fs = std::filesystem;
  const fs::path given(flags.path);
  const fs::path weights = fs::is_directory(given) ? given / "model.safetensors" : given;
  const auto data = ReadFile(weights);
  if (!data) return context.UsageError("cannot read " + weights.string() + " (a .safetensors file, or a folder with model.safetensors)");
  const auto config = ReadFile(weights.parent_path() / "config.json");
  if (!config) return context.UsageError("no config.json beside " + weights.string() + " (it defines the architecture)");
  std::vector<v1::UploadModelRequest> messages(1);
  auto* metadata = messages[0].mutable_metadata();
  metadata->set_name(flags.name);
  metadata->set_config_json(*config);
  metadata->set_total_bytes(data->size());
  metadata->set_file_name(weights.filename().string());
  metadata->set_request_id(flags.request_id);
  if (!ParseLabels(flags.labels, metadata->mutable_labels(), context.err)) return kExitUsage;
  constexpr size_t kChunk = size_t{1} << 20;
  for (size_t at = 0; at < data->size(); at += kChunk) {
    messages.emplace_back().set_chunk(data->substr(at, kChunk));
  }
  auto model = context.client.UploadModel(messages);
  if (!model.ok()) return context.Fail(model.status());
  PrintObject(ModelJson(*model), context.format, context.out);
  return 0;
}

CommandRun DefineUpload(CLI::App& command) {
  auto flags = std::make_shared<UploadFlags>();
  command.add_option("name", flags->name, "Model name ([a-z0-9-], up to 63 characters)")->required();
  command.add_option("path", flags->path,
                     "A checkpoint folder on this machine (model.safetensors and config.json, as posbias-train writes "
                     "them) or a .safetensors file with config.json beside it")
      ->required();
  command.add_option("--label", flags->labels, "KEY=VALUE (repeatable)");
  command.add_option("--request-id", flags->request_id, "Idempotency key for retries");
  return RunWith(flags, RunUpload);
}

CommandRun DefineGet(CLI::App& command) { return RunWith(AddName(command), RunGet); }

CommandRun DefineRm(CLI::App& command) {
  auto flags = AddName(command);
  command.add_flag("--force", flags->force, "Delete even if queued or running jobs use it");
  return RunWith(flags, RunRm);
}

CommandRun DefineExport(CLI::App& command) {
  auto flags = AddName(command);
  command.add_option("file", flags->file, "Output .safetensors file")->required();
  return RunWith(flags, RunExport);
}

// The subcommands of `models`, in the order --help lists them: a new one is one more row.
constexpr CommandSpec kModelCommands[] = {
    {"register", "Register a model (preset + overrides + seed, checkpoint or TorchScript)",
     DefineRegister},
    {"upload", "Upload a checkpoint from this machine (a folder posbias-train wrote, or a .safetensors file)",
     DefineUpload},
    {"list", "List models (built-in presets included)", DefineList},
    {"get", "Show one model", DefineGet},
    {"rm", "Delete a model", DefineRm},
    {"export", "Write a model's weights as safetensors (Hugging Face names)", DefineExport},
};

// ------------------------------------------------------------------------------- tokenize

struct TokenizeFlags {
  std::string model, text, text_file;
  bool special_tokens_as_text = false;
};

int RunTokenize(const CliContext& context, const TokenizeFlags& flags) {
  v1::TokenizeRequest request;
  request.set_model(flags.model);
  request.set_special_tokens_as_text(flags.special_tokens_as_text);
  if (!flags.text_file.empty()) {
    std::ifstream in(flags.text_file, std::ios::binary);
    if (!in) return context.UsageError("cannot read " + flags.text_file);
    request.set_text(std::string(std::istreambuf_iterator<char>(in), {}));
  } else if (!flags.text.empty()) {
    request.set_text(flags.text);
  } else {
    return context.UsageError("give --text or --text-file");
  }
  auto response = context.client.Tokenize(request);
  if (!response.ok()) return context.Fail(response.status());
  nlohmann::ordered_json offsets = nlohmann::ordered_json::array();
  for (const auto& offset : response->offsets()) offsets.push_back({offset.start(), offset.end()});
  PrintObject({{"token_ids", std::vector<uint32_t>(response->token_ids().begin(), response->token_ids().end())},
               {"offsets", offsets}},
              context.format, context.out);
  return 0;
}

}  // namespace

CommandRun DefineModelCommands(CLI::App& models) { return AddCommands(models, kModelCommands); }

CommandRun DefineTokenize(CLI::App& command) {
  auto flags = std::make_shared<TokenizeFlags>();
  command.add_option("--model,-m", flags->model, "A model with a tokenizer (a checkpoint directory's)")->required();
  auto* text = command.add_option("--text", flags->text, "The text (UTF-8)");
  auto* file = command.add_option("--text-file", flags->text_file, "Read the text from this file");
  text->excludes(file);
  file->excludes(text);
  command.add_flag("--special-tokens-as-text", flags->special_tokens_as_text,
                   "Tokenize <|endoftext|> and other special tokens in the text as plain text");
  return RunWith(flags, RunTokenize);
}

}  // namespace posbias::cli
