// The CLI's transport-security and authentication options, shared by every subcommand: --token,
// --tls, --ca-file, --cert-file/--key-file (mTLS) and --tls-server-name, each also read from its
// POSBIAS_* environment variable (the flag wins). They fill ClientOptions::Security; see client.h
// for what each means.
#pragma once

#include <optional>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/strings/string_view.h"
#include "posbias/client.h"

namespace posbias::cli {

// Adds the options to `app` (listed under "Security" in --help), storing into `security`.
void AddSecurityOptions(CLI::App& app, ClientOptions::Security& security);

// Whether every address gRPC target `target` names is on this machine: localhost, 127.0.0.0/8,
// ::1 (also as "ipv4:", "ipv6:" or "dns:///" targets), or a unix socket.
bool IsLoopbackTarget(absl::string_view target);

// The warning to print once when `security` sends a token in plaintext to a non-loopback
// `target`; nullopt when there is nothing to warn about.
std::optional<std::string> PlaintextTokenWarning(absl::string_view target,
                                                 const ClientOptions::Security& security);

}  // namespace posbias::cli
