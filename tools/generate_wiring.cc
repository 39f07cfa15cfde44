// posbias-generate-wiring: a build tool. From the descriptors of posbias.v1's proto files (linked
// in whole; the files are named on the command line from proto/CMakeLists.txt's POSBIAS_PROTOS, the
// one list of the API's files), writes the two headers no one edits by hand (the build runs it
// before the api and rpc rooms compile; see tools/CMakeLists.txt):
//
//   server/api/v1_handlers.h  the declaration of every unary RPC's gRPC-free handler,
//                        absl::StatusOr<Response> Handle<Method>(<Prefix>Requests& service,
//                                                            Caller& caller, const Request& request);
//                      which the service's *_requests.cc defines (Prefix: the service's name less
//                      "Service", so JobService's state is JobRequests), and V1Services(): the
//                      services' descriptors, in the files' order (the policies are read from them);
//   server/rpc/v1_wiring.h    <Service>Wiring, each service's gRPC callback service: each unary
//                      method hands its handler to AnswerUnary (or, with the policy's
//                      answer_when_busy, AnswerUnaryInline) from unary_call.h, so authentication,
//                      the role check, the enum check, audit, metrics and executor admission come
//                      with it; each streaming method is forwarded to the member of the same name
//                      of a `Streams` class (a template parameter; the service's reactors). Then
//                      kV1ServiceNames (health) and V1Wiring, every service wired at once.
//
// Usage: posbias-generate-wiring <output root> <proto file>... (posbias/v1/x.proto, as imported;
// files without a service are skipped). Writes a file only when its text changed, so an unchanged
// proto rebuilds nothing. Exit 1 names a method the policy cannot wire or a file not linked in.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <google/protobuf/descriptor.h>

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

using Files = std::vector<const pb::FileDescriptor*>;

std::string Banner(const Files& files) {
  std::string names;
  for (const auto* file : files) names += (names.empty() ? "" : ", ") + file->name();
  return "// Generated by posbias-generate-wiring (tools/generate_wiring.cc) from " + names +
         ".\n// Do not edit: change the proto, or the generator.\n";
}

// Every service of `files`, in order.
std::vector<const pb::ServiceDescriptor*> Services(const Files& files) {
  std::vector<const pb::ServiceDescriptor*> services;
  for (const auto* file : files) {
    for (int s = 0; s < file->service_count(); ++s) services.push_back(file->service(s));
  }
  return services;
}

bool HasStreams(const pb::ServiceDescriptor* service) {
  for (int m = 0; m < service->method_count(); ++m) {
    if (!IsUnary(service->method(m))) return true;
  }
  return false;
}

// "ModelService" -> "model_service"
std::string SnakeName(const std::string& name) {
  std::string out;
  for (char c : name) {
    if (c >= 'A' && c <= 'Z') {
      if (!out.empty()) out += '_';
      out += static_cast<char>(c - 'A' + 'a');
    } else {
      out += c;
    }
  }
  return out;
}

std::string HandlersHeader(const Files& files) {
  std::set<std::string> includes;
  for (const auto* service : Services(files)) {
    includes.insert(Stem(service->file()->name()) + ".pb.h");
    for (int m = 0; m < service->method_count(); ++m) {
      includes.insert(Stem(service->method(m)->input_type()->file()->name()) + ".pb.h");
      includes.insert(Stem(service->method(m)->output_type()->file()->name()) + ".pb.h");
    }
  }
  std::ostringstream out;
  out << Banner(files);
  out << "// The gRPC-free handlers of the unary RPCs: one function each, of (the service's state, the\n"
         "// caller, the request), defined by hand in the service's *_requests.cc and tested there.\n";
  out << "#pragma once\n\n#include <vector>\n\n#include <google/protobuf/descriptor.h>\n\n"
         "#include \"absl/status/statusor.h\"\n";
  for (const auto& include : includes) out << "#include \"" << include << "\"\n";
  out << "\nnamespace posbias::api {\n\nstruct Caller;\n";
  for (const auto* service : Services(files)) {
    const std::string state = RequestsClass(service);
    out << "\nstruct " << state << ";  // The handlers' state, hand-written in the *_requests.h header.\n\n";
    for (int m = 0; m < service->method_count(); ++m) {
      const auto* method = service->method(m);
      if (!IsUnary(method)) continue;
      out << "// " << service->full_name() << "." << method->name() << " (" << PolicyText(method) << ").\n";
      out << "absl::StatusOr<" << CppType(method->output_type()) << "> Handle" << method->name() << "(" << state
          << "& service, Caller& caller,\n    const " << CppType(method->input_type()) << "& request);\n";
    }
  }
  out << "\n// The services, in the proto files' order. Through a message of each file, so the generated\n"
         "// descriptors are linked in and registered.\n"
         "inline std::vector<const google::protobuf::ServiceDescriptor*> V1Services() {\n  return {";
  bool first = true;
  for (const auto* service : Services(files)) {
    out << (first ? "" : ",\n          ") << CppType(service->file()->message_type(0))
        << "::descriptor()->file()->FindServiceByName(\"" << service->name() << "\")";
    first = false;
  }
  out << "};\n}\n\n}  // namespace posbias::api\n";
  return out.str();
}

std::string WiringClass(const pb::ServiceDescriptor* service) {
  std::ostringstream out;
  const std::string state = "api::" + RequestsClass(service);
  const bool streams = HasStreams(service);
  const std::string grpc_service = CppNamespace(service->file()->package()) + "::" + service->name() + "::CallbackService";
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
          << "        [requests = requests_](api::Caller& caller, const " << CppType(method->input_type())
          << "& r) { return api::Handle" << method->name() << "(*requests, caller, r); });\n";
    } else {
      out << "    return streams_->" << method->name() << "(" << ForwardArguments(method) << ");\n";
    }
    out << "  }\n";
  }
  out << "\n private:\n  " << state << "* requests_;\n";
  if (streams) out << "  Streams* streams_;\n";
  out << "  const CallRuntime* runtime_;\n};\n";
  return out.str();
}

// V1Wiring: every service's wiring as members, constructed from each one's state (and streams,
// the template parameters, one per service with streams), registered with a builder at once.
std::string AllWiring(const Files& files) {
  const auto services = Services(files);
  std::vector<std::string> parameters, arguments, initializers, members;
  for (const auto* service : services) {
    const std::string member = SnakeName(service->name());
    const std::string requests = member + "_requests";
    parameters.push_back("api::" + RequestsClass(service) + "* " + requests);
    std::string type = service->name() + "Wiring";
    std::string init = member + "(" + requests;
    if (HasStreams(service)) {
      const std::string streams = service->name() + "Streams";
      arguments.push_back("typename " + streams);
      parameters.push_back(streams + "* " + member + "_streams");
      type += "<" + streams + ">";
      init += ", " + member + "_streams";
    }
    initializers.push_back(init + ", runtime)");
    members.push_back(type + " " + member + ";");
  }
  parameters.push_back("const CallRuntime* runtime");
  std::ostringstream out;
  out << "\n// The services' full names, as health checks and reflection know them.\n"
         "inline constexpr const char* kV1ServiceNames[] = {";
  for (size_t i = 0; i < services.size(); ++i) out << (i ? ", " : "") << "\"" << services[i]->full_name() << "\"";
  out << "};\n\n// Every service wired: each to its state (and its streams), all outliving this.\n";
  if (!arguments.empty()) {
    out << "template <";
    for (size_t i = 0; i < arguments.size(); ++i) out << (i ? ", " : "") << arguments[i];
    out << ">\n";
  }
  out << "struct V1Wiring {\n  V1Wiring(";
  for (size_t i = 0; i < parameters.size(); ++i) out << (i ? ", " : "") << parameters[i];
  out << ")\n      : ";
  for (size_t i = 0; i < initializers.size(); ++i) out << (i ? ", " : "") << initializers[i];
  out << " {}\n\n  // Registers every service with `builder`, which this outlives.\n"
         "  void RegisterWith(::grpc::ServerBuilder& builder) {\n";
  for (const auto* service : services) out << "    builder.RegisterService(&" << SnakeName(service->name()) << ");\n";
  out << "  }\n\n";
  for (const auto& member : members) out << "  " << member << "\n";
  out << "};\n";
  return out.str();
}

std::string WiringHeader(const Files& files) {
  std::ostringstream out;
  out << Banner(files);
  out << "// The services over gRPC's callback API: every unary RPC goes through unary_call.h's\n"
         "// AnswerUnary to its handler (server/api/v1_handlers.h); every stream to the Streams class's\n"
         "// member of the same name.\n";
  out << "#pragma once\n\n#include <grpcpp/server_builder.h>\n\n";
  for (const auto* file : files) {
    if (file->service_count() > 0) out << "#include \"" << Stem(file->name()) << ".grpc.pb.h\"\n";
  }
  out << "#include \"server/api/v1_handlers.h\"\n";
  out << "#include \"server/rpc/unary_call.h\"\n\nnamespace posbias::rpc {\n";
  for (const auto* service : Services(files)) out << WiringClass(service);
  out << AllWiring(files);
  out << "\n}  // namespace posbias::rpc\n";
  return out.str();
}

// Empty when every method of `files` can be wired; else what is wrong.
std::string PolicyProblems(const Files& files) {
  for (const auto* service : Services(files)) {
    if (service->file()->message_type_count() == 0) {
      return service->full_name() + ": its file declares no message (V1Services reaches it through one)";
    }
    for (int m = 0; m < service->method_count(); ++m) {
      const auto* method = service->method(m);
      if (!method->options().HasExtension(posbias::v1::policy)) {
        return service->full_name() + "." + method->name() + ": no (posbias.v1.policy) option";
      }
      if (!IsUnary(method) && method->options().GetExtension(posbias::v1::policy).answer_when_busy()) {
        return service->full_name() + "." + method->name() +
               ": answer_when_busy is for unary RPCs (a stream holds no executor thread anyway)";
      }
    }
  }
  return "";
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
  if (argc < 3) {
    std::cerr << "usage: posbias-generate-wiring <output root> <proto file>...\n";
    return 2;
  }
  const std::filesystem::path root = argv[1];
  Files files;
  for (int i = 2; i < argc; ++i) {
    const auto* file = pb::DescriptorPool::generated_pool()->FindFileByName(argv[i]);
    if (file == nullptr) {
      std::cerr << argv[i] << ": not among the descriptors linked in (link posbias_proto whole)\n";
      return 1;
    }
    files.push_back(file);
  }
  if (const std::string problem = PolicyProblems(files); !problem.empty()) {
    std::cerr << problem << "\n";
    return 1;
  }
  const std::filesystem::path api = root / "server" / "api", rpc = root / "server" / "rpc";
  std::filesystem::create_directories(api);
  std::filesystem::create_directories(rpc);
  if (!WriteIfChanged(api / "v1_handlers.h", HandlersHeader(files)) ||
      !WriteIfChanged(rpc / "v1_wiring.h", WiringHeader(files))) {
    std::cerr << "cannot write into " << root << "\n";
    return 1;
  }
  return 0;
}
