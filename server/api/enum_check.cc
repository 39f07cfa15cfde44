#include "server/api/enum_check.h"

#include <string>
#include <vector>

#include <google/protobuf/descriptor.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/status/error.h"

namespace posbias::api {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;

// Requests nest a few levels; the cap keeps a hostile recursive message from deepening the stack
// (the parser's own recursion limit is 100).
constexpr int kMaxDepth = 100;

absl::Status UndefinedValue(const std::string& path, const google::protobuf::EnumDescriptor* type, int number) {
  std::vector<std::string> names;
  for (int i = 0; i < type->value_count(); ++i) names.push_back(type->value(i)->name());
  return InvalidArgumentError({ErrorReason::kInvalidEnumValue, path, std::to_string(number),
                               absl::StrCat("one of ", absl::StrJoin(names, ", "), " (", type->full_name(), ")")});
}

absl::Status Walk(const Message& message, const std::string& prefix, int depth) {
  if (depth > kMaxDepth) return absl::OkStatus();
  const auto* reflection = message.GetReflection();
  std::vector<const FieldDescriptor*> fields;
  reflection->ListFields(message, &fields);  // Set fields only: an unset enum is 0, defined.
  for (const auto* field : fields) {
    const std::string path = prefix.empty() ? field->name() : absl::StrCat(prefix, ".", field->name());
    if (field->cpp_type() == FieldDescriptor::CPPTYPE_ENUM) {
      const auto* type = field->enum_type();
      if (field->is_repeated()) {
        for (int i = 0; i < reflection->FieldSize(message, field); ++i) {
          const int number = reflection->GetRepeatedEnumValue(message, field, i);
          if (type->FindValueByNumber(number) == nullptr) return UndefinedValue(absl::StrCat(path, "[", i, "]"), type, number);
        }
      } else {
        const int number = reflection->GetEnumValue(message, field);
        if (type->FindValueByNumber(number) == nullptr) return UndefinedValue(path, type, number);
      }
    } else if (field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      if (field->is_repeated()) {
        for (int i = 0; i < reflection->FieldSize(message, field); ++i) {
          const auto status = Walk(reflection->GetRepeatedMessage(message, field, i), absl::StrCat(path, "[", i, "]"), depth + 1);
          if (!status.ok()) return status;
        }
      } else {
        const auto status = Walk(reflection->GetMessage(message, field), path, depth + 1);
        if (!status.ok()) return status;
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckEnumValues(const Message& message) { return Walk(message, "", 0); }

}  // namespace posbias::api
