// The report's comparison with the theory: what it fits, and that a part which fails is named in
// the note with its reason while the other parts are still reported.
#include "server/measure/theory_report.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

namespace posbias::measure {
namespace {

// A U-shaped profile over `length` positions (first and last heavy, the middle light).
std::vector<double> UShape(size_t length) {
  std::vector<double> profile(length);
  for (size_t j = 0; j < length; ++j) {
    const double x = (static_cast<double>(j) + 0.5) / static_cast<double>(length);
    profile[j] = 0.2 / std::sqrt(x) + 1.0 / (1.05 - x);
  }
  return profile;
}

bool Says(const jobs::TheoryComparison& theory, const std::string& text) {
  return theory.note && theory.note->find(text) != std::string::npos;
}

TEST(CompareWithTheory, AProfileThatFitsGetsEveryPartAndNoNote) {
  const auto theory = CompareWithTheory(2, UShape(64), {0.5, 0.5}, {}, {});
  EXPECT_FALSE(theory.note) << *theory.note;
  ASSERT_TRUE(theory.fits);
  EXPECT_EQ(theory.fits->size(), 2u);  // Coherent and incoherent.
  ASSERT_TRUE(theory.effective_depth_fits);
  EXPECT_TRUE(theory.measured_alpha_schedule);
}

TEST(CompareWithTheory, FitsThatFailAreNamedWithTheirReasonInTheNote) {
  // Longer than any fit takes (65,536 values): both fits fail, and say so.
  const auto theory = CompareWithTheory(2, UShape(70'000), {}, {}, {});
  EXPECT_FALSE(theory.fits);
  EXPECT_FALSE(theory.effective_depth_fits);
  EXPECT_TRUE(Says(theory, "the fits at depth 2 failed")) << theory.note.value_or("(no note)");
  EXPECT_TRUE(Says(theory, "the effective-depth fits over depths 1..8 failed")) << *theory.note;
  EXPECT_TRUE(Says(theory, "3..65536 values")) << "the reason is the fit's own";
}

TEST(CompareWithTheory, ABadBranchRatioLosesOnlyItsOwnPart) {
  const auto theory = CompareWithTheory(2, UShape(64), {1.5, 0.5}, {}, {});
  ASSERT_TRUE(theory.fits) << "the fits do not depend on the branch ratios";
  EXPECT_FALSE(theory.measured_alpha_schedule);
  EXPECT_TRUE(Says(theory, "the theory under the measured branch ratios failed")) << theory.note.value_or("(no note)");
  EXPECT_TRUE(Says(theory, "alpha_schedule.alpha[0]")) << *theory.note;
}

TEST(CompareWithTheory, TooFewPositionsIsOneNoteAndNoFit) {
  const auto theory = CompareWithTheory(2, {1.0, 0.5}, {}, {}, {});
  EXPECT_FALSE(theory.fits);
  EXPECT_TRUE(Says(theory, "at least 3"));
}


// Gemma 2's pattern: a sliding layer, then a full one. Every part runs the layers' product in
// order, for the coherent model (the incoherent one is a sum over the 2^H subsets of layers).
TEST(CompareWithTheory, WindowsThatDifferBetweenLayersEnterTheMeasuredAlphaTheory) {
  const auto full = CompareWithTheory(2, UShape(64), {0.5, 0.5}, {}, {});
  const auto patterned = CompareWithTheory(2, UShape(64), {0.5, 0.5}, {}, {8, 0});
  ASSERT_TRUE(full.measured_alpha_schedule) << full.note.value_or("(no note)");
  ASSERT_TRUE(patterned.measured_alpha_schedule) << patterned.note.value_or("(no note)");
  EXPECT_NE(full.measured_alpha_schedule->coherent_profile, patterned.measured_alpha_schedule->coherent_profile);
  EXPECT_TRUE(Says(patterned, "different windows (8, 0)")) << patterned.note.value_or("(no note)");
  EXPECT_TRUE(full.measured_alpha_schedule->incoherent);
  EXPECT_FALSE(patterned.measured_alpha_schedule->incoherent) << "a sum over 2^H subsets: not computed";
  ASSERT_TRUE(patterned.fits) << patterned.note.value_or("(no note)");
  ASSERT_EQ(patterned.fits->size(), 1u) << "the coherent model alone";
  EXPECT_NE(patterned.fits->front().profile, full.fits->front().profile) << "the fit runs the layers' windows";
  ASSERT_TRUE(patterned.effective_depth_fits);
  // One window shared by every layer is no pattern: no note.
  EXPECT_FALSE(CompareWithTheory(2, UShape(64), {0.5, 0.5}, {}, {8, 8}).note);
}

}  // namespace
}  // namespace posbias::measure
