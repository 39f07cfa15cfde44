// posbias-generate-wiring: writes, from the compiled-in descriptors of posbias.v1's services, the
// two headers per service that no one edits by hand (the build runs it before the api and grpc
// rooms compile; see server/grpc/CMakeLists.txt):
//
//   server/api/<file>_handlers.h  the declaration of every unary RPC's gRPC-free handler,
//                        absl::StatusOr<Response> Handle<Method>(<Prefix>Requests& service,
//                                                            Caller& caller, const Request& request);
//                      which the service's *_requests.cc defines (Prefix: the service's name less
//                      "Service", so JobService's state is JobRequests);
//   server/grpc/<file>_wiring.h   <Service>Wiring, the gRPC callback service: each unary method hands its
//                      handler to AnswerUnary (or, with the policy's answer_when_busy,
//                      AnswerUnaryInline) from unary_call.h, so authentication, the role check,
//                      the enum check, audit, metrics and executor admission come with it; each
//                      streaming method is forwarded to the member of the same name of a
//                      `Streams` class (a template parameter; the service's reactors).
//
// Usage: posbias-generate-wiring <output root> (the two headers go to its server/api/ and
// server/grpc/). Writes a file only when its text changed, so
// an unchanged proto rebuilds nothing. Exit 1 names a method the policy cannot wire.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <google/protobuf/descriptor.h>

#include "posbias/v1/density_service.pb.h"
#include "posbias/v1/job_service.pb.h"
#include "posbias/v1/model_service.pb.h"
#include "posbias/v1/options.pb.h"

namespace {

namespace pb = google::protobuf;

// "posbias.v1" -> "::posbias::v1"
std::string CppNamespace(const std::string& package) {
  std::string out = "::";
  for (char c : package) {
    if (c == '.') {
      out += "::";
    } else {
      out += c;
    }
  }
  return out;
}

// "posbias.v1.Job" -> "::posbias::v1::Job" (nested messages: "Outer.Inner" -> "Outer_Inner").
std::string CppType(const pb::Descriptor* message) {
  const std::string& package = message->file()->package();
  std::string name = message->full_name().substr(package.empty() ? 0 : package.size() + 1);
  for (char& c : name) {
    if (c == '.') c = '_';
  }
  return CppNamespace(package) + "::" + name;
}

// "posbias/v1/job_service.proto" -> "posbias/v1/job_service"
std::string Stem(const std::string& proto_path) { return proto_path.substr(0, proto_path.size() - 6); }
std::string BaseName(const std::string& proto_path) {
  return std::filesystem::path(Stem(proto_path)).filename().string();
}

std::string RequestsClass(const pb::ServiceDescriptor* service) {
  std::string name = service->name();
  const std::string suffix = "Service";
  if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
    name.resize(name.size() - suffix.size());
  }
  return name + "Requests";
}

bool IsUnary(const pb::MethodDescriptor* method) { return !method->client_streaming() && !method->server_streaming(); }

std::string PolicyText(const pb::MethodDescriptor* method) {
  const posbias::v1::MethodPolicy& policy = method->options().GetExtension(posbias::v1::policy);
  std::string text = "role " + posbias::v1::AccessRole_Name(policy.role()).substr(std::string("ACCESS_ROLE_").size());
  if (policy.mutating()) text += ", mutating";
  if (policy.audited()) text += ", audited";
  if (policy.answer_when_busy()) text += ", answered when busy";
  return text;
}

// The override's signature for the callback API (without the trailing "override").
std::string Override(const pb::MethodDescriptor* method) {
  const std::string in = CppType(method->input_type());
  const std::string out = CppType(method->output_type());
  const std::string& name = method->name();
  if (IsUnary(method)) {
    return "::grpc::ServerUnaryReactor* " + name + "(::grpc::CallbackServerContext* context, const " + in +
           "* request, " + out + "* response)";
  }
  if (method->server_streaming() && !method->client_streaming()) {
    return "::grpc::ServerWriteReactor<" + out + ">* " + name + "(::grpc::CallbackServerContext* context, const " +
           in + "* request)";
  }
  if (method->client_streaming() && !method->server_streaming()) {
    return "::grpc::ServerReadReactor<" + in + ">* " + name + "(::grpc::CallbackServerContext* context, " + out +
           "* response)";
  }
  return "::grpc::ServerBidiReactor<" + in + ", " + out + ">* " + name + "(::grpc::CallbackServerContext* context)";
}

std::string ForwardArguments(const pb::MethodDescriptor* method) {
  if (IsUnary(method)) return "context, request, response";
  if (method->server_streaming() && !method->client_streaming()) return "context, request";
  if (method->client_streaming() && !method->server_streaming()) return "context, response";
  return "context";
}

std::string Banner(const pb::FileDescriptor* file) {
  return "// Generated by posbias-generate-wiring (server/grpc/generate_wiring.cc) from " + file->name() +
         ".\n// Do not edit: change the proto, or the generator.\n";
}

std::string HandlersHeader(const pb::FileDescriptor* file) {
  std::set<std::string> includes;
  for (int s = 0; s < file->service_count(); ++s) {
    const auto* service = file->service(s);
    for (int m = 0; m < service->method_count(); ++m) {
      includes.insert(Stem(service->method(m)->input_type()->file()->name()) + ".pb.h");
      includes.insert(Stem(service->method(m)->output_type()->file()->name()) + ".pb.h");
    }
  }
  std::ostringstream out;
  out << Banner(file);
  out << "// The gRPC-free handlers of its unary RPCs: one function each, of (the service's state, the\n"
         "// caller, the request), defined by hand in the service's *_requests.cc and tested there.\n";
  out << "#pragma once\n\n#include \"absl/status/statusor.h\"\n";
  for (const auto& include : includes) out << "#include \"" << include << "\"\n";
  out << "\nnamespace posbias::service {\n\nstruct Caller;\n";
  for (int s = 0; s < file->service_count(); ++s) {
    const auto* service = file->service(s);
    const std::string state = RequestsClass(service);
    out << "struct " << state << ";  // The handlers' state, hand-written in the *_requests.h header.\n\n";
    for (int m = 0; m < service->method_count(); ++m) {
      const auto* method = service->method(m);
      if (!IsUnary(method)) continue;
      out << "// " << service->full_name() << "." << method->name() << " (" << PolicyText(method) << ").\n";
      out << "absl::StatusOr<" << CppType(method->output_type()) << "> Handle" << method->name() << "(" << state
          << "& service, Caller& caller,\n    const " << CppType(method->input_type()) << "& request);\n";
    }
  }
  out << "\n}  // namespace posbias::service\n";
  return out.str();
}

std::string WiringHeader(const pb::FileDescriptor* file) {
  std::ostringstream out;
  out << Banner(file);
  out << "// Its services over gRPC's callback API: every unary RPC goes through unary_call.h's\n"
         "// AnswerUnary to its handler (" << BaseName(file->name()) << "_handlers.h); every stream to the\n"
         "// Streams class's member of the same name.\n";
  out << "#pragma once\n\n#include \"" << Stem(file->name()) << ".grpc.pb.h\"\n";
  out << "#include \"server/api/" << BaseName(file->name()) << "_handlers.h\"\n";
  out << "#include \"server/grpc/unary_call.h\"\n\nnamespace posbias::service {\n";
  for (int s = 0; s < file->service_count(); ++s) {
    const auto* service = file->service(s);
    const std::string state = RequestsClass(service);
    bool streams = false;
    for (int m = 0; m < service->method_count(); ++m) streams = streams || !IsUnary(service->method(m));
    const std::string grpc_service = CppNamespace(file->package()) + "::" + service->name() + "::CallbackService";
    out << "\n";
    if (streams) out << "template <typename Streams>\n";
    out << "class " << service->name() << "Wiring final : public " << grpc_service << " {\n public:\n";
    out << "  // All outlive this; `runtime` is read per call (filled before the server starts).\n";
    out << "  " << service->name() << "Wiring(" << state << "* requests, " << (streams ? "Streams* streams, " : "")
        << "const CallRuntime* runtime)\n      : requests_(requests), " << (streams ? "streams_(streams), " : "")
        << "runtime_(runtime) {}\n";
    for (int m = 0; m < service->method_count(); ++m) {
      const auto* method = service->method(m);
      out << "\n  // " << PolicyText(method) << ".\n";
      out << "  " << Override(method) << " override {\n";
      if (IsUnary(method)) {
        const bool inline_answer = method->options().GetExtension(posbias::v1::policy).answer_when_busy();
        out << "    return " << (inline_answer ? "AnswerUnaryInline" : "AnswerUnary")
            << "(context, *runtime_, request, response,\n"
            << "        [requests = requests_](Caller& caller, const " << CppType(method->input_type())
            << "& r) { return Handle" << method->name() << "(*requests, caller, r); });\n";
      } else {
        out << "    return streams_->" << method->name() << "(" << ForwardArguments(method) << ");\n";
      }
      out << "  }\n";
    }
    out << "\n private:\n  " << state << "* requests_;\n";
    if (streams) out << "  Streams* streams_;\n";
    out << "  const CallRuntime* runtime_;\n};\n";
  }
  out << "\n}  // namespace posbias::service\n";
  return out.str();
}

bool WriteIfChanged(const std::filesystem::path& path, const std::string& text) {
  {
    std::ifstream in(path, std::ios::binary);
    if (in) {
      std::ostringstream old;
      old << in.rdbuf();
      if (old.str() == text) return true;
    }
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  return static_cast<bool>(out);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: posbias-generate-wiring <output root>\n";
    return 2;
  }
  const std::filesystem::path root = argv[1];
  const std::filesystem::path api = root / "server" / "api", grpc = root / "server" / "grpc";
  std::filesystem::create_directories(api);
  std::filesystem::create_directories(grpc);
  // Through a message of each file, so the generated descriptors are linked in and registered.
  const std::vector<const pb::FileDescriptor*> files = {posbias::v1::EvaluateContinuumRequest::descriptor()->file(),
                                                        posbias::v1::GetModelRequest::descriptor()->file(),
                                                        posbias::v1::GetJobRequest::descriptor()->file()};
  for (const auto* file : files) {
    for (int s = 0; s < file->service_count(); ++s) {
      const auto* service = file->service(s);
      for (int m = 0; m < service->method_count(); ++m) {
        const auto* method = service->method(m);
        if (!method->options().HasExtension(posbias::v1::policy)) {
          std::cerr << service->full_name() << "." << method->name() << ": no (posbias.v1.policy) option\n";
          return 1;
        }
        if (!IsUnary(method) && method->options().GetExtension(posbias::v1::policy).answer_when_busy()) {
          std::cerr << service->full_name() << "." << method->name()
                    << ": answer_when_busy is for unary RPCs (a stream holds no executor thread anyway)\n";
          return 1;
        }
      }
    }
    const std::string base = BaseName(file->name());
    if (!WriteIfChanged(api / (base + "_handlers.h"), HandlersHeader(file)) ||
        !WriteIfChanged(grpc / (base + "_wiring.h"), WiringHeader(file))) {
      std::cerr << "cannot write into " << root << "\n";
      return 1;
    }
  }
  return 0;
}
