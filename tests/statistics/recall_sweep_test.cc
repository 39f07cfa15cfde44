// Recall by depth: the binomial and correlation intervals against Debian's scipy (golden values,
// tests/statistics/golden/generate_clopper_pearson.py), and each depth's statistics computed by hand;
// the recall layout survives the job spec and the report survives its JSON.
#include "server/statistics/recall_sweep.h"

#include <cmath>
#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"

namespace posbias::statistics {
namespace {

using jobs::JacobianReport;
using jobs::ReportToJson;
using jobs::ReportFromJson;
using jobs::SpecFromJson;
using jobs::SpecToJson;
using jobs::JacobianJobSpec;

std::vector<double> Numbers(const std::string& text) {
  std::vector<double> values;
  std::istringstream in(text);
  for (double v; in >> v;) values.push_back(v);
  return values;
}

struct GoldenRow {
  std::string kind, a, b;
  double value = 0, low = 0, high = 0;
};

std::vector<GoldenRow> Golden() {
  std::ifstream in(std::string(POSBIAS_STATISTICS_GOLDEN_DIR) + "/clopper_pearson.csv");
  std::vector<GoldenRow> rows;
  std::string line;
  std::getline(in, line);  // Header.
  while (std::getline(in, line)) {
    std::vector<std::string> cells;
    std::istringstream fields(line);
    for (std::string cell; std::getline(fields, cell, ',');) cells.push_back(cell);
    if (cells.size() != 6) continue;
    rows.push_back({cells[0], cells[1], cells[2], std::stod(cells[3]), std::stod(cells[4]), std::stod(cells[5])});
  }
  return rows;
}

TEST(RecallStatistics, TheClopperPearsonIntervalIsScipysExactIntervalForEveryGoldenCase) {
  int checked = 0;
  for (const GoldenRow& row : Golden()) {
    if (row.kind != "binomial") continue;
    const auto interval = ClopperPearson(std::stoll(row.a), std::stoll(row.b));
    EXPECT_NEAR(interval.low, row.low, 1e-12 * std::max(1.0, row.low)) << row.a << " of " << row.b;
    EXPECT_NEAR(interval.high, row.high, 1e-12) << row.a << " of " << row.b;
    ++checked;
  }
  EXPECT_EQ(checked, 15);
}

TEST(RecallStatistics, PearsonsRAndItsFisherIntervalAreScipysForEveryGoldenCase) {
  int checked = 0;
  for (const GoldenRow& row : Golden()) {
    if (row.kind != "pearson") continue;
    const auto correlation = PearsonCorrelation(Numbers(row.a), Numbers(row.b));
    ASSERT_TRUE(correlation.has_value());
    EXPECT_NEAR(correlation->r, row.value, 1e-12);
    EXPECT_NEAR(correlation->low, row.low, 1e-9);
    EXPECT_NEAR(correlation->high, row.high, 1e-9);
    EXPECT_EQ(correlation->cells, static_cast<int64_t>(Numbers(row.a).size()));
    ++checked;
  }
  EXPECT_EQ(checked, 3);
}

TEST(RecallStatistics, ACorrelationNeedsFourCellsAndSpreadOnBothSides) {
  EXPECT_FALSE(PearsonCorrelation({1, 2, 3}, {1, 2, 4}).has_value());
  EXPECT_FALSE(PearsonCorrelation({1, 2, 3, 4}, {0, 0, 0, 0}).has_value());  // Accuracy 0 at every depth.
  const auto exact = PearsonCorrelation({1, 2, 3, 4}, {2, 4, 6, 8});
  ASSERT_TRUE(exact.has_value());
  EXPECT_DOUBLE_EQ(exact->r, 1.0);
  EXPECT_DOUBLE_EQ(exact->low, 1.0);
}

// Two depths of three probes over L = 4 (the queried pair at positions 2..3 of each probe).
JacobianJobSpec::RecallSweep TwoDepthsThreeProbes() {
  JacobianJobSpec::RecallSweep sweep;
  sweep.depths = {0.0, 1.0};
  sweep.probes_per_depth = 3;
  sweep.values = "ab";
  sweep.pair_starts = {2, 2, 2, 1, 1, 1};
  sweep.pair_tokens = {2, 2, 2, 2, 2, 2};
  return sweep;
}

TEST(RecallStatistics, EachDepthCountsOnlyAStrictTopAnswerAndSharesThePairsPositions) {
  const std::vector<std::vector<double>> x = {
      {1, 1, 1, 1},  // Pair 2..3: share 2/4 of 1..4, 2/3 of the context 1..3.
      {0, 2, 0, 2},  // 2/4, 2/2.
      {1, 0, 0, 3},  // 0, 0.
      {1, 1, 2, 4},  // Pair 1..2: 2/8, 2/4.
      {1, 1, 2, 4},
      {1, 1, 2, 4},
  };
  const std::vector<NextTokenScore> scores = {
      {-0.1, 0, 0}, {-0.5, 0, 1} /* a tie: not the model's answer */, {-2.0, 3, 0},
      {-1.0, 1, 0}, {-1.0, 2, 0}, {-1.0, 5, 0}};
  const RecallSummary summary = RecallSweepStatistics(TwoDepthsThreeProbes(), x, scores);
  EXPECT_DOUBLE_EQ(summary.chance, 0.5);
  ASSERT_EQ(summary.depths.size(), 2u);
  const RecallDepth& top = summary.depths[0];
  EXPECT_EQ(top.probes, 3);
  EXPECT_EQ(top.correct, 1);
  EXPECT_DOUBLE_EQ(top.accuracy, 1.0 / 3.0);
  EXPECT_DOUBLE_EQ(top.accuracy_low, ClopperPearson(1, 3).low);
  EXPECT_DOUBLE_EQ(top.log_prob_mean, (-0.1 - 0.5 - 2.0) / 3);
  const double mean = (-0.1 - 0.5 - 2.0) / 3;
  const double std = std::sqrt((std::pow(-0.1 - mean, 2) + std::pow(-0.5 - mean, 2) + std::pow(-2.0 - mean, 2)) / 2);
  EXPECT_NEAR(top.log_prob_std, std, 1e-15);
  EXPECT_NEAR(top.log_prob_stderr, std / std::sqrt(3.0), 1e-15);
  EXPECT_NEAR(top.pair_share_mean, (0.5 + 0.5 + 0.0) / 3, 1e-15);
  EXPECT_NEAR(top.pair_context_share_mean, (2.0 / 3 + 1.0 + 0.0) / 3, 1e-15);
  const RecallDepth& end = summary.depths[1];
  EXPECT_EQ(end.correct, 0);
  EXPECT_DOUBLE_EQ(end.accuracy_low, 0.0);
  EXPECT_NEAR(end.pair_share_mean, 0.25, 1e-15);
  EXPECT_NEAR(end.pair_context_share_mean, 0.5, 1e-15);
  EXPECT_NEAR(end.pair_share_stderr, 0.0, 1e-15);
  EXPECT_FALSE(summary.share_accuracy.has_value());  // Two depths: no interval.
}

TEST(RecallStatistics, ThePooledCorrelationRunsOverEveryModelsDepths) {
  RecallSummary a, b;
  a.depths = {RecallDepth{.depth = 0, .accuracy = 0.9, .pair_context_share_mean = 0.3},
              RecallDepth{.depth = 1, .accuracy = 0.5, .pair_context_share_mean = 0.1}};
  b.depths = {RecallDepth{.depth = 0, .accuracy = 0.7, .pair_context_share_mean = 0.2},
              RecallDepth{.depth = 1, .accuracy = 0.2, .pair_context_share_mean = 0.05}};
  const auto pooled = PooledRecallCorrelation({&a, &b});
  const auto direct = PearsonCorrelation({0.3, 0.1, 0.2, 0.05}, {0.9, 0.5, 0.7, 0.2});
  ASSERT_TRUE(pooled && direct);
  EXPECT_DOUBLE_EQ(pooled->r, direct->r);
  EXPECT_EQ(pooled->cells, 4);
}

TEST(RecallStatistics, TheRecallLayoutSurvivesTheJobSpecAndTheTableSurvivesTheReport) {
  JacobianJobSpec spec;
  spec.model = "m";
  spec.length = 4;
  spec.recall = TwoDepthsThreeProbes();
  spec.recall->seed = 7;
  spec.recall->pairs = 3;
  spec.recall->key_letters = 2;
  auto read = SpecFromJson(SpecToJson(spec));
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_TRUE(read->recall.has_value());
  EXPECT_EQ(read->recall->pair_starts, spec.recall->pair_starts);
  EXPECT_EQ(read->recall->values, "ab");
  EXPECT_EQ(read->recall->seed, 7u);
  EXPECT_EQ(read->recall->depths, spec.recall->depths);
  auto broken = SpecToJson(spec);
  broken["recall"]["pair_starts"] = {1, 2};
  EXPECT_EQ(SpecFromJson(broken).status().code(), absl::StatusCode::kInvalidArgument);

  JacobianReport report;
  report.recall = RecallSweepStatistics(*spec.recall, std::vector<std::vector<double>>(6, {1, 1, 1, 1}),
                                        std::vector<NextTokenScore>(6, NextTokenScore{-0.2, 0, 0}));
  report.recall_correlation = RecallCorrelation{0.5, -0.1, 0.8, 6};
  auto back = ReportFromJson(nlohmann::json::parse(ReportToJson(report).dump()));
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_TRUE(back->recall.has_value());
  EXPECT_EQ(back->recall->depths.size(), 2u);
  EXPECT_DOUBLE_EQ(back->recall->depths[1].accuracy, 1.0);
  EXPECT_DOUBLE_EQ(back->recall_correlation->high, 0.8);
}

}  // namespace
}  // namespace posbias::statistics
