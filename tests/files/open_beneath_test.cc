// Opening files beneath a scope (server/files/open_beneath.h): links that stay inside work, links
// that lead out are refused in the same words whether or not their target exists, and messages
// never show the server's paths.
#include "server/files/open_beneath.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "server/status/error.h"

namespace posbias::files {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

void Write(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

// <tmp>/root/{lab-a,lab-b} and <tmp>/outside, the scope being lab-b's folder.
class BeneathTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = fs::temp_directory_path() / ("posbias-beneath-" + std::to_string(::getpid()) + "-" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(base_);
    Write(base_ / "root/lab-a/ckpt/config.json", "lab-a's config");
    Write(base_ / "outside/secret.txt", "TOPSECRET");
    Write(base_ / "root/lab-b/blobs/abc", "lab-b's weights");
    fs::create_directories(base_ / "root/lab-b/snapshots/main");
    auto scope = Scope::Of((base_ / "root/lab-b").string(), "the model root's folder lab-b/");
    ASSERT_TRUE(scope.ok()) << scope.status();
    scope_ = *scope;
  }
  void TearDown() override { fs::remove_all(base_); }

  std::string In(const std::string& relative) const { return (fs::path(scope_.root) / relative).string(); }
  void Link(const std::string& target, const std::string& name) const {
    fs::create_directories(fs::path(In(name)).parent_path());
    fs::create_symlink(target, In(name));
  }

  fs::path base_;
  Scope scope_;
};

TEST_F(BeneathTest, AFileInsideTheScopeOpensAndReads) {
  auto text = ReadBeneath(scope_, In("blobs/abc"), 1 << 20);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "lab-b's weights");
  EXPECT_TRUE(ReadBeneath(scope_, "blobs/abc", 1 << 20).ok()) << "a path relative to the root";
}

TEST_F(BeneathTest, ARelativeLinkThatStaysInsideWorksAsHuggingFaceCachesUseThem) {
  Link("../../blobs/abc", "snapshots/main/model.safetensors");
  auto text = ReadBeneath(scope_, In("snapshots/main/model.safetensors"), 1 << 20);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "lab-b's weights");
}

TEST_F(BeneathTest, AnAbsoluteLinkThatStaysInsideWorksThroughTheCanonicalRoute) {
  Link(In("blobs/abc"), "snapshots/main/absolute");
  auto text = ReadBeneath(scope_, In("snapshots/main/absolute"), 1 << 20);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "lab-b's weights");
}

TEST_F(BeneathTest, LinksIntoAnotherTenantOrOutOfTheRootAreRefusedWithPathNotAllowed) {
  Link("../../lab-a/ckpt/config.json", "steal/config.json");
  Link((base_ / "root/lab-a/ckpt/config.json").string(), "steal/absolute.json");
  Link((base_ / "outside/secret.txt").string(), "steal/secret.txt");
  Link("../lab-a/ckpt", "steal-dir");
  for (const std::string path : {"steal/config.json", "steal/absolute.json", "steal/secret.txt",
                                 "steal-dir/config.json", "../lab-a/ckpt/config.json"}) {
    auto opened = OpenBeneath(scope_, In(path));
    ASSERT_FALSE(opened.ok()) << path;
    EXPECT_EQ(opened.status().code(), absl::StatusCode::kInvalidArgument) << path;
    EXPECT_EQ(ErrorReasonOf(opened.status()), "PATH_NOT_ALLOWED") << path;
    EXPECT_THAT(std::string(opened.status().message()), Not(HasSubstr(base_.string()))) << path;
    EXPECT_THAT(std::string(opened.status().message()), Not(HasSubstr("TOPSECRET")));
  }
  EXPECT_EQ(ErrorReasonOf(OpenBeneath(scope_, (base_ / "outside/secret.txt").string()).status()), "PATH_NOT_ALLOWED")
      << "an absolute path outside the root";
}

// `ln lab-a/ckpt/config.json lab-b/hl/config.json`: the hard link is a file of lab-b's folder
// by every path check, but a second name of lab-a's file; a walled scope refuses any file with
// more than one name, and says how many it has, not where the others are.
TEST_F(BeneathTest, AHardLinkedFileIsRefusedInAWalledScope) {
  fs::create_directories(In("hl"));
  fs::create_hard_link(base_ / "root/lab-a/ckpt/config.json", In("hl/config.json"));
  auto refused = ReadBeneath(scope_, In("hl/config.json"), 1 << 20);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ErrorReasonOf(refused.status()), "PATH_NOT_ALLOWED");
  EXPECT_THAT(refused.status().message(), HasSubstr("hl/config.json has 2 hard links"));
  EXPECT_THAT(refused.status().message(), Not(HasSubstr("lab-a")));
  EXPECT_THAT(refused.status().message(), Not(HasSubstr(base_.string())));
  // The stand-alone tools open their own files anywhere, links and all.
  EXPECT_TRUE(ReadBeneath(Scope{}, In("hl/config.json"), 1 << 20).ok());
}

TEST_F(BeneathTest, ALinkOutAnswersTheSameWhetherOrNotItsTargetExists) {
  Link("../../lab-a/ckpt/config.json", "probe/config.json");
  Link("../../lab-a/ckpt/no-such.json", "probe2/config.json");
  Link((base_ / "outside/secret.txt").string(), "probe3/config.json");
  Link((base_ / "outside/no-such.txt").string(), "probe4/config.json");
  Link("no-such-inside", "probe5/config.json");  // Dangling inside the scope: refused the same way.
  const auto message = [&](const std::string& dir) {
    auto opened = OpenBeneath(scope_, In(dir + "/config.json"));
    EXPECT_EQ(ErrorReasonOf(opened.status()), "PATH_NOT_ALLOWED") << dir;
    std::string text(opened.status().message());
    return text.substr(text.find(' '));  // Everything after the file's own name.
  };
  EXPECT_EQ(message("probe"), message("probe2"));
  EXPECT_EQ(message("probe3"), message("probe4"));
  EXPECT_EQ(message("probe"), message("probe3"));
  EXPECT_EQ(message("probe"), message("probe5"));
}

TEST_F(BeneathTest, AMissingFileInsideIsNotFoundNamedRelativeToTheRoot) {
  auto opened = OpenBeneath(scope_, In("ckpt/config.json"));
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ErrorReasonOf(opened.status()), "PATH_NOT_FOUND");
  EXPECT_THAT(std::string(opened.status().message()), HasSubstr("ckpt/config.json"));
  EXPECT_THAT(std::string(opened.status().message()), Not(HasSubstr(base_.string())));
}

TEST_F(BeneathTest, DirectoriesAndFifosAreNotRegularFilesAndNeverBlock) {
  ASSERT_EQ(::mkfifo(In("pipe").c_str(), 0600), 0);
  for (const std::string path : {"blobs", "pipe"}) {
    auto opened = OpenBeneath(scope_, In(path));
    ASSERT_FALSE(opened.ok()) << path;
    EXPECT_EQ(ErrorReasonOf(opened.status()), "INVALID_MODEL_FILE") << path;
  }
}

TEST_F(BeneathTest, AFileReplacedByALinkOutIsRefusedWhenReadAgain) {
  Write(In("tok/merges.txt"), "a b\n");
  ASSERT_TRUE(ReadBeneath(scope_, In("tok/merges.txt"), 1 << 20).ok());
  fs::remove(In("tok/merges.txt"));
  Link((base_ / "outside/secret.txt").string(), "tok/merges.txt");
  EXPECT_EQ(ErrorReasonOf(ReadBeneath(scope_, In("tok/merges.txt"), 1 << 20).status()), "PATH_NOT_ALLOWED");
}

TEST_F(BeneathTest, AFileOverTheSizeLimitIsRefusedBeforeItIsRead) {
  auto text = ReadBeneath(scope_, In("blobs/abc"), 4);
  EXPECT_EQ(ErrorReasonOf(text.status()), "INVALID_MODEL_FILE");
}

TEST_F(BeneathTest, DirectoriesAreFoundBeneathOnlyWhenTheyResolveInside) {
  Link("../lab-a", "other");
  Link("snapshots", "alias");
  EXPECT_TRUE(IsDirectoryBeneath(scope_, In("snapshots/main")));
  EXPECT_TRUE(IsDirectoryBeneath(scope_, In("alias/main")));
  EXPECT_FALSE(IsDirectoryBeneath(scope_, In("other")));
  EXPECT_FALSE(IsDirectoryBeneath(scope_, In("other/ckpt")));
}

TEST_F(BeneathTest, WithoutAWallFilesOpenAnywhereAsTheStandAloneToolsNeed) {
  auto text = ReadBeneath(Scope{}, (base_ / "outside/secret.txt").string(), 1 << 20);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "TOPSECRET");
}

TEST(ScopeTest, AMissingScopeDirectoryIsAFailedPrecondition) {
  auto scope = Scope::Of("/no/such/posbias/scope", "the model root's folder x/");
  EXPECT_EQ(scope.status().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace posbias::files
