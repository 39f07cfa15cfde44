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
//   - TensorFile opens one file and reads a tensor's bytes through its descriptor (pread), never
//     through a memory map: the files are a tenant's to write, and a file that shrinks while it
//     is read must give an error, not a SIGBUS that ends the server.
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
// most 100 MiB and lists at most kMaxTensorsPerFile tensors, an index at most kMaxIndexEntries;
// headers and indexes parse in time linear in their size and ask a StopCheck as they go (a
// stopped parse is CANCELLED naming the file); a file truncated by someone else while it is read is INVALID_MODEL_FILE ("the file
// shrank while it was read"), whatever the moment.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/files/open_beneath.h"

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
// Tensors one file's header may list (the largest published shards hold a few thousand), and
// entries an index's weight map may have (DeepSeek-V3's has about 92 thousand). More is refused
// while the JSON is read, before it is built in memory.
inline constexpr int64_t kMaxTensorsPerFile = int64_t{1} << 18;
inline constexpr int64_t kMaxIndexEntries = int64_t{1} << 20;

// Asked while a header or an index is parsed (every few thousand tokens): true = stop now (the
// caller's deadline passed, its call was cancelled, or the server is shutting down). Empty = never.
using StopCheck = std::function<bool()>;

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
                                   const std::string& file_label, const StopCheck& stop = {});

// Parses the header of a whole file held in memory (bytes[0, size)): checks the length prefix
// (size >= 8, N <= size - 8, N <= kMaxHeaderBytes), then ParseHeader. Used by the fuzz targets
// (TensorFile::Open reads the same prefix through its descriptor).
absl::StatusOr<Header> ParseFile(const std::byte* bytes, uint64_t size,
                                 const std::string& file_label);

// One open .safetensors file: its validated header, and its tensors read on demand through the
// descriptor (pread). Move-only; closes the file in the destructor. The header is validated at
// Open against the size the file had then, so every tensor of header() lay inside the file; if
// the file shrinks later, Read says so (INVALID_MODEL_FILE) instead of reading past its end.
class TensorFile {
 public:
  // Opens `path` beneath `scope` (files/open_beneath.h; the default scope is anywhere). Messages
  // name the file as ShownPath does.
  static absl::StatusOr<TensorFile> Open(const std::string& path, const files::Scope& scope = {},
                                         const StopCheck& stop = {});

  TensorFile(TensorFile&& other) noexcept = default;
  TensorFile& operator=(TensorFile&& other) noexcept = default;
  TensorFile(const TensorFile&) = delete;
  TensorFile& operator=(const TensorFile&) = delete;

  const Header& header() const { return header_; }
  const TensorInfo* Find(const std::string& name) const;  // nullptr if absent.
  // Reads the tensor's (tensor.end - tensor.begin) bytes into `out`. INVALID_MODEL_FILE naming the
  // file and the tensor when the file ends before them (it shrank since Open).
  absl::Status Read(const TensorInfo& tensor, std::byte* out) const;
  const std::string& path() const { return path_; }

 private:
  TensorFile(files::OpenFile file) : file_(std::move(file)) {}

  files::OpenFile file_;
  std::string path_;
  std::string label_;  // The path as messages show it.
  Header header_;
};

// A checkpoint: one .safetensors file; a directory holding model.safetensors (preferred, as
// transformers does) or model.safetensors.index.json; or an index file itself. An index is
// {"weight_map": {tensor: shard file name}, "metadata": {...}}; its shards live beside it, their
// names must not contain '/', '\\' or "..", and every tensor it lists must be in its shard.
// Tensors present in a shard but absent from the weight map are not part of the checkpoint.
class Checkpoint {
 public:
  // Every file (the checkpoint, its index and each shard) is opened beneath `scope`
  // (files/open_beneath.h): a shard or index that links out of it is PATH_NOT_ALLOWED.
  static absl::StatusOr<Checkpoint> Open(const std::string& path, const files::Scope& scope = {},
                                         const StopCheck& stop = {});

  std::vector<std::string> TensorNames() const;  // Sorted.

  struct Tensor {
    const TensorInfo* info;       // Valid while the Checkpoint lives (moves included).
    std::vector<std::byte> data;  // The tensor's bytes, read from its file now.
  };
  // INVALID_MODEL_FILE "<path>: missing tensor '<name>'" when absent, or "... shrank while it was
  // read" when its file no longer holds it.
  absl::StatusOr<Tensor> Get(const std::string& name) const;
  // The tensor's metadata without reading it (nullptr if absent).
  const TensorInfo* Info(const std::string& name) const;
  // The tensor converted to float32 into `out` (ElementCount(shape) floats); F32 data are read
  // straight into it. Errors as Get and ConvertToFloat32.
  absl::Status ReadFloat32(const std::string& name, float* out) const;

  // The __metadata__ of the only file, or of the shard whose file name sorts first.
  const std::map<std::string, std::string>& metadata() const;

 private:
  struct Location {
    size_t file = 0;
    size_t tensor = 0;
  };
  static absl::StatusOr<Checkpoint> OpenSingle(const std::string& path, const files::Scope& scope, const StopCheck& stop);
  static absl::StatusOr<Checkpoint> OpenIndex(const std::string& index_path, const files::Scope& scope,
                                              const StopCheck& stop);

  Checkpoint() = default;

  std::string label_;  // The path given to Open as messages show it.
  std::vector<TensorFile> files_;
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

// Takes the bytes of a file in order; false refuses them (and ends the stream).
using ByteSink = std::function<bool(const void* bytes, size_t size)>;
// The bytes WriteFile would write (the same checks, header and data), handed to `sink` in order
// instead of a file: how a file's SHA-256 is known without writing it. A status `data` returns
// ends the stream with it; a sink that refuses is INTERNAL.
absl::Status StreamFile(const std::vector<TensorToWrite>& tensors, const std::map<std::string, std::string>& metadata,
                        const TensorData& data, const ByteSink& sink);

}  // namespace posbias::safetensors
