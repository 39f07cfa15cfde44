// The client's security settings without a server: which targets count as loopback, when the CLI
// warns about a plaintext token, what MakeCredentials and Client say about bad files and tokens,
// and the CLI's flags, environment variables and exit codes for them.
#include "client/cli/security_options.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "client/cli/cli.h"
#include "posbias/client.h"

namespace posbias::cli {
namespace {

// ---------------------------------------------------------------- IsLoopbackTarget

TEST(IsLoopbackTarget, AcceptsLocalhostLoopbackAddressesAndUnixSockets) {
  for (const char* target :
       {"127.0.0.1:50051", "127.8.9.10:1", "localhost:50051", "LOCALHOST", "api.localhost:1",
        "[::1]:50051", "::1", "ipv4:127.0.0.1:1,127.0.0.2:2", "ipv6:[::1]:5",
        "dns:///localhost:50051", "dns://8.8.8.8/127.0.0.1:1", "unix:/run/posbias.sock",
        "unix-abstract:posbias", "[::ffff:127.0.0.1]:1"}) {
    EXPECT_TRUE(IsLoopbackTarget(target)) << target;
  }
}

TEST(IsLoopbackTarget, RejectsEverythingElse) {
  for (const char* target :
       {"10.0.0.7:50051", "posbias.example:443", "dns:///posbias.example:50051", "[2001:db8::1]:1",
        "ipv4:127.0.0.1:1,10.0.0.1:2", "128.0.0.1:1", "localhost.example:1", "0.0.0.0:1", "",
        "[::ffff:10.0.0.1]:1"}) {
    EXPECT_FALSE(IsLoopbackTarget(target)) << target;
  }
}

// ---------------------------------------------------------------- PlaintextTokenWarning

TEST(PlaintextTokenWarning, WarnsOnlyForATokenInPlaintextToARemoteTarget) {
  const ClientOptions::Security token{.token = "t0ken"};
  const auto warning = PlaintextTokenWarning("10.0.0.7:50051", token);
  ASSERT_TRUE(warning.has_value());
  EXPECT_NE(warning->find("without TLS to 10.0.0.7:50051"), std::string::npos) << *warning;

  EXPECT_FALSE(PlaintextTokenWarning("127.0.0.1:50051", token));
  EXPECT_FALSE(PlaintextTokenWarning("10.0.0.7:50051", {}));
  EXPECT_FALSE(PlaintextTokenWarning("10.0.0.7:50051", {.token = "t", .tls = true}));
  EXPECT_FALSE(PlaintextTokenWarning("10.0.0.7:50051", {.token = "t", .ca_file = "ca.pem"}));
}

// ---------------------------------------------------------------- MakeCredentials, Client

std::string WriteFile(const std::string& name, const std::string& contents) {
  const std::string path = ::testing::TempDir() + "/posbias-security-options-" + name;
  std::ofstream(path) << contents;
  return path;
}

TEST(MakeCredentials, IsInsecureWithoutTlsAndSslWithTheSystemRoots) {
  auto insecure = MakeCredentials({.token = "t"});
  ASSERT_TRUE(insecure.ok()) << insecure.status();
  EXPECT_NE(*insecure, nullptr);
  auto tls = MakeCredentials({.tls = true});
  ASSERT_TRUE(tls.ok()) << tls.status();
  EXPECT_NE(*tls, nullptr);
}

TEST(MakeCredentials, NamesAMissingFile) {
  const auto missing = MakeCredentials({.ca_file = "/nonexistent/ca.pem"});
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("cannot read the CA file /nonexistent/ca.pem"),
            std::string::npos)
      << missing.status();
}

TEST(MakeCredentials, RefusesAFileThatIsNotPem) {
  const std::string path = WriteFile("not-pem.txt", "hello\n");
  const auto status = MakeCredentials({.ca_file = path}).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("is not PEM"), std::string::npos) << status;
  EXPECT_NE(status.message().find(path), std::string::npos) << status;
}

TEST(MakeCredentials, NeedsBothTheCertificateAndTheKey) {
  const std::string pem = WriteFile("fake.pem", "-----BEGIN CERTIFICATE-----\n");
  for (const auto& security :
       {ClientOptions::Security{.cert_file = pem}, ClientOptions::Security{.key_file = pem}}) {
    const auto status = MakeCredentials(security).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_NE(status.message().find("both"), std::string::npos) << status;
  }
  const auto missing_key = MakeCredentials({.cert_file = pem, .key_file = "/nonexistent/key.pem"});
  EXPECT_NE(missing_key.status().message().find("key file /nonexistent/key.pem"), std::string::npos)
      << missing_key.status();
}

TEST(Client, ReturnsTheSetupErrorFromEveryCall) {
  Client client({.target = "127.0.0.1:1", .security = {.ca_file = "/nonexistent/ca.pem"}});
  EXPECT_EQ(client.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(client.channel(), nullptr);
  EXPECT_EQ(client.Check().status(), client.status());
  EXPECT_EQ(client.EvaluateContinuum({}).status(), client.status());
  EXPECT_EQ(client.UploadModel({}).status(), client.status());
  EXPECT_EQ(client.WatchJob({}, [](const auto&) { return true; }), client.status());
}

TEST(Client, RefusesATokenWithSpacesOrNewlines) {
  for (const char* token : {"abc\n", "a b", "tab\there"}) {
    Client client({.target = "127.0.0.1:1", .security = {.token = token}});
    EXPECT_EQ(client.status().code(), absl::StatusCode::kInvalidArgument) << token;
    // Also through the constructor that takes an existing channel.
    Client on_channel(grpc::CreateChannel("127.0.0.1:1", grpc::InsecureChannelCredentials()),
                      {.security = {.token = token}});
    EXPECT_EQ(on_channel.status().code(), absl::StatusCode::kInvalidArgument) << token;
  }
  EXPECT_TRUE(Client({.security = {.token = "eyJhbGciOi.J9-_~+/="}}).status().ok());
}

// ---------------------------------------------------------------- the CLI

constexpr const char* kSecurityEnv[] = {
    "POSBIAS_SERVER",         "POSBIAS_TOKEN",     "POSBIAS_TLS",
    "POSBIAS_CA_FILE",        "POSBIAS_CERT_FILE", "POSBIAS_KEY_FILE",
    "POSBIAS_TLS_SERVER_NAME"};

class CliSecurity : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name : kSecurityEnv) unsetenv(name);
  }
  void TearDown() override { SetUp(); }

  int Run(std::vector<std::string> args) {
    args.insert(args.begin(), "posbias");
    std::vector<const char*> argv;
    for (const auto& arg : args) argv.push_back(arg.c_str());
    out_.str("");
    err_.str("");
    return RunCli(static_cast<int>(argv.size()), argv.data(), out_, err_);
  }

  std::ostringstream out_, err_;
};

TEST_F(CliSecurity, HelpListsTheOptionsAndTheirEnvironmentVariables) {
  ASSERT_EQ(Run({"--help"}), 0);
  const std::string help = out_.str();
  for (const char* text :
       {"Security", "--token", "POSBIAS_TOKEN", "--tls", "POSBIAS_TLS", "--ca-file",
        "POSBIAS_CA_FILE", "--cert-file", "POSBIAS_CERT_FILE", "--key-file", "POSBIAS_KEY_FILE",
        "--tls-server-name", "POSBIAS_TLS_SERVER_NAME"}) {
    EXPECT_NE(help.find(text), std::string::npos) << text << " missing from:\n" << help;
  }
}

TEST_F(CliSecurity, AnUnreadableCaFileIsAUsageError) {
  EXPECT_EQ(Run({"health", "--ca-file", "/nonexistent/ca.pem"}), kExitUsage);
  EXPECT_NE(err_.str().find("error: cannot read the CA file /nonexistent/ca.pem"),
            std::string::npos)
      << err_.str();
}

TEST_F(CliSecurity, ReadsTheFilesFromTheEnvironment) {
  setenv("POSBIAS_CA_FILE", "/nonexistent/env-ca.pem", 1);
  EXPECT_EQ(Run({"health"}), kExitUsage);
  EXPECT_NE(err_.str().find("/nonexistent/env-ca.pem"), std::string::npos) << err_.str();
}

TEST_F(CliSecurity, ACertificateNeedsItsKey) {
  EXPECT_EQ(Run({"health", "--cert-file", "client.pem"}), kExitUsage);
  EXPECT_NE(err_.str().find("--key-file"), std::string::npos) << err_.str();
  EXPECT_EQ(Run({"health", "--key-file", "client.key"}), kExitUsage);
  EXPECT_NE(err_.str().find("--cert-file"), std::string::npos) << err_.str();
}

TEST_F(CliSecurity, WarnsOnceAboutAPlaintextTokenToARemoteAddress) {
  // 192.0.2.1 (TEST-NET-1) is never reachable: the call fails after the short deadline.
  EXPECT_EQ(Run({"health", "--server", "192.0.2.1:9", "--timeout", "0.2", "--token", "t"}),
            kExitServerError);
  const std::string err = err_.str();
  const auto first = err.find("warning: sending the token without TLS");
  ASSERT_NE(first, std::string::npos) << err;
  EXPECT_EQ(err.find("warning:", first + 1), std::string::npos) << err;

  setenv("POSBIAS_TOKEN", "t", 1);
  EXPECT_EQ(Run({"health", "--server", "127.0.0.1:1", "--timeout", "0.2"}), kExitServerError);
  EXPECT_EQ(err_.str().find("warning:"), std::string::npos) << err_.str();
}

}  // namespace
}  // namespace posbias::cli
