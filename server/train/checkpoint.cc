// The trainer's files (checkpoint.h).
#include "server/train/checkpoint.h"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <regex>

#include <torch/serialize.h>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "server/models/weights.h"

namespace posbias::train {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

absl::Status WriteText(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) return absl::InternalError("cannot write " + path.string());
  return absl::OkStatus();
}

// A count in one of the trainer's files (`file`, for the message): a whole number in [0, 2^63);
// DATA_LOSS naming the field otherwise. Only JSON integers are read: nlohmann converts a float
// such as 1e300 with a cast, which is undefined behaviour out of range.
absl::StatusOr<int64_t> CountAt(const json& object, const char* key, const std::string& file) {
  const auto it = object.find(key);
  const bool fits = it != object.end() && it->is_number_unsigned() &&
                    it->get<uint64_t>() <= uint64_t{std::numeric_limits<int64_t>::max()};
  if (!fits) {
    return absl::DataLossError(absl::StrCat("--resume: ", file, ": \"", key, "\" must be a whole number in [0, 2^63), found ",
                                            it == object.end() ? "nothing" : it->dump()));
  }
  return it->get<int64_t>();
}

absl::StatusOr<std::string> ReadText(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError("cannot read " + path.string());
  return std::string(std::istreambuf_iterator<char>(in), {});
}

json StateToJson(const TrainerState& state) {
  return {{"step", state.step}, {"epoch", state.epoch}, {"epoch_position", state.epoch_position},
          {"tokens", state.tokens}, {"seed", state.seed}, {"length", state.length},
          {"batch_size", state.batch_size}, {"steps", state.steps},
          {"data_order", "epoch e: SeededPermutation(train sequences, seed, e + 1)"},
          {"config", json::parse(state.config_json)}};
}

absl::Status SaveTrainingState(const fs::path& path, models::DecoderModel& model, torch::optim::Optimizer& optimizer) {
  try {
    torch::serialize::OutputArchive archive, parameters, optimizer_archive;
    int64_t index = 0;
    for (const auto& [name, tensor] : model.NamedParameters()) {
      parameters.write(absl::StrCat("parameter_", index++), tensor.detach());
    }
    optimizer.save(optimizer_archive);
    archive.write("parameters", parameters);
    archive.write("optimizer", optimizer_archive);
    archive.save_to(path.string());
  } catch (const c10::Error& error) {
    return absl::InternalError(absl::StrCat("cannot write ", path.string(), ": ", error.what_without_backtrace()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<NamedFile>> ReadTokenizerFiles(const std::string& dir) {
  const fs::path root(dir);
  if (!fs::is_regular_file(root / "tokenizer.json") &&
      !(fs::is_regular_file(root / "vocab.json") && fs::is_regular_file(root / "merges.txt"))) {
    return absl::NotFoundError(absl::StrCat("--tokenizer ", dir,
                                            ": no tokenizer.json (nor vocab.json + merges.txt) in that directory"));
  }
  std::vector<NamedFile> files;
  for (const char* name : {"tokenizer.json", "vocab.json", "merges.txt", "tokenizer_config.json", "special_tokens_map.json"}) {
    if (!fs::is_regular_file(root / name)) continue;
    auto text = ReadText(root / name);
    if (!text.ok()) return text.status();
    files.emplace_back(name, *std::move(text));
  }
  return files;
}

absl::Status WriteCheckpoint(const std::string& out_dir, const TrainerState& state, models::DecoderModel& model,
                             torch::optim::Optimizer& optimizer, const std::vector<NamedFile>& tokenizer_files) {
  const fs::path final_dir = fs::path(out_dir) / absl::StrCat("step", state.step);
  const fs::path partial = fs::path(out_dir) / absl::StrCat("step", state.step, ".partial");
  std::error_code error;
  fs::remove_all(partial, error);
  fs::create_directories(partial, error);
  if (error) return absl::InternalError("cannot create " + partial.string() + ": " + error.message());
  if (auto s = WriteText(partial / "config.json", models::ConfigToHuggingFaceJson(model.config()) + "\n"); !s.ok()) return s;
  if (auto s = models::ExportWeights(model, (partial / "model.safetensors").string()); !s.ok()) return s;
  for (const auto& [name, text] : tokenizer_files) {
    if (auto s = WriteText(partial / name, text); !s.ok()) return s;
  }
  if (auto s = SaveTrainingState(partial / "trainer_state.pt", model, optimizer); !s.ok()) return s;
  if (auto s = WriteText(partial / "trainer_state.json", StateToJson(state).dump(1) + "\n"); !s.ok()) return s;
  fs::remove_all(final_dir, error);
  fs::rename(partial, final_dir, error);
  if (error) return absl::InternalError("cannot rename " + partial.string() + ": " + error.message());
  return absl::OkStatus();
}

absl::StatusOr<std::string> LatestCheckpoint(const std::string& out_dir) {
  static const std::regex kStepDir("step([0-9]{1,18})");
  int64_t best = -1;
  std::string best_dir;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(out_dir, error)) {
    std::smatch match;
    const std::string name = entry.path().filename().string();
    if (!std::regex_match(name, match, kStepDir) || !fs::is_regular_file(entry.path() / "trainer_state.json")) continue;
    const int64_t step = std::stoll(match[1].str());
    if (step > best) best = step, best_dir = entry.path().string();
  }
  if (best < 0) {
    return absl::NotFoundError(absl::StrCat("--resume: no checkpoint (step<N>/trainer_state.json) in --out ", out_dir));
  }
  return best_dir;
}

absl::StatusOr<TrainerState> ReadTrainerState(const std::string& step_dir) {
  const std::string file = (fs::path(step_dir) / "trainer_state.json").string();
  auto text = ReadText(file);
  if (!text.ok()) return text.status();
  const auto state_json = json::parse(*text, nullptr, false);
  if (state_json.is_discarded() || !state_json.is_object()) {
    return absl::DataLossError(absl::StrCat("--resume: ", file, " is not a JSON object"));
  }
  TrainerState state;
  for (const auto& [key, field] : {std::pair{"step", &state.step}, {"epoch", &state.epoch},
                                   {"epoch_position", &state.epoch_position}, {"tokens", &state.tokens},
                                   {"length", &state.length}, {"batch_size", &state.batch_size}, {"steps", &state.steps}}) {
    auto value = CountAt(state_json, key, file);
    if (!value.ok()) return value.status();
    *field = *value;
  }
  const auto seed = state_json.find("seed");
  if (seed == state_json.end() || !seed->is_number_unsigned()) {
    return absl::DataLossError(absl::StrCat("--resume: ", file, ": \"seed\" must be a whole number in [0, 2^64), found ",
                                            seed == state_json.end() ? "nothing" : seed->dump()));
  }
  state.seed = seed->get<uint64_t>();
  const auto config = state_json.find("config");
  if (config == state_json.end() || !config->is_object()) {
    return absl::DataLossError(absl::StrCat("--resume: ", file, ": \"config\" must be an object"));
  }
  state.config_json = config->dump();
  return state;
}

absl::Status LoadTrainingState(const std::string& step_dir, models::DecoderModel& model,
                               torch::optim::Optimizer& optimizer) {
  const std::string path = (fs::path(step_dir) / "trainer_state.pt").string();
  try {
    auto named = model.NamedParameters();
    torch::serialize::InputArchive archive, parameters, optimizer_archive;
    archive.load_from(path, named.front().second.device());
    archive.read("parameters", parameters);
    archive.read("optimizer", optimizer_archive);
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < named.size(); ++i) {
      torch::Tensor saved;
      parameters.read(absl::StrCat("parameter_", i), saved);
      named[i].second.copy_(saved);
    }
    optimizer.load(optimizer_archive);
  } catch (const c10::Error& error) {
    return absl::DataLossError(absl::StrCat("--resume: cannot load ", path, ": ", error.what_without_backtrace()));
  }
  return absl::OkStatus();
}

absl::Status WriteLossLog(const std::string& out_dir, const TrainResult& result, int64_t batch_size, int64_t length) {
  json steps = json::array(), evals = json::array();
  for (const auto& r : result.steps) {
    json record = {{"step", r.step}, {"loss", r.loss}, {"objective", r.objective}, {"lr", r.lr},
                   {"grad_norm", r.grad_norm}, {"tokens", r.tokens}};
    if (r.accuracy >= 0) record["accuracy"] = r.accuracy;
    steps.push_back(std::move(record));
  }
  for (const auto& r : result.evals) {
    json record = {{"step", r.step}, {"loss", r.loss}, {"by_decile", r.by_decile}};
    if (r.accuracy >= 0) {
      record["accuracy"] = r.accuracy;
      json by_depth = json::array();
      for (const auto& d : r.recall) {
        by_depth.push_back({{"depth", d.depth}, {"probes", d.probes}, {"accuracy", d.accuracy}, {"log_prob", d.log_prob}});
      }
      record["recall"] = std::move(by_depth);
    }
    evals.push_back(std::move(record));
  }
  const json log = {{"unigram_entropy_nats", result.unigram_entropy_nats}, {"length", length},
                    {"batch_size", batch_size}, {"tokens_per_step", batch_size * length},
                    {"documents", result.documents}, {"corpus_tokens", result.corpus_tokens},
                    {"train_sequences", result.train_sequences}, {"eval_sequences", result.eval_sequences},
                    {"position_weights", result.position_weights}, {"steps", steps}, {"eval", evals}};
  const fs::path path = fs::path(out_dir) / "loss.json", temporary = fs::path(out_dir) / "loss.json.partial";
  if (auto status = WriteText(temporary, log.dump(1) + "\n"); !status.ok()) return status;
  std::error_code error;
  fs::rename(temporary, path, error);
  if (error) return absl::InternalError("cannot rename " + temporary.string() + ": " + error.message());
  return absl::OkStatus();
}

absl::Status ReadLossLog(const std::string& out_dir, int64_t last_step, TrainResult& result) {
  const std::string file = (fs::path(out_dir) / "loss.json").string();
  auto text = ReadText(file);
  if (!text.ok()) return text.status();
  const auto log = json::parse(*text, nullptr, false);
  if (log.is_discarded() || !log.is_object()) return absl::DataLossError("--resume: " + file + " is not JSON");
  try {
    for (const auto& r : log.at("steps")) {
      auto step = CountAt(r, "step", file);
      if (!step.ok()) return step.status();
      if (*step > last_step) continue;
      auto tokens = CountAt(r, "tokens", file);
      if (!tokens.ok()) return tokens.status();
      result.steps.push_back({*step, r.at("loss").get<double>(), r.at("objective").get<double>(), r.at("lr").get<double>(),
                              r.at("grad_norm").get<double>(), *tokens, r.value("accuracy", -1.0)});
    }
    for (const auto& r : log.at("eval")) {
      auto step = CountAt(r, "step", file);
      if (!step.ok()) return step.status();
      if (*step > last_step) continue;
      EvalRecord eval{*step, r.at("loss").get<double>(), r.value("by_decile", std::vector<double>{}), {}, r.value("accuracy", -1.0)};
      for (const auto& d : r.value("recall", json::array())) {
        eval.recall.push_back({d.at("depth").get<double>(), d.at("probes").get<int64_t>(), d.at("accuracy").get<double>(),
                               d.at("log_prob").get<double>()});
      }
      result.evals.push_back(std::move(eval));
    }
  } catch (const json::exception& error) {
    return absl::DataLossError(absl::StrCat("--resume: ", file, ": ", error.what()));
  }
  return absl::OkStatus();
}

}  // namespace posbias::train
