// The API's policy comes from the proto: every RPC carries its (posbias.v1.policy) option, the
// server's table is read from the descriptors, and an RPC without the option is refused at
// start-up. Enum values a proto3 enum does not define are refused once for every request.
#include "server/api/api_methods.h"

#include <google/protobuf/descriptor.pb.h>

#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "posbias/v1/density_service.pb.h"
#include "posbias/v1/job_service.pb.h"
#include "posbias/v1/model_service.pb.h"
#include "posbias/v1/options.pb.h"
#include "server/api/enum_check.h"
#include "server/status/error.h"

namespace posbias::api {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;

TEST(ApiMethods, EveryRpcOfTheThreeServicesHasAPolicy) {
  const auto& methods = V1Methods();
  ASSERT_TRUE(methods.ok()) << methods.status();
  int rpcs = 0;
  for (const auto* service : V1Services()) {
    ASSERT_NE(service, nullptr);
    for (int i = 0; i < service->method_count(); ++i, ++rpcs) {
      const auto* method = service->method(i);
      EXPECT_TRUE(method->options().HasExtension(v1::policy)) << method->full_name();
      const std::string name = "/" + service->full_name() + "/" + method->name();
      EXPECT_NE(methods->rules().Find(name), nullptr) << name;
      EXPECT_EQ(methods->MethodFor(method->input_type()), name);
    }
  }
  EXPECT_EQ(static_cast<int>(methods->names().size()), rpcs);
  EXPECT_EQ(methods->rules().all().size(), methods->names().size());
}

TEST(ApiMethods, TheTableIsWhatTheProtoSays) {
  const auto& rules = V1Methods()->rules();
  const auto* submit = rules.Find("/posbias.v1.JobService/SubmitJob");
  ASSERT_NE(submit, nullptr);
  EXPECT_EQ(submit->role, auth::Role::kSubmitter);
  EXPECT_TRUE(submit->mutating);
  EXPECT_TRUE(submit->audited);
  const auto* exported = rules.Find("/posbias.v1.ModelService/ExportModel");
  ASSERT_NE(exported, nullptr);
  EXPECT_EQ(exported->role, auth::Role::kOperator);
  EXPECT_FALSE(exported->mutating);
  EXPECT_TRUE(exported->audited);  // Weights leave the server: audited though it changes nothing.
  const auto* tokenize = rules.Find("/posbias.v1.ModelService/Tokenize");
  ASSERT_NE(tokenize, nullptr);
  EXPECT_EQ(tokenize->role, auth::Role::kReader);
  EXPECT_FALSE(tokenize->audited);
  EXPECT_EQ(rules.Find("/posbias.v1.JobService/NoSuchMethod"), nullptr);
}

// A service built in a pool of its own, one method with the policy `configure` gives it.
absl::StatusOr<ApiMethods> MethodsOfAHandBuiltService(
    const std::function<void(google::protobuf::ServiceDescriptorProto*)>& configure) {
  google::protobuf::FileDescriptorProto file;
  file.set_name("hand_built.proto");
  file.set_package("handbuilt");
  file.set_syntax("proto3");
  file.add_message_type()->set_name("Req");
  file.add_message_type()->set_name("Other");
  auto* service = file.add_service();
  service->set_name("S");
  configure(service);
  // A pool per service: each declares the same names. Kept for the process (descriptors point into it).
  static auto* pools = new std::vector<std::unique_ptr<google::protobuf::DescriptorPool>>();
  pools->push_back(std::make_unique<google::protobuf::DescriptorPool>());
  const auto* built = pools->back()->BuildFile(file);
  if (built == nullptr) return absl::InternalError("hand-built file did not build");
  return ApiMethods::FromServices({built->service(0)});
}

google::protobuf::MethodDescriptorProto* AddMethod(google::protobuf::ServiceDescriptorProto* service,
                                                  const std::string& name, const std::string& input) {
  auto* method = service->add_method();
  method->set_name(name);
  method->set_input_type(".handbuilt." + input);
  method->set_output_type(".handbuilt.Other");
  return method;
}

TEST(ApiMethods, AnRpcWithoutTheOptionStopsTheTableFromBuilding) {
  const auto methods = MethodsOfAHandBuiltService([](auto* service) { AddMethod(service, "Open", "Req"); });
  ASSERT_FALSE(methods.ok());
  EXPECT_NE(methods.status().message().find("/handbuilt.S/Open"), std::string::npos) << methods.status();
  EXPECT_NE(methods.status().message().find("missing"), std::string::npos) << methods.status();
}

TEST(ApiMethods, AnUnspecifiedRoleAnUnauditedMutationAndASharedRequestTypeAreRefused) {
  const auto unspecified = MethodsOfAHandBuiltService([](auto* service) {
    AddMethod(service, "Open", "Req")->mutable_options()->MutableExtension(v1::policy)->set_audited(true);
  });
  EXPECT_FALSE(unspecified.ok());
  const auto unaudited = MethodsOfAHandBuiltService([](auto* service) {
    auto* policy = AddMethod(service, "Change", "Req")->mutable_options()->MutableExtension(v1::policy);
    policy->set_role(v1::ACCESS_ROLE_OPERATOR);
    policy->set_mutating(true);
  });
  EXPECT_FALSE(unaudited.ok());
  const auto shared = MethodsOfAHandBuiltService([](auto* service) {
    AddMethod(service, "A", "Req")->mutable_options()->MutableExtension(v1::policy)->set_role(v1::ACCESS_ROLE_READER);
    AddMethod(service, "B", "Req")->mutable_options()->MutableExtension(v1::policy)->set_role(v1::ACCESS_ROLE_READER);
  });
  ASSERT_FALSE(shared.ok());
  EXPECT_NE(shared.status().message().find("shared"), std::string::npos) << shared.status();
  const auto fine = MethodsOfAHandBuiltService([](auto* service) {
    AddMethod(service, "A", "Req")->mutable_options()->MutableExtension(v1::policy)->set_role(v1::ACCESS_ROLE_ADMIN);
  });
  ASSERT_TRUE(fine.ok()) << fine.status();
  EXPECT_EQ(fine->rules().Find("/handbuilt.S/A")->role, auth::Role::kAdmin);
}

// ---- Enum values --------------------------------------------------------------------------------

// Every path from `type` to an enum field, as the chain of fields leading to it. A message type
// already on the path is not entered again (recursive messages).
void EnumPaths(const Descriptor* type, std::vector<const FieldDescriptor*>& path, std::set<const Descriptor*>& open,
               std::vector<std::vector<const FieldDescriptor*>>& out) {
  open.insert(type);
  for (int i = 0; i < type->field_count(); ++i) {
    const auto* field = type->field(i);
    path.push_back(field);
    if (field->cpp_type() == FieldDescriptor::CPPTYPE_ENUM) {
      out.push_back(path);
    } else if (field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE && !open.count(field->message_type())) {
      EnumPaths(field->message_type(), path, open, out);
    }
    path.pop_back();
  }
  open.erase(type);
}

// Sets the enum at the end of `path` to `number` (entering each message, adding one element to
// each repeated field on the way); returns the path as the check names it.
std::string SetEnum(Message* message, const std::vector<const FieldDescriptor*>& path, int number) {
  std::string name;
  for (size_t k = 0; k < path.size(); ++k) {
    const auto* field = path[k];
    const auto* reflection = message->GetReflection();
    name += (name.empty() ? "" : ".") + field->name();
    if (field->is_repeated()) name += "[0]";
    if (k + 1 == path.size()) {
      if (field->is_repeated()) {
        reflection->AddEnumValue(message, field, number);
      } else {
        reflection->SetEnumValue(message, field, number);
      }
    } else {
      if (field->is_map()) {  // A map entry needs its key set to be one entry.
        message = reflection->AddMessage(message, field);
        continue;
      }
      message = field->is_repeated() ? reflection->AddMessage(message, field) : reflection->MutableMessage(message, field);
    }
  }
  return name;
}

TEST(EnumValues, EveryEnumFieldOfEveryRequestRefusesAnUndefinedNumber) {
  int checked = 0;
  for (const auto* service : V1Services()) {
    for (int i = 0; i < service->method_count(); ++i) {
      const Descriptor* request_type = service->method(i)->input_type();
      std::vector<std::vector<const FieldDescriptor*>> paths;
      std::vector<const FieldDescriptor*> path;
      std::set<const Descriptor*> open;
      EnumPaths(request_type, path, open, paths);
      for (const auto& enum_path : paths) {
        const auto* prototype = google::protobuf::MessageFactory::generated_factory()->GetPrototype(request_type);
        std::unique_ptr<Message> request(prototype->New());
        const int undefined = 7777;
        ASSERT_EQ(enum_path.back()->enum_type()->FindValueByNumber(undefined), nullptr);
        const std::string name = SetEnum(request.get(), enum_path, undefined);
        const absl::Status status = CheckEnumValues(*request);
        EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << request_type->name() << " " << name;
        EXPECT_EQ(ErrorReasonOf(status), "INVALID_ENUM_VALUE") << name;
        EXPECT_EQ(ErrorFieldOf(status), name);
        EXPECT_EQ(ErrorValueOf(status), "7777");
        EXPECT_NE(ErrorAllowedOf(status).find(enum_path.back()->enum_type()->value(0)->name()), std::string::npos);
        std::unique_ptr<Message> defined(prototype->New());
        SetEnum(defined.get(), enum_path, enum_path.back()->enum_type()->value(0)->number());
        EXPECT_TRUE(CheckEnumValues(*defined).ok()) << name;
        ++checked;
      }
    }
  }
  EXPECT_GE(checked, 6);  // method, dtype, output, device, pathway, states, ... at least.
}

TEST(EnumValues, TheIssuesExamplesAreRefusedNamingTheirFields) {
  v1::SubmitJobRequest submit;
  submit.mutable_spec()->mutable_jacobian_norm()->set_model("m");
  submit.mutable_spec()->mutable_jacobian_norm()->set_method(static_cast<v1::JacobianMethod>(7));
  EXPECT_EQ(ErrorFieldOf(CheckEnumValues(submit)), "spec.jacobian_norm.method");
  v1::ExportModelRequest exported;
  exported.set_dtype(static_cast<v1::ComputeDtype>(-1));
  const absl::Status status = CheckEnumValues(exported);
  EXPECT_EQ(ErrorReasonOf(status), "INVALID_ENUM_VALUE");
  EXPECT_EQ(ErrorFieldOf(status), "dtype");
  EXPECT_NE(status.message().find("FLOAT32"), std::string::npos) << status;
}

}  // namespace
}  // namespace posbias::api
