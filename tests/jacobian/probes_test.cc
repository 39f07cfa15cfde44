// Hutchinson's probes on a fixed matrix whose norms are known: every distribution is unbiased, its
// reported variance matches the spread of repeated estimates, orthogonal blocks of all d rows are
// exact, and at equal K the orthogonal and Rademacher rows spread less than the Gaussian ones.
#include "server/jacobian/probes.h"

#include <cmath>

#include <torch/torch.h>

#include "gtest/gtest.h"

namespace posbias::jacobian {
namespace {

TEST(ProbeBlockSizes, AreAsEqualAsPossibleNoneAboveTheWidthAndTwoBelowIt) {
  struct Case {
    int64_t probes, width;
    std::vector<int64_t> sizes;
  };
  for (const Case& c : std::vector<Case>{{16, 768, {8, 8}},
                                         {768, 768, {768}},
                                         {1536, 768, {768, 768}},
                                         {1000, 768, {500, 500}},
                                         {5, 768, {3, 2}},
                                         {1, 768, {1}},
                                         {7, 3, {3, 2, 2}},
                                         {4, 1, {1, 1, 1, 1}}}) {
    EXPECT_EQ(ProbeBlockSizes(c.probes, c.width), c.sizes) << c.probes << " probes of width " << c.width;
  }
}

// Positions j = 1..3, each with its own J_j [d, 10]: the squared norms ||u^T J_j||^2 of K rows.
class KnownJacobians : public ::testing::Test {
 protected:
  static constexpr int64_t kWidth = 12;
  void SetUp() override {
    auto generator = at::detail::createCPUGenerator(5);
    jacobians_ = torch::randn({3, kWidth, 10}, generator, torch::TensorOptions().dtype(torch::kFloat64));
    // Unequal singular values, so that the distributions differ.
    jacobians_ *= torch::linspace(0.2, 2.0, kWidth, torch::kFloat64).view({1, kWidth, 1});
    truth_ = jacobians_.pow(2).sum({1, 2});
  }
  // One estimate with `probes` rows from `seed`, the rows handed over in chunks of 3.
  std::pair<torch::Tensor, torch::Tensor> Estimate(ProbeDistribution distribution, int64_t probes, uint64_t seed) {
    auto generator = at::detail::createCPUGenerator(seed);
    ProbeRows rows(distribution, probes, kWidth);
    ProbeEstimate estimate(distribution, probes, kWidth, 3);
    for (int64_t start = 0; start < probes; start += 3) {
      const int64_t n = std::min<int64_t>(3, probes - start);
      auto u = rows.Next(start, n, generator);                                      // [n, d]
      auto squares = torch::einsum("nd,jdm->njm", {u, jacobians_}).pow(2).sum(-1);  // [n, 3]
      estimate.Add(start, squares);
    }
    return {estimate.Mean(), estimate.VarianceOfMean()};
  }
  torch::Tensor jacobians_, truth_;
};

TEST_F(KnownJacobians, EveryDistributionIsUnbiasedAndReportsTheVarianceItHas) {
  for (auto distribution : {ProbeDistribution::kGaussian, ProbeDistribution::kRademacher, ProbeDistribution::kOrthogonal}) {
    constexpr int repeats = 3000;
    std::vector<torch::Tensor> means, variances;
    for (int r = 0; r < repeats; ++r) {
      auto [mean, variance] = Estimate(distribution, 4, 1000 + r);
      means.push_back(mean);
      variances.push_back(variance);
    }
    auto stacked = torch::stack(means);
    auto spread = stacked.var(0);
    const auto name = std::string(jobs::ProbeDistributionName(distribution));
    for (int64_t j = 0; j < 3; ++j) {
      const double bias = stacked.mean(0)[j].item<double>() - truth_[j].item<double>();
      EXPECT_LE(std::abs(bias), 4.0 * std::sqrt(spread[j].item<double>() / repeats)) << name << " j = " << j;
      const double reported = torch::stack(variances).mean(0)[j].item<double>();
      EXPECT_NEAR(reported / spread[j].item<double>(), 1.0, 0.2) << name << " j = " << j;
    }
  }
}

TEST_F(KnownJacobians, OrthogonalBlocksOfAllRowsAreExactWithNoSpread) {
  for (int64_t probes : {kWidth, 2 * kWidth}) {
    auto [mean, variance] = Estimate(ProbeDistribution::kOrthogonal, probes, 9);
    EXPECT_TRUE(torch::allclose(mean, truth_, 1e-12, 0)) << probes << " probes: " << mean << " vs " << truth_;
    EXPECT_LE(variance.abs().max().item<double>(), 1e-20 * truth_.max().item<double>());
  }
}

TEST_F(KnownJacobians, AtEqualProbesOrthogonalAndRademacherRowsSpreadLessThanGaussianOnes) {
  auto spread = [&](ProbeDistribution distribution) {
    std::vector<torch::Tensor> means;
    for (int r = 0; r < 2000; ++r) means.push_back(Estimate(distribution, 6, 50'000 + r).first);
    return (torch::stack(means).var(0) / truth_.pow(2)).mean().item<double>();
  };
  const double gaussian = spread(ProbeDistribution::kGaussian);
  EXPECT_LT(spread(ProbeDistribution::kRademacher), 0.9 * gaussian);
  EXPECT_LT(spread(ProbeDistribution::kOrthogonal), 0.7 * gaussian);
}

TEST(ProbeRows, AFullOrthogonalBlockIsSqrtDTimesARotation) {
  auto generator = at::detail::createCPUGenerator(3);
  ProbeRows rows(ProbeDistribution::kOrthogonal, 8, 8);
  auto u = torch::cat({rows.Next(0, 5, generator), rows.Next(5, 3, generator)});
  EXPECT_TRUE(torch::allclose(u.matmul(u.t()), 8.0 * torch::eye(8, torch::kFloat64), 0, 1e-12));
  // Starting again at row 0 (the next output) draws a new block.
  EXPECT_FALSE(torch::allclose(rows.Next(0, 8, generator), u));
}

}  // namespace
}  // namespace posbias::jacobian
