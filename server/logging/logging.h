// Process logging: spdlog's default logger, as human-readable text or as JSON lines.
#pragma once

#include <string>

#include "absl/status/status.h"

namespace posbias::logging {

// level: trace, debug, info, warn, error, critical or off. format: text or json.
absl::Status ConfigureLogging(const std::string& level, const std::string& format);

// Escapes a string for inclusion in a JSON string literal (without the surrounding quotes).
std::string JsonEscape(const std::string& text);

}  // namespace posbias::logging
