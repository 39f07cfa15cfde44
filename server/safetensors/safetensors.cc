#include "server/safetensors/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <set>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "server/jsontext/bounded_json.h"
#include "server/status/error.h"

namespace posbias::safetensors {
namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors data are little-endian; this room assumes a little-endian host");

using Json = nlohmann::json;
using OrderedJson = nlohmann::ordered_json;

constexpr char kMetadataKey[] = "__metadata__";
constexpr char kSingleFileName[] = "model.safetensors";
constexpr char kIndexFileName[] = "model.safetensors.index.json";
constexpr int64_t kMaxInt64 = std::numeric_limits<int64_t>::max();

// ---------------------------------------------------------------------------------------------
// Errors.

// Text as it appears in a message: printable ASCII kept, other bytes (control characters, UTF-8
// sequences, which may be invalid in a malformed file) written \xNN, at most 256 bytes kept.
std::string Printable(const std::string& text) {
  constexpr size_t kMaxBytes = 256;
  std::string out;
  for (size_t i = 0; i < text.size() && i < kMaxBytes; ++i) {
    const unsigned char byte = static_cast<unsigned char>(text[i]);
    if (byte >= 0x20 && byte < 0x7f && byte != '\\') {
      out.push_back(static_cast<char>(byte));
    } else {
      absl::StrAppend(&out, "\\x", absl::Hex(byte, absl::kZeroPad2));
    }
  }
  if (text.size() > kMaxBytes) out += "...";
  return out;
}

absl::Status FileError(const std::string& label, const std::string& message) {
  return ErrorWithReason(absl::StatusCode::kInvalidArgument, ErrorReason::kInvalidModelFile,
                         absl::StrCat(label, ": ", message));
}

absl::Status TensorError(const std::string& label, const std::string& name,
                         const std::string& message) {
  return FileError(label, absl::StrCat("tensor '", Printable(name), "': ", message));
}

absl::Status NotFoundError(const std::string& path, const std::string& message) {
  return ErrorWithReason(absl::StatusCode::kNotFound, ErrorReason::kPathNotFound,
                         absl::StrCat(path, ": ", message));
}

absl::Status Stopped(const std::string& label, const std::string& what) {
  return absl::CancelledError(absl::StrCat(label, ": stopped while its ", what,
                                           " was read (the call's deadline passed, it was cancelled, or the "
                                           "server is shutting down)"));
}

absl::Status ArgumentError(const std::string& message) {
  return ErrorWithReason(absl::StatusCode::kInvalidArgument, ErrorReason::kInvalidArgument, message);
}

// An operating-system failure with errno `error`: PATH_NOT_FOUND for a missing path, else internal.
absl::Status OsError(const std::string& path, const std::string& action, int error) {
  const std::string reason = std::error_code(error, std::generic_category()).message();
  if (error == ENOENT || error == ENOTDIR) return NotFoundError(path, "no such file or directory");
  return ErrorWithReason(absl::StatusCode::kInternal, ErrorReason::kInternalError,
                         absl::StrCat(path, ": cannot ", action, ": ", reason));
}

// ---------------------------------------------------------------------------------------------
// Dtypes and shapes.

struct DTypeEntry {
  DType dtype;
  const char* name;
  size_t size;
};

constexpr DTypeEntry kDTypes[] = {
    {DType::kF64, "F64", 8},   {DType::kF32, "F32", 4}, {DType::kF16, "F16", 2},
    {DType::kBF16, "BF16", 2}, {DType::kI64, "I64", 8}, {DType::kI32, "I32", 4},
    {DType::kI16, "I16", 2},   {DType::kI8, "I8", 1},   {DType::kU8, "U8", 1},
    {DType::kBool, "BOOL", 1},
};

const DTypeEntry& EntryOf(DType dtype) {
  for (const DTypeEntry& entry : kDTypes) {
    if (entry.dtype == dtype) return entry;
  }
  return kDTypes[0];  // Unreachable for a valid enumerator.
}

std::optional<DType> DTypeFromName(const std::string& name) {
  for (const DTypeEntry& entry : kDTypes) {
    if (name == entry.name) return entry.dtype;
  }
  return std::nullopt;
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

std::string RangeText(uint64_t begin, uint64_t end) {
  return absl::StrCat("[", begin, ", ", end, ")");
}

// Bytes of a tensor: nullopt when the element count (of the non-zero entries, so that any partial
// product fits in int64) exceeds int64 or the byte count exceeds uint64.
std::optional<uint64_t> ByteCount(const std::vector<int64_t>& shape, DType dtype) {
  uint64_t nonzero_product = 1;
  bool has_zero = false;
  for (int64_t dim : shape) {
    if (dim < 0) return std::nullopt;
    if (dim == 0) has_zero = true;
    if (dim == 0) continue;
    if (__builtin_mul_overflow(nonzero_product, static_cast<uint64_t>(dim), &nonzero_product) ||
        nonzero_product > static_cast<uint64_t>(kMaxInt64)) {
      return std::nullopt;
    }
  }
  if (has_zero) return 0;
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(nonzero_product, DTypeSize(dtype), &bytes)) return std::nullopt;
  return bytes;
}

// A JSON number as a non-negative integer (accepting "-0"), or nullopt.
std::optional<uint64_t> AsUnsigned(const Json& value) {
  if (value.is_number_unsigned()) return value.get<uint64_t>();
  if (value.is_number_integer() && value.get<int64_t>() == 0) return 0;
  return std::nullopt;
}

// ---------------------------------------------------------------------------------------------
// Header parsing.

// Parses JSON text in linear time (jsontext/bounded_json.h); *duplicate receives the first
// top-level key seen twice (the parser keeps the last value, so duplicates can only be seen while
// parsing). `stop` is asked as the parse goes (a long header is a deadline's or a shutdown's).
absl::StatusOr<Json> ParseJson(const std::string& text, const std::string& label, const std::string& what,
                               std::optional<std::string>* duplicate, int64_t max_entries, const StopCheck& stop) {
  std::set<std::string> seen;
  jsontext::ParseBounds bounds;
  bounds.max_depth = kMaxJsonDepth;
  bounds.max_entries = max_entries;
  bounds.stop = stop;
  bounds.top_level_key = [&](const std::string& key) {
    if (!duplicate->has_value() && !seen.insert(key).second) *duplicate = key;
  };
  jsontext::Parsed parsed = jsontext::Parse(text, bounds);
  if (parsed.outcome == jsontext::ParseOutcome::kStopped) return Stopped(label, what);
  if (parsed.outcome != jsontext::ParseOutcome::kOk) {
    return FileError(label, absl::StrCat(what, " ", jsontext::Describe(parsed, bounds),
                                         parsed.outcome == jsontext::ParseOutcome::kSyntaxError ? "; expected a JSON object" : ""));
  }
  return std::move(parsed.value);
}

absl::Status ParseShape(const Json& value, const std::string& label, const std::string& name,
                        std::vector<int64_t>* shape) {
  if (!value.is_array()) return TensorError(label, name, "shape is not an array");
  for (const Json& entry : value) {
    std::optional<uint64_t> dim = AsUnsigned(entry);
    if (!dim.has_value() && entry.is_number_integer()) {
      return TensorError(label, name, absl::StrCat("shape entry ", entry.dump(), " is negative"));
    }
    if (!dim.has_value() || *dim > static_cast<uint64_t>(kMaxInt64)) {
      return TensorError(
          label, name,
          absl::StrCat("shape entry ", entry.dump(), " is not an integer in [0, 2^63)"));
    }
    shape->push_back(static_cast<int64_t>(*dim));
  }
  return absl::OkStatus();
}

absl::Status ParseOffsets(const Json& value, uint64_t data_size, const std::string& label,
                          TensorInfo* info) {
  if (!value.is_array() || value.size() != 2 || !AsUnsigned(value[0]) || !AsUnsigned(value[1])) {
    return TensorError(label, info->name, "data_offsets is not a pair of non-negative integers");
  }
  info->begin = *AsUnsigned(value[0]);
  info->end = *AsUnsigned(value[1]);
  if (info->begin > info->end) {
    return TensorError(
        label, info->name,
        absl::StrCat("data_offsets ", RangeText(info->begin, info->end), " end before they begin"));
  }
  if (info->end > data_size) {
    return TensorError(label, info->name,
                       absl::StrCat("data_offsets ", RangeText(info->begin, info->end),
                                    " exceed the data buffer of ", data_size, " bytes"));
  }
  return absl::OkStatus();
}

absl::Status ParseDType(const Json& entry, const std::string& label, TensorInfo* info) {
  auto it = entry.find("dtype");
  if (it == entry.end() || !it->is_string()) {
    return TensorError(label, info->name, "dtype is missing or not a string");
  }
  std::optional<DType> dtype = DTypeFromName(it->get<std::string>());
  if (!dtype.has_value()) {
    return TensorError(label, info->name,
                       absl::StrCat("unknown dtype '", Printable(it->get<std::string>()),
                                    "': allowed F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL"));
  }
  info->dtype = *dtype;
  return absl::OkStatus();
}

absl::Status CheckSize(const std::string& label, const TensorInfo& info) {
  std::optional<uint64_t> bytes = ByteCount(info.shape, info.dtype);
  if (!bytes.has_value()) {
    return TensorError(label, info.name,
                       absl::StrCat("shape ", ShapeText(info.shape), " of ", DTypeName(info.dtype),
                                    " is too large (element or byte count overflows)"));
  }
  if (info.end - info.begin != *bytes) {
    return TensorError(label, info.name,
                       absl::StrCat("data_offsets ", RangeText(info.begin, info.end),
                                    " do not match shape ", ShapeText(info.shape), " of ",
                                    DTypeName(info.dtype), " (", *bytes, " bytes)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<TensorInfo> ParseTensor(const std::string& name, const Json& entry,
                                       uint64_t data_size, const std::string& label) {
  TensorInfo info;
  info.name = name;
  if (!entry.is_object()) return TensorError(label, name, "entry is not a JSON object");
  if (absl::Status status = ParseDType(entry, label, &info); !status.ok()) return status;
  auto shape = entry.find("shape");
  if (shape == entry.end()) return TensorError(label, name, "shape is missing");
  if (absl::Status status = ParseShape(*shape, label, name, &info.shape); !status.ok()) {
    return status;
  }
  auto offsets = entry.find("data_offsets");
  if (offsets == entry.end()) return TensorError(label, name, "data_offsets is missing");
  if (absl::Status status = ParseOffsets(*offsets, data_size, label, &info); !status.ok()) {
    return status;
  }
  if (absl::Status status = CheckSize(label, info); !status.ok()) return status;
  return info;
}

absl::Status ParseMetadata(const Json& value, const std::string& label,
                           std::map<std::string, std::string>* metadata) {
  if (!value.is_object()) return FileError(label, "__metadata__ is not a JSON object");
  for (const auto& [key, entry] : value.items()) {
    if (!entry.is_string()) {
      return FileError(
          label, absl::StrCat("__metadata__ value of '", Printable(key), "' is not a string"));
    }
    (*metadata)[key] = entry.get<std::string>();
  }
  return absl::OkStatus();
}

// Tensors sorted by name; overlaps are checked on a copy of the non-empty ranges sorted by begin.
absl::Status CheckOverlaps(const std::vector<TensorInfo>& tensors, const std::string& label) {
  std::vector<const TensorInfo*> ranges;
  for (const TensorInfo& tensor : tensors) {
    if (tensor.end > tensor.begin) ranges.push_back(&tensor);
  }
  std::sort(ranges.begin(), ranges.end(),
            [](const TensorInfo* a, const TensorInfo* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < ranges.size(); ++i) {
    const TensorInfo& previous = *ranges[i - 1];
    const TensorInfo& current = *ranges[i];
    if (current.begin < previous.end) {
      return TensorError(
          label, current.name,
          absl::StrCat("data_offsets ", RangeText(current.begin, current.end), " overlap tensor '",
                       Printable(previous.name), "' at ", RangeText(previous.begin, previous.end)));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Header> HeaderFromJson(const Json& json, uint64_t data_size,
                                      const std::string& label) {
  if (!json.is_object()) return FileError(label, "header is not a JSON object");
  Header header;
  for (const auto& [key, value] : json.items()) {
    if (key == kMetadataKey) {
      if (absl::Status status = ParseMetadata(value, label, &header.metadata); !status.ok()) {
        return status;
      }
      continue;
    }
    absl::StatusOr<TensorInfo> info = ParseTensor(key, value, data_size, label);
    if (!info.ok()) return info.status();
    header.tensors.push_back(*std::move(info));
  }
  // nlohmann::json keeps object keys sorted, so the tensors already are sorted by name.
  if (absl::Status status = CheckOverlaps(header.tensors, label); !status.ok()) return status;
  return header;
}

uint64_t ReadLittleEndian64(const std::byte* bytes) {
  uint64_t value = 0;
  std::memcpy(&value, bytes, sizeof(value));
  return value;
}

// ---------------------------------------------------------------------------------------------
// Files.

std::string JoinPath(const std::string& directory, const std::string& name) {
  if (directory.empty()) return name;
  if (directory.back() == '/') return directory + name;
  return absl::StrCat(directory, "/", name);
}

std::string DirectoryOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

bool EndsWith(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// A shard name must name a file in the index's directory.
bool IsSafeShardName(const std::string& name) {
  return !name.empty() && name != "." && name.find('/') == std::string::npos &&
         name.find('\\') == std::string::npos && name.find("..") == std::string::npos &&
         name.find('\0') == std::string::npos;
}

// Writes all of data to fd, retrying on EINTR and short writes; false with errno set on failure.
bool WriteAll(int fd, const void* data, size_t size) {
  const char* bytes = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t wrote = ::write(fd, bytes, size);
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote == 0) errno = EIO;
    if (wrote <= 0) return false;
    bytes += wrote;
    size -= static_cast<size_t>(wrote);
  }
  return true;
}

// ---------------------------------------------------------------------------------------------
// Writing.

absl::Status CheckTensorToWrite(const TensorToWrite& tensor, std::set<std::string>* names) {
  const std::string where = absl::StrCat("tensor '", Printable(tensor.name), "': ");
  if (tensor.name.empty() || tensor.name == kMetadataKey) {
    return ArgumentError(absl::StrCat(where, "name is empty or reserved"));
  }
  if (!names->insert(tensor.name).second) {
    return ArgumentError(absl::StrCat(where, "name appears twice"));
  }
  std::optional<uint64_t> bytes = ByteCount(tensor.shape, tensor.dtype);
  if (!bytes.has_value() || *bytes != tensor.size_bytes) {
    return ArgumentError(absl::StrCat(where, tensor.size_bytes, " bytes do not match shape ",
                                      ShapeText(tensor.shape), " of ", DTypeName(tensor.dtype)));
  }
  return absl::OkStatus();
}

// The header JSON, padded with spaces so that 8 + its size is a multiple of 8.
absl::StatusOr<std::string> BuildHeader(const std::vector<TensorToWrite>& tensors,
                                        const std::map<std::string, std::string>& metadata) {
  OrderedJson json = OrderedJson::object();
  if (!metadata.empty()) json[kMetadataKey] = metadata;
  uint64_t offset = 0;
  for (const TensorToWrite& tensor : tensors) {
    OrderedJson entry = OrderedJson::object();
    entry["dtype"] = DTypeName(tensor.dtype);
    entry["shape"] = tensor.shape;
    entry["data_offsets"] = {offset, offset + tensor.size_bytes};
    json[tensor.name] = std::move(entry);
    offset += tensor.size_bytes;
  }
  std::string text;
  try {
    text = json.dump();
  } catch (const OrderedJson::exception& error) {
    return ArgumentError(absl::StrCat("header cannot be written: ", error.what()));
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

// The file's bytes after its checks: the length prefix, the header, each tensor's data, handed
// to `sink` in order. False when the sink refused (errno set by a file's sink); a status `data`
// returns goes to *refused.
bool StreamContents(const ByteSink& sink, const std::string& header, const std::vector<TensorToWrite>& tensors,
                    const TensorData& data, absl::Status* refused) {
  const uint64_t length = header.size();
  if (!sink(&length, sizeof(length)) || !sink(header.data(), header.size())) return false;
  for (size_t i = 0; i < tensors.size(); ++i) {
    absl::StatusOr<const void*> bytes = data(i);
    if (!bytes.ok()) {
      *refused = bytes.status();
      return false;
    }
    if (*bytes == nullptr && tensors[i].size_bytes > 0) {
      *refused = ArgumentError(absl::StrCat("tensor '", Printable(tensors[i].name), "': data is null"));
      return false;
    }
    if (!sink(*bytes, tensors[i].size_bytes)) return false;
  }
  return true;
}

// The tensors checked and the header built: what WriteFile and StreamFile share.
absl::StatusOr<std::string> CheckedHeader(const std::vector<TensorToWrite>& tensors,
                                          const std::map<std::string, std::string>& metadata) {
  std::set<std::string> names;
  for (const TensorToWrite& tensor : tensors) {
    if (absl::Status status = CheckTensorToWrite(tensor, &names); !status.ok()) return status;
  }
  return BuildHeader(tensors, metadata);
}

std::string TemporaryPath(const std::string& path) {
  static std::atomic<uint64_t> counter{0};
  return absl::StrCat(path, ".tmp.", ::getpid(), ".", counter.fetch_add(1));
}

// ---------------------------------------------------------------------------------------------
// Float conversions.

float FloatFromBits(uint32_t bits) { return std::bit_cast<float>(bits); }
uint32_t BitsOfFloat(float value) { return std::bit_cast<uint32_t>(value); }

// |value| < 2^-14 (bits without sign): a half subnormal or zero, rounded to nearest even.
uint16_t HalfSubnormalBits(uint32_t magnitude) {
  const int exponent = static_cast<int>(magnitude >> 23) - 127;  // value = m * 2^(exponent - 23).
  if (exponent < -25)
    return 0;  // Below half of the smallest subnormal 2^-24 (float subnormals too).
  const uint32_t mantissa = (magnitude & 0x7fffff) | 0x800000;
  const int shift = -(exponent + 1);  // In [14, 24]: units of 2^-24 = m >> shift.
  const uint32_t quotient = mantissa >> shift;
  const uint32_t remainder = mantissa & ((1u << shift) - 1);
  const uint32_t half = 1u << (shift - 1);
  const bool round_up = remainder > half || (remainder == half && (quotient & 1) != 0);
  return static_cast<uint16_t>(quotient +
                               (round_up ? 1 : 0));  // May carry into the smallest normal.
}

// 2^-14 <= |value| < 65520 (bits without sign): a normal half, rounded to nearest even.
uint16_t HalfNormalBits(uint32_t magnitude) {
  const uint32_t exponent = (magnitude >> 23) - 127 + 15;
  const uint32_t mantissa = magnitude & 0x7fffff;
  uint32_t bits = (exponent << 10) | (mantissa >> 13);
  const uint32_t remainder = mantissa & 0x1fff;
  if (remainder > 0x1000 || (remainder == 0x1000 && (bits & 1) != 0)) ++bits;  // Carries are right.
  return static_cast<uint16_t>(bits);
}

template <typename Value>
Value LoadUnaligned(const std::byte* data, size_t index) {
  Value value;
  std::memcpy(&value, data + index * sizeof(Value), sizeof(Value));
  return value;
}

template <typename Value>
void StoreUnaligned(Value value, std::byte* out, size_t index) {
  std::memcpy(out + index * sizeof(Value), &value, sizeof(Value));
}

}  // namespace

// -----------------------------------------------------------------------------------------------
// Dtypes.

std::string DTypeName(DType dtype) { return EntryOf(dtype).name; }

size_t DTypeSize(DType dtype) { return EntryOf(dtype).size; }

int64_t ElementCount(const std::vector<int64_t>& shape) {
  int64_t count = 1;
  for (int64_t dim : shape) count *= dim;
  return count;
}

// -----------------------------------------------------------------------------------------------
// Parsing.

absl::StatusOr<Header> ParseHeader(const std::string& header_json, uint64_t data_size,
                                   const std::string& file_label, const StopCheck& stop) {
  std::optional<std::string> duplicate;
  // One entry more than the tensors: __metadata__.
  absl::StatusOr<Json> json = ParseJson(header_json, file_label, "header", &duplicate, kMaxTensorsPerFile + 1, stop);
  if (!json.ok()) return json.status();
  if (duplicate.has_value()) {
    if (*duplicate == kMetadataKey) return FileError(file_label, "__metadata__ appears twice");
    return TensorError(file_label, *duplicate, "appears twice in the header");
  }
  absl::StatusOr<Header> header = HeaderFromJson(*json, data_size, file_label);
  if (header.ok()) header->data_start = 8 + header_json.size();
  return header;
}

namespace {

// The length prefix N of a file of `size` bytes, checked: N <= kMaxHeaderBytes, N <= size - 8.
absl::Status CheckHeaderLength(uint64_t length, uint64_t size, const std::string& file_label) {
  if (length > kMaxHeaderBytes) {
    return FileError(file_label, absl::StrCat("header length ", length, " exceeds the limit of ",
                                              kMaxHeaderBytes, " bytes"));
  }
  if (length > size - 8) {
    return FileError(file_label, absl::StrCat("header length ", length, " exceeds the ", size - 8,
                                              " bytes after the length prefix"));
  }
  return absl::OkStatus();
}

absl::Status TooShort(uint64_t size, const std::string& file_label) {
  return FileError(file_label, absl::StrCat("file of ", size, " bytes is too short for the 8-byte header length"));
}

}  // namespace

absl::StatusOr<Header> ParseFile(const std::byte* bytes, uint64_t size,
                                 const std::string& file_label) {
  if (size < 8) return TooShort(size, file_label);
  const uint64_t length = ReadLittleEndian64(bytes);
  if (auto status = CheckHeaderLength(length, size, file_label); !status.ok()) return status;
  const std::string header_json(reinterpret_cast<const char*>(bytes + 8), length);
  return ParseHeader(header_json, size - 8 - length, file_label);
}

// -----------------------------------------------------------------------------------------------
// TensorFile.

namespace {

// Reads bytes [offset, offset + size) of the open file into `out`, resuming after short reads
// and interruptions. A read that meets the end of the file first is INVALID_MODEL_FILE: the file
// shrank after it was opened (`what` names the part that was being read).
absl::Status ReadAt(int fd, uint64_t offset, uint64_t size, std::byte* out, const std::string& label,
                    const std::string& what) {
  uint64_t done = 0;
  while (done < size) {
    const size_t chunk = static_cast<size_t>(std::min<uint64_t>(size - done, uint64_t{1} << 30));
    const ssize_t got = ::pread(fd, out + done, chunk, static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return OsError(label, "read", errno);
    if (got == 0) {
      struct stat info {};
      const uint64_t now = ::fstat(fd, &info) == 0 ? static_cast<uint64_t>(info.st_size) : offset + done;
      return FileError(label, absl::StrCat("the file shrank while it was read: ", what, " ends at byte ", offset + size,
                                           ", the file now has ", now, " bytes"));
    }
    done += static_cast<uint64_t>(got);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TensorFile> TensorFile::Open(const std::string& path, const files::Scope& scope, const StopCheck& stop) {
  absl::StatusOr<files::OpenFile> opened = files::OpenBeneath(scope, path);
  if (!opened.ok()) return opened.status();
  const std::string label = files::ShownPath(scope, path);
  const uint64_t size = opened->size();
  if (size < 8) return TooShort(size, label);
  std::byte prefix[8];
  if (auto status = ReadAt(opened->fd(), 0, 8, prefix, label, "the header length"); !status.ok()) return status;
  const uint64_t length = ReadLittleEndian64(prefix);
  if (auto status = CheckHeaderLength(length, size, label); !status.ok()) return status;
  std::string header_json(length, '\0');
  if (auto status = ReadAt(opened->fd(), 8, length, reinterpret_cast<std::byte*>(header_json.data()), label, "the header");
      !status.ok()) {
    return status;
  }
  absl::StatusOr<Header> header = ParseHeader(header_json, size - 8 - length, label, stop);
  if (!header.ok()) return header.status();
  TensorFile file(*std::move(opened));
  file.path_ = path;
  file.label_ = label;
  file.header_ = *std::move(header);
  return file;
}

const TensorInfo* TensorFile::Find(const std::string& name) const {
  auto it = std::lower_bound(
      header_.tensors.begin(), header_.tensors.end(), name,
      [](const TensorInfo& tensor, const std::string& key) { return tensor.name < key; });
  return it != header_.tensors.end() && it->name == name ? &*it : nullptr;
}

absl::Status TensorFile::Read(const TensorInfo& tensor, std::byte* out) const {
  return ReadAt(file_.fd(), header_.data_start + tensor.begin, tensor.end - tensor.begin, out, label_,
                absl::StrCat("tensor '", Printable(tensor.name), "'"));
}

// -----------------------------------------------------------------------------------------------
// Checkpoint.

absl::StatusOr<Checkpoint> Checkpoint::Open(const std::string& path, const files::Scope& scope, const StopCheck& stop) {
  const std::string label = files::ShownPath(scope, path);
  if (!files::HasEntry(path)) return NotFoundError(label, "no such file or directory");
  if (files::IsDirectoryBeneath(scope, path)) {
    const std::string single = JoinPath(path, kSingleFileName);
    if (files::HasEntry(single)) return OpenSingle(single, scope, stop);
    const std::string index = JoinPath(path, kIndexFileName);
    if (files::HasEntry(index)) return OpenIndex(index, scope, stop);
    return NotFoundError(
        label, absl::StrCat("directory holds neither ", kSingleFileName, " nor ", kIndexFileName));
  }
  if (EndsWith(path, ".json")) return OpenIndex(path, scope, stop);
  return OpenSingle(path, scope, stop);
}

absl::StatusOr<Checkpoint> Checkpoint::OpenSingle(const std::string& path, const files::Scope& scope,
                                                  const StopCheck& stop) {
  absl::StatusOr<TensorFile> file = TensorFile::Open(path, scope, stop);
  if (!file.ok()) return file.status();
  Checkpoint checkpoint;
  checkpoint.label_ = files::ShownPath(scope, path);
  const std::vector<TensorInfo>& tensors = file->header().tensors;
  for (size_t i = 0; i < tensors.size(); ++i) checkpoint.tensors_[tensors[i].name] = {0, i};
  checkpoint.files_.push_back(*std::move(file));
  return checkpoint;
}

namespace {

// The weight map of an index: tensor name -> shard file name, every shard name checked.
absl::StatusOr<std::map<std::string, std::string>> ReadWeightMap(const std::string& index_path,
                                                                 const files::Scope& scope, const StopCheck& stop) {
  absl::StatusOr<std::string> text = files::ReadBeneath(scope, index_path, kMaxHeaderBytes);
  if (!text.ok()) return text.status();
  const std::string label = files::ShownPath(scope, index_path);
  std::optional<std::string> duplicate;
  absl::StatusOr<Json> json = ParseJson(*text, label, "index", &duplicate, kMaxIndexEntries, stop);
  if (!json.ok()) return json.status();
  if (!json->is_object() || !json->contains("weight_map") || !(*json)["weight_map"].is_object()) {
    return FileError(label, "index is not a JSON object with a \"weight_map\" object");
  }
  std::map<std::string, std::string> weight_map;
  for (const auto& [name, shard] : (*json)["weight_map"].items()) {
    if (!shard.is_string() || !IsSafeShardName(shard.get<std::string>())) {
      return TensorError(label, name,
                         absl::StrCat("shard ", shard.dump(),
                                      " is not a file name in the index's "
                                      "directory (no '/', '\\\\' or '..')"));
    }
    weight_map[name] = shard.get<std::string>();
  }
  if (weight_map.empty()) return FileError(label, "weight_map is empty");
  return weight_map;
}

// Opens one shard; a missing shard names the index that lists it.
absl::StatusOr<TensorFile> OpenShard(const std::string& directory, const std::string& shard,
                                     const std::string& index_path, const files::Scope& scope, const StopCheck& stop) {
  const std::string shard_path = JoinPath(directory, shard);
  absl::StatusOr<TensorFile> file = TensorFile::Open(shard_path, scope, stop);
  if (!file.ok() && absl::IsNotFound(file.status())) {
    return NotFoundError(files::ShownPath(scope, shard_path),
                         absl::StrCat("shard listed in ", files::ShownPath(scope, index_path), " does not exist"));
  }
  return file;
}

}  // namespace

absl::StatusOr<Checkpoint> Checkpoint::OpenIndex(const std::string& index_path, const files::Scope& scope,
                                                  const StopCheck& stop) {
  absl::StatusOr<std::map<std::string, std::string>> weight_map = ReadWeightMap(index_path, scope, stop);
  if (!weight_map.ok()) return weight_map.status();
  std::map<std::string, size_t> shard_files;  // Sorted, so files_[0] is the first shard by name.
  for (const auto& [name, shard] : *weight_map) shard_files.emplace(shard, 0);
  Checkpoint checkpoint;
  checkpoint.label_ = files::ShownPath(scope, index_path);
  const std::string directory = DirectoryOf(index_path);
  for (auto& [shard, file_index] : shard_files) {
    absl::StatusOr<TensorFile> file = OpenShard(directory, shard, index_path, scope, stop);
    if (!file.ok()) return file.status();
    file_index = checkpoint.files_.size();
    checkpoint.files_.push_back(*std::move(file));
  }
  for (const auto& [name, shard] : *weight_map) {
    const size_t file_index = shard_files[shard];
    const TensorFile& file = checkpoint.files_[file_index];
    const TensorInfo* info = file.Find(name);
    if (info == nullptr) {
      return TensorError(checkpoint.label_, name,
                         absl::StrCat("listed in the weight map but missing from "
                                      "shard '",
                                      Printable(shard), "'"));
    }
    const size_t tensor_index = static_cast<size_t>(info - file.header().tensors.data());
    checkpoint.tensors_[name] = {file_index, tensor_index};
  }
  return checkpoint;
}

std::vector<std::string> Checkpoint::TensorNames() const {
  std::vector<std::string> names;
  names.reserve(tensors_.size());
  for (const auto& [name, location] : tensors_) names.push_back(name);
  return names;
}

const TensorInfo* Checkpoint::Info(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &files_[it->second.file].header().tensors[it->second.tensor];
}

absl::StatusOr<Checkpoint::Tensor> Checkpoint::Get(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) {
    return FileError(label_, absl::StrCat("missing tensor '", Printable(name), "'"));
  }
  const TensorFile& file = files_[it->second.file];
  const TensorInfo& info = file.header().tensors[it->second.tensor];
  Tensor tensor{&info, std::vector<std::byte>(info.end - info.begin)};
  if (auto status = file.Read(info, tensor.data.data()); !status.ok()) return status;
  return tensor;
}

absl::Status Checkpoint::ReadFloat32(const std::string& name, float* out) const {
  const TensorInfo* info = Info(name);
  if (info != nullptr && info->dtype == DType::kF32) {
    const auto& location = tensors_.at(name);
    return files_[location.file].Read(*info, reinterpret_cast<std::byte*>(out));
  }
  absl::StatusOr<Tensor> tensor = Get(name);
  if (!tensor.ok()) return tensor.status();
  return ConvertToFloat32(*tensor->info, tensor->data.data(), out);
}

const std::map<std::string, std::string>& Checkpoint::metadata() const {
  static const std::map<std::string, std::string> kEmpty;
  return files_.empty() ? kEmpty : files_.front().header().metadata;
}

// -----------------------------------------------------------------------------------------------
// Conversions.

float HalfBitsToFloat(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1f;
  const uint32_t mantissa = bits & 0x3ff;
  if (exponent == 0x1f) {  // Inf, or NaN made quiet with its payload kept.
    const uint32_t quiet = mantissa != 0 ? 0x400000 : 0;
    return FloatFromBits(sign | 0x7f800000 | quiet | (mantissa << 13));
  }
  if (exponent == 0) {  // Zero or subnormal: mantissa * 2^-24, exact in float.
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign != 0 ? -magnitude : magnitude;
  }
  return FloatFromBits(sign | ((exponent + 127 - 15) << 23) | (mantissa << 13));
}

float BFloat16BitsToFloat(uint16_t bits) {
  return FloatFromBits(static_cast<uint32_t>(bits) << 16);
}

uint16_t FloatToHalfBits(float value) {
  const uint32_t bits = BitsOfFloat(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000);
  const uint32_t magnitude = bits & 0x7fffffff;
  if (magnitude > 0x7f800000) {  // NaN: quiet, top payload bits kept.
    return static_cast<uint16_t>(sign | 0x7e00 | ((magnitude >> 13) & 0x3ff));
  }
  if (magnitude >= 0x477ff000) return static_cast<uint16_t>(sign | 0x7c00);  // >= 65520, or inf.
  if (magnitude < 0x38800000) return static_cast<uint16_t>(sign | HalfSubnormalBits(magnitude));
  return static_cast<uint16_t>(sign | HalfNormalBits(magnitude));
}

uint16_t FloatToBFloat16Bits(float value) {
  const uint32_t bits = BitsOfFloat(value);
  if ((bits & 0x7fffffff) > 0x7f800000) {  // NaN: quiet, sign and top payload bits kept.
    return static_cast<uint16_t>((bits >> 16) | 0x0040);
  }
  const uint32_t rounding = 0x7fff + ((bits >> 16) & 1);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

absl::Status ConvertToFloat32(const TensorInfo& info, const std::byte* data, float* out) {
  std::optional<uint64_t> bytes = ByteCount(info.shape, info.dtype);
  if (!bytes.has_value() || *bytes != info.end - info.begin) {
    return ErrorWithReason(
        absl::StatusCode::kInvalidArgument, ErrorReason::kInvalidModelFile,
        absl::StrCat("tensor '", Printable(info.name), "': data_offsets do not match its shape"));
  }
  const size_t count = static_cast<size_t>(*bytes / DTypeSize(info.dtype));
  switch (info.dtype) {
    case DType::kF32:
      if (count > 0) std::memcpy(out, data, count * sizeof(float));
      return absl::OkStatus();
    case DType::kF16:
      for (size_t i = 0; i < count; ++i) out[i] = HalfBitsToFloat(LoadUnaligned<uint16_t>(data, i));
      return absl::OkStatus();
    case DType::kBF16:
      for (size_t i = 0; i < count; ++i) {
        out[i] = BFloat16BitsToFloat(LoadUnaligned<uint16_t>(data, i));
      }
      return absl::OkStatus();
    case DType::kF64:
      for (size_t i = 0; i < count; ++i)
        out[i] = static_cast<float>(LoadUnaligned<double>(data, i));
      return absl::OkStatus();
    default:
      return ErrorWithReason(
          absl::StatusCode::kInvalidArgument, ErrorReason::kInvalidModelFile,
          absl::StrCat("tensor '", Printable(info.name), "': dtype ", DTypeName(info.dtype),
                       " is not a float type "
                       "(allowed F32, F16, BF16, F64)"));
  }
}

void ConvertFromFloat32(const float* in, size_t count, DType dtype, std::byte* out) {
  switch (dtype) {
    case DType::kF32:
      if (count > 0) std::memcpy(out, in, count * sizeof(float));
      return;
    case DType::kF16:
      for (size_t i = 0; i < count; ++i) StoreUnaligned(FloatToHalfBits(in[i]), out, i);
      return;
    case DType::kBF16:
      for (size_t i = 0; i < count; ++i) StoreUnaligned(FloatToBFloat16Bits(in[i]), out, i);
      return;
    case DType::kF64:
      for (size_t i = 0; i < count; ++i) StoreUnaligned(static_cast<double>(in[i]), out, i);
      return;
    default:
      return;
  }
}

// -----------------------------------------------------------------------------------------------
// Writing.

absl::Status WriteFile(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  for (const TensorToWrite& tensor : tensors) {
    if (tensor.data == nullptr && tensor.size_bytes > 0) {
      return ArgumentError(absl::StrCat("tensor '", Printable(tensor.name), "': data is null"));
    }
  }
  return WriteFile(path, tensors, metadata, [&tensors](size_t i) -> absl::StatusOr<const void*> { return tensors[i].data; });
}

absl::Status WriteFile(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata, const TensorData& data) {
  absl::StatusOr<std::string> header = CheckedHeader(tensors, metadata);
  if (!header.ok()) return header.status();
  const std::string temporary = TemporaryPath(path);
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0) return OsError(temporary, "create", errno);
  absl::Status refused;
  const ByteSink to_file = [fd](const void* bytes, size_t size) { return WriteAll(fd, bytes, size); };
  bool ok = StreamContents(to_file, *header, tensors, data, &refused) && ::fsync(fd) == 0;
  int error = ok ? 0 : errno;
  if (::close(fd) != 0 && ok) {
    ok = false;
    error = errno;
  }
  if (ok && ::rename(temporary.c_str(), path.c_str()) != 0) {
    ok = false;
    error = errno;
  }
  if (!ok) {
    ::unlink(temporary.c_str());
    return refused.ok() ? OsError(path, "write", error) : refused;
  }
  return absl::OkStatus();
}

absl::Status StreamFile(const std::vector<TensorToWrite>& tensors, const std::map<std::string, std::string>& metadata,
                        const TensorData& data, const ByteSink& sink) {
  absl::StatusOr<std::string> header = CheckedHeader(tensors, metadata);
  if (!header.ok()) return header.status();
  absl::Status refused;
  if (StreamContents(sink, *header, tensors, data, &refused)) return absl::OkStatus();
  return refused.ok() ? ErrorWithReason(absl::StatusCode::kInternal, ErrorReason::kInternalError,
                                        "the file's bytes could not be taken (the sink refused them)")
                      : refused;
}

}  // namespace posbias::safetensors
