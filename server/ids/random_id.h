// Unguessable identifiers from the kernel's CSPRNG (getrandom(2)), for ids a client must not be
// able to predict or collide with (job ids, model uids).
#pragma once

#include <cstddef>
#include <string>

namespace posbias::ids {

// `bytes` random bytes as 2 * bytes lowercase hex digits. Blocks only until the kernel's pool is
// seeded at boot; a kernel without getrandom aborts the process rather than mint guessable ids.
std::string RandomHex(size_t bytes);

}  // namespace posbias::ids
