// The safetensors room: reading and writing Hugging Face .safetensors checkpoints without torch.
//
// A .safetensors file is an 8-byte little-endian u64 N, then N bytes of UTF-8 JSON (possibly
// padded with spaces), then the data buffer. The JSON object maps each tensor name to
// {"dtype", "shape", "data_offsets": [begin, end]} (offsets relative to the start of the buffer)
// and may hold "__metadata__": {string: string}. See https://github.com/huggingface/safetensors.
//
// What the room does:
//   - ParseHeader validates a header completely (dtype known, shape non-negative and without
//     overflow, offsets inside the buffer and matching the shape, no overlaps, no duplicate names,
//     metadata values strings), so later code may trust every TensorInfo it hands out.
//   - MappedFile maps one file read-only; tensor data are pointers into the mapping (no copy).
//   - Checkpoint opens a single file, a directory with model.safetensors, or a sharded checkpoint
//     described by model.safetensors.index.json, and finds tensors by name across shards.
//   - ConvertToFloat32 / ConvertFromFloat32 convert F32, F16, BF16 and F64 data (IEEE half and
//     bfloat16 handled bit by bit: subnormals, infinities, NaN, round-to-nearest-even).
//   - WriteFile writes a file the way the reference writer does (header padded with spaces to a
//     multiple of 8, data contiguous), atomically through a temporary file and a rename.
//
// Errors: a malformed file is INVALID_ARGUMENT with reason INVALID_MODEL_FILE and a message that
// names the file and, where one is involved, the tensor; a missing file or directory is NOT_FOUND
// with reason PATH_NOT_FOUND; unexpected operating-system failures are INTERNAL / INTERNAL_ERROR.
// Bad arguments to WriteFile are INVALID_ARGUMENT / INVALID_ARGUMENT.
//
// Limits and caveats: the host must be little-endian (checked at compile time); the header is at
// most 100 MiB; tensor data are not aligned in memory (read them with memcpy, as the conversions
// do); a file truncated by someone else while mapped raises SIGBUS on access, as with any mmap.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/files/beneath.h"

namespace posbias::safetensors {

enum class DType { kF64, kF32, kF16, kBF16, kI64, kI32, kI16, kI8, kU8, kBool };

// "F64", "F32", "F16", "BF16", "I64", "I32", "I16", "I8", "U8", "BOOL".
std::string DTypeName(DType dtype);
// Bytes per element: 8, 4, 2, 2, 8, 4, 2, 1, 1, 1.
size_t DTypeSize(DType dtype);

// The largest header the room accepts (the JSON part, N).
inline constexpr uint64_t kMaxHeaderBytes = uint64_t{100} << 20;
// Deepest nesting of arrays and objects a header (or index file) may have.
inline constexpr int kMaxJsonDepth = 64;

struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;  // [] for a scalar; entries >= 0.
  uint64_t begin = 0;          // Offsets in the data buffer: [begin, end).
  uint64_t end = 0;
};

struct Header {
  std::vector<TensorInfo> tensors;  // Sorted by name.
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;  // 8 + N: where the data buffer starts in the file.
};

// Element count of a shape (1 for a scalar). The shape must have been validated by ParseHeader.
int64_t ElementCount(const std::vector<int64_t>& shape);

// Parses and validates the JSON header of a file whose data buffer holds data_size bytes.
// file_label names the file in error messages. Duplicate tensor names are detected while parsing.
// Entries may carry keys besides dtype/shape/data_offsets; they are ignored (as the reference
// does). Gaps between tensors are allowed; overlaps are not (zero-size tensors overlap nothing).
// header_json is the whole N-byte header (padding included): data_start is set to 8 + its size.
absl::StatusOr<Header> ParseHeader(const std::string& header_json, uint64_t data_size,
                                   const std::string& file_label);

// Parses the header of a whole file held in memory (bytes[0, size)): checks the length prefix
// (size >= 8, N <= size - 8, N <= kMaxHeaderBytes), then ParseHeader. Used by MappedFile::Open and
// by the fuzz targets.
absl::StatusOr<Header> ParseFile(const std::byte* bytes, uint64_t size,
                                 const std::string& file_label);

// One memory-mapped .safetensors file (read-only, PROT_READ, MAP_PRIVATE). Move-only; unmaps in
// the destructor. The header is validated at Open, so Data(t) + (t.end - t.begin) stays inside
// the mapping for every tensor of header().
class MappedFile {
 public:
  // Opens `path` beneath `scope` (files/beneath.h; the default scope is anywhere). Messages
  // name the file as ShownPath does.
  static absl::StatusOr<MappedFile> Open(const std::string& path, const files::Scope& scope = {});

  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const Header& header() const { return header_; }
  const TensorInfo* Find(const std::string& name) const;  // nullptr if absent.
  const std::byte* Data(const TensorInfo& tensor) const;  // Pointer into the mapping.
  const std::string& path() const { return path_; }

 private:
  MappedFile() = default;
  void Unmap();

  std::string path_;
  Header header_;
  void* base_ = nullptr;
  size_t size_ = 0;
};

// A checkpoint: one .safetensors file; a directory holding model.safetensors (preferred, as
// transformers does) or model.safetensors.index.json; or an index file itself. An index is
// {"weight_map": {tensor: shard file name}, "metadata": {...}}; its shards live beside it, their
// names must not contain '/', '\\' or "..", and every tensor it lists must be in its shard.
// Tensors present in a shard but absent from the weight map are not part of the checkpoint.
class Checkpoint {
 public:
  // Every file (the checkpoint, its index and each shard) is opened beneath `scope`
  // (files/beneath.h): a shard or index that links out of it is PATH_NOT_ALLOWED.
  static absl::StatusOr<Checkpoint> Open(const std::string& path, const files::Scope& scope = {});

  std::vector<std::string> TensorNames() const;  // Sorted.

  struct Tensor {
    const TensorInfo* info;
    const std::byte* data;
  };
  // INVALID_MODEL_FILE "<path>: missing tensor '<name>'" when absent. The pointers stay valid
  // while the Checkpoint lives (moves included).
  absl::StatusOr<Tensor> Get(const std::string& name) const;

  // The __metadata__ of the only file, or of the shard whose file name sorts first.
  const std::map<std::string, std::string>& metadata() const;

 private:
  struct Location {
    size_t file = 0;
    size_t tensor = 0;
  };
  static absl::StatusOr<Checkpoint> OpenSingle(const std::string& path, const files::Scope& scope);
  static absl::StatusOr<Checkpoint> OpenIndex(const std::string& index_path, const files::Scope& scope);

  Checkpoint() = default;

  std::string label_;  // The path given to Open as messages show it.
  std::vector<MappedFile> files_;
  std::map<std::string, Location> tensors_;
};

// Converts a validated F32, F16, BF16 or F64 tensor to float32 (out holds ElementCount(shape)
// floats; data need not be aligned). Other dtypes are INVALID_MODEL_FILE naming the tensor.
// F64 values beyond the float range become +-inf; NaN stays NaN.
absl::Status ConvertToFloat32(const TensorInfo& info, const std::byte* data, float* out);

// Converts count floats to dtype F32, F16, BF16 or F64 (round-to-nearest-even; overflow gives
// +-inf; NaN stays a quiet NaN with its sign). out must hold count * DTypeSize(dtype) bytes.
// For any other dtype nothing is written (the caller must not ask for one).
void ConvertFromFloat32(const float* in, size_t count, DType dtype, std::byte* out);

// Bit-level conversions of one value, exposed for tests and callers that need a single element.
float HalfBitsToFloat(uint16_t bits);
float BFloat16BitsToFloat(uint16_t bits);
uint16_t FloatToHalfBits(float value);
uint16_t FloatToBFloat16Bits(float value);

struct TensorToWrite {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  size_t size_bytes = 0;  // Must equal ElementCount(shape) * DTypeSize(dtype).
};

// Writes a .safetensors file: "__metadata__" first (omitted when empty), then the tensors in the
// given order with contiguous data offsets; the JSON is compact and padded with spaces so that
// 8 + N is a multiple of 8. Written to a temporary file beside path, synced, then renamed over it.
absl::Status WriteFile(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata);

// The same file, with the tensors' data produced one at a time: `data(i)` gives tensor i's
// size_bytes (TensorToWrite::data is not read) and stays valid until the next call, so a writer
// holds one tensor at a time rather than the whole file. A status `data` returns ends the write
// with nothing at `path` (how a writer whose client went away stops).
using TensorData = std::function<absl::StatusOr<const void*>(size_t index)>;
absl::Status WriteFile(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata, const TensorData& data);

}  // namespace posbias::safetensors
