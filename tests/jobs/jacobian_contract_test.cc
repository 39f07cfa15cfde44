// The typed job contract: every enum's name parses back to it, unknown names are refused naming the
// field and the allowed names, and the report's JSON round-trips, reads strictly (a missing or
// mistyped member is DATA_LOSS naming it), keeps NaN as null, and reads older reports without the
// members added since.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "server/jobs/jacobian_report.h"
#include "server/jobs/jacobian_spec.h"
#include "server/status/error.h"

namespace posbias::jobs {
namespace {

template <typename Enum, typename Name, typename Parse>
void ExpectNamesRoundTrip(std::initializer_list<Enum> values, Name name, Parse parse) {
  for (Enum value : values) {
    auto parsed = parse(name(value));
    ASSERT_TRUE(parsed.ok()) << name(value);
    EXPECT_EQ(*parsed, value) << name(value);
  }
}

TEST(JacobianSpecNames, EveryEnumValueParsesBackFromItsName) {
  ExpectNamesRoundTrip({JacobianMethod::kExact, JacobianMethod::kHutchinson}, MethodName, ParseMethod);
  ExpectNamesRoundTrip({JacobianOutput::kFinalHidden, JacobianOutput::kLayerSweep, JacobianOutput::kLogProb},
                       OutputName, ParseOutput);
  ExpectNamesRoundTrip({JacobianInput::kRandomTokens, JacobianInput::kGivenTokens, JacobianInput::kGaussianEmbeddings},
                       InputName, ParseInput);
  ExpectNamesRoundTrip({ComputeDtype::kFloat32, ComputeDtype::kBfloat16, ComputeDtype::kFloat16, ComputeDtype::kFloat64},
                       DtypeName, ParseDtype);
  ExpectNamesRoundTrip({DevicePreference::kAny, DevicePreference::kCpu, DevicePreference::kCuda}, DeviceName,
                       ParseDevice);
  ExpectNamesRoundTrip({Pathway::kFull, Pathway::kValueOnly}, PathwayName, ParsePathway);
  ExpectNamesRoundTrip({ProbeDistribution::kGaussian, ProbeDistribution::kRademacher, ProbeDistribution::kOrthogonal},
                       ProbeDistributionName, ParseProbeDistribution);
}

TEST(JacobianSpecNames, TheNamesAreTheStoredWords) {
  EXPECT_EQ(MethodName(JacobianMethod::kHutchinson), "hutchinson");
  EXPECT_EQ(OutputName(JacobianOutput::kLayerSweep), "layer_sweep");
  EXPECT_EQ(InputName(JacobianInput::kGaussianEmbeddings), "gaussian_embeddings");
  EXPECT_EQ(DtypeName(ComputeDtype::kBfloat16), "bfloat16");
  EXPECT_EQ(DeviceName(DevicePreference::kAny), "");
  EXPECT_EQ(*ParseDtype("bf16"), ComputeDtype::kBfloat16);
  EXPECT_EQ(PathwayName(Pathway::kValueOnly), "value_only");
  EXPECT_EQ(*ParsePathway("value-only"), Pathway::kValueOnly);  // posbias-measure's spelling.
  EXPECT_EQ(ErrorAllowedOf(ParsePathway("scores").status()), "full, value_only");
}

TEST(JacobianSpecNames, AnUnknownNameIsRefusedNamingTheFieldAndTheAllowedNames) {
  const absl::Status status = ParseMethod("Exact").status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ErrorFieldOf(status), "spec.method");
  EXPECT_EQ(ErrorAllowedOf(status), "exact, hutchinson");
  EXPECT_EQ(ErrorAllowedOf(ParseDevice("tpu").status()), "\"\", cpu, cuda");
}

TEST(JacobianSpecJson, AStoredSpecWithAnUnknownEnumNameIsInvalid) {
  const absl::Status status = SpecFromJson(nlohmann::json{{"model", "m"}, {"output", "attention"}}).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ErrorFieldOf(status), "spec.output");
}

TEST(JacobianSpecJson, ThePathwayRoundTripsAndAnOlderSpecMeasuresTheFullJacobian) {
  JacobianJobSpec spec;
  spec.model = "m";
  spec.pathway = Pathway::kValueOnly;
  spec.compare_pathways = true;
  const auto json = SpecToJson(spec);
  EXPECT_EQ(json["pathway"], "value_only");
  auto back = SpecFromJson(json);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->pathway, Pathway::kValueOnly);
  EXPECT_TRUE(back->compare_pathways);
  auto older = SpecFromJson(nlohmann::json{{"model", "m"}, {"length", 8}});
  ASSERT_TRUE(older.ok()) << older.status();
  EXPECT_EQ(older->pathway, Pathway::kFull);
  EXPECT_FALSE(older->compare_pathways);
  const absl::Status status = SpecFromJson(nlohmann::json{{"model", "m"}, {"pathway", "scores"}}).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ErrorFieldOf(status), "spec.pathway");
  EXPECT_EQ(SpecFromJson(nlohmann::json{{"model", "m"}, {"compare_pathways", 1}}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(JacobianSpecJson, TheProbeDistributionRoundTripsAndAnOlderSpecRanGaussianProbes) {
  JacobianJobSpec spec;
  spec.model = "m";
  spec.method = JacobianMethod::kHutchinson;
  spec.probe_distribution = ProbeDistribution::kRademacher;
  const auto json = SpecToJson(spec);
  EXPECT_EQ(json["probe_distribution"], "rademacher");
  auto back = SpecFromJson(json);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->probe_distribution, ProbeDistribution::kRademacher);
  auto older = SpecFromJson(nlohmann::json{{"model", "m"}, {"method", "hutchinson"}});
  ASSERT_TRUE(older.ok()) << older.status();
  EXPECT_EQ(older->probe_distribution, ProbeDistribution::kGaussian);  // What such jobs ran with.
  const absl::Status status = SpecFromJson(nlohmann::json{{"model", "m"}, {"probe_distribution", "sobol"}}).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ErrorFieldOf(status), "spec.probe_distribution");
  EXPECT_EQ(ErrorAllowedOf(status), "gaussian, rademacher, orthogonal");
}

JacobianReport FullReport() {
  JacobianReport report;
  report.model.family = "gpt2";
  report.model.layers = 2;
  report.model.weights = "seeded initialization";
  report.model.weights_sha256 = "ab";
  report.model.uid = "0123456789abcdef0123456789abcdef";
  report.model.source = "preset";
  report.measurement.length = 3;
  report.measurement.target = 3;
  report.measurement.samples = 2;
  report.measurement.method = JacobianMethod::kHutchinson;
  report.measurement.output = JacobianOutput::kLayerSweep;
  report.measurement.probe_distribution = ProbeDistribution::kOrthogonal;
  report.measurement.seed = ~uint64_t{0};
  report.measurement.pathway = Pathway::kFull;
  report.tokens = {{1, 2, 3, 4}, {5, 6, 7, 8}};
  report.positions = {1, 2, 3};
  report.sq_norm_mean = {0.5, 0.25, 0.25};
  report.sq_norm_std = report.sq_norm_stderr = report.norm_mean = report.norm_std = report.norm_stderr = {1, 2, 3};
  report.sq_norm_estimator_stderr = std::vector<double>{0.1, 0.1, 0.1};
  report.layers = std::vector<LayerProfile>{{1, {1, 2, 3}, {0, 0, 0}}, {2, {3, 2, 1}, {0, 0, 0}}};
  auto& pathways = report.pathways.emplace();
  pathways.value_sq_norm_mean = {0.4, 0.2, 0.25}, pathways.value_sq_norm_std = {0.1, 0.1, 0.1};
  pathways.value_sq_norm_stderr = {0.05, 0.05, 0.05};
  pathways.ratio_mean = {0.8, 0.8, 1.0}, pathways.ratio_std = {0.1, 0.1, 0}, pathways.ratio_stderr = {0.05, 0.05, 0};
  pathways.total_ratio_mean = 0.875, pathways.total_ratio_std = 0.01, pathways.total_ratio_stderr = 0.005;
  pathways.score_share_mean = {0.1, 0.3, 0.0}, pathways.score_share_std = {0.01, 0.01, 0};
  pathways.score_share_stderr = {0.005, 0.005, 0};
  pathways.interference_share_mean = {0.1, -0.1, 0.0}, pathways.interference_share_std = {0.02, 0.02, 0};
  pathways.interference_share_stderr = {0.01, 0.01, 0};
  pathways.cosine_mean = {0.2, -0.1, 0.0}, pathways.cosine_std = {0.1, 0.1, 0}, pathways.cosine_stderr = {0.05, 0.05, 0};
  pathways.total_score_share_mean = 0.1, pathways.total_score_share_std = 0.01, pathways.total_score_share_stderr = 0.005;
  pathways.total_interference_share_mean = 0.025, pathways.total_interference_share_std = 0.01;
  pathways.total_interference_share_stderr = 0.005;
  report.branch_ratio = {0.5, 0.4};
  report.theory.depth = 2;
  FixedDepthFit fit;
  fit.alpha = 0.5;
  fit.lambda = 1.0;
  fit.lambda_sample_low = 0.9;
  fit.lambda_sample_high = 1.1;
  fit.bootstrap_resamples = 200;
  fit.profile = {0.2, 0.3, 0.5};
  report.theory.fits = std::vector<FixedDepthFit>{fit};
  EffectiveDepthFit ridge;
  ridge.model = TheoryModel::kIncoherent;
  ridge.depth = 3;
  ridge.ridge = {{1, 0.9, 0.1}, {3, 0.3, 0.05}};
  report.theory.effective_depth_fits = std::vector<EffectiveDepthFit>{ridge};
  report.theory.measured_alpha_schedule = MeasuredAlphaTheory{{0.5, 0.4}, {}, ReportMetrics{}, {0.1, 0.2, 0.7}, {0.2, 0.2, 0.6}};
  report.theory.fit_effective_depth = true;
  report.raw = std::vector<std::vector<double>>{{1, 2, 3}, {4, 5, 6}};
  report.job = ReportJob{"j-1", 2, 1, 0};
  return report;
}

TEST(JacobianWorkUnits, AComparisonHasOneUnitPerModelAndSampleNumberedModelMajor) {
  JacobianJobSpec spec;
  spec.samples = 3;
  EXPECT_EQ(WorkUnits(spec), 3) << "one unit per sample without versus";
  spec.versus.resize(2);  // Two more models: init and another.
  EXPECT_EQ(WorkUnits(spec), 9);
  // Units 2..6: the first model's last sample, all of init's, the first of b's.
  EXPECT_EQ(SampleRangesOfUnits(spec, 2, 7), (std::vector<SampleRange>{{2, 3}, {0, 3}, {0, 1}}));
  // Units 4..5 lie within init's samples: the other models' ranges are empty.
  const auto middle = SampleRangesOfUnits(spec, 4, 6);
  EXPECT_TRUE(middle[0].empty());
  EXPECT_EQ(middle[1], (SampleRange{1, 3}));
  EXPECT_TRUE(middle[2].empty());
  EXPECT_EQ(middle[0].size() + middle[1].size() + middle[2].size(), 2);
  // Every unit of the job belongs to exactly one model's range.
  const auto whole = SampleRangesOfUnits(spec, 0, WorkUnits(spec));
  for (const auto& range : whole) EXPECT_EQ(range, (SampleRange{0, 3}));
}

TEST(JacobianReportJson, AFullReportRoundTrips) {
  const auto json = ReportToJson(FullReport());
  auto back = ReportFromText(json.dump());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(ReportToJson(*back).dump(), json.dump());
  EXPECT_EQ(back->measurement.seed, ~uint64_t{0});
  EXPECT_EQ(back->theory.effective_depth_fits->at(0).model, TheoryModel::kIncoherent);
  EXPECT_EQ(back->measurement.pathway, Pathway::kFull);
  EXPECT_EQ(back->measurement.probe_distribution, ProbeDistribution::kOrthogonal);
  ASSERT_TRUE(back->pathways.has_value());
  EXPECT_EQ(back->pathways->ratio_mean, (std::vector<double>{0.8, 0.8, 1.0}));
  EXPECT_EQ(back->pathways->total_ratio_mean, 0.875);
}

TEST(JacobianReportJson, APathwayRatioAfterTheTargetIsNullAndReadsBackAsNaN) {
  auto report = FullReport();
  report.pathways->ratio_mean[2] = std::numeric_limits<double>::quiet_NaN();
  auto back = ReportFromText(ReportToJson(report).dump());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(std::isnan(back->pathways->ratio_mean[2]));
}

TEST(JacobianReportJson, AMistypedPathwayIsDataLossNamingIt) {
  auto json = nlohmann::json::parse(ReportToJson(FullReport()).dump());
  json["measurement"]["pathway"] = "scores";
  EXPECT_NE(ReportFromJson(json).status().message().find("report.measurement.pathway"), std::string::npos);
  json = nlohmann::json::parse(ReportToJson(FullReport()).dump());
  json["pathways"].erase("ratio_std");
  const absl::Status status = ReportFromJson(json).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(status.message().find("report.pathways.ratio_std"), std::string::npos) << status.message();
}

TEST(JacobianReportJson, KeysComeInThePrintedOrder) {
  const auto json = ReportToJson(FullReport());
  std::vector<std::string> keys;
  for (const auto& item : json.items()) keys.push_back(item.key());
  const std::vector<std::string> expected = {
      "model", "measurement", "tokens", "positions", "sq_norm_mean", "sq_norm_std", "sq_norm_stderr",
      "norm_mean", "norm_std", "norm_stderr", "sq_norm_estimator_stderr", "layers", "pathways", "branch_ratio", "theory",
      "raw", "job"};
  EXPECT_EQ(keys, expected);
}

TEST(JacobianReportJson, AMissingMemberIsDataLossNamingIt) {
  auto json = nlohmann::json::parse(ReportToJson(FullReport()).dump());
  json["measurement"].erase("samples");
  const absl::Status status = ReportFromJson(json).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(status.message().find("report.measurement.samples"), std::string::npos) << status.message();
}

TEST(JacobianReportJson, AMistypedValueIsDataLossNamingItsIndex) {
  auto json = nlohmann::json::parse(ReportToJson(FullReport()).dump());
  json["sq_norm_mean"][1] = "0.25";
  const absl::Status status = ReportFromJson(json).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(status.message().find("report.sq_norm_mean[1] is not a number"), std::string::npos) << status.message();
  EXPECT_EQ(ReportFromText("{not json").status().code(), absl::StatusCode::kDataLoss);
}

TEST(JacobianReportJson, ANonFiniteValueIsWrittenAsNullAndReadBackAsNaN) {
  auto report = FullReport();
  report.sq_norm_mean[2] = std::numeric_limits<double>::infinity();
  const std::string text = ReportToJson(report).dump();
  EXPECT_NE(text.find("\"sq_norm_mean\":[0.5,0.25,null]"), std::string::npos);
  auto back = ReportFromText(text);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(std::isnan(back->sq_norm_mean[2]));
}

TEST(JacobianReportJson, AnOlderReportWithoutLaterMembersIsRead) {
  auto json = nlohmann::json::parse(ReportToJson(FullReport()).dump());
  json.erase("job");
  json["model"].erase("weights_sha256");
  json["theory"].erase("effective_depth_fits");
  json["theory"].erase("fit_effective_depth");
  json["theory"]["fits"][0].erase("lambda_sample_low");
  json["measurement"].erase("pathway");
  json.erase("pathways");
  auto back = ReportFromJson(json);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_FALSE(back->measurement.pathway.has_value());
  EXPECT_FALSE(back->pathways.has_value());
  EXPECT_FALSE(back->job.has_value());
  EXPECT_FALSE(back->theory.effective_depth_fits.has_value());
  EXPECT_FALSE(back->theory.fits->at(0).lambda_sample_low.has_value());
}

TEST(JacobianReportJson, APathwayComparisonStoredBeforeTheDecompositionIsRead) {
  auto json = nlohmann::json::parse(ReportToJson(FullReport()).dump());
  for (const char* key : {"score_share_mean", "score_share_std", "score_share_stderr", "interference_share_mean",
                          "interference_share_std", "interference_share_stderr", "cosine_mean", "cosine_std",
                          "cosine_stderr", "total_score_share_mean", "total_score_share_std", "total_score_share_stderr",
                          "total_interference_share_mean", "total_interference_share_std",
                          "total_interference_share_stderr"}) {
    ASSERT_TRUE(json["pathways"].contains(key)) << key;
    json["pathways"].erase(key);
  }
  ASSERT_EQ(json["model"].erase("uid"), 1u);
  auto back = ReportFromJson(json);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_FALSE(back->model.uid.has_value());
  EXPECT_EQ(back->pathways->ratio_mean, (std::vector<double>{0.8, 0.8, 1.0}));
  EXPECT_TRUE(back->pathways->score_share_mean.empty());
  EXPECT_EQ(back->pathways->total_score_share_mean, 0.0);
}

}  // namespace
}  // namespace posbias::jobs
