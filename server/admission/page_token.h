// Page tokens: opaque to clients and bound to the listing that issued them (AIP-158).
//
// A token is the URL-safe base64 of "p1" | the first 8 bytes of SHA-256(listing NUL filter) |
// the listing's own cursor. Redeeming it for a different listing or a different filter (states,
// model, label selector, result range...) is INVALID_ARGUMENT: a client that changes its filter
// starts again from the first page instead of receiving a page of some other query. The cursor
// itself is whatever the listing needs to resume (a store position, a name, an index); only the
// fingerprint check makes it unforgeable across filters, which is all a token protects: any page a
// token reaches is one the same caller could list from the start.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace posbias::admission {

// The token that resumes `listing` (e.g. "ListJobs") under `filter` (a canonical spelling of every
// request field that selects what is listed, page_size excluded) at `cursor`. "" for an empty
// cursor (the last page has no next token).
std::string IssuePageToken(std::string_view listing, std::string_view filter, std::string_view cursor);

// The cursor inside `token`: "" for an empty token (the first page). INVALID_ARGUMENT naming
// page_token when it is not a token of this server or was issued for another listing or filter.
absl::StatusOr<std::string> RedeemPageToken(std::string_view token, std::string_view listing,
                                            std::string_view filter);

}  // namespace posbias::admission
