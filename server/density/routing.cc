#include "server/density/routing.h"

#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "server/status/error.h"

namespace posbias::density {
namespace {

bool IsUnitInterval(double alpha) { return alpha >= 0.0 && alpha <= 1.0; }  // False for NaN.

absl::Status CheckDepth(uint32_t depth, uint32_t max_depth, const std::string& allowed) {
  if (depth >= 1 && depth <= max_depth) return absl::OkStatus();
  return InvalidArgumentError({ErrorReason::kInvalidDepth, "depth", std::to_string(depth), allowed});
}

}  // namespace

std::vector<double> Routing::layer_alphas() const {
  return constant_ ? std::vector<double>(depth_, alphas_.front()) : alphas_;
}

absl::StatusOr<Routing> MakeRouting(uint32_t depth, double alpha) {
  if (auto status = CheckDepth(depth, kMaxDepth, "1..100000"); !status.ok()) return status;
  if (!IsUnitInterval(alpha)) {
    return InvalidArgumentError({ErrorReason::kInvalidAlpha, "alpha", FormatValue(alpha), "[0, 1]"});
  }
  Routing routing;
  routing.depth_ = depth;
  routing.constant_ = true;
  routing.alphas_ = {alpha};
  return routing;
}

absl::StatusOr<Routing> MakeScheduledRouting(uint32_t depth, const std::vector<double>& alphas) {
  if (alphas.empty() || alphas.size() > kMaxScheduleDepth) {
    return InvalidArgumentError({ErrorReason::kInvalidDepth, "alpha_schedule.alpha",
                                 absl::StrCat(alphas.size(), " entries"), "1..4096 entries"});
  }
  if (depth != 0 && depth != alphas.size()) {
    return InvalidArgumentError({ErrorReason::kInvalidDepth, "depth", std::to_string(depth),
                                 absl::StrCat("0 or the schedule's length ", alphas.size())});
  }
  for (size_t l = 0; l < alphas.size(); ++l) {
    if (!IsUnitInterval(alphas[l])) {
      return InvalidArgumentError({ErrorReason::kInvalidAlpha, absl::StrCat("alpha_schedule.alpha[", l, "]"),
                                   FormatValue(alphas[l]), "[0, 1]"});
    }
  }
  Routing routing;
  routing.depth_ = static_cast<uint32_t>(alphas.size());
  routing.constant_ = false;
  routing.alphas_ = alphas;
  return routing;
}

std::optional<uint32_t> Routing::uniform_window() const {
  if (windows_.empty()) return 0u;
  for (uint32_t w : windows_) {
    if (w != windows_.front()) return std::nullopt;
  }
  return windows_.front();
}

absl::StatusOr<Routing> WithAttentionWindows(Routing routing, uint32_t window, const std::vector<uint32_t>& layer_windows) {
  if (!layer_windows.empty()) {
    if (window != 0) {
      return InvalidArgumentError({ErrorReason::kInvalidArgument, "attention_window", std::to_string(window),
                                   "0 when layer_windows is given (one or the other)"});
    }
    if (layer_windows.size() != routing.depth_) {
      return InvalidArgumentError({ErrorReason::kInvalidDepth, "layer_windows",
                                   absl::StrCat(layer_windows.size(), " entries"),
                                   absl::StrCat("one window per layer: ", routing.depth_, " entries")});
    }
    bool any = false;
    for (uint32_t w : layer_windows) any = any || w != 0;
    if (any) routing.windows_ = layer_windows;
    return routing;
  }
  if (window != 0) routing.windows_.assign(routing.depth_, window);
  return routing;
}

}  // namespace posbias::density
