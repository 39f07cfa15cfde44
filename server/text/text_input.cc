#include "server/text/text_input.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "server/statistics/boundary_spikes.h"
#include "server/status/error.h"

namespace posbias::text {
namespace {

absl::Status Invalid(const std::string& field, const std::string& value, const std::string& allowed) {
  return InvalidArgumentError({ErrorReason::kInvalidArgument, field, value, allowed});
}

absl::StatusOr<std::vector<int64_t>> Ids(const tokenizer::Tokenizer& tokenizer, const std::string& text) {
  auto encoding = tokenizer.Encode(text);
  if (!encoding.ok()) return encoding.status();
  return std::move(encoding->ids);
}

// `ids` repeated (cyclically) or cut to exactly `count`.
std::vector<int64_t> Fill(const std::vector<int64_t>& ids, int64_t count) {
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) out.push_back(ids[static_cast<size_t>(i) % ids.size()]);
  return out;
}

// The boundary token's id, if any (INVALID_ARGUMENT when the tokenizer has no such token).
absl::StatusOr<std::optional<int64_t>> BoundaryToken(const tokenizer::Tokenizer& tokenizer, const v1::TextInput& input) {
  switch (input.boundary_token()) {
    case v1::TEXT_BOUNDARY_TOKEN_UNSPECIFIED:
    case v1::TEXT_BOUNDARY_TOKEN_NONE: return std::optional<int64_t>();
    case v1::TEXT_BOUNDARY_TOKEN_EOS:
      if (auto eos = tokenizer.eos_token_id()) return std::optional<int64_t>(*eos);
      return Invalid("input.text.boundary_token", "EOS", "NONE or BOS: this tokenizer names no end-of-sequence token");
    case v1::TEXT_BOUNDARY_TOKEN_BOS:
      if (auto bos = tokenizer.bos_token_id()) return std::optional<int64_t>(*bos);
      return Invalid("input.text.boundary_token", "BOS", "NONE or EOS: this tokenizer names no beginning-of-sequence token");
    default:
      return Invalid("input.text.boundary_token", std::to_string(input.boundary_token()), "NONE, EOS or BOS");
  }
}

absl::Status CheckSizes(const v1::TextInput& input, const TextLimits& limits) {
  if (input.samples_size() < 1) return Invalid("input.text.samples", "none", "1 or more samples");
  if (input.samples_size() > limits.max_samples) {
    return TooLargeError("input.text.samples", std::to_string(input.samples_size()),
                         limits::Allowed(limits::Limit::kMaxTextSamples, limits.max_samples));
  }
  size_t total = input.separator().size() + input.needle().size() + input.question().size();
  for (int s = 0; s < input.samples_size(); ++s) {
    const auto& documents = input.samples(s).documents();
    const std::string field = absl::StrCat("input.text.samples[", s, "].documents");
    if (documents.empty()) return Invalid(field, "none", "1 or more documents");
    if (documents.size() > limits.max_documents) {
      return TooLargeError(field, std::to_string(documents.size()),
                           limits::Allowed(limits::Limit::kMaxTextDocuments, limits.max_documents));
    }
    for (const auto& document : documents) {
      if (document.size() > limits.max_document_bytes) {
        return TooLargeError(field, absl::StrCat(document.size(), " bytes"),
                             limits::Allowed(limits::Limit::kMaxDocumentBytes, static_cast<double>(limits.max_document_bytes)));
      }
      total += document.size();
    }
  }
  if (total > limits.max_total_bytes) {
    return TooLargeError("input.text", absl::StrCat(total, " bytes"),
                         limits::Allowed(limits::Limit::kMaxTextBytes, static_cast<double>(limits.max_total_bytes)));
  }
  return absl::OkStatus();
}

// `ids` below is L ids, plus the one that follows them in the text when `next` (LOG_PROB at T = L).
absl::Status Concatenate(const tokenizer::Tokenizer& tokenizer, const v1::TextInput& input, int64_t length, bool next,
                         LaidOutText& out) {
  std::vector<int64_t> separator;
  if (!input.separator().empty()) {
    auto ids = Ids(tokenizer, input.separator());
    if (!ids.ok()) return ids.status();
    separator = *std::move(ids);
  } else if (auto eos = tokenizer.eos_token_id()) {
    separator = {*eos};
  } else {
    return Invalid("input.text.separator", "\"\"", "a separator text: this tokenizer names no end-of-sequence token");
  }
  for (int s = 0; s < input.samples_size(); ++s) {
    std::vector<int64_t> ids, starts;
    for (int d = 0; d < input.samples(s).documents_size(); ++d) {
      if (d > 0) ids.insert(ids.end(), separator.begin(), separator.end());
      starts.push_back(static_cast<int64_t>(ids.size()) + 1);
      auto document = Ids(tokenizer, input.samples(s).documents(d));
      if (!document.ok()) return document.status();
      ids.insert(ids.end(), document->begin(), document->end());
    }
    const auto count = static_cast<int64_t>(ids.size());
    const std::string field = absl::StrCat("input.text.samples[", s, "]");
    const int64_t wanted = length + (next ? 1 : 0);
    const std::string what = next ? absl::StrCat("L + 1 = ", wanted, " tokens (LOG_PROB at T = L scores the token after position L)")
                                  : absl::StrCat("L = ", length, " tokens");
    if (count < wanted) return Invalid(field, absl::StrCat(count, " tokens"), "at least " + what);
    if (count > wanted && !input.truncate()) {
      return Invalid(field, absl::StrCat(count, " tokens"), absl::StrCat("exactly ", what, ", or set truncate to cut them"));
    }
    ids.resize(static_cast<size_t>(wanted));
    starts.erase(std::remove_if(starts.begin(), starts.end(), [&](int64_t b) { return b > length; }), starts.end());
    out.tokens.push_back(std::move(ids));
    out.document_starts.push_back(std::move(starts));
  }
  return absl::OkStatus();
}

absl::Status FixedBoundaries(const tokenizer::Tokenizer& tokenizer, const v1::TextInput& input, int64_t length,
                             bool next, std::optional<int64_t> boundary, LaidOutText& out) {
  std::vector<int64_t> starts = {1};
  for (int i = 0; i < input.boundaries_size(); ++i) {
    const int64_t b = input.boundaries(i);
    // A boundary's spike ratio compares it with two neighbours on each side (statistics/boundary_spikes.h), so
    // it lies in 3..L-2: nearer an end the ratio's no-spike value is not 1 (the profile's own
    // U-shape there), and it would read as a spike that is not one.
    if (b <= starts.back() || b < 1 + statistics::kSpikeNeighbours || b > length - statistics::kSpikeNeighbours) {
      return Invalid(absl::StrCat("input.text.boundaries[", i, "]"), std::to_string(b),
                     absl::StrCat("strictly increasing positions in ", 1 + statistics::kSpikeNeighbours, "..L-",
                                  statistics::kSpikeNeighbours, " = ", length - statistics::kSpikeNeighbours, " (each boundary has ",
                                  statistics::kSpikeNeighbours, " neighbours on each side for its spike ratio)"));
    }
    starts.push_back(b);
  }
  for (int s = 0; s < input.samples_size(); ++s) {
    const auto& documents = input.samples(s).documents();
    if (static_cast<size_t>(documents.size()) != starts.size()) {
      return Invalid(absl::StrCat("input.text.samples[", s, "].documents"), std::to_string(documents.size()),
                     absl::StrCat(starts.size(), " documents (one more than the boundaries)"));
    }
    std::vector<int64_t> ids, sample_starts;
    for (size_t d = 0; d < starts.size(); ++d) {
      // The last document runs to L (to L + 1 with the next token: it goes on after position L).
      const int64_t end = d + 1 < starts.size() ? starts[d + 1] : length + 1 + (next ? 1 : 0);
      auto document = Ids(tokenizer, documents[static_cast<int>(d)]);
      if (!document.ok()) return document.status();
      if (boundary && !document->empty()) document->insert(document->begin(), *boundary);
      if (document->empty()) {
        return Invalid(absl::StrCat("input.text.samples[", s, "].documents[", d, "]"), "\"\"",
                       "a document with at least one token to fill its span");
      }
      const auto span = Fill(*document, end - starts[d]);
      ids.insert(ids.end(), span.begin(), span.end());
      // A short document repeated to fill its span begins again at each repetition: those are
      // document starts too (up to L).
      sample_starts.push_back(starts[d]);
      for (int64_t again = starts[d] + static_cast<int64_t>(document->size()); again < end && again <= length;
           again += static_cast<int64_t>(document->size())) {
        sample_starts.push_back(again);
      }
    }
    out.tokens.push_back(std::move(ids));
    out.document_starts.push_back(std::move(sample_starts));
  }
  return absl::OkStatus();
}

absl::Status Needle(const tokenizer::Tokenizer& tokenizer, const v1::TextInput& input, int64_t length, bool next,
                    std::optional<int64_t> boundary, LaidOutText& out) {
  auto needle = Ids(tokenizer, input.needle());
  if (!needle.ok()) return needle.status();
  std::vector<int64_t> question;
  if (!input.question().empty()) {
    auto ids = Ids(tokenizer, input.question());
    if (!ids.ok()) return ids.status();
    question = *std::move(ids);
    if (next) {
      return Invalid("input.text.question", "set", "no question with LOG_PROB at T = L (nothing follows the question to score)");
    }
  }
  const auto size = static_cast<int64_t>(needle->size());
  const auto asked = static_cast<int64_t>(question.size());
  // The haystack: what the needle and the question leave of L.
  const int64_t hay_tokens = length - size - asked;
  if (size < 1 || hay_tokens < 1) {
    return Invalid("input.text.needle", absl::StrCat(size, " tokens (question ", asked, ")"),
                   absl::StrCat("1 or more tokens, needle and question together below L = ", length));
  }
  if (input.needle_depths_size() < 1) return Invalid("input.text.needle_depths", "none", "1 or more depths in [0, 1]");
  for (int i = 0; i < input.needle_depths_size(); ++i) {
    const double depth = input.needle_depths(i);
    if (!(depth >= 0 && depth <= 1)) {
      return Invalid(absl::StrCat("input.text.needle_depths[", i, "]"), FormatValue(depth), "[0, 1]");
    }
  }
  if (static_cast<int64_t>(input.samples_size()) * (input.needle_depths_size() + 1) > 65536) {
    return TooLargeError("input.text.needle_depths", "samples x (depths + 1) above 65536", "65536 samples");
  }
  jobs::JacobianJobSpec::NeedleSweep sweep;
  sweep.needle_tokens = size;
  for (double depth : input.needle_depths()) {
    sweep.depths.push_back(depth);
    sweep.starts.push_back(std::llround(depth * static_cast<double>(hay_tokens)) + 1);
  }
  const int64_t extra = next ? 1 : 0;  // The next token: the haystack goes on one past position L.
  for (int s = 0; s < input.samples_size(); ++s) {
    std::vector<int64_t> filler;
    for (const auto& document : input.samples(s).documents()) {
      auto ids = Ids(tokenizer, document);
      if (!ids.ok()) return ids.status();
      filler.insert(filler.end(), ids->begin(), ids->end());
      if (boundary) filler.push_back(*boundary);  // After each filler document (repeats included).
    }
    if (filler.empty()) return Invalid(absl::StrCat("input.text.samples[", s, "]"), "no tokens", "filler text");
    const auto hay = Fill(filler, hay_tokens + extra);
    for (size_t d = 0; d < sweep.depths.size(); ++d) {
      const int64_t at = sweep.starts[d] - 1;
      std::vector<int64_t> ids(hay.begin(), hay.begin() + at);
      ids.insert(ids.end(), needle->begin(), needle->end());
      ids.insert(ids.end(), hay.begin() + at, hay.end());
      ids.insert(ids.end(), question.begin(), question.end());
      out.tokens.push_back(std::move(ids));
      out.document_starts.push_back({at + 1});
      sweep.samples.push_back({static_cast<int64_t>(d), s});
    }
    // The filler alone, the needle-free baseline: the same positions hold the filler's own text.
    auto alone = Fill(filler, length - asked + extra);
    alone.insert(alone.end(), question.begin(), question.end());
    out.tokens.push_back(std::move(alone));
    out.document_starts.push_back({});
    sweep.samples.push_back({-1, s});
  }
  out.needle_sweep = std::move(sweep);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<LaidOutText> LayOutText(const tokenizer::Tokenizer& tokenizer, const v1::TextInput& input,
                                       int64_t length, bool with_next_token, const TextLimits& limits) {
  if (auto sizes = CheckSizes(input, limits); !sizes.ok()) return sizes;
  if (length < 2) return Invalid("sequence_length", std::to_string(length), "2 or more for a text input");
  auto boundary = BoundaryToken(tokenizer, input);
  if (!boundary.ok()) return boundary.status();
  if (*boundary && (input.layout() == v1::TEXT_LAYOUT_UNSPECIFIED || input.layout() == v1::TEXT_LAYOUT_CONCATENATE)) {
    return Invalid("input.text.boundary_token", v1::TextBoundaryToken_Name(input.boundary_token()),
                   "NONE with CONCATENATE (documents are joined by `separator` there)");
  }
  LaidOutText out;
  absl::Status status;
  switch (input.layout()) {
    case v1::TEXT_LAYOUT_UNSPECIFIED:
    case v1::TEXT_LAYOUT_CONCATENATE: status = Concatenate(tokenizer, input, length, with_next_token, out); break;
    case v1::TEXT_LAYOUT_FIXED_BOUNDARIES:
      status = FixedBoundaries(tokenizer, input, length, with_next_token, *boundary, out);
      break;
    case v1::TEXT_LAYOUT_NEEDLE: status = Needle(tokenizer, input, length, with_next_token, *boundary, out); break;
    default:
      return Invalid("input.text.layout", std::to_string(input.layout()), "CONCATENATE, FIXED_BOUNDARIES or NEEDLE");
  }
  if (!status.ok()) return status;
  return out;
}

}  // namespace posbias::text
