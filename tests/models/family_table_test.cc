// The family table (server/models/family_table.cc): one row per family, from which names, lists
// in messages and each family's architecture are read.
#include "server/models/config.h"

#include <string>

#include "gtest/gtest.h"

namespace posbias::models {
namespace {

TEST(FamilyTable, EveryBuiltFamilyHasABaseConfigOfItsOwnFamily) {
  ASSERT_FALSE(BuiltFamilyNames().empty());
  for (const std::string& name : BuiltFamilyNames()) {
    const auto config = FamilyConfig(name);
    ASSERT_TRUE(config.ok()) << name << ": " << config.status();
    EXPECT_EQ(FamilyName(config->family), name);
  }
  EXPECT_FALSE(FamilyConfig("torchscript").ok()) << "a TorchScript file is loaded, never built from a config";
}

TEST(FamilyTable, TheListsInMessagesNameEveryFamilyTheyStandFor) {
  const std::string built = BuiltFamiliesText();
  for (const std::string& name : BuiltFamilyNames()) EXPECT_NE(built.find(name), std::string::npos) << name;
  EXPECT_EQ(built.find("torchscript"), std::string::npos);
  const std::string hugging_face = HuggingFaceFamiliesText();
  EXPECT_NE(hugging_face.find("smollm3"), std::string::npos);
  EXPECT_EQ(hugging_face.find("cesaro"), std::string::npos) << "the Cesàro model has no config.json";
}

TEST(FamilyTable, RotaryPositionsBelongToTheRotaryFamiliesOnly) {
  EXPECT_FALSE(HasRotary(Family::kGpt2)) << "learned positions";
  EXPECT_FALSE(HasRotary(Family::kCesaro));
  EXPECT_FALSE(HasRotary(Family::kTorchScript));
  for (Family family : {Family::kLlama, Family::kQwen2, Family::kQwen3, Family::kGemma3, Family::kSmolLm3}) {
    EXPECT_TRUE(HasRotary(family)) << FamilyName(family);
    EXPECT_NE(RotaryFamiliesText().find(FamilyName(family)), std::string::npos) << FamilyName(family);
  }
  EXPECT_EQ(FamilyName(static_cast<Family>(999)), "unknown");
}

}  // namespace
}  // namespace posbias::models
