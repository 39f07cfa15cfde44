// libFuzzer entry point for the safetensors header parser (optional; needs clang with libFuzzer).
//
// Build and run, e.g.:
//   clang++ -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -I. \
//     tests/safetensors/fuzz_parse_header.cc server/safetensors/safetensors.cc \
//     server/status/error.cc $(pkg-config --libs absl_status absl_statusor absl_strings \
//     absl_cord absl_str_format) -o fuzz_parse_header
//   ./fuzz_parse_header -max_total_time=60
// Every input must parse to a header whose tensors stay inside the buffer, or give an
// INVALID_MODEL_FILE error; anything else aborts.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "server/safetensors/safetensors.h"
#include "server/status/error.h"

namespace {

using posbias::safetensors::ConvertToFloat32;
using posbias::safetensors::ElementCount;
using posbias::safetensors::Header;
using posbias::safetensors::TensorInfo;

void CheckHeader(const Header& header, const std::byte* bytes, size_t size) {
  const uint64_t data_size = size - header.data_start;
  for (const TensorInfo& tensor : header.tensors) {
    if (tensor.begin > tensor.end || tensor.end > data_size) std::abort();
    std::vector<std::byte> copy(bytes + header.data_start + tensor.begin,
                                bytes + header.data_start + tensor.end);
    std::vector<float> out(static_cast<size_t>(ElementCount(tensor.shape)));
    (void)ConvertToFloat32(tensor, copy.data(), out.data());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto* bytes = reinterpret_cast<const std::byte*>(data);
  absl::StatusOr<Header> header = posbias::safetensors::ParseFile(bytes, size, "fuzz");
  if (header.ok()) {
    CheckHeader(*header, bytes, size);
  } else if (posbias::ErrorReasonOf(header.status()) != "INVALID_MODEL_FILE") {
    std::abort();
  }
  return 0;
}
