#include "server/density/routing.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "server/density/mixing.h"
#include "server/status/error.h"

namespace posbias::density {
namespace {

constexpr long double kNegInf = -std::numeric_limits<long double>::infinity();

void ExpectFieldError(const absl::Status& status, const std::string& reason,
                      const std::string& field, const std::string& value,
                      const std::string& allowed) {
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_EQ(ErrorReasonOf(status), reason) << status;
  EXPECT_EQ(ErrorFieldOf(status), field) << status;
  EXPECT_EQ(ErrorValueOf(status), value) << status;
  EXPECT_EQ(ErrorAllowedOf(status), allowed) << status;
  // The message names the field, the value and the allowed range.
  EXPECT_NE(status.message().find(field), std::string::npos) << status;
  EXPECT_NE(status.message().find(value), std::string::npos) << status;
  EXPECT_NE(status.message().find(allowed), std::string::npos) << status;
}

// c_r of prod_l (q_l + p_l z) by the plain DP in long double, with p = a or a^2.
std::vector<long double> ExpandProduct(const std::vector<double>& alphas, bool squared) {
  std::vector<long double> c(alphas.size() + 1, 0.0L);
  c[0] = 1.0L;
  for (double alpha : alphas) {
    long double p = alpha, q = 1.0L - static_cast<long double>(alpha);
    if (squared) p *= p, q *= q;
    std::vector<long double> next(c.size(), 0.0L);
    for (size_t r = 0; r < c.size(); ++r) {
      next[r] += q * c[r];
      if (r + 1 < c.size()) next[r + 1] += p * c[r];
    }
    c = next;
  }
  return c;
}

long double Binomial(uint32_t n, uint32_t k) {
  long double result = 1.0L;
  for (uint32_t i = 1; i <= k; ++i) result = result * (n - k + i) / i;
  return result;
}

double Sum(const MixingCoefficients& coefficients) {
  double sum = 0.0;
  for (uint32_t r = 0; r <= coefficients.depth; ++r) sum += coefficients.c(r);
  return sum;
}

TEST(MakeRouting, AcceptsTheEndsOfTheDocumentedRanges) {
  for (uint32_t depth : {1u, 24u, kMaxDepth}) {
    for (double alpha : {0.0, 0.5, 1.0}) {
      const auto routing = MakeRouting(depth, alpha);
      ASSERT_TRUE(routing.ok()) << routing.status();
      EXPECT_EQ(routing->depth(), depth);
      EXPECT_TRUE(routing->is_constant());
      EXPECT_EQ(routing->alpha(), alpha);
    }
  }
  const std::vector<double> layers = MakeRouting(3, 0.25)->layer_alphas();
  EXPECT_EQ(layers, (std::vector<double>{0.25, 0.25, 0.25}));
}

TEST(MakeRouting, RejectsDepthZeroAndAboveTheLimitNamingTheRange) {
  ExpectFieldError(MakeRouting(0, 0.5).status(), "INVALID_DEPTH", "depth", "0", "1..100000");
  ExpectFieldError(MakeRouting(100001, 0.5).status(), "INVALID_DEPTH", "depth", "100001",
                   "1..100000");
}

TEST(MakeRouting, RejectsAlphaOutsideTheUnitIntervalNamingTheRange) {
  ExpectFieldError(MakeRouting(12, -0.1).status(), "INVALID_ALPHA", "alpha", "-0.1", "[0, 1]");
  ExpectFieldError(MakeRouting(12, 1.5).status(), "INVALID_ALPHA", "alpha", "1.5", "[0, 1]");
  ExpectFieldError(MakeRouting(12, std::nan("")).status(), "INVALID_ALPHA", "alpha", "nan",
                   "[0, 1]");
  ExpectFieldError(MakeRouting(12, std::numeric_limits<double>::infinity()).status(),
                   "INVALID_ALPHA", "alpha", "inf", "[0, 1]");
  ExpectFieldError(MakeRouting(12, 1.0000000000000002).status(), "INVALID_ALPHA", "alpha",
                   "1.0000000000000002", "[0, 1]");
}

TEST(MakeRouting, ChecksTheDepthBeforeTheAlpha) {
  EXPECT_EQ(ErrorReasonOf(MakeRouting(0, 2.0).status()), "INVALID_DEPTH");
}

TEST(MakeScheduledRouting, TakesTheScheduleLengthAsDepthWhenDepthIsZeroOrEqual) {
  const std::vector<double> schedule = {0.1, 0.0, 1.0};
  for (uint32_t depth : {0u, 3u}) {
    const auto routing = MakeScheduledRouting(depth, schedule);
    ASSERT_TRUE(routing.ok()) << routing.status();
    EXPECT_EQ(routing->depth(), 3u);
    EXPECT_FALSE(routing->is_constant());
    EXPECT_EQ(routing->layer_alphas(), schedule);
  }
  const std::vector<double> longest(kMaxScheduleDepth, 0.5);
  EXPECT_TRUE(MakeScheduledRouting(0, longest).ok());
}

TEST(MakeScheduledRouting, RejectsAnEmptyScheduleAndOneLongerThan4096) {
  ExpectFieldError(MakeScheduledRouting(0, {}).status(), "INVALID_DEPTH", "alpha_schedule.alpha",
                   "0 entries", "1..4096 entries");
  const std::vector<double> too_long(kMaxScheduleDepth + 1, 0.5);
  ExpectFieldError(MakeScheduledRouting(0, too_long).status(), "INVALID_DEPTH",
                   "alpha_schedule.alpha", "4097 entries", "1..4096 entries");
}

TEST(MakeScheduledRouting, RejectsADepthThatDiffersFromTheScheduleLength) {
  ExpectFieldError(MakeScheduledRouting(3, {0.1, 0.2}).status(), "INVALID_DEPTH", "depth", "3",
                   "0 or the schedule's length 2");
  ExpectFieldError(MakeScheduledRouting(1, {0.1, 0.2}).status(), "INVALID_DEPTH", "depth", "1",
                   "0 or the schedule's length 2");
}

TEST(MakeScheduledRouting, RejectsABadEntryNamingItsIndex) {
  ExpectFieldError(MakeScheduledRouting(0, {0.1, 0.2, std::nan(""), 0.4}).status(),
                   "INVALID_ALPHA", "alpha_schedule.alpha[2]", "nan", "[0, 1]");
  ExpectFieldError(MakeScheduledRouting(0, {-0.25}).status(), "INVALID_ALPHA",
                   "alpha_schedule.alpha[0]", "-0.25", "[0, 1]");
  // The first bad entry is reported.
  ExpectFieldError(MakeScheduledRouting(4, {0.5, 0.5, 0.5, 2.0, -1.0}).status(), "INVALID_DEPTH",
                   "depth", "4", "0 or the schedule's length 5");
  ExpectFieldError(MakeScheduledRouting(0, {0.5, 0.5, 0.5, 2.0, -1.0}).status(), "INVALID_ALPHA",
                   "alpha_schedule.alpha[3]", "2", "[0, 1]");
}

TEST(CoherentCoefficients, SumToOne) {
  for (uint32_t depth : {1u, 2u, 24u, 1000u, 100000u}) {
    for (double alpha : {0.0, 1e-3, 0.3, 0.5, 0.999, 1.0}) {
      const MixingCoefficients c = CoherentCoefficients(*MakeRouting(depth, alpha));
      ASSERT_EQ(c.depth, depth);
      ASSERT_EQ(c.log_c.size(), depth + 1u);
      EXPECT_NEAR(Sum(c), 1.0, 1e-12) << "H=" << depth << " alpha=" << alpha;
    }
  }
  const std::vector<double> schedule = {0.1, 0.9, 0.5, 0.0, 1.0, 0.37, 0.62};
  EXPECT_NEAR(Sum(CoherentCoefficients(*MakeScheduledRouting(0, schedule))), 1.0, 1e-15);
}

TEST(CoherentCoefficients, MatchTheBinomialClosedForm) {
  for (uint32_t depth : {1u, 7u, 24u, 60u}) {
    for (double alpha : {0.1, 0.5, 0.83}) {
      const MixingCoefficients c = CoherentCoefficients(*MakeRouting(depth, alpha));
      for (uint32_t r = 0; r <= depth; ++r) {
        const long double expected = Binomial(depth, r) *
                                     std::pow(1.0L - static_cast<long double>(alpha), depth - r) *
                                     std::pow(static_cast<long double>(alpha), r);
        EXPECT_LE(std::abs(c.c(r) - static_cast<double>(expected)) / static_cast<double>(expected),
                  1e-13)
            << "H=" << depth << " alpha=" << alpha << " r=" << r;
      }
    }
  }
}

TEST(CoherentCoefficients, ConstantScheduleMatchesTheClosedForm) {
  const MixingCoefficients closed = CoherentCoefficients(*MakeRouting(40, 0.3));
  const MixingCoefficients expanded =
      CoherentCoefficients(*MakeScheduledRouting(0, std::vector<double>(40, 0.3)));
  for (uint32_t r = 0; r <= 40; ++r) {
    EXPECT_LE(std::abs(closed.c(r) - expanded.c(r)) / closed.c(r), 1e-13) << "r=" << r;
  }
}

TEST(CoherentCoefficients, LogsStayFiniteWhereTheCoefficientsUnderflow) {
  // alpha = 1e-300: c_2 ~ 5e-595 underflows a double but its logarithm is kept.
  const MixingCoefficients c = CoherentCoefficients(*MakeRouting(1000, 1e-300));
  EXPECT_EQ(c.r_min, 0u);
  EXPECT_EQ(c.r_max, 1000u);
  EXPECT_EQ(c.c(2), 0.0);
  const long double log_alpha = std::log(1e-300L);
  EXPECT_NEAR(static_cast<double>(c.log_c[2]),
              static_cast<double>(std::log(Binomial(1000, 2)) + 2 * log_alpha), 1e-9);
  EXPECT_NEAR(static_cast<double>(c.log_c[1000]), static_cast<double>(1000 * log_alpha), 1e-7);
}

TEST(IncoherentCoefficients, ConstantAlphaIsTheBinomialWithSquares) {
  for (uint32_t depth : {1u, 6u, 24u}) {
    for (double alpha : {0.2, 0.5, 0.9}) {
      const MixingCoefficients c = IncoherentCoefficients(*MakeRouting(depth, alpha));
      const long double p = static_cast<long double>(alpha) * alpha;
      const long double q = (1.0L - alpha) * (1.0L - alpha);
      for (uint32_t r = 0; r <= depth; ++r) {
        const long double expected = Binomial(depth, r) * std::pow(q, depth - r) * std::pow(p, r);
        EXPECT_LE(std::abs(c.c(r) - static_cast<double>(expected)) / static_cast<double>(expected),
                  1e-13)
            << "H=" << depth << " alpha=" << alpha << " r=" << r;
      }
      // Not normalized: the sum is (alpha^2 + (1 - alpha)^2)^H.
      EXPECT_NEAR(Sum(c) / std::pow(static_cast<double>(p + q), depth), 1.0, 1e-13);
    }
  }
}

TEST(IncoherentCoefficients, ScheduleMatchesTheProductExpansionWithSquares) {
  const std::vector<double> schedule = {0.1, 0.9, 0.5, 0.25, 0.37, 0.62, 0.05, 0.8};
  const Routing routing = *MakeScheduledRouting(0, schedule);
  const MixingCoefficients incoherent = IncoherentCoefficients(routing);
  const MixingCoefficients coherent = CoherentCoefficients(routing);
  const std::vector<long double> squared = ExpandProduct(schedule, /*squared=*/true);
  const std::vector<long double> plain = ExpandProduct(schedule, /*squared=*/false);
  for (uint32_t r = 0; r <= schedule.size(); ++r) {
    EXPECT_LE(std::abs(incoherent.c(r) / static_cast<double>(squared[r]) - 1.0), 1e-14) << r;
    EXPECT_LE(std::abs(coherent.c(r) / static_cast<double>(plain[r]) - 1.0), 1e-14) << r;
  }
}

TEST(MixingCoefficients, SupportOfAlphaZeroIsTheResidualPathOnly) {
  for (const MixingCoefficients& c : {CoherentCoefficients(*MakeRouting(5, 0.0)),
                                      IncoherentCoefficients(*MakeRouting(5, 0.0))}) {
    EXPECT_EQ(c.r_min, 0u);
    EXPECT_EQ(c.r_max, 0u);
    EXPECT_EQ(c.c(0), 1.0);
    for (uint32_t r = 1; r <= 5; ++r) {
      EXPECT_EQ(c.log_c[r], kNegInf);
      EXPECT_EQ(c.c(r), 0.0);
    }
  }
}

TEST(MixingCoefficients, SupportOfAlphaOneIsTheFullCausalPathOnly) {
  for (const MixingCoefficients& c : {CoherentCoefficients(*MakeRouting(5, 1.0)),
                                      IncoherentCoefficients(*MakeRouting(5, 1.0))}) {
    EXPECT_EQ(c.r_min, 5u);
    EXPECT_EQ(c.r_max, 5u);
    EXPECT_EQ(c.c(5), 1.0);
    for (uint32_t r = 0; r < 5; ++r) EXPECT_EQ(c.log_c[r], kNegInf);
  }
}

TEST(MixingCoefficients, SupportOfSchedulesCountsTheLayersPinnedAtZeroAndOne) {
  struct Case {
    std::vector<double> schedule;
    uint32_t r_min, r_max;
  };
  for (const Case& test : std::vector<Case>{{{0.0, 1.0, 0.5}, 1, 2},
                                            {{1.0, 1.0, 0.0, 0.0}, 2, 2},
                                            {{1.0, 0.3, 1.0, 0.7, 0.0}, 2, 4},
                                            {{0.0, 0.0, 0.0}, 0, 0},
                                            {{1.0, 1.0, 1.0}, 3, 3},
                                            {{0.2, 0.4}, 0, 2}}) {
    const Routing routing = *MakeScheduledRouting(0, test.schedule);
    for (const MixingCoefficients& c : {CoherentCoefficients(routing), IncoherentCoefficients(routing)}) {
      EXPECT_EQ(c.r_min, test.r_min) << "schedule of " << test.schedule.size();
      EXPECT_EQ(c.r_max, test.r_max) << "schedule of " << test.schedule.size();
      for (uint32_t r = 0; r <= c.depth; ++r) {
        EXPECT_EQ(c.c(r) > 0.0, r >= test.r_min && r <= test.r_max) << "r=" << r;
      }
    }
  }
}

TEST(MixingCoefficients, PowersBeyondTheDepthHaveZeroWeight) {
  const MixingCoefficients c = CoherentCoefficients(*MakeRouting(3, 0.5));
  EXPECT_EQ(c.c(4), 0.0);
  EXPECT_EQ(c.c(1000), 0.0);
}

TEST(LogFactorial, MatchesLogGammaInsideAndBeyondTheTable) {
  EXPECT_EQ(LogFactorial(0), 0.0L);
  EXPECT_EQ(LogFactorial(1), 0.0L);
  EXPECT_NEAR(static_cast<double>(LogFactorial(10)), std::log(3628800.0), 1e-14);
  for (uint64_t k : {uint64_t{100}, uint64_t{131071}, uint64_t{131072}, uint64_t{10000000}}) {
    const double expected = std::lgamma(static_cast<double>(k) + 1.0);
    EXPECT_NEAR(static_cast<double>(LogFactorial(k)) / expected, 1.0, 1e-15) << "k=" << k;
  }
}

}  // namespace
}  // namespace posbias::density
