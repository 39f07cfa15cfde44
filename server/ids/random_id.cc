#include "server/ids/random_id.h"

#include <sys/random.h>

#include <cerrno>
#include <cstdlib>
#include <vector>

namespace posbias::ids {

std::string RandomHex(size_t bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::vector<unsigned char> random(bytes);
  size_t filled = 0;
  while (filled < bytes) {
    const ssize_t got = getrandom(random.data() + filled, bytes - filled, 0);
    if (got > 0) {
      filled += static_cast<size_t>(got);
    } else if (errno != EINTR) {
      std::abort();
    }
  }
  std::string hex;
  hex.reserve(2 * bytes);
  for (const unsigned char byte : random) {
    hex.push_back(kDigits[byte >> 4]);
    hex.push_back(kDigits[byte & 0xf]);
  }
  return hex;
}

}  // namespace posbias::ids
