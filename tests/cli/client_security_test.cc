// posbias::Client and the posbias CLI against a real gRPC server in this process, over plaintext,
// TLS and mTLS, with certificates made by `openssl` at test time (a CA, server certificates for
// localhost/127.0.0.1 and for another name, a client certificate, and one from a foreign CA).
//
// The server is not posbias-server but a stand-in: its DensityService.EvaluateContinuum,
// JobService.WatchJob (server streaming) and ModelService.UploadModel (client streaming) all fail
// with FAILED_PRECONDITION and the message "echo: authorization=<value>; peer=<client cert CN>",
// so a test sees what arrived; grpc.health.v1 is gRPC's default health service (SERVING).
#include <grpcpp/grpcpp.h>
#include <grpcpp/security/server_credentials.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "client/cli/cli.h"
#include "posbias/client.h"

namespace posbias {
namespace {

// ---------------------------------------------------------------- certificates

// Runs `command` in `directory` (output into openssl.log there); fails the test when it fails.
void Shell(const std::string& directory, const std::string& command) {
  const std::string line = "cd '" + directory + "' && " + command + " >>openssl.log 2>&1";
  ASSERT_EQ(std::system(line.c_str()), 0) << line << "\n(see " << directory << "/openssl.log)";
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The files a test names: <dir>/<name>.pem and <dir>/<name>.key.
struct Certificates {
  std::string dir;
  std::string Pem(const std::string& name) const { return dir + "/" + name + ".pem"; }
  std::string Key(const std::string& name) const { return dir + "/" + name + ".key"; }
};

constexpr char kNewKey[] = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";

// A self-signed CA `name`.
void MakeCa(const std::string& dir, const std::string& name) {
  Shell(dir, std::string("openssl req -x509 -new ") + kNewKey + " -keyout " + name + ".key -out " +
                 name + ".pem -days 2 -subj '/CN=" + name +
                 "' -addext basicConstraints=critical,CA:TRUE -addext "
                 "keyUsage=critical,keyCertSign,cRLSign");
}

// A certificate `name` (CN = name) signed by CA `ca`, with the X.509 v3 `extensions` lines.
void MakeLeaf(const std::string& dir, const std::string& name, const std::string& ca, int serial,
              const std::string& extensions) {
  std::ofstream(dir + "/" + name + ".ext") << extensions;
  Shell(dir, std::string("openssl req -new ") + kNewKey + " -keyout " + name + ".key -out " + name +
                 ".csr -subj '/CN=" + name + "'");
  Shell(dir, "openssl x509 -req -in " + name + ".csr -CA " + ca + ".pem -CAkey " + ca +
                 ".key -set_serial " + std::to_string(serial) + " -days 2 -out " + name +
                 ".pem -extfile " + name + ".ext");
}

// ---------------------------------------------------------------- the echo server

std::string Describe(const grpc::ServerContext& context) {
  std::string authorization = "<none>";
  const auto& metadata = context.client_metadata();
  if (auto it = metadata.find(kAuthorizationHeader); it != metadata.end()) {
    authorization = std::string(it->second.data(), it->second.size());
  }
  std::string peer = "<none>";
  if (auto auth = context.auth_context()) {
    const auto names = auth->FindPropertyValues("x509_common_name");
    if (!names.empty()) peer = std::string(names.front().data(), names.front().size());
  }
  return "echo: authorization=" + authorization + "; peer=" + peer;
}

grpc::Status Echo(const grpc::ServerContext& context) {
  return {grpc::StatusCode::FAILED_PRECONDITION, Describe(context)};
}

class EchoDensity final : public v1::DensityService::Service {
  grpc::Status EvaluateContinuum(grpc::ServerContext* context, const v1::EvaluateContinuumRequest*,
                                 v1::EvaluateContinuumResponse*) override {
    return Echo(*context);
  }
};

class EchoJobs final : public v1::JobService::Service {
  grpc::Status WatchJob(grpc::ServerContext* context, const v1::WatchJobRequest*,
                        grpc::ServerWriter<v1::WatchJobResponse>*) override {
    return Echo(*context);
  }
};

class EchoModels final : public v1::ModelService::Service {
  grpc::Status UploadModel(grpc::ServerContext* context,
                           grpc::ServerReader<v1::UploadModelRequest>* reader,
                           v1::Model*) override {
    v1::UploadModelRequest message;
    while (reader->Read(&message)) {
    }
    return Echo(*context);
  }
};

enum class Transport { kPlaintext, kTls, kMutualTls };

// The echo services on 127.0.0.1 (an OS-chosen port), serving certificate `server_cert`.
class EchoServer {
 public:
  EchoServer(const Certificates& certs, Transport transport, const std::string& server_cert) {
    std::shared_ptr<grpc::ServerCredentials> credentials = grpc::InsecureServerCredentials();
    if (transport != Transport::kPlaintext) {
      grpc::SslServerCredentialsOptions ssl(
          transport == Transport::kMutualTls
              ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
              : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
      ssl.pem_root_certs = ReadText(certs.Pem("ca"));  // Verifies client certificates.
      ssl.pem_key_cert_pairs.push_back(
          {ReadText(certs.Key(server_cert)), ReadText(certs.Pem(server_cert))});
      credentials = grpc::SslServerCredentials(ssl);
    }
    grpc::EnableDefaultHealthCheckService(true);
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", credentials, &port_);
    builder.RegisterService(&density_);
    builder.RegisterService(&jobs_);
    builder.RegisterService(&models_);
    server_ = builder.BuildAndStart();
  }
  ~EchoServer() {
    if (server_) server_->Shutdown(std::chrono::system_clock::now());
  }

  bool started() const { return server_ != nullptr && port_ > 0; }
  std::string Address() const { return "127.0.0.1:" + std::to_string(port_); }
  int port() const { return port_; }

 private:
  EchoDensity density_;
  EchoJobs jobs_;
  EchoModels models_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

// ---------------------------------------------------------------- the fixture

class ClientSecurity : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string pattern = ::testing::TempDir() + "/posbias-client-security-XXXXXX";
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    certs_ = new Certificates{pattern};
    const std::string& dir = certs_->dir;
    MakeCa(dir, "ca");
    MakeCa(dir, "foreign-ca");
    MakeLeaf(dir, "server", "ca", 2,
             "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n");
    MakeLeaf(dir, "other", "ca", 3,
             "subjectAltName=DNS:posbias.internal\nextendedKeyUsage=serverAuth\n");
    MakeLeaf(dir, "client", "ca", 4, "extendedKeyUsage=clientAuth\n");
    MakeLeaf(dir, "foreign-client", "foreign-ca", 5, "extendedKeyUsage=clientAuth\n");
  }
  static void TearDownTestSuite() {
    std::error_code ignored;
    if (certs_ != nullptr) std::filesystem::remove_all(certs_->dir, ignored);
    delete certs_;
    certs_ = nullptr;
  }

  void SetUp() override {
    for (const char* name : {"POSBIAS_SERVER", "POSBIAS_TOKEN", "POSBIAS_TLS", "POSBIAS_CA_FILE",
                             "POSBIAS_CERT_FILE", "POSBIAS_KEY_FILE", "POSBIAS_TLS_SERVER_NAME"}) {
      unsetenv(name);
    }
  }

  std::unique_ptr<EchoServer> Start(Transport transport, const std::string& cert = "server") {
    auto server = std::make_unique<EchoServer>(*certs_, transport, cert);
    EXPECT_TRUE(server->started());
    return server;
  }

  // A client of `server` with `security`; a short deadline, so failed handshakes fail fast.
  static Client Connect(const EchoServer& server, ClientOptions::Security security) {
    return Client({.target = server.Address(),
                   .default_timeout = std::chrono::milliseconds(5'000),
                   .security = std::move(security)});
  }

  // What the server echoed from a unary call, or the call's status when it did not echo.
  static absl::StatusOr<std::string> EchoUnary(Client& client) {
    return Echoed(client.EvaluateContinuum({}).status());
  }
  static absl::StatusOr<std::string> EchoServerStream(Client& client) {
    return Echoed(client.WatchJob({}, [](const v1::WatchJobResponse&) { return true; }));
  }
  static absl::StatusOr<std::string> EchoClientStream(Client& client) {
    return Echoed(
        client.UploadModel({v1::UploadModelRequest(), v1::UploadModelRequest()}).status());
  }
  static absl::StatusOr<std::string> Echoed(const absl::Status& status) {
    if (status.code() == absl::StatusCode::kFailedPrecondition &&
        status.message().substr(0, 6) == "echo: ") {
      return std::string(status.message().substr(6));
    }
    if (status.ok()) return absl::InternalError("the echo server answered OK");
    return status;
  }

  ClientOptions::Security Trusting() const { return {.ca_file = certs_->Pem("ca")}; }
  ClientOptions::Security WithCert(const std::string& name) const {
    return {.ca_file = certs_->Pem("ca"),
            .cert_file = certs_->Pem(name),
            .key_file = certs_->Key(name)};
  }

  int RunCli(std::vector<std::string> args) {
    args.insert(args.begin(), "posbias");
    std::vector<const char*> argv;
    for (const auto& arg : args) argv.push_back(arg.c_str());
    out_.str("");
    err_.str("");
    return cli::RunCli(static_cast<int>(argv.size()), argv.data(), out_, err_);
  }

  static Certificates* certs_;
  std::ostringstream out_, err_;
};

Certificates* ClientSecurity::certs_ = nullptr;

// ---------------------------------------------------------------- (a) TLS

TEST_F(ClientSecurity, ConnectsOverTlsWithTheCaFile) {
  auto server = Start(Transport::kTls);
  Client client = Connect(*server, Trusting());
  ASSERT_TRUE(client.status().ok()) << client.status();
  EXPECT_EQ(EchoUnary(client).value_or("failed"), "authorization=<none>; peer=<none>");
  auto health = client.Check();
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(*health, ServingStatus::kServing);
}

TEST_F(ClientSecurity, PlaintextAndUntrustedClientsFailAgainstTls) {
  auto server = Start(Transport::kTls);
  Client plaintext = Connect(*server, {});
  const auto plain = EchoUnary(plaintext);
  EXPECT_FALSE(plain.ok()) << *plain;
  EXPECT_EQ(plain.status().code(), absl::StatusCode::kUnavailable) << plain.status();

  Client system_roots = Connect(*server, {.tls = true});  // Our test CA is not a system root.
  EXPECT_EQ(EchoUnary(system_roots).status().code(), absl::StatusCode::kUnavailable);

  Client foreign = Connect(*server, {.ca_file = certs_->Pem("foreign-ca")});
  EXPECT_EQ(EchoUnary(foreign).status().code(), absl::StatusCode::kUnavailable);
}

TEST_F(ClientSecurity, TlsClientFailsAgainstPlaintext) {
  auto server = Start(Transport::kPlaintext);
  Client client = Connect(*server, Trusting());
  EXPECT_EQ(EchoUnary(client).status().code(), absl::StatusCode::kUnavailable);
}

// ---------------------------------------------------------------- (b) the token

TEST_F(ClientSecurity, SendsTheTokenOnUnaryAndStreamingCallsOverTls) {
  auto server = Start(Transport::kTls);
  auto security = Trusting();
  security.token = "s3cr3t.t0ken";
  Client client = Connect(*server, security);
  const std::string expected = "authorization=Bearer s3cr3t.t0ken; peer=<none>";
  EXPECT_EQ(EchoUnary(client).value_or("failed"), expected);
  EXPECT_EQ(EchoServerStream(client).value_or("failed"), expected);
  EXPECT_EQ(EchoClientStream(client).value_or("failed"), expected);
}

TEST_F(ClientSecurity, SendsTheTokenOverPlaintextToo) {
  auto server = Start(Transport::kPlaintext);
  Client client = Connect(*server, {.token = "dev"});
  EXPECT_EQ(EchoUnary(client).value_or("failed"), "authorization=Bearer dev; peer=<none>");
  EXPECT_EQ(EchoServerStream(client).value_or("failed"), "authorization=Bearer dev; peer=<none>");
  EXPECT_EQ(EchoClientStream(client).value_or("failed"), "authorization=Bearer dev; peer=<none>");

  Client without = Connect(*server, {});
  EXPECT_EQ(EchoUnary(without).value_or("failed"), "authorization=<none>; peer=<none>");
}

// ---------------------------------------------------------------- (c) mTLS

TEST_F(ClientSecurity, PresentsTheClientCertificate) {
  auto server = Start(Transport::kMutualTls);
  auto security = WithCert("client");
  security.token = "t";
  Client client = Connect(*server, security);
  EXPECT_EQ(EchoUnary(client).value_or("failed"), "authorization=Bearer t; peer=client");
  EXPECT_EQ(EchoServerStream(client).value_or("failed"), "authorization=Bearer t; peer=client");
}

TEST_F(ClientSecurity, ClientsWithoutATrustedCertificateFailAgainstMutualTls) {
  auto server = Start(Transport::kMutualTls);
  Client without = Connect(*server, Trusting());
  const auto no_cert = EchoUnary(without);
  EXPECT_FALSE(no_cert.ok()) << *no_cert;
  EXPECT_EQ(no_cert.status().code(), absl::StatusCode::kUnavailable) << no_cert.status();

  Client foreign = Connect(*server, WithCert("foreign-client"));
  const auto foreign_cert = EchoUnary(foreign);
  EXPECT_FALSE(foreign_cert.ok()) << *foreign_cert;
}

// ---------------------------------------------------------------- (d) --tls-server-name

TEST_F(ClientSecurity, TheServerNameOverrideVerifiesACertificateForAnotherName) {
  auto server = Start(Transport::kTls, "other");  // SAN posbias.internal only.
  Client by_address = Connect(*server, Trusting());
  EXPECT_EQ(EchoUnary(by_address).status().code(), absl::StatusCode::kUnavailable);

  auto security = Trusting();
  security.tls_server_name = "posbias.internal";
  Client by_name = Connect(*server, security);
  EXPECT_EQ(EchoUnary(by_name).value_or("failed"), "authorization=<none>; peer=<none>");

  security.tls_server_name = "wrong.internal";
  Client wrong = Connect(*server, security);
  EXPECT_EQ(EchoUnary(wrong).status().code(), absl::StatusCode::kUnavailable);
}

// ---------------------------------------------------------------- the CLI, end to end

TEST_F(ClientSecurity, CliConnectsWithMutualTlsAndSendsTheToken) {
  auto server = Start(Transport::kMutualTls, "other");
  const std::vector<std::string> security = {
      "--server",   server->Address(),     "--timeout",         "5",
      "--ca-file",  certs_->Pem("ca"),     "--cert-file",       certs_->Pem("client"),
      "--key-file", certs_->Key("client"), "--tls-server-name", "posbias.internal"};
  std::vector<std::string> health = {"health"};
  health.insert(health.end(), security.begin(), security.end());
  EXPECT_EQ(RunCli(health), 0) << err_.str();

  std::vector<std::string> density = {"density", "-H",  "24",      "-a",       "0.5",
                                      "--x",     "0.5", "--token", "cli-token"};
  density.insert(density.end(), security.begin(), security.end());
  EXPECT_EQ(RunCli(density), cli::kExitServerError);
  EXPECT_NE(err_.str().find("echo: authorization=Bearer cli-token; peer=client"), std::string::npos)
      << err_.str();
  EXPECT_EQ(err_.str().find("warning:"), std::string::npos) << err_.str();
}

TEST_F(ClientSecurity, CliReadsTheSecurityOptionsFromTheEnvironment) {
  auto server = Start(Transport::kMutualTls);
  setenv("POSBIAS_SERVER", server->Address().c_str(), 1);
  setenv("POSBIAS_TOKEN", "env-token", 1);
  setenv("POSBIAS_CA_FILE", certs_->Pem("ca").c_str(), 1);
  setenv("POSBIAS_CERT_FILE", certs_->Pem("client").c_str(), 1);
  setenv("POSBIAS_KEY_FILE", certs_->Key("client").c_str(), 1);
  EXPECT_EQ(RunCli({"density", "-H", "24", "-a", "0.5", "--x", "0.5", "--timeout", "5"}),
            cli::kExitServerError);
  EXPECT_NE(err_.str().find("echo: authorization=Bearer env-token; peer=client"), std::string::npos)
      << err_.str();
  SetUp();  // Unset them again.
}

TEST_F(ClientSecurity, CliWithoutTlsFailsAgainstTls) {
  auto server = Start(Transport::kTls);
  EXPECT_EQ(RunCli({"health", "--server", server->Address(), "--timeout", "5"}),
            cli::kExitServerError);
  setenv("POSBIAS_TLS", "1", 1);  // System roots: our CA is not one of them.
  EXPECT_EQ(RunCli({"health", "--server", server->Address(), "--timeout", "5"}),
            cli::kExitServerError);
  SetUp();
}

}  // namespace
}  // namespace posbias
