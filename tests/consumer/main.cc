// Uses the installed posbias client: builds a request, calls an address where nothing listens,
// and expects the client's UNAVAILABLE error (no server is needed to prove the package links).
#include <iostream>

#include "posbias/client.h"

int main() {
  posbias::ClientOptions options;
  options.target = "127.0.0.1:1";
  options.default_timeout = std::chrono::milliseconds(2000);
  posbias::Client client(options);
  posbias::v1::EvaluateContinuumRequest request;
  request.mutable_model()->set_depth(24);
  request.mutable_model()->set_alpha(0.5);
  request.mutable_point_list()->add_x(0.5);
  const auto response = client.EvaluateContinuum(request);
  if (response.ok() || response.status().code() != absl::StatusCode::kUnavailable) {
    std::cerr << "unexpected: " << response.status() << "\n";
    return 1;
  }
  std::cout << "consumer OK: " << response.status().code() << "\n";
  return 0;
}
