#include "server/api/caller.h"

#include "absl/strings/str_cat.h"
#include "server/status/error.h"

namespace posbias::api {

absl::Status HiddenJob(const std::string& id) {
  return ErrorWithReason(absl::StatusCode::kNotFound, ErrorReason::kJobNotFound, absl::StrCat("job ", id, " does not exist"));
}

absl::Status HiddenModel(const std::string& name) {
  return ErrorWithReason(absl::StatusCode::kNotFound, ErrorReason::kModelNotFound,
                         absl::StrCat("no model named ", name));
}

}  // namespace posbias::api
