// The one tenancy rule (auth/visibility.h), as jobs and models use it.
#include "server/auth/visibility.h"

#include "gtest/gtest.h"
#include "server/auth/authenticator.h"

namespace posbias::auth {
namespace {

Principal Member(const std::string& tenant, Role role = Role::kOperator) {
  Principal principal;
  principal.name = "someone";
  principal.tenant = tenant;
  principal.role = role;
  return principal;
}

TEST(Visibility, ATenantSeesItsOwnJobsAndModelsAndNoOneElses) {
  for (ResourceKind kind : {ResourceKind::kJob, ResourceKind::kModel}) {
    EXPECT_TRUE(Sees(Member("lab-a"), kind, "lab-a"));
    EXPECT_FALSE(Sees(Member("lab-a"), kind, "lab-b"));
  }
}

TEST(Visibility, PublicModelsAreSeenByEveryoneButJobsAreNeverPublic) {
  EXPECT_TRUE(Sees(Member("lab-a", Role::kReader), ResourceKind::kModel, ""));
  EXPECT_FALSE(Sees(Member("lab-a"), ResourceKind::kJob, "")) << "an admin's job is not public";
}

TEST(Visibility, AnAdminSeesEverythingAndRegistersPublicModels) {
  const Principal admin = Member("ops", Role::kAdmin);
  EXPECT_TRUE(Sees(admin, ResourceKind::kJob, "lab-b"));
  EXPECT_TRUE(Sees(admin, ResourceKind::kModel, "lab-b"));
  EXPECT_TRUE(Sees(AnonymousAdmin(), ResourceKind::kJob, "lab-a")) << "a server without authentication";
  EXPECT_EQ(RegistrationTenant(admin), "");
  EXPECT_EQ(RegistrationTenant(Member("lab-a")), "lab-a");
}

}  // namespace
}  // namespace posbias::auth
