#include "server/tokenizer/utf8.h"

#include <cstdint>

namespace posbias::tokenizer {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";

// The length of the well-formed character at input[at], or 0 when input[at..] starts an ill-formed
// sequence; then `*bad` is the length of its maximal subpart (at least 1). Table 3-7 of the
// Unicode Standard, which the WHATWG decoder implements byte by byte.
size_t ScanCharacter(std::string_view input, size_t at, size_t* bad) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(input[i]); };
  const uint8_t lead = byte(at);
  if (lead < 0x80) return 1;
  size_t needed = 0;
  uint8_t low = 0x80, high = 0xBF;  // Allowed range of the first continuation byte.
  if (lead >= 0xC2 && lead <= 0xDF) {
    needed = 1;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    needed = 2;
    if (lead == 0xE0) low = 0xA0;
    if (lead == 0xED) high = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    needed = 3;
    if (lead == 0xF0) low = 0x90;
    if (lead == 0xF4) high = 0x8F;
  } else {
    *bad = 1;
    return 0;
  }
  size_t length = 1;
  for (size_t k = 0; k < needed; ++k, ++length) {
    if (at + length >= input.size()) break;
    const uint8_t next = byte(at + length);
    const uint8_t lo = k == 0 ? low : 0x80;
    const uint8_t hi = k == 0 ? high : 0xBF;
    if (next < lo || next > hi) break;
  }
  if (length == needed + 1) return length;
  *bad = length;
  return 0;
}

}  // namespace

MappedText RepairUtf8(std::string_view input) {
  MappedText out;
  out.text.reserve(input.size());
  out.origin_begin.reserve(input.size());
  out.origin_end.reserve(input.size());
  size_t at = 0;
  while (at < input.size()) {
    // Copy a run of well-formed characters in one step.
    size_t run_end = at, bad = 0, length = 0;
    while (run_end < input.size() && (length = ScanCharacter(input, run_end, &bad)) > 0) {
      run_end += length;
    }
    out.text.append(input.substr(at, run_end - at));
    for (size_t i = at; i < run_end; ++i) {
      out.origin_begin.push_back(i);
      out.origin_end.push_back(i + 1);
    }
    if (run_end < input.size()) {
      out.AppendSpan(kReplacement, run_end, run_end + bad);
      run_end += bad;
    }
    at = run_end;
  }
  return out;
}

std::string RepairUtf8String(std::string_view input) {
  std::string out;
  out.reserve(input.size());
  size_t at = 0;
  while (at < input.size()) {
    size_t bad = 0;
    const size_t length = ScanCharacter(input, at, &bad);
    if (length > 0) {
      out.append(input.substr(at, length));
      at += length;
    } else {
      out.append(kReplacement);
      at += bad;
    }
  }
  return out;
}

size_t Utf8CharLength(std::string_view text, size_t at) {
  const auto lead = static_cast<uint8_t>(text[at]);
  if (lead < 0x80) return 1;
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  return 4;
}

}  // namespace posbias::tokenizer
