// Replays every libFuzzer harness of tests/fuzz/libfuzzer/ over its committed seed corpus
// (corpus/<name>/) and the inputs that once crashed it (regressions/<name>/), in the ordinary
// (g++) build, without clang: the harness sources are compiled into this binary with their entry
// points renamed (CMakeLists.txt), and a broken promise aborts just as it does under libFuzzer.
#include <gtest/gtest.h>
#include <unistd.h>

#include <csignal>
#include <cstring>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <ostream>
#include <string>
#include <vector>

extern "C" int PosbiasFuzz_safetensors_header(const uint8_t* data, size_t size);
extern "C" int PosbiasFuzz_config_json(const uint8_t* data, size_t size);
extern "C" int PosbiasFuzz_density_requests(const uint8_t* data, size_t size);
extern "C" int PosbiasFuzz_job_requests(const uint8_t* data, size_t size);
extern "C" int PosbiasFuzz_model_registration(const uint8_t* data, size_t size);
extern "C" int PosbiasFuzz_tokenizer_json(const uint8_t* data, size_t size);

namespace {

namespace fs = std::filesystem;

struct Harness {
  const char* name;
  int (*entry)(const uint8_t*, size_t);
};

const Harness kHarnesses[] = {
    {"safetensors_header", PosbiasFuzz_safetensors_header}, {"config_json", PosbiasFuzz_config_json},
    {"density_requests", PosbiasFuzz_density_requests},     {"job_requests", PosbiasFuzz_job_requests},
    {"model_registration", PosbiasFuzz_model_registration}, {"tokenizer_json", PosbiasFuzz_tokenizer_json},
};

// gtest names a parameter in test listings with this.
void PrintTo(const Harness& harness, std::ostream* out) { *out << harness.name; }

std::vector<fs::path> InputsUnder(const fs::path& dir) {
  std::vector<fs::path> inputs;
  if (!fs::is_directory(dir)) return inputs;
  for (const auto& file : fs::directory_iterator(dir)) {
    if (file.is_regular_file() && file.path().filename().string().rfind("README", 0) != 0) inputs.push_back(file.path());
  }
  std::sort(inputs.begin(), inputs.end());
  return inputs;
}

std::string ReadBytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The input being replayed, named on stderr when a harness aborts on it.
std::string current_input;

extern "C" void NameTheInput(int signal) {
  const char prefix[] = "\nlibfuzzer_replay_tests: aborted on input ";
  (void)!::write(2, prefix, sizeof prefix - 1);
  (void)!::write(2, current_input.data(), current_input.size());
  (void)!::write(2, "\n", 1);
  std::signal(signal, SIG_DFL);
  std::raise(signal);
}

class Replay : public ::testing::TestWithParam<Harness> {};

TEST_P(Replay, CorpusAndRegressions) {
  const fs::path root(POSBIAS_FUZZ_DIR);
  const auto corpus = InputsUnder(root / "corpus" / GetParam().name);
  EXPECT_FALSE(corpus.empty()) << "no seed corpus in " << (root / "corpus" / GetParam().name);
  auto inputs = corpus;
  const auto regressions = InputsUnder(root / "regressions" / GetParam().name);
  inputs.insert(inputs.end(), regressions.begin(), regressions.end());
  std::signal(SIGABRT, NameTheInput);
  for (const fs::path& input : inputs) {
    SCOPED_TRACE(input.string());
    current_input = input.string();
    const std::string bytes = ReadBytes(input);
    try {
      EXPECT_EQ(GetParam().entry(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), 0);
    } catch (const std::exception& error) {  // Under libFuzzer, an escaping exception is a crash.
      ADD_FAILURE() << input << ": exception escaped the harness: " << error.what();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(LibFuzzer, Replay, ::testing::ValuesIn(kHarnesses),
                         [](const ::testing::TestParamInfo<Harness>& param_info) { return std::string(param_info.param.name); });

}  // namespace
