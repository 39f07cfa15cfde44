#include "server/safetensors/safetensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "server/status/error.h"

namespace posbias::safetensors {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// ---------------------------------------------------------------------------------------------
// Helpers.

// A fresh directory per test, removed afterwards.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ =
        std::filesystem::path(::testing::TempDir()) /
        absl::StrCat("safetensors_", info->test_suite_name(), "_", info->name(), "_", ::getpid());
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string File(const std::string& name) const { return (path_ / name).string(); }
  std::string path() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::string LittleEndian64(uint64_t value) {
  std::string bytes(8, '\0');
  std::memcpy(bytes.data(), &value, 8);
  return bytes;
}

// A whole file: length prefix, header JSON, data.
std::string FileBytes(const std::string& header_json, const std::string& data) {
  return LittleEndian64(header_json.size()) + header_json + data;
}

template <typename T>
std::string BytesOf(const std::vector<T>& values) {
  std::string bytes(values.size() * sizeof(T), '\0');
  if (!values.empty()) std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

absl::StatusOr<Header> Parse(const std::string& file_bytes) {
  return ParseFile(reinterpret_cast<const std::byte*>(file_bytes.data()), file_bytes.size(),
                   "model.safetensors");
}

void ExpectInvalidModelFile(const absl::Status& status, const std::vector<std::string>& parts) {
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_EQ(ErrorReasonOf(status), "INVALID_MODEL_FILE") << status;
  for (const std::string& part : parts) EXPECT_THAT(status.message(), HasSubstr(part));
}

void ExpectPathNotFound(const absl::Status& status, const std::vector<std::string>& parts) {
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound) << status;
  EXPECT_EQ(ErrorReasonOf(status), "PATH_NOT_FOUND") << status;
  for (const std::string& part : parts) EXPECT_THAT(status.message(), HasSubstr(part));
}

TensorToWrite F32Tensor(const std::string& name, std::vector<int64_t> shape,
                        const std::vector<float>& values) {
  return {name, DType::kF32, std::move(shape), values.data(), values.size() * sizeof(float)};
}

std::vector<float> ToFloats(const Checkpoint& checkpoint, const std::string& name) {
  absl::StatusOr<Checkpoint::Tensor> tensor = checkpoint.Get(name);
  EXPECT_TRUE(tensor.ok()) << tensor.status();
  if (!tensor.ok()) return {};
  std::vector<float> out(static_cast<size_t>(ElementCount(tensor->info->shape)));
  EXPECT_TRUE(ConvertToFloat32(*tensor->info, tensor->data.data(), out.data()).ok());
  return out;
}

bool SameFloat(float a, float b) {
  return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b);
}

// ---------------------------------------------------------------------------------------------
// Dtypes.

TEST(SafetensorsDType, NamesAndSizesFollowTheFormat) {
  EXPECT_EQ(DTypeName(DType::kF32), "F32");
  EXPECT_EQ(DTypeName(DType::kBF16), "BF16");
  EXPECT_EQ(DTypeName(DType::kBool), "BOOL");
  EXPECT_EQ(DTypeSize(DType::kF64), 8u);
  EXPECT_EQ(DTypeSize(DType::kF16), 2u);
  EXPECT_EQ(DTypeSize(DType::kU8), 1u);
  EXPECT_EQ(ElementCount({}), 1);
  EXPECT_EQ(ElementCount({2, 0, 3}), 0);
  EXPECT_EQ(ElementCount({2, 3, 4}), 24);
}

// ---------------------------------------------------------------------------------------------
// Round trips.

TEST(SafetensorsRoundTrip, F32F16AndBf16TensorsComeBackWithShapesValuesAndMetadata) {
  TempDir dir;
  const std::vector<float> a = {1.0f, -2.5f, 3.25f, 0.0f, -0.0f, 1e-3f};
  const std::vector<float> b_values = {1.0f, -2.0f, 65504.0f, 0.5f};
  std::vector<std::byte> b(b_values.size() * 2);
  ConvertFromFloat32(b_values.data(), b_values.size(), DType::kF16, b.data());
  const std::vector<float> c_values = {1.0f, -2.0f, 0.15625f, -3.0e38f};
  std::vector<std::byte> c(c_values.size() * 2);
  ConvertFromFloat32(c_values.data(), c_values.size(), DType::kBF16, c.data());
  const std::vector<float> scalar = {3.5f};
  const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"note", "h\u00e9llo"}};
  const std::string path = dir.File("model.safetensors");
  ASSERT_TRUE(WriteFile(path,
                        {F32Tensor("a", {2, 3}, a),
                         {"b", DType::kF16, {4}, b.data(), b.size()},
                         {"c", DType::kBF16, {2, 2}, c.data(), c.size()},
                         F32Tensor("scalar", {}, scalar),
                         {"empty", DType::kF32, {0, 5}, nullptr, 0}},
                        metadata)
                  .ok());

  absl::StatusOr<Checkpoint> checkpoint = Checkpoint::Open(path);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  EXPECT_THAT(checkpoint->TensorNames(), ElementsAre("a", "b", "c", "empty", "scalar"));
  EXPECT_EQ(checkpoint->metadata(), metadata);
  EXPECT_THAT(checkpoint->Get("a")->info->shape, ElementsAre(2, 3));
  EXPECT_EQ(checkpoint->Get("b")->info->dtype, DType::kF16);
  EXPECT_EQ(checkpoint->Get("c")->info->dtype, DType::kBF16);
  EXPECT_TRUE(checkpoint->Get("scalar")->info->shape.empty());
  EXPECT_THAT(checkpoint->Get("empty")->info->shape, ElementsAre(0, 5));
  const std::vector<float> a_back = ToFloats(*checkpoint, "a");
  ASSERT_EQ(a_back.size(), a.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(SameFloat(a_back[i], a[i])) << i;
  EXPECT_EQ(ToFloats(*checkpoint, "b"), b_values);
  EXPECT_EQ(ToFloats(*checkpoint, "c"),
            (std::vector<float>{1.0f, -2.0f, 0.15625f,
                                BFloat16BitsToFloat(FloatToBFloat16Bits(-3.0e38f))}));
  EXPECT_EQ(ToFloats(*checkpoint, "scalar"), scalar);
  EXPECT_TRUE(ToFloats(*checkpoint, "empty").empty());
}

TEST(SafetensorsRoundTrip, TheByteLayoutOfASmallFileMatchesAHandBuiltBuffer) {
  TempDir dir;
  const std::vector<float> x = {1.0f, 2.0f};
  const std::vector<int32_t> y = {7};
  const std::string path = dir.File("small.safetensors");
  ASSERT_TRUE(
      WriteFile(path, {F32Tensor("x", {2}, x), {"y", DType::kI32, {1}, y.data(), sizeof(int32_t)}},
                {{"format", "pt"}})
          .ok());

  std::string json =
      R"({"__metadata__":{"format":"pt"},"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("y":{"dtype":"I32","shape":[1],"data_offsets":[8,12]}})";
  json.append((8 - json.size() % 8) % 8, ' ');
  const std::string expected = FileBytes(json, BytesOf(x) + BytesOf(y));
  const std::string actual = ReadBytes(path);
  EXPECT_EQ(actual, expected);

  uint64_t length = 0;
  ASSERT_GE(actual.size(), 8u);
  std::memcpy(&length, actual.data(), 8);
  EXPECT_EQ((8 + length) % 8, 0u);
  const nlohmann::json header = nlohmann::json::parse(actual.substr(8, length));
  EXPECT_EQ(header["x"]["data_offsets"], nlohmann::json({0, 8}));
  EXPECT_EQ(header["y"]["dtype"], "I32");
  EXPECT_EQ(header["__metadata__"]["format"], "pt");
}

TEST(SafetensorsRoundTrip, TensorsAreLaidOutInTheGivenOrderWithContiguousOffsets) {
  TempDir dir;
  const std::vector<float> z = {1, 2, 3};
  const std::vector<float> a = {4};
  const std::string path = dir.File("order.safetensors");
  ASSERT_TRUE(WriteFile(path, {F32Tensor("z", {3}, z), F32Tensor("a", {1}, a)}, {}).ok());
  absl::StatusOr<TensorFile> file = TensorFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  const TensorInfo* zi = file->Find("z");
  const TensorInfo* ai = file->Find("a");
  ASSERT_NE(zi, nullptr);
  ASSERT_NE(ai, nullptr);
  EXPECT_EQ(zi->begin, 0u);
  EXPECT_EQ(zi->end, 12u);
  EXPECT_EQ(ai->begin, 12u);
  EXPECT_EQ(ai->end, 16u);
  EXPECT_EQ(file->Find("missing"), nullptr);
  EXPECT_EQ(file->header().data_start % 8, 0u);
  EXPECT_TRUE(file->header().metadata.empty());
  float value = 0;
  ASSERT_TRUE(file->Read(*ai, reinterpret_cast<std::byte*>(&value)).ok());
  EXPECT_EQ(value, 4.0f);
  EXPECT_EQ(file->path(), path);
}

TEST(SafetensorsRoundTrip, AFileWithoutTensorsIsValid) {
  TempDir dir;
  const std::string path = dir.File("empty.safetensors");
  ASSERT_TRUE(WriteFile(path, {}, {}).ok());
  EXPECT_EQ(ReadBytes(path), FileBytes("{}      ", ""));
  absl::StatusOr<Checkpoint> checkpoint = Checkpoint::Open(path);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  EXPECT_TRUE(checkpoint->TensorNames().empty());
}

TEST(SafetensorsRoundTrip, OpenFilesStayUsableAfterAMove) {
  TempDir dir;
  const std::vector<float> x = {9.0f};
  const std::string path = dir.File("m.safetensors");
  ASSERT_TRUE(WriteFile(path, {F32Tensor("x", {1}, x)}, {}).ok());
  absl::StatusOr<TensorFile> opened = TensorFile::Open(path);
  ASSERT_TRUE(opened.ok());
  TensorFile moved = *std::move(opened);
  TensorFile assigned = std::move(moved);
  float value = 0;
  ASSERT_TRUE(assigned.Read(*assigned.Find("x"), reinterpret_cast<std::byte*>(&value)).ok());
  EXPECT_EQ(value, 9.0f);
}

// The files are a tenant's to write: a checkpoint truncated after it was opened must give an
// error naming the file and the tensor, never a signal (a memory map would raise SIGBUS).
TEST(SafetensorsRoundTrip, AFileThatShrinksAfterOpenIsAnErrorNotASignal) {
  TempDir dir;
  const std::vector<float> a(1024, 1.0f), b(1024, 2.0f);
  const std::string path = dir.File("shrinks.safetensors");
  ASSERT_TRUE(WriteFile(path, {F32Tensor("a", {1024}, a), F32Tensor("b", {1024}, b)}, {}).ok());
  absl::StatusOr<Checkpoint> checkpoint = Checkpoint::Open(path);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  const uint64_t data_start = std::filesystem::file_size(path) - 2 * 4096;
  std::filesystem::resize_file(path, data_start + 4096 + 100);  // "b" now ends past the file.
  EXPECT_EQ(ToFloats(*checkpoint, "a"), a);
  absl::StatusOr<Checkpoint::Tensor> cut = checkpoint->Get("b");
  ExpectInvalidModelFile(cut.status(), {"shrinks.safetensors", "shrank while it was read", "tensor 'b'",
                                        absl::StrCat("the file now has ", data_start + 4196, " bytes")});
  std::vector<float> out(1024);
  ExpectInvalidModelFile(checkpoint->ReadFloat32("b", out.data()), {"shrank while it was read"});
  std::filesystem::resize_file(path, 0);
  ExpectInvalidModelFile(checkpoint->ReadFloat32("a", out.data()), {"tensor 'a'", "the file now has 0 bytes"});
}

TEST(SafetensorsWrite, OverwritesAtomicallyAndLeavesNoTemporaryFiles) {
  TempDir dir;
  const std::vector<float> x = {1.0f};
  const std::vector<float> y = {2.0f, 3.0f};
  const std::string path = dir.File("w.safetensors");
  ASSERT_TRUE(WriteFile(path, {F32Tensor("x", {1}, x)}, {}).ok());
  ASSERT_TRUE(WriteFile(path, {F32Tensor("y", {2}, y)}, {}).ok());
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    names.push_back(entry.path().filename().string());
  }
  EXPECT_THAT(names, ElementsAre("w.safetensors"));
  absl::StatusOr<Checkpoint> checkpoint = Checkpoint::Open(path);
  ASSERT_TRUE(checkpoint.ok());
  EXPECT_THAT(checkpoint->TensorNames(), ElementsAre("y"));
}

TEST(SafetensorsWrite, RefusesSizeMismatchesDuplicateNamesAndReservedNames) {
  TempDir dir;
  const std::vector<float> x = {1.0f, 2.0f};
  const std::string path = dir.File("bad.safetensors");
  absl::Status mismatch = WriteFile(path, {F32Tensor("x", {3}, x)}, {});
  EXPECT_EQ(ErrorReasonOf(mismatch), "INVALID_ARGUMENT");
  EXPECT_THAT(mismatch.message(), HasSubstr("tensor 'x'"));
  absl::Status duplicate = WriteFile(path, {F32Tensor("x", {2}, x), F32Tensor("x", {2}, x)}, {});
  EXPECT_THAT(duplicate.message(), HasSubstr("appears twice"));
  absl::Status reserved = WriteFile(path, {F32Tensor("__metadata__", {2}, x)}, {});
  EXPECT_EQ(reserved.code(), absl::StatusCode::kInvalidArgument);
  absl::Status negative = WriteFile(path, {{"n", DType::kF32, {-1}, nullptr, 0}}, {});
  EXPECT_EQ(negative.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(SafetensorsWrite, AMissingDirectoryIsPathNotFound) {
  TempDir dir;
  ExpectPathNotFound(WriteFile(dir.File("no/such/dir/x.safetensors"), {}, {}), {});
}

// ---------------------------------------------------------------------------------------------
// Half and bfloat16 conversions.

TEST(SafetensorsHalf, KnownBitPatternsConvertExactlyBothWays) {
  const std::vector<std::pair<float, uint16_t>> cases = {
      {1.0f, 0x3c00},
      {-2.0f, 0xc000},
      {65504.0f, 0x7bff},
      {0.0f, 0x0000},
      {-0.0f, 0x8000},
      {0.5f, 0x3800},
      {std::ldexp(1.0f, -24), 0x0001},     // Smallest subnormal.
      {std::ldexp(1023.0f, -24), 0x03ff},  // Largest subnormal.
      {std::ldexp(1.0f, -14), 0x0400},     // Smallest normal.
      {std::numeric_limits<float>::infinity(), 0x7c00},
      {-std::numeric_limits<float>::infinity(), 0xfc00},
  };
  for (const auto& [value, bits] : cases) {
    EXPECT_EQ(FloatToHalfBits(value), bits) << value;
    EXPECT_TRUE(SameFloat(HalfBitsToFloat(bits), value)) << bits;
  }
}

TEST(SafetensorsHalf, NanStaysNanBothWays) {
  EXPECT_TRUE(std::isnan(HalfBitsToFloat(0x7e00)));
  EXPECT_TRUE(std::isnan(HalfBitsToFloat(0x7c01)));  // Signaling half NaN.
  EXPECT_TRUE(std::isnan(HalfBitsToFloat(0xfe00)));
  const uint16_t bits = FloatToHalfBits(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(bits & 0x7c00, 0x7c00);
  EXPECT_NE(bits & 0x03ff, 0);
  // A float NaN whose payload sits only in the low bits must not become infinity.
  EXPECT_NE(FloatToHalfBits(std::bit_cast<float>(0x7f800001u)) & 0x03ff, 0);
  EXPECT_EQ(FloatToHalfBits(std::bit_cast<float>(0xffc00000u)) & 0x8000, 0x8000);
}

TEST(SafetensorsHalf, RoundsToNearestEven) {
  const float ulp = std::ldexp(1.0f, -10);                 // Half spacing in [1, 2).
  EXPECT_EQ(FloatToHalfBits(1.0f + ulp / 2), 0x3c00);      // Tie: down to even.
  EXPECT_EQ(FloatToHalfBits(1.0f + 3 * ulp / 2), 0x3c02);  // Tie: up to even.
  EXPECT_EQ(FloatToHalfBits(1.0f + ulp / 2 + std::ldexp(1.0f, -20)), 0x3c01);  // Above the tie.
  EXPECT_EQ(FloatToHalfBits(65519.0f), 0x7bff);  // Below the tie: max.
  EXPECT_EQ(FloatToHalfBits(65520.0f), 0x7c00);  // Tie: to inf (even).
  EXPECT_EQ(FloatToHalfBits(1e6f), 0x7c00);
  EXPECT_EQ(FloatToHalfBits(-1e6f), 0xfc00);
  EXPECT_EQ(FloatToHalfBits(std::ldexp(1.0f, -25)), 0x0000);  // Half the smallest: to zero.
  EXPECT_EQ(FloatToHalfBits(-std::ldexp(1.0f, -25)), 0x8000);
  EXPECT_EQ(FloatToHalfBits(std::ldexp(1.5f, -25)), 0x0001);  // Above the tie.
  EXPECT_EQ(FloatToHalfBits(std::ldexp(3.0f, -25)), 0x0002);  // Tie between 1 and 2: even.
  EXPECT_EQ(FloatToHalfBits(std::ldexp(5.0f, -25)), 0x0002);  // Tie between 2 and 3: even.
  EXPECT_EQ(FloatToHalfBits(std::ldexp(1.0f, -26)), 0x0000);
  EXPECT_EQ(FloatToHalfBits(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_EQ(FloatToHalfBits(std::ldexp(2047.0f, -25)), 0x0400);  // Subnormal tie carries to normal.
  EXPECT_EQ(FloatToHalfBits(std::nextafter(std::ldexp(1.0f, -14), 0.0f)), 0x0400);
}

TEST(SafetensorsHalf, EveryHalfValueSurvivesARoundTripThroughFloat) {
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const float value = HalfBitsToFloat(static_cast<uint16_t>(bits));
    if (std::isnan(value)) {
      EXPECT_TRUE(std::isnan(HalfBitsToFloat(FloatToHalfBits(value)))) << bits;
    } else {
      ASSERT_EQ(FloatToHalfBits(value), bits) << bits;
    }
  }
}

// For random floats in the half range, the chosen half is the nearest, ties going to even.
TEST(SafetensorsHalf, RandomFloatsRoundToTheNearestHalfWithTiesToEven) {
  std::mt19937 random(12345);
  std::uniform_real_distribution<float> exponent(-26.0f, 16.0f);
  for (int i = 0; i < 200000; ++i) {
    const float value = std::exp2(exponent(random));
    if (!(value < 65504.0f)) continue;
    const uint16_t bits = FloatToHalfBits(value);
    const double chosen = HalfBitsToFloat(bits);
    const double error = std::fabs(chosen - value);
    for (int step : {-1, 1}) {
      const int neighbor_bits = bits + step;
      if (neighbor_bits < 0 || neighbor_bits > 0x7bff) continue;
      const double other = std::fabs(HalfBitsToFloat(static_cast<uint16_t>(neighbor_bits)) - value);
      ASSERT_LE(error, other) << value;
      if (error == other) {
        ASSERT_EQ(bits & 1, 0) << value;
      }
    }
  }
}

TEST(SafetensorsBFloat16, KnownBitPatternsConvertExactlyBothWays) {
  const std::vector<std::pair<float, uint16_t>> cases = {
      {1.0f, 0x3f80},
      {-2.0f, 0xc000},
      {0.0f, 0x0000},
      {-0.0f, 0x8000},
      {std::ldexp(1.0f, -133), 0x0001},  // Smallest bfloat16 subnormal.
      {std::numeric_limits<float>::infinity(), 0x7f80},
      {-std::numeric_limits<float>::infinity(), 0xff80},
  };
  for (const auto& [value, bits] : cases) {
    EXPECT_EQ(FloatToBFloat16Bits(value), bits) << value;
    EXPECT_TRUE(SameFloat(BFloat16BitsToFloat(bits), value)) << bits;
  }
}

TEST(SafetensorsBFloat16, RoundsToNearestEvenAndKeepsNan) {
  const float ulp = std::ldexp(1.0f, -7);                      // bfloat16 spacing in [1, 2).
  EXPECT_EQ(FloatToBFloat16Bits(1.0f + ulp / 2), 0x3f80);      // Tie: down.
  EXPECT_EQ(FloatToBFloat16Bits(1.0f + 3 * ulp / 2), 0x3f82);  // Tie: up.
  EXPECT_EQ(FloatToBFloat16Bits(1.0f + ulp / 2 + std::ldexp(1.0f, -20)), 0x3f81);  // Above.
  EXPECT_EQ(FloatToBFloat16Bits(std::numeric_limits<float>::max()), 0x7f80);       // Overflow.
  EXPECT_EQ(FloatToBFloat16Bits(std::numeric_limits<float>::quiet_NaN()), 0x7fc0);
  EXPECT_TRUE(
      std::isnan(BFloat16BitsToFloat(FloatToBFloat16Bits(std::bit_cast<float>(0x7f800001u)))));
  EXPECT_TRUE(std::isnan(BFloat16BitsToFloat(0x7fc0)));
  EXPECT_TRUE(std::isnan(BFloat16BitsToFloat(0xff81)));
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const float value = BFloat16BitsToFloat(static_cast<uint16_t>(bits));
    if (!std::isnan(value)) {
      ASSERT_EQ(FloatToBFloat16Bits(value), bits) << bits;
    }
  }
}

TEST(SafetensorsConvert, F64TensorsNarrowToFloatAndIntegerTensorsAreRefused) {
  const std::vector<double> values = {1.5, -1e300, 1e-300, 0.1};
  TensorInfo info{"w", DType::kF64, {4}, 0, 32};
  std::vector<float> out(4);
  ASSERT_TRUE(
      ConvertToFloat32(info, reinterpret_cast<const std::byte*>(values.data()), out.data()).ok());
  EXPECT_EQ(out[0], 1.5f);
  EXPECT_EQ(out[1], -std::numeric_limits<float>::infinity());
  EXPECT_EQ(out[2], 0.0f);
  EXPECT_EQ(out[3], 0.1f);

  TensorInfo integer{"ids", DType::kI32, {2}, 0, 8};
  const std::vector<int32_t> ids = {1, 2};
  ExpectInvalidModelFile(
      ConvertToFloat32(integer, reinterpret_cast<const std::byte*>(ids.data()), out.data()),
      {"tensor 'ids'", "I32"});
}

TEST(SafetensorsConvert, UnalignedF16DataConvertsAndFloatsRoundTripThroughEveryFloatDtype) {
  const std::vector<float> values = {1.0f, -0.5f, 2.0f, 1024.0f};
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16, DType::kF64}) {
    std::vector<std::byte> buffer(1 + values.size() * DTypeSize(dtype));
    ConvertFromFloat32(values.data(), values.size(), dtype, buffer.data() + 1);  // Unaligned.
    TensorInfo info{"t", dtype, {4}, 0, values.size() * DTypeSize(dtype)};
    std::vector<float> back(values.size());
    ASSERT_TRUE(ConvertToFloat32(info, buffer.data() + 1, back.data()).ok());
    EXPECT_EQ(back, values) << DTypeName(dtype);
  }
}

// ---------------------------------------------------------------------------------------------
// Checkpoints: directories and shards.

class SafetensorsShards : public ::testing::Test {
 protected:
  void WriteShards() {
    ASSERT_TRUE(WriteFile(dir_.File("model-00001-of-00002.safetensors"),
                          {F32Tensor("a", {2}, a_), F32Tensor("b", {1}, b_)}, {{"format", "pt"}})
                    .ok());
    ASSERT_TRUE(WriteFile(dir_.File("model-00002-of-00002.safetensors"),
                          {F32Tensor("c", {3}, c_), F32Tensor("unlisted", {1}, b_)},
                          {{"format", "other"}})
                    .ok());
  }
  void WriteIndex(const nlohmann::json& weight_map) {
    nlohmann::json index = {{"metadata", {{"total_size", 24}}}, {"weight_map", weight_map}};
    WriteBytes(dir_.File("model.safetensors.index.json"), index.dump(2));
  }
  nlohmann::json GoodMap() const {
    return {{"a", "model-00001-of-00002.safetensors"},
            {"b", "model-00001-of-00002.safetensors"},
            {"c", "model-00002-of-00002.safetensors"}};
  }

  TempDir dir_;
  std::vector<float> a_ = {1.0f, 2.0f};
  std::vector<float> b_ = {3.0f};
  std::vector<float> c_ = {4.0f, 5.0f, 6.0f};
};

TEST_F(SafetensorsShards, ADirectoryWithAnIndexFindsEveryTensorInItsShard) {
  WriteShards();
  WriteIndex(GoodMap());
  for (const std::string& path : {dir_.path(), dir_.File("model.safetensors.index.json")}) {
    absl::StatusOr<Checkpoint> checkpoint = Checkpoint::Open(path);
    ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
    EXPECT_THAT(checkpoint->TensorNames(), ElementsAre("a", "b", "c"));
    EXPECT_EQ(ToFloats(*checkpoint, "a"), a_);
    EXPECT_EQ(ToFloats(*checkpoint, "b"), b_);
    EXPECT_EQ(ToFloats(*checkpoint, "c"), c_);
    EXPECT_EQ(checkpoint->metadata().at("format"), "pt");  // Of the first shard.
    ExpectInvalidModelFile(checkpoint->Get("unlisted").status(), {"missing tensor 'unlisted'"});
  }
}

TEST_F(SafetensorsShards, TensorPointersSurviveMovingTheCheckpoint) {
  WriteShards();
  WriteIndex(GoodMap());
  absl::StatusOr<Checkpoint> opened = Checkpoint::Open(dir_.path());
  ASSERT_TRUE(opened.ok());
  absl::StatusOr<Checkpoint::Tensor> before = opened->Get("c");
  ASSERT_TRUE(before.ok());
  Checkpoint moved = *std::move(opened);
  absl::StatusOr<Checkpoint::Tensor> after = moved.Get("c");
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(before->info, after->info);
  EXPECT_EQ(before->data, after->data);  // The same bytes, read again after the move.
}

TEST_F(SafetensorsShards, AMissingShardIsPathNotFoundNamingTheShard) {
  WriteShards();
  nlohmann::json map = GoodMap();
  map["c"] = "model-00003-of-00002.safetensors";
  WriteIndex(map);
  ExpectPathNotFound(Checkpoint::Open(dir_.path()).status(),
                     {"model-00003-of-00002.safetensors", "model.safetensors.index.json"});
}

TEST_F(SafetensorsShards, ATensorListedInTheIndexButAbsentFromItsShardIsRefused) {
  WriteShards();
  nlohmann::json map = GoodMap();
  map["d"] = "model-00002-of-00002.safetensors";
  WriteIndex(map);
  ExpectInvalidModelFile(Checkpoint::Open(dir_.path()).status(),
                         {"tensor 'd'", "missing from shard 'model-00002-of-00002.safetensors'"});
}

TEST_F(SafetensorsShards, ShardPathsLeavingTheDirectoryAreRefused) {
  WriteShards();
  for (const std::string shard :
       {"../model-00001-of-00002.safetensors", "sub/x.safetensors", "/etc/passwd", "..", ""}) {
    nlohmann::json map = GoodMap();
    map["a"] = shard;
    WriteIndex(map);
    ExpectInvalidModelFile(Checkpoint::Open(dir_.path()).status(), {"tensor 'a'", "shard"});
  }
}

TEST_F(SafetensorsShards, MalformedIndexFilesAreInvalidModelFiles) {
  WriteShards();
  WriteBytes(dir_.File("model.safetensors.index.json"), "{not json");
  ExpectInvalidModelFile(Checkpoint::Open(dir_.path()).status(),
                         {"model.safetensors.index.json", "index is not valid JSON"});
  WriteBytes(dir_.File("model.safetensors.index.json"), R"({"weight_map": []})");
  ExpectInvalidModelFile(Checkpoint::Open(dir_.path()).status(), {"weight_map"});
  WriteIndex(nlohmann::json::object());
  ExpectInvalidModelFile(Checkpoint::Open(dir_.path()).status(), {"weight_map is empty"});
  WriteIndex({{"a", 3}});
  ExpectInvalidModelFile(Checkpoint::Open(dir_.path()).status(), {"tensor 'a'"});
}

TEST_F(SafetensorsShards, ADirectoryPrefersModelSafetensorsOverTheIndex) {
  WriteShards();
  WriteIndex(GoodMap());
  ASSERT_TRUE(WriteFile(dir_.File("model.safetensors"), {F32Tensor("only", {1}, b_)}, {}).ok());
  absl::StatusOr<Checkpoint> checkpoint = Checkpoint::Open(dir_.path());
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  EXPECT_THAT(checkpoint->TensorNames(), ElementsAre("only"));
}

TEST(SafetensorsCheckpoint, MissingPathsAndEmptyDirectoriesArePathNotFound) {
  TempDir dir;
  ExpectPathNotFound(Checkpoint::Open(dir.File("nothing.safetensors")).status(),
                     {"nothing.safetensors"});
  ExpectPathNotFound(TensorFile::Open(dir.File("nothing.safetensors")).status(), {});
  ExpectPathNotFound(Checkpoint::Open(dir.path()).status(), {"model.safetensors"});
}

TEST(SafetensorsCheckpoint, ADirectoryIsNotATensorFile) {
  TempDir dir;
  ExpectInvalidModelFile(TensorFile::Open(dir.path()).status(), {"not a regular file"});
}

TEST(SafetensorsCheckpoint, AMissingTensorNamesTheTensor) {
  TempDir dir;
  const std::vector<float> x = {1.0f};
  ASSERT_TRUE(WriteFile(dir.File("model.safetensors"), {F32Tensor("x", {1}, x)}, {}).ok());
  absl::StatusOr<Checkpoint> checkpoint = Checkpoint::Open(dir.path());
  ASSERT_TRUE(checkpoint.ok());
  ExpectInvalidModelFile(checkpoint->Get("h.0.attn.c_attn.weight").status(),
                         {"missing tensor 'h.0.attn.c_attn.weight'", "model.safetensors"});
}

// ---------------------------------------------------------------------------------------------
// Malformed headers: every one is INVALID_MODEL_FILE naming the file and the tensor.

constexpr char kLabel[] = "model.safetensors";

TEST(SafetensorsMalformed, AHeaderLengthLargerThanTheFileIsRefused) {
  const std::string bytes = LittleEndian64(1000) + "{}";
  ExpectInvalidModelFile(Parse(bytes).status(), {kLabel, "header length 1000", "2 bytes"});
  ExpectInvalidModelFile(Parse(LittleEndian64(~uint64_t{0}) + "{}").status(), {"header length"});
}

TEST(SafetensorsMalformed, AHeaderLengthAboveTheLimitIsRefused) {
  ExpectInvalidModelFile(Parse(LittleEndian64(kMaxHeaderBytes + 1) + "{}").status(),
                         {"exceeds the limit"});
}

TEST(SafetensorsMalformed, FilesShorterThanEightBytesAreTruncated) {
  TempDir dir;
  for (size_t size : {0, 1, 7}) {
    const std::string path = dir.File("short.safetensors");
    WriteBytes(path, std::string(size, '\x01'));
    ExpectInvalidModelFile(TensorFile::Open(path).status(), {path, "too short"});
    ExpectInvalidModelFile(Checkpoint::Open(path).status(), {path, "too short"});
  }
}

TEST(SafetensorsMalformed, InvalidJsonIsRefused) {
  for (const std::string& json :
       std::vector<std::string>{"{", "{\"a\":}", "", "{\"a\": {\"dtype\": \"F32\"", "{}x",
                                "{\"\xff\": 1}", std::string("{}\0", 3), std::string("{}\0x", 4)}) {
    ExpectInvalidModelFile(Parse(FileBytes(json, "")).status(), {kLabel, "not valid JSON"});
  }
}

// A header is read by a program that only trusts its length: a value nested a million levels deep
// (2 MB, well under the header limit) must be refused, not recursed into until the stack runs out.
TEST(SafetensorsMalformed, AHeaderNestedTooDeeplyIsRefused) {
  const std::string deep = "{\"w\": " + std::string(1'000'000, '[') + std::string(1'000'000, ']') + "}";
  ExpectInvalidModelFile(Parse(FileBytes(deep, "")).status(), {kLabel, "nested deeper than 64 levels"});
}

TEST(SafetensorsMalformed, JsonThatIsNotAnObjectIsRefused) {
  for (const std::string json : {"[]", "3", "\"x\"", "null"}) {
    ExpectInvalidModelFile(Parse(FileBytes(json, "")).status(), {kLabel, "not a JSON object"});
  }
}

TEST(SafetensorsMalformed, AnUnknownDtypeNamesTheTensorAndTheDtype) {
  const std::string json = R"({"w":{"dtype":"F8_E4M3","shape":[1],"data_offsets":[0,1]}})";
  ExpectInvalidModelFile(Parse(FileBytes(json, "x")).status(),
                         {kLabel, "tensor 'w'", "unknown dtype 'F8_E4M3'"});
  ExpectInvalidModelFile(
      Parse(FileBytes(R"({"w":{"dtype":3,"shape":[1],"data_offsets":[0,1]}})", "x")).status(),
      {"tensor 'w'", "dtype"});
}

TEST(SafetensorsMalformed, ANegativeShapeEntryNamesTheTensor) {
  const std::string json = R"({"w":{"dtype":"F32","shape":[2,-1],"data_offsets":[0,0]}})";
  ExpectInvalidModelFile(Parse(FileBytes(json, "")).status(),
                         {kLabel, "tensor 'w'", "shape entry -1 is negative"});
}

TEST(SafetensorsMalformed, NonIntegerShapesAreRefused) {
  for (const std::string shape : {"[1.5]", "[\"2\"]", "3", "[9223372036854775808]", "[1e30]"}) {
    const std::string json =
        absl::StrCat(R"({"w":{"dtype":"U8","shape":)", shape, R"(,"data_offsets":[0,0]}})");
    ExpectInvalidModelFile(Parse(FileBytes(json, "")).status(), {"tensor 'w'", "shape"});
  }
}

TEST(SafetensorsMalformed, AShapeWhoseProductOverflowsIsRefused) {
  const std::string json =
      R"({"w":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,0]}})";
  ExpectInvalidModelFile(Parse(FileBytes(json, "")).status(), {"tensor 'w'", "too large"});
  const std::string bytes_overflow =
      R"({"w":{"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,0]}})";
  ExpectInvalidModelFile(Parse(FileBytes(bytes_overflow, "")).status(),
                         {"tensor 'w'", "too large"});
}

TEST(SafetensorsMalformed, OffsetsOutOfRangeNameTheTensor) {
  const std::string json = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  ExpectInvalidModelFile(
      Parse(FileBytes(json, "1234")).status(),
      {kLabel, "tensor 'w'", "data_offsets [0, 8) exceed the data buffer of 4 bytes"});
  const std::string huge =
      R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[18446744073709551615,18446744073709551615]}})";
  ExpectInvalidModelFile(Parse(FileBytes(huge, "12345678")).status(), {"tensor 'w'", "exceed"});
  const std::string reversed = R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})";
  ExpectInvalidModelFile(Parse(FileBytes(reversed, "12345678")).status(),
                         {"tensor 'w'", "end before they begin"});
  for (const std::string offsets : {"[0]", "[0,4,8]", "[-1,3]", "[0,4.5]", "{}"}) {
    const std::string bad =
        absl::StrCat(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":)", offsets, "}}");
    ExpectInvalidModelFile(Parse(FileBytes(bad, "12345678")).status(),
                           {"tensor 'w'", "data_offsets"});
  }
}

TEST(SafetensorsMalformed, ASizeMismatchGivesTheExpectedMessage) {
  const std::string json =
      R"({"h.0.attn.c_attn.weight":{"dtype":"F32","shape":[3,4],"data_offsets":[0,12]}})";
  absl::Status status = Parse(FileBytes(json, std::string(48, '\0'))).status();
  ExpectInvalidModelFile(status, {});
  EXPECT_EQ(status.message(),
            "model.safetensors: tensor 'h.0.attn.c_attn.weight': data_offsets [0, 12) do not match "
            "shape [3, 4] of F32 (48 bytes)");
}

TEST(SafetensorsMalformed, OverlappingTensorsNameBothTensors) {
  const std::string json = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                           R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})";
  ExpectInvalidModelFile(Parse(FileBytes(json, std::string(12, '\0'))).status(),
                         {kLabel, "tensor 'b'", "overlap tensor 'a'"});
}

TEST(SafetensorsMalformed, NonStringMetadataIsRefused) {
  const std::string json = R"({"__metadata__":{"format":"pt","step":3}})";
  ExpectInvalidModelFile(Parse(FileBytes(json, "")).status(),
                         {kLabel, "__metadata__ value of 'step' is not a string"});
  ExpectInvalidModelFile(Parse(FileBytes(R"({"__metadata__":["x"]})", "")).status(),
                         {"__metadata__ is not a JSON object"});
}

TEST(SafetensorsMalformed, DuplicateTensorNamesAreRefused) {
  const std::string json = R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                           R"("a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})";
  ExpectInvalidModelFile(Parse(FileBytes(json, "xy")).status(),
                         {kLabel, "tensor 'a'", "appears twice"});
  ExpectInvalidModelFile(Parse(FileBytes(R"({"__metadata__":{},"__metadata__":{}})", "")).status(),
                         {"__metadata__ appears twice"});
}

TEST(SafetensorsMalformed, EntriesMissingFieldsOrNotObjectsNameTheTensor) {
  for (const std::string entry :
       {R"({"shape":[1],"data_offsets":[0,1]})", R"({"dtype":"U8","data_offsets":[0,1]})",
        R"({"dtype":"U8","shape":[1]})", "[]", "7"}) {
    const std::string json = absl::StrCat(R"({"w":)", entry, "}");
    ExpectInvalidModelFile(Parse(FileBytes(json, "x")).status(), {kLabel, "tensor 'w'"});
  }
}

TEST(SafetensorsMalformed, ControlCharactersInNamesAreEscapedInMessages) {
  const std::string json = R"({"a\nb":{"dtype":"X","shape":[1],"data_offsets":[0,1]}})";
  ExpectInvalidModelFile(Parse(FileBytes(json, "x")).status(), {"tensor 'a\\x0ab'"});
}

// ---------------------------------------------------------------------------------------------
// Valid corner cases the parser must accept.

TEST(SafetensorsHeader, AcceptsSpacePaddingGapsEmptyTensorsAndExtraKeys) {
  const std::string json = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"extra":1},)"
                           R"("e":{"dtype":"F32","shape":[0],"data_offsets":[2,2]},)"
                           R"("s":{"dtype":"BOOL","shape":[],"data_offsets":[8,9]}}    )";
  absl::StatusOr<Header> header = Parse(FileBytes(json, std::string(9, '\0')));
  ASSERT_TRUE(header.ok()) << header.status();
  ASSERT_EQ(header->tensors.size(), 3u);
  EXPECT_EQ(header->tensors[0].name, "a");
  EXPECT_EQ(header->tensors[2].dtype, DType::kBool);
  EXPECT_EQ(header->data_start, 8 + json.size());
}

TEST(SafetensorsHeader, AcceptsMinusZeroAndZeroSizedShapesWithHugeDimensions) {
  const std::string json =
      R"({"z":{"dtype":"F32","shape":[0,9223372036854775807],"data_offsets":[-0,0]}})";
  absl::StatusOr<Header> header = ParseHeader(json, 0, kLabel);
  ASSERT_TRUE(header.ok()) << header.status();
  EXPECT_EQ(ElementCount(header->tensors[0].shape), 0);
}

// Found by a hostile review: a header of 32k entries took 13-19 s to parse, 300k over two minutes,
// and nothing could interrupt it. Parsing is linear now, entries are bounded while parsing, and
// a stop check ends a long parse.
std::string HeaderOfScalars(int64_t tensors) {
  std::string text = "{";
  for (int64_t i = 0; i < tensors; ++i) {
    absl::StrAppend(&text, i == 0 ? "" : ",", "\"t", i, "\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[", i,
                    ",", i + 1, "]}");
  }
  return text + "}";
}

TEST(SafetensorsBounds, AHeaderAtTheTensorLimitParsesAndOneMoreIsRefusedWhileParsing) {
  auto full = ParseHeader(HeaderOfScalars(kMaxTensorsPerFile), kMaxTensorsPerFile, "big.safetensors");
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_EQ(static_cast<int64_t>(full->tensors.size()), kMaxTensorsPerFile);
  const absl::Status over = ParseHeader(HeaderOfScalars(kMaxTensorsPerFile + 2), kMaxTensorsPerFile + 2,
                                        "big.safetensors").status();
  EXPECT_EQ(ErrorReasonOf(over), "INVALID_MODEL_FILE");
  EXPECT_EQ(over.message(), "big.safetensors: header has an object or array of more than 262145 entries");
}

TEST(SafetensorsBounds, AStopCheckEndsALongHeaderParseWithCancelled) {
  int asked = 0;
  const absl::Status stopped =
      ParseHeader(HeaderOfScalars(20000), 20000, "slow.safetensors", [&asked] { return ++asked >= 2; }).status();
  EXPECT_EQ(stopped.code(), absl::StatusCode::kCancelled) << stopped;
  EXPECT_NE(stopped.message().find("slow.safetensors: stopped while its header was read"), std::string::npos)
      << stopped.message();
  EXPECT_EQ(asked, 2);
}

}  // namespace
}  // namespace posbias::safetensors
