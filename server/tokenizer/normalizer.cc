#include "server/tokenizer/normalizer.h"

#include <unicode/bytestream.h>
#include <unicode/edits.h>
#include <unicode/normalizer2.h>
#include <unicode/stringpiece.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "server/status/error.h"

namespace posbias::tokenizer {
namespace {

absl::Status IcuError(const char* what, UErrorCode code) {
  return ErrorWithReason(absl::StatusCode::kInternal, ErrorReason::kInternalError,
                         absl::StrCat("ICU ", what, " failed: ", u_errorName(code)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Normalizer>> Normalizer::Create(NormalizerSpec spec) {
  const void* icu_normalizer = nullptr;
  if (spec.kind == NormalizerSpec::Kind::kNfc || spec.kind == NormalizerSpec::Kind::kNfkc) {
    UErrorCode code = U_ZERO_ERROR;
    icu_normalizer = spec.kind == NormalizerSpec::Kind::kNfc ? icu::Normalizer2::getNFCInstance(code)
                                                             : icu::Normalizer2::getNFKCInstance(code);
    if (U_FAILURE(code)) return IcuError("Normalizer2::getInstance", code);
  }
  if (spec.kind == NormalizerSpec::Kind::kReplace && spec.pattern.empty()) {
    return ErrorWithReason(absl::StatusCode::kInvalidArgument, ErrorReason::kInvalidModelFile,
                           "a Replace normalizer has an empty pattern");
  }
  return std::unique_ptr<Normalizer>(new Normalizer(std::move(spec), icu_normalizer));
}

MappedText PrependText(const MappedText& text, std::string_view content) {
  if (text.text.empty()) return text;
  MappedText out;
  out.AppendSpan(content, text.origin_begin[0], text.origin_end[0]);
  out.text.append(text.text);
  out.origin_begin.insert(out.origin_begin.end(), text.origin_begin.begin(), text.origin_begin.end());
  out.origin_end.insert(out.origin_end.end(), text.origin_end.begin(), text.origin_end.end());
  return out;
}

MappedText ReplaceText(const MappedText& text, std::string_view pattern, std::string_view content) {
  MappedText out;
  const std::string_view input(text.text);
  size_t copied = 0;
  for (size_t at = input.find(pattern); at != std::string_view::npos; at = input.find(pattern, copied)) {
    out.text.append(input.substr(copied, at - copied));
    out.origin_begin.insert(out.origin_begin.end(), text.origin_begin.begin() + copied, text.origin_begin.begin() + at);
    out.origin_end.insert(out.origin_end.end(), text.origin_end.begin() + copied, text.origin_end.begin() + at);
    out.AppendSpan(content, text.origin_begin[at], text.origin_end[at + pattern.size() - 1]);
    copied = at + pattern.size();
  }
  out.text.append(input.substr(copied));
  out.origin_begin.insert(out.origin_begin.end(), text.origin_begin.begin() + copied, text.origin_begin.end());
  out.origin_end.insert(out.origin_end.end(), text.origin_end.begin() + copied, text.origin_end.end());
  return out;
}

absl::StatusOr<MappedText> Normalizer::Normalize(const MappedText& text) const {
  switch (spec_.kind) {
    case NormalizerSpec::Kind::kPrepend:
      return PrependText(text, spec_.content);
    case NormalizerSpec::Kind::kReplace:
      return ReplaceText(text, spec_.pattern, spec_.content);
    case NormalizerSpec::Kind::kNfc:
    case NormalizerSpec::Kind::kNfkc:
      break;
  }
  return NormalizeUnicode(text);
}

absl::StatusOr<MappedText> Normalizer::NormalizeUnicode(const MappedText& text) const {
  const auto* normalizer = static_cast<const icu::Normalizer2*>(icu_normalizer_);
  std::string normalized;
  icu::StringByteSink<std::string> sink(&normalized, static_cast<int32_t>(text.text.size()));
  icu::Edits edits;
  UErrorCode code = U_ZERO_ERROR;
  normalizer->normalizeUTF8(
      0, icu::StringPiece(text.text.data(), static_cast<int32_t>(text.text.size())), sink, &edits,
      code);
  if (U_FAILURE(code)) return IcuError("normalizeUTF8", code);

  MappedText out;
  out.text = std::move(normalized);
  out.origin_begin.resize(out.text.size());
  out.origin_end.resize(out.text.size());
  icu::Edits::Iterator span = edits.getFineIterator();
  while (span.next(code)) {
    const auto source = static_cast<size_t>(span.sourceIndex());
    const auto destination = static_cast<size_t>(span.destinationIndex());
    const auto old_length = static_cast<size_t>(span.oldLength());
    const auto new_length = static_cast<size_t>(span.newLength());
    for (size_t k = 0; k < new_length; ++k) {
      if (!span.hasChange()) {
        out.origin_begin[destination + k] = text.origin_begin[source + k];
        out.origin_end[destination + k] = text.origin_end[source + k];
      } else if (old_length > 0) {
        out.origin_begin[destination + k] = text.origin_begin[source];
        out.origin_end[destination + k] = text.origin_end[source + old_length - 1];
      } else {  // An insertion: an empty span where it was inserted.
        const size_t at = source < text.text.size() ? text.origin_begin[source]
                          : source > 0              ? text.origin_end[source - 1]
                                                    : 0;
        out.origin_begin[destination + k] = at;
        out.origin_end[destination + k] = at;
      }
    }
  }
  if (U_FAILURE(code)) return IcuError("Edits::Iterator", code);
  return out;
}

}  // namespace posbias::tokenizer
