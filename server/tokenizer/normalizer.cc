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

absl::StatusOr<std::unique_ptr<Normalizer>> Normalizer::Create(NormalizationForm form) {
  UErrorCode code = U_ZERO_ERROR;
  const icu::Normalizer2* normalizer = form == NormalizationForm::kNfc
                                           ? icu::Normalizer2::getNFCInstance(code)
                                           : icu::Normalizer2::getNFKCInstance(code);
  if (U_FAILURE(code)) return IcuError("Normalizer2::getInstance", code);
  return std::unique_ptr<Normalizer>(new Normalizer(normalizer));
}

absl::StatusOr<MappedText> Normalizer::Normalize(const MappedText& text) const {
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
