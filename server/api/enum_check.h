// One check for every enum field of every request: proto3 enums are open, so a number the enum
// does not define parses and would otherwise be read as some default by the handler. The walk
// covers singular, repeated, map and nested fields through reflection.
#pragma once

#include <google/protobuf/message.h>

#include "absl/status/status.h"

namespace posbias::api {

// INVALID_ARGUMENT with reason INVALID_ENUM_VALUE for the first enum field that holds an undefined
// number: the detail's field is the path ("spec.device", "states[2]"), its value the number and
// allowed the enum's names. OK when every enum value is defined (UNSPECIFIED = 0 is defined; the
// handler decides what it means).
absl::Status CheckEnumValues(const google::protobuf::Message& message);

}  // namespace posbias::api
