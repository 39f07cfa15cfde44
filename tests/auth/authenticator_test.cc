// Who is calling: tokens-file principals, certificate names matched explicitly (the CN, or one SAN
// of a named type; never the first of two), and a tokens file that fails closed.
#include "server/auth/authenticator.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"
#include "server/auth/principals.h"
#include "server/status/error.h"

namespace posbias::auth {
namespace {

// The SHA-256 of "token-a".
constexpr char kTokenA[] = "token-a";
constexpr char kHashA[] = "a70bf50e531ce1a817561f2f5d5b6645d4e806becf58ccc5e8cf6b8045a090a8";

std::string Principal(const std::string& name, const std::string& role, const std::string& credential) {
  return "{\"name\": \"" + name + "\", \"tenant\": \"lab-a\", \"roles\": [\"" + role + "\"], " + credential + "}";
}

std::string File(std::initializer_list<std::string> principals) {
  std::string text = "{\"principals\": [";
  bool first = true;
  for (const auto& p : principals) text += (first ? "" : ", ") + p, first = false;
  return text + "]}";
}

TEST(Principals, ACertificatePrincipalNamesItsCnOrOneSanOfAType) {
  const auto parsed = ParsePrincipals(File({
      Principal("cn", "reader", "\"cert_subject\": \"client-reader\""),
      Principal("uri", "admin", "\"cert_san\": {\"type\": \"uri\", \"value\": \"spiffe://lab/admin\"}"),
      Principal("mail", "reader", "\"cert_san\": {\"type\": \"email\", \"value\": \"a@lab.example\"}"),
  }));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ((*parsed)[0].cert_subject, "client-reader");
  EXPECT_FALSE((*parsed)[0].cert_san.has_value());
  ASSERT_TRUE((*parsed)[1].cert_san.has_value());
  EXPECT_EQ((*parsed)[1].cert_san->type, SanType::kUri);
  EXPECT_EQ((*parsed)[1].cert_san->value, "spiffe://lab/admin");
  EXPECT_EQ((*parsed)[2].cert_san->type, SanType::kEmail);
}

TEST(Principals, RefusesAnUnknownSanTypeTwoCredentialsAndTheSameSanTwice) {
  const auto ip = ParsePrincipals(File({Principal("x", "reader", "\"cert_san\": {\"type\": \"ip\", \"value\": \"1.2.3.4\"}")}));
  EXPECT_EQ(ip.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(ip.status().message().find("dns"), std::string::npos) << ip.status();
  const auto two = ParsePrincipals(File({Principal(
      "x", "reader", "\"cert_subject\": \"c\", \"cert_san\": {\"type\": \"dns\", \"value\": \"d\"}")}));
  EXPECT_NE(two.status().message().find("more than one credential"), std::string::npos) << two.status();
  const auto twice = ParsePrincipals(File({
      Principal("x", "reader", "\"cert_san\": {\"type\": \"dns\", \"value\": \"d\"}"),
      Principal("y", "admin", "\"cert_san\": {\"type\": \"dns\", \"value\": \"d\"}"),
  }));
  EXPECT_EQ(twice.status().code(), absl::StatusCode::kInvalidArgument);
  // The same value under two types is two credentials.
  EXPECT_TRUE(ParsePrincipals(File({
                  Principal("x", "reader", "\"cert_san\": {\"type\": \"dns\", \"value\": \"d\"}"),
                  Principal("y", "admin", "\"cert_san\": {\"type\": \"uri\", \"value\": \"d\"}"),
              })).ok());
}

class AuthenticatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = std::filesystem::temp_directory_path() / ("posbias_auth_test_" + std::to_string(::getpid()) + ".json");
    Write(File({
        Principal("reader", "reader", "\"cert_subject\": \"client-reader\""),
        Principal("admin", "admin", "\"cert_san\": {\"type\": \"uri\", \"value\": \"spiffe://lab/admin\"}"),
        Principal("dns", "submitter", "\"cert_san\": {\"type\": \"dns\", \"value\": \"svc.lab.example\"}"),
        Principal("mail", "operator", "\"cert_san\": {\"type\": \"email\", \"value\": \"a@lab.example\"}"),
        Principal("token", "reader", std::string("\"token_sha256\": \"") + Sha() + "\""),
    }));
    auto opened = Authenticator::Open({path_.string(), /*client_certificates=*/true});
    ASSERT_TRUE(opened.ok()) << opened.status();
    authenticator_ = *std::move(opened);
  }
  void TearDown() override { std::filesystem::remove(path_); }
  void Write(const std::string& text) { std::ofstream(path_) << text; }
  static std::string Sha() { return kHashA; }

  absl::StatusOr<std::string> Who(const CertificateNames& names) const {
    auto principal = authenticator_->Authenticate("", names);
    if (!principal.ok()) return principal.status();
    return principal->name;
  }

  std::filesystem::path path_;
  std::unique_ptr<Authenticator> authenticator_;
};

TEST_F(AuthenticatorTest, TheCertificateTable) {
  struct Row {
    const char* what;
    CertificateNames names;
    const char* principal;  // nullptr: refused.
  };
  const Row rows[] = {
      {"CN of a cert_subject", {"client-reader", {}}, "reader"},
      {"a URI SAN of a cert_san", {"other", {{SanType::kUri, "spiffe://lab/admin"}}}, "admin"},
      {"a DNS SAN", {"", {{SanType::kDns, "svc.lab.example"}}}, "dns"},
      {"an email SAN", {"x", {{SanType::kEmail, "a@lab.example"}}}, "mail"},
      {"a SAN equal to a cert_subject does not match it", {"x", {{SanType::kDns, "client-reader"}}}, nullptr},
      {"a CN equal to a SAN value does not match it", {"spiffe://lab/admin", {}}, nullptr},
      {"the right value under another type", {"x", {{SanType::kDns, "spiffe://lab/admin"}}}, nullptr},
      {"CN of a reader with the admin's URI SAN: two principals", {"client-reader", {{SanType::kUri, "spiffe://lab/admin"}}}, nullptr},
      {"no principal names it", {"stranger", {{SanType::kDns, "stranger.example"}}}, nullptr},
  };
  for (const Row& row : rows) {
    const auto who = Who(row.names);
    if (row.principal == nullptr) {
      EXPECT_EQ(who.status().code(), absl::StatusCode::kUnauthenticated) << row.what;
      EXPECT_EQ(ErrorReasonOf(who.status()), "AUTHENTICATION_REQUIRED") << row.what;
    } else {
      ASSERT_TRUE(who.ok()) << row.what << ": " << who.status();
      EXPECT_EQ(*who, row.principal) << row.what;
    }
  }
  const auto two = Who({"client-reader", {{SanType::kUri, "spiffe://lab/admin"}}});
  EXPECT_NE(two.status().message().find("matches 2 principals"), std::string::npos) << two.status();
}

TEST_F(AuthenticatorTest, AFileThatFailsToParseKeepsTheLastGoodPrincipals) {
  Write("{\"principals\": [ not json");
  EXPECT_EQ(authenticator_->Reload().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(authenticator_->principal_count(), 5u);
  EXPECT_TRUE(Who({"client-reader", {}}).ok());
}

TEST_F(AuthenticatorTest, ADeletedFileRevokesEveryPrincipal) {
  ASSERT_TRUE(authenticator_->Authenticate(std::string("Bearer ") + kTokenA, {}).ok());
  std::filesystem::remove(path_);
  EXPECT_EQ(authenticator_->ReloadIfChanged().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(authenticator_->principal_count(), 0u);
  EXPECT_EQ(Who({"client-reader", {}}).status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(authenticator_->Authenticate(std::string("Bearer ") + kTokenA, {}).status().code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_TRUE(authenticator_->ReloadIfChanged().ok());  // Still gone: nothing changed, nothing logged again.
}

}  // namespace
}  // namespace posbias::auth
