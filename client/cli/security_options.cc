#include "client/cli/security_options.h"

#include <arpa/inet.h>

#include <cstring>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace posbias::cli {
namespace {

constexpr char kGroup[] = "Security";

// "host", "host:port", "[v6]:port" or a bare IPv6 address -> the host.
absl::string_view HostOf(absl::string_view address) {
  if (absl::StartsWith(address, "[")) {
    const auto close = address.find(']');
    return close == absl::string_view::npos ? address.substr(1) : address.substr(1, close - 1);
  }
  const auto colon = address.find(':');
  if (colon != absl::string_view::npos && address.find(':', colon + 1) == absl::string_view::npos) {
    return address.substr(0, colon);  // One colon: host:port. More: a bare IPv6 address.
  }
  return address;
}

bool IsLoopbackHost(absl::string_view host) {
  if (absl::EqualsIgnoreCase(host, "localhost") || absl::EndsWithIgnoreCase(host, ".localhost")) {
    return true;
  }
  const std::string text(host);
  in_addr v4{};
  if (inet_pton(AF_INET, text.c_str(), &v4) == 1) {
    return (ntohl(v4.s_addr) >> 24) == 127;
  }
  in6_addr v6{};
  if (inet_pton(AF_INET6, text.c_str(), &v6) == 1) {
    if (std::memcmp(&v6, &in6addr_loopback, sizeof v6) == 0) return true;
    // ::ffff:127.x.y.z, an IPv4 loopback address mapped into IPv6.
    static constexpr unsigned char kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    return std::memcmp(&v6, kMapped, sizeof kMapped) == 0 && v6.s6_addr[12] == 127;
  }
  return false;
}

}  // namespace

void AddSecurityOptions(CLI::App& app, ClientOptions::Security& security) {
  app.add_option("--token", security.token,
                 "Bearer token sent as `authorization: Bearer <token>` on every call (prefer the "
                 "environment variable: a flag shows in ps)")
      ->type_name("TOKEN")
      ->envname("POSBIAS_TOKEN")
      ->group(kGroup);
  app.add_flag("--tls", security.tls, "TLS, verifying the server against the system roots")
      ->envname("POSBIAS_TLS")
      ->group(kGroup);
  app.add_option("--ca-file", security.ca_file,
                 "PEM root certificate(s) that verify the server instead of the system roots "
                 "(implies --tls)")
      ->type_name("PEM")
      ->envname("POSBIAS_CA_FILE")
      ->group(kGroup);
  auto* cert = app.add_option("--cert-file", security.cert_file,
                              "PEM client certificate (chain) presented for mTLS (implies --tls)")
                   ->type_name("PEM")
                   ->envname("POSBIAS_CERT_FILE")
                   ->group(kGroup);
  auto* key = app.add_option("--key-file", security.key_file,
                             "PEM private key of --cert-file (implies --tls)")
                  ->type_name("PEM")
                  ->envname("POSBIAS_KEY_FILE")
                  ->group(kGroup);
  cert->needs(key);
  key->needs(cert);
  app.add_option("--tls-server-name", security.tls_server_name,
                 "Name checked in the server's certificate instead of the --server host "
                 "(implies --tls)")
      ->type_name("NAME")
      ->envname("POSBIAS_TLS_SERVER_NAME")
      ->group(kGroup);
}

bool IsLoopbackTarget(absl::string_view target) {
  if (absl::StartsWith(target, "unix:") || absl::StartsWith(target, "unix-abstract:")) return true;
  absl::string_view addresses = target;
  if (absl::ConsumePrefix(&addresses, "dns:")) {
    if (absl::ConsumePrefix(&addresses, "//")) {  // dns://[authority]/host:port
      const auto slash = addresses.find('/');
      addresses = slash == absl::string_view::npos ? "" : addresses.substr(slash + 1);
    }
  } else if (!absl::ConsumePrefix(&addresses, "ipv4:")) {
    absl::ConsumePrefix(&addresses, "ipv6:");
  }
  const std::vector<absl::string_view> list = absl::StrSplit(addresses, ',');
  for (absl::string_view address : list) {
    if (!IsLoopbackHost(HostOf(address))) return false;
  }
  return true;
}

std::optional<std::string> PlaintextTokenWarning(absl::string_view target,
                                                 const ClientOptions::Security& security) {
  if (security.token.empty() || security.UsesTls() || IsLoopbackTarget(target)) return std::nullopt;
  return absl::StrCat("warning: sending the token without TLS to ", target,
                      ", which is not a loopback address: anyone on the way can read it (add "
                      "--tls or --ca-file unless TLS ends in front of the client, e.g. a mesh)");
}

}  // namespace posbias::cli
