// UTF-8 in and out of the tokenizer: invalid input is repaired the way the WHATWG Encoding
// Standard's UTF-8 decoder does (and so Node's Buffer#toString and TextDecoder, which the
// reference tokenizers see): every maximal subpart of an ill-formed sequence becomes one U+FFFD.
#pragma once

#include <string>
#include <string_view>

#include "server/tokenizer/mapped_text.h"

namespace posbias::tokenizer {

// `input` as valid UTF-8: valid characters copied byte for byte, each maximal subpart of an
// ill-formed sequence (a stray continuation byte, a truncated sequence, an overlong form, a
// surrogate, a code point above U+10FFFF) replaced by U+FFFD mapped to the bytes it replaces.
MappedText RepairUtf8(std::string_view input);

// The same repair without the mapping (for decoded text).
std::string RepairUtf8String(std::string_view input);

// Length in bytes of the UTF-8 character starting at text[at] (text is valid UTF-8).
size_t Utf8CharLength(std::string_view text, size_t at);

}  // namespace posbias::tokenizer
