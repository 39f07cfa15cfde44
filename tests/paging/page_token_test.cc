// Page tokens: a token gives back its cursor only to the listing and filter that issued it, and
// only on a server that holds the key it was signed with.
#include "server/paging/page_token.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "server/status/error.h"

namespace posbias::paging {
namespace {

TEST(PageToken, ResumesItsOwnListingAndFilterAtItsCursor) {
  SetPageTokenKey("test key");
  const std::string token = IssuePageToken("ListJobs", "states=RUNNING", "cursor 42");
  ASSERT_FALSE(token.empty());
  EXPECT_EQ(token.find("cursor 42"), std::string::npos) << "opaque: the cursor is not readable in it";
  auto cursor = RedeemPageToken(token, "ListJobs", "states=RUNNING");
  ASSERT_TRUE(cursor.ok()) << cursor.status();
  EXPECT_EQ(*cursor, "cursor 42");
}

TEST(PageToken, AnEmptyCursorHasNoTokenAndAnEmptyTokenIsTheFirstPage) {
  SetPageTokenKey("test key");
  EXPECT_EQ(IssuePageToken("ListJobs", "", ""), "");
  auto first = RedeemPageToken("", "ListJobs", "");
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(*first, "");
}

TEST(PageToken, IsRefusedForAnotherListingAnotherFilterAnotherKeyOrAChangedByte) {
  SetPageTokenKey("test key");
  const std::string token = IssuePageToken("ListJobs", "states=RUNNING", "7");
  EXPECT_EQ(ErrorFieldOf(RedeemPageToken(token, "ListModels", "states=RUNNING").status()), "page_token");
  EXPECT_EQ(ErrorFieldOf(RedeemPageToken(token, "ListJobs", "states=QUEUED").status()), "page_token");
  std::string changed = token;
  changed.back() = changed.back() == 'A' ? 'B' : 'A';
  EXPECT_EQ(RedeemPageToken(changed, "ListJobs", "states=RUNNING").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RedeemPageToken("not a token", "ListJobs", "states=RUNNING").status().code(),
            absl::StatusCode::kInvalidArgument);
  SetPageTokenKey("another server's key");
  EXPECT_EQ(RedeemPageToken(token, "ListJobs", "states=RUNNING").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(PageTokenKey, IsCreatedOnceAndReadBackByEveryReplicaOfTheDirectory) {
  const auto path = std::filesystem::path(::testing::TempDir()) / ("page_token_" + std::to_string(::getpid()) + ".key");
  std::filesystem::remove(path);
  auto created = LoadOrCreatePageTokenKey(path.string());
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_EQ(created->size(), 64u) << "32 random bytes as hex";
  EXPECT_EQ(std::filesystem::status(path).permissions() & std::filesystem::perms::all,
            std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  auto again = LoadOrCreatePageTokenKey(path.string());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, *created);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace posbias::paging
