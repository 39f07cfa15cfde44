// The trainer's files (checkpoint.h).
#include "server/train/checkpoint.h"

#include <filesystem>
#include <fstream>
#include <iterator>
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
  auto text = ReadText(fs::path(step_dir) / "trainer_state.json");
  if (!text.ok()) return text.status();
  const auto state_json = json::parse(*text, nullptr, false);
  if (state_json.is_discarded() || !state_json.is_object()) {
    return absl::DataLossError(absl::StrCat("--resume: ", step_dir, "/trainer_state.json is not a JSON object"));
  }
  TrainerState state;
  try {
    state.step = state_json.at("step").get<int64_t>();
    state.epoch = state_json.at("epoch").get<int64_t>();
    state.epoch_position = state_json.at("epoch_position").get<int64_t>();
    state.tokens = state_json.at("tokens").get<int64_t>();
    state.seed = state_json.at("seed").get<uint64_t>();
    state.length = state_json.at("length").get<int64_t>();
    state.batch_size = state_json.at("batch_size").get<int64_t>();
    state.steps = state_json.at("steps").get<int64_t>();
    state.config_json = state_json.at("config").dump();
  } catch (const json::exception& error) {
    return absl::DataLossError(absl::StrCat("--resume: ", step_dir, "/trainer_state.json: ", error.what()));
  }
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
    steps.push_back({{"step", r.step}, {"loss", r.loss}, {"objective", r.objective}, {"lr", r.lr},
                     {"grad_norm", r.grad_norm}, {"tokens", r.tokens}});
  }
  for (const auto& r : result.evals) evals.push_back({{"step", r.step}, {"loss", r.loss}, {"by_decile", r.by_decile}});
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
  auto text = ReadText(fs::path(out_dir) / "loss.json");
  if (!text.ok()) return text.status();
  const auto log = json::parse(*text, nullptr, false);
  if (log.is_discarded() || !log.is_object()) return absl::DataLossError("--resume: " + out_dir + "/loss.json is not JSON");
  try {
    for (const auto& r : log.at("steps")) {
      if (r.at("step").get<int64_t>() > last_step) continue;
      result.steps.push_back({r.at("step").get<int64_t>(), r.at("loss").get<double>(), r.at("objective").get<double>(),
                              r.at("lr").get<double>(), r.at("grad_norm").get<double>(), r.at("tokens").get<int64_t>()});
    }
    for (const auto& r : log.at("eval")) {
      if (r.at("step").get<int64_t>() > last_step) continue;
      result.evals.push_back({r.at("step").get<int64_t>(), r.at("loss").get<double>(),
                              r.value("by_decile", std::vector<double>{})});
    }
  } catch (const json::exception& error) {
    return absl::DataLossError(absl::StrCat("--resume: ", out_dir, "/loss.json: ", error.what()));
  }
  return absl::OkStatus();
}

}  // namespace posbias::train
