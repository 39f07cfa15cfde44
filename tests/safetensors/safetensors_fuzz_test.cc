// Bounded randomized robustness tests of the safetensors parser (fixed seeds, a few seconds).
//
// Valid files are mutated at random (bytes flipped in the length prefix and the JSON, truncation,
// insertion, erasure, numbers replaced by huge or negative values, header length rewritten), random
// headers are generated from a small grammar, and pure random bytes are tried. Every input must
// give either a header that satisfies the room's promises (offsets inside the buffer, sizes
// matching shapes, no overlaps; conversions stay inside the tensor's bytes) or an
// INVALID_MODEL_FILE error naming the file; never a crash. Run once under
// -fsanitize=address,undefined to prove the "never crash" part.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "server/safetensors/safetensors.h"
#include "server/status/error.h"

namespace posbias::safetensors {
namespace {

constexpr char kLabel[] = "fuzz.safetensors";

std::string LittleEndian64(uint64_t value) {
  std::string bytes(8, '\0');
  std::memcpy(bytes.data(), &value, 8);
  return bytes;
}

std::string FileBytes(const std::string& json, const std::string& data) {
  return LittleEndian64(json.size()) + json + data;
}

const std::byte* AsBytes(const std::string& bytes) {
  return reinterpret_cast<const std::byte*>(bytes.data());
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A directory unique to this process and test (ctest may run tests in parallel).
std::filesystem::path FreshDirectory(const std::string& name) {
  const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::filesystem::path path = std::filesystem::path(::testing::TempDir()) /
                                     absl::StrCat(name, "_", test->name(), "_", ::getpid());
  std::filesystem::remove_all(path);
  std::filesystem::create_directories(path);
  return path;
}

// Valid files written by WriteFile: several dtypes, a scalar, a zero-size tensor, metadata.
std::vector<std::string> SeedFiles() {
  const std::filesystem::path dir = FreshDirectory("safetensors_fuzz_seeds");
  const std::vector<float> f32 = {1.0f, -2.0f, 3.5f, 0.25f, 8.0f, -0.0f};
  const std::vector<uint16_t> f16 = {0x3c00, 0x7c00, 0x0001, 0x7e00};
  const std::vector<double> f64 = {1e300, -0.5};
  const std::vector<int64_t> i64 = {1, -1};
  const std::vector<std::vector<TensorToWrite>> sets = {
      {{"h.0.attn.c_attn.weight", DType::kF32, {2, 3}, f32.data(), 24},
       {"h.0.ln_1.bias", DType::kF16, {4}, f16.data(), 8}},
      {{"scalar", DType::kBF16, {}, f16.data(), 2},
       {"empty", DType::kF32, {0, 7}, nullptr, 0},
       {"d", DType::kF64, {2}, f64.data(), 16},
       {"ids", DType::kI64, {2, 1}, i64.data(), 16},
       {"mask", DType::kBool, {3}, f16.data(), 3}},
      {},
  };
  std::vector<std::string> files;
  for (size_t i = 0; i < sets.size(); ++i) {
    const std::string path = (dir / absl::StrCat("seed", i, ".safetensors")).string();
    EXPECT_TRUE(WriteFile(path, sets[i], {{"format", "pt"}, {"k", "v"}}).ok());
    files.push_back(ReadBytes(path));
  }
  std::filesystem::remove_all(dir);
  return files;
}

// Checks what ParseFile promises for one input.
::testing::AssertionResult CheckParse(const std::string& bytes) {
  const std::byte* data = AsBytes(bytes);
  absl::StatusOr<Header> header = ParseFile(data, bytes.size(), kLabel);
  if (!header.ok()) {
    if (header.status().code() == absl::StatusCode::kInvalidArgument &&
        ErrorReasonOf(header.status()) == "INVALID_MODEL_FILE" &&
        header.status().message().substr(0, sizeof(kLabel) - 1) == kLabel) {
      return ::testing::AssertionSuccess();
    }
    return ::testing::AssertionFailure() << "unexpected error " << header.status();
  }
  const uint64_t data_size = bytes.size() - header->data_start;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const TensorInfo& tensor : header->tensors) {
    if (tensor.begin > tensor.end || tensor.end > data_size) {
      return ::testing::AssertionFailure() << "tensor " << tensor.name << " outside the buffer";
    }
    const uint64_t count = static_cast<uint64_t>(ElementCount(tensor.shape));
    if (count * DTypeSize(tensor.dtype) != tensor.end - tensor.begin) {
      return ::testing::AssertionFailure() << "tensor " << tensor.name << " size mismatch";
    }
    if (tensor.end > tensor.begin) ranges.emplace_back(tensor.begin, tensor.end);
    // Convert from an exactly sized heap copy, so that an over-read shows under ASan.
    std::vector<std::byte> copy(data + header->data_start + tensor.begin,
                                data + header->data_start + tensor.end);
    std::vector<float> out(count);
    (void)ConvertToFloat32(tensor, copy.data(), out.data());
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].first < ranges[i - 1].second) return ::testing::AssertionFailure() << "overlap";
  }
  return ::testing::AssertionSuccess();
}

// ---------------------------------------------------------------------------------------------
// Mutations.

class Mutator {
 public:
  explicit Mutator(uint64_t seed) : random_(seed) {}

  uint64_t Below(uint64_t bound) { return bound == 0 ? 0 : random_() % bound; }
  char Byte() { return static_cast<char>(Below(256)); }

  // Raw mutations of a whole file.
  void MutateFile(std::string& bytes) {
    switch (Below(8)) {
      case 0:
        FlipIn(bytes, 0, std::min<size_t>(8, bytes.size()));
        break;  // Length prefix.
      case 1:
        FlipIn(bytes, 8, HeaderEnd(bytes));
        break;  // JSON.
      case 2:
        FlipIn(bytes, 0, bytes.size());
        break;  // Anywhere.
      case 3:
        bytes.resize(Below(bytes.size() + 1));
        break;  // Truncate.
      case 4:
        bytes.insert(Below(bytes.size() + 1), RandomBytes(1 + Below(16)));
        break;
      case 5:
        Erase(bytes);
        break;
      case 6:
        SetLength(bytes);
        break;
      default:
        ReplaceNumber(bytes, 8, HeaderEnd(bytes));
        break;
    }
  }

  // Mutations of the JSON text alone; the caller rewrites a matching length prefix.
  void MutateJson(std::string& json) {
    static const char* const kTokens[] = {"{",         "}",       "[",         "]",
                                          ",",         ":",       "\"",        "-",
                                          "0",         "1e400",   "null",      "\"__metadata__\"",
                                          "\"dtype\"", "\"F16\"", "\"shape\"", "\"data_offsets\"",
                                          "\\u0000",   "\xff"};
    switch (Below(4)) {
      case 0:
        FlipIn(json, 0, json.size());
        break;
      case 1:
        json.insert(Below(json.size() + 1), kTokens[Below(std::size(kTokens))]);
        break;
      case 2:
        Erase(json);
        break;
      default:
        ReplaceNumber(json, 0, json.size());
        break;
    }
  }

  std::string RandomBytes(size_t count) {
    std::string bytes(count, '\0');
    for (char& byte : bytes) byte = Byte();
    return bytes;
  }

 private:
  static size_t HeaderEnd(const std::string& bytes) {
    if (bytes.size() < 8) return bytes.size();
    uint64_t length = 0;
    std::memcpy(&length, bytes.data(), 8);
    return static_cast<size_t>(8 + std::min<uint64_t>(length, bytes.size() - 8));
  }

  void FlipIn(std::string& bytes, size_t begin, size_t end) {
    if (end <= begin) return;
    const size_t at = begin + Below(end - begin);
    bytes[at] = Below(2) == 0 ? Byte() : static_cast<char>(bytes[at] ^ (1 << Below(8)));
  }

  void Erase(std::string& bytes) {
    if (bytes.empty()) return;
    const size_t at = Below(bytes.size());
    bytes.erase(at, 1 + Below(std::min<size_t>(16, bytes.size() - at)));
  }

  void SetLength(std::string& bytes) {
    if (bytes.size() < 8) return;
    const uint64_t rest = bytes.size() - 8;
    const uint64_t choices[] = {
        rest,         rest + 1, rest == 0 ? 0 : rest - 1, Below(rest + 1), 0, kMaxHeaderBytes + 1,
        ~uint64_t{0}, random_()};
    const std::string prefix = LittleEndian64(choices[Below(std::size(choices))]);
    bytes.replace(0, 8, prefix);
  }

  // Replaces the run of digits at a random place with a huge, negative or odd number.
  void ReplaceNumber(std::string& text, size_t begin, size_t end) {
    static const char* const kNumbers[] = {"18446744073709551615",
                                           "18446744073709551616",
                                           "9223372036854775807",
                                           "9223372036854775808",
                                           "-1",
                                           "-9223372036854775808",
                                           "4294967296",
                                           "0",
                                           "-0",
                                           "1.5",
                                           "1e19",
                                           "99999999999999999999999"};
    std::vector<size_t> digits;
    for (size_t i = begin; i < end && i < text.size(); ++i) {
      if (text[i] >= '0' && text[i] <= '9') digits.push_back(i);
    }
    if (digits.empty()) return;
    size_t first = digits[Below(digits.size())];
    size_t last = first;
    while (first > 0 && text[first - 1] >= '0' && text[first - 1] <= '9') --first;
    while (last + 1 < text.size() && text[last + 1] >= '0' && text[last + 1] <= '9') ++last;
    text.replace(first, last - first + 1, kNumbers[Below(std::size(kNumbers))]);
  }

  std::mt19937_64 random_;
};

// A random header from a small grammar: names that repeat, dtypes that may be unknown, shapes and
// offsets near the data size (sometimes negative or huge), metadata of mixed types.
std::string GenerateHeader(Mutator& m, uint64_t data_size) {
  static const char* const kNames[] = {"a", "b", "w.0", "__metadata__", "", "a"};
  static const char* const kDTypes[] = {"F32", "F16", "BF16", "F64", "I64", "I32", "I16",
                                        "I8",  "U8",  "BOOL", "F8",  "f32", ""};
  static const char* const kOdd[] = {"-1", "1.5", "18446744073709551615", "\"3\"", "null", "[]"};
  auto number = [&](uint64_t bound) {
    if (m.Below(8) == 0) return std::string(kOdd[m.Below(std::size(kOdd))]);
    return absl::StrCat(m.Below(bound));
  };
  std::string json = "{";
  const uint64_t entries = m.Below(5);
  for (uint64_t i = 0; i < entries; ++i) {
    if (i > 0) json += ",";
    const std::string name = kNames[m.Below(std::size(kNames))];
    if (name == "__metadata__" && m.Below(2) == 0) {
      json +=
          R"("__metadata__":{"k":)" + (m.Below(2) == 0 ? std::string("\"v\"") : number(9)) + "}";
      continue;
    }
    std::string shape = "[";
    const uint64_t rank = m.Below(4);
    for (uint64_t d = 0; d < rank; ++d) shape += (d > 0 ? "," : "") + number(5);
    shape += "]";
    const std::string begin = number(data_size + 2);
    const std::string end = number(data_size + 2);
    json += absl::StrCat("\"", name, "\":{\"dtype\":\"", kDTypes[m.Below(std::size(kDTypes))],
                         "\",\"shape\":", shape, ",\"data_offsets\":[", begin, ",", end, "]}");
  }
  return json + "}" + std::string(m.Below(8), ' ');
}

// ---------------------------------------------------------------------------------------------
// Tests.

TEST(SafetensorsFuzz, MutatedValidFilesGiveAValidHeaderOrInvalidModelFile) {
  const std::vector<std::string> seeds = SeedFiles();
  for (const std::string& seed : seeds)
    ASSERT_TRUE(ParseFile(AsBytes(seed), seed.size(), kLabel).ok());
  Mutator m(20240601);
  int accepted = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string bytes = seeds[m.Below(seeds.size())];
    const uint64_t rounds = 1 + m.Below(3);
    for (uint64_t r = 0; r < rounds; ++r) m.MutateFile(bytes);
    ASSERT_TRUE(CheckParse(bytes)) << "iteration " << i << ": " << absl::CHexEscape(bytes);
    accepted += ParseFile(AsBytes(bytes), bytes.size(), kLabel).ok() ? 1 : 0;
  }
  EXPECT_GT(accepted, 100);  // Some mutations keep the file valid (e.g. a changed value byte).
}

TEST(SafetensorsFuzz, MutatedJsonWithAMatchingLengthGivesAValidHeaderOrInvalidModelFile) {
  const std::vector<std::string> seeds = SeedFiles();
  Mutator m(7);
  int accepted = 0;
  for (int i = 0; i < 20000; ++i) {
    const std::string& seed = seeds[m.Below(seeds.size())];
    uint64_t length = 0;
    std::memcpy(&length, seed.data(), 8);
    std::string json = seed.substr(8, length);
    std::string data = seed.substr(8 + length);
    const uint64_t rounds = 1 + m.Below(3);
    for (uint64_t r = 0; r < rounds; ++r) m.MutateJson(json);
    if (m.Below(4) == 0) data.resize(m.Below(data.size() + 1));
    ASSERT_TRUE(CheckParse(FileBytes(json, data)))
        << "iteration " << i << ": " << absl::CHexEscape(json);
    accepted += ParseHeader(json, data.size(), kLabel).ok() ? 1 : 0;
  }
  EXPECT_GT(accepted, 200);
}

TEST(SafetensorsFuzz, GeneratedHeadersGiveAValidHeaderOrInvalidModelFile) {
  Mutator m(99);
  int accepted = 0;
  for (int i = 0; i < 20000; ++i) {
    const uint64_t data_size = m.Below(40);
    const std::string json = GenerateHeader(m, data_size);
    const std::string bytes = FileBytes(json, m.RandomBytes(data_size));
    ASSERT_TRUE(CheckParse(bytes)) << "iteration " << i << ": " << json;
    accepted += ParseHeader(json, data_size, kLabel).ok() ? 1 : 0;
  }
  EXPECT_GT(accepted, 100);  // The grammar reaches valid headers too, not only errors.
}

TEST(SafetensorsFuzz, RandomBytesGiveInvalidModelFile) {
  Mutator m(12345);
  for (int i = 0; i < 20000; ++i) {
    std::string bytes = m.RandomBytes(m.Below(64));
    if (m.Below(2) == 0 && bytes.size() >= 8) {  // A plausible length prefix.
      bytes.replace(0, 8, LittleEndian64(m.Below(bytes.size() - 7)));
    }
    ASSERT_TRUE(CheckParse(bytes)) << "iteration " << i << ": " << absl::CHexEscape(bytes);
  }
}

TEST(SafetensorsFuzz, OpenFilesOfMutatedBytesNeverCrash) {
  const std::vector<std::string> seeds = SeedFiles();
  const std::filesystem::path dir = FreshDirectory("safetensors_fuzz_mapped");
  const std::string path = (dir / "m.safetensors").string();
  Mutator m(424242);
  for (int i = 0; i < 300; ++i) {
    std::string bytes = seeds[m.Below(seeds.size())];
    if (i % 3 != 0) m.MutateFile(bytes);
    WriteBytes(path, bytes);
    absl::StatusOr<TensorFile> file = TensorFile::Open(path);
    if (!file.ok()) {
      ASSERT_EQ(ErrorReasonOf(file.status()), "INVALID_MODEL_FILE") << file.status();
      continue;
    }
    for (const TensorInfo& tensor : file->header().tensors) {
      std::vector<float> out(static_cast<size_t>(ElementCount(tensor.shape)));
      std::vector<std::byte> data(tensor.end - tensor.begin);
      ASSERT_TRUE(file->Read(tensor, data.data()).ok());  // Validated at Open: inside the file.
      (void)ConvertToFloat32(tensor, data.data(), out.data());
      ASSERT_EQ(file->Find(tensor.name), &tensor);
    }
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace posbias::safetensors
