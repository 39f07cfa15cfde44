// Page tokens: opaque to clients and bound to the listing that issued them (AIP-158).
//
// A token is the URL-safe base64 of "p2" | the first 16 bytes of HMAC-SHA-256(key, listing NUL
// filter NUL cursor) | the listing's own cursor. The key is the server's secret (the data
// directory's page_token.key, shared by replicas that share the directory), so a client can
// neither forge a token nor change its cursor. Redeeming it for a different listing or a
// different filter (states, model, label selector, result range...) is INVALID_ARGUMENT: a client
// that changes its filter starts again from the first page instead of receiving a page of some
// other query. The cursor itself is whatever the listing needs to resume (a store position, a
// name, an index); the filter binds the caller's tenant too, so any page a token reaches is one
// the same caller could list from the start.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace posbias::paging {

// The key tokens are signed with, from now on (before the server serves; a process that never
// sets one signs with a random key of its own, so its tokens die with it).
void SetPageTokenKey(std::string key);
// The data directory's page-token key: read from `path`, or created there (32 random bytes, as
// hex, mode 0600, written once: a replica that loses the race reads the winner's).
absl::StatusOr<std::string> LoadOrCreatePageTokenKey(const std::string& path);

// The token that resumes `listing` (e.g. "ListJobs") under `filter` (a canonical spelling of every
// request field that selects what is listed, page_size excluded) at `cursor`. "" for an empty
// cursor (the last page has no next token).
std::string IssuePageToken(std::string_view listing, std::string_view filter, std::string_view cursor);

// The cursor inside `token`: "" for an empty token (the first page). INVALID_ARGUMENT naming
// page_token when it is not a token of this server or was issued for another listing or filter.
absl::StatusOr<std::string> RedeemPageToken(std::string_view token, std::string_view listing,
                                            std::string_view filter);

}  // namespace posbias::paging
