#include "server/statistics/jacobian_comparison.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <string>

#include "absl/strings/str_cat.h"
#include "server/density/comparison.h"
#include "server/status/error.h"

namespace posbias::statistics {

int64_t EdgeBandPositions(int64_t length) { return std::max<int64_t>(1, length / 10); }

absl::StatusOr<BandShares> SharesOf(const std::vector<double>& profile) {
  const auto length = static_cast<int64_t>(profile.size());
  if (length < 3) {
    return InvalidArgumentError({ErrorReason::kInvalidLength, "profile", absl::StrCat(length, " positions"),
                                 "at least 3 positions (a leading, a middle and a trailing band)"});
  }
  double total = 0;
  for (double v : profile) {
    if (!std::isfinite(v) || v < 0) {
      return InvalidArgumentError({ErrorReason::kInvalidArgument, "profile", absl::StrCat(v), "finite values >= 0"});
    }
    total += v;
  }
  if (total <= 0) {
    return InvalidArgumentError({ErrorReason::kInvalidArgument, "profile", "all zero", "a positive sum"});
  }
  const int64_t edge = EdgeBandPositions(length);
  BandShares shares;
  for (int64_t j = 0; j < length; ++j) {
    const double w = profile[j] / total;
    (j < edge ? shares.leading : j >= length - edge ? shares.trailing : shares.middle) += w;
  }
  shares.first = profile.front() / total;
  shares.last = profile.back() / total;
  return shares;
}

PairedEstimate BootstrapMean(const std::vector<double>& values, const ComparisonOptions& options) {
  PairedEstimate estimate;
  estimate.moments = MomentsOf(values);
  estimate.samples = static_cast<int64_t>(values.size());
  if (values.empty()) return estimate;
  std::mt19937_64 generator(options.seed);
  std::uniform_int_distribution<size_t> pick(0, values.size() - 1);
  std::vector<double> means(static_cast<size_t>(std::max<int64_t>(1, options.bootstrap_resamples)));
  for (double& mean : means) {
    double sum = 0;
    for (size_t i = 0; i < values.size(); ++i) sum += values[pick(generator)];
    mean = sum / static_cast<double>(values.size());
  }
  std::sort(means.begin(), means.end());
  const double tail = (1.0 - options.confidence) / 2.0;
  auto quantile = [&](double q) {
    const double at = q * static_cast<double>(means.size() - 1);
    const auto below = static_cast<size_t>(std::floor(at));
    const size_t above = std::min(below + 1, means.size() - 1);
    return means[below] + (at - static_cast<double>(below)) * (means[above] - means[below]);
  };
  estimate.low = quantile(tail);
  estimate.high = quantile(1.0 - tail);
  return estimate;
}

namespace {

// log(b / a) per sample where both are positive (the others are left out and not counted).
std::vector<double> LogRatios(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> ratios;
  for (size_t s = 0; s < a.size(); ++s) {
    if (a[s] > 0 && b[s] > 0) ratios.push_back(std::log(b[s] / a[s]));
  }
  return ratios;
}

// Each band's per-sample shares, in the order leading, middle, trailing, first, last.
absl::StatusOr<std::vector<std::vector<double>>> BandColumns(const std::vector<std::vector<double>>& profiles,
                                                             const std::string& which) {
  std::vector<std::vector<double>> columns(5);
  for (size_t s = 0; s < profiles.size(); ++s) {
    auto shares = SharesOf(profiles[s]);
    if (!shares.ok()) {
      return InvalidArgumentError({ErrorReason::kInvalidArgument, absl::StrCat(which, " sample ", s),
                                   std::string(shares.status().message()), "a profile of squared norms"});
    }
    for (auto [column, value] : {std::pair{0, shares->leading}, {1, shares->middle}, {2, shares->trailing},
                                 {3, shares->first}, {4, shares->last}}) {
      columns[column].push_back(value);
    }
  }
  return columns;
}

std::vector<double> MeanProfile(const std::vector<std::vector<double>>& profiles) {
  std::vector<double> mean(profiles.front().size(), 0.0);
  for (const auto& profile : profiles) {
    for (size_t j = 0; j < mean.size(); ++j) mean[j] += profile[j] / static_cast<double>(profiles.size());
  }
  return mean;
}

}  // namespace

absl::StatusOr<ProfileComparison> CompareProfilesPaired(const std::vector<std::vector<double>>& reference,
                                                        const std::vector<std::vector<double>>& other,
                                                        const ComparisonOptions& options) {
  if (reference.empty() || reference.size() != other.size()) {
    return InvalidArgumentError({ErrorReason::kInvalidArgument, "samples",
                                 absl::StrCat(reference.size(), " and ", other.size()),
                                 "the same number (at least 1) of samples for both models"});
  }
  for (size_t s = 0; s < reference.size(); ++s) {
    if (reference[s].size() != other[s].size() || reference[s].size() != reference.front().size()) {
      return InvalidArgumentError({ErrorReason::kInvalidArgument, absl::StrCat("sample ", s),
                                   absl::StrCat(reference[s].size(), " and ", other[s].size(), " positions"),
                                   "the same positions for every sample of both models"});
    }
  }
  auto ref = BandColumns(reference, "reference");
  if (!ref.ok()) return ref.status();
  auto own = BandColumns(other, "model");
  if (!own.ok()) return own.status();
  ProfileComparison comparison;
  comparison.leading = MomentsOf((*own)[0]);
  comparison.middle = MomentsOf((*own)[1]);
  comparison.trailing = MomentsOf((*own)[2]);
  comparison.first = MomentsOf((*own)[3]);
  comparison.last = MomentsOf((*own)[4]);
  comparison.middle_log_ratio = BootstrapMean(LogRatios((*ref)[1], (*own)[1]), options);
  comparison.first_log_ratio = BootstrapMean(LogRatios((*ref)[3], (*own)[3]), options);
  comparison.last_log_ratio = BootstrapMean(LogRatios((*ref)[4], (*own)[4]), options);
  const auto a = MeanProfile(reference), b = MeanProfile(other);
  comparison.spearman = density::SpearmanCorrelation(a, b);
  return comparison;
}

namespace {

ShareEstimate Share(const SampleMoments& m) { return {m.mean, m.std, m.standard_error}; }

PairedLogRatio Ratio(const PairedEstimate& e) {
  return {e.moments.mean, e.moments.std, e.moments.standard_error, e.low, e.high, e.samples};
}

// Mean and standard error over samples, per position.
void ProfileOf(const std::vector<std::vector<double>>& samples, ComparedModel& compared) {
  const size_t length = samples.front().size();
  for (size_t j = 0; j < length; ++j) {
    std::vector<double> column;
    for (const auto& sample : samples) column.push_back(sample[j]);
    const SampleMoments m = MomentsOf(column);
    compared.sq_norm_mean.push_back(m.mean);
    compared.sq_norm_stderr.push_back(m.standard_error);
  }
}

// The statistics of `paired` (the model's against the reference; no ratios for the reference).
BandStatistics StatisticsOf(const ProfileComparison& paired, bool is_reference) {
  BandStatistics out;
  out.leading = Share(paired.leading);
  out.middle = Share(paired.middle);
  out.trailing = Share(paired.trailing);
  out.first = Share(paired.first);
  out.last = Share(paired.last);
  out.spearman = paired.spearman;
  if (!is_reference) {
    out.middle_log_ratio = Ratio(paired.middle_log_ratio);
    out.first_log_ratio = Ratio(paired.first_log_ratio);
    out.last_log_ratio = Ratio(paired.last_log_ratio);
  }
  return out;
}

// Every sample without its last position (the target's own).
std::vector<std::vector<double>> ContextOf(const std::vector<std::vector<double>>& samples) {
  std::vector<std::vector<double>> context;
  for (const auto& sample : samples) context.emplace_back(sample.begin(), sample.end() - 1);
  return context;
}

}  // namespace

absl::StatusOr<std::vector<ComparedModel>> CompareModels(const std::vector<MeasuredModel>& models,
                                                         const ComparisonOptions& options) {
  std::vector<ComparedModel> compared;
  if (models.empty()) return compared;
  if (options.reference >= models.size()) {
    return InvalidArgumentError({ErrorReason::kInvalidArgument, "reference", absl::StrCat(options.reference),
                                 absl::StrCat("an index of the ", models.size(), " models compared")});
  }
  const auto& reference = models[options.reference].samples;
  // The context alone needs three positions of its own (a leading, a middle and a trailing band).
  const bool with_context = !reference.empty() && reference.front().size() >= 4;
  const auto reference_context = with_context ? ContextOf(reference) : std::vector<std::vector<double>>{};
  for (size_t m = 0; m < models.size(); ++m) {
    auto paired = CompareProfilesPaired(reference, models[m].samples, options);
    if (!paired.ok()) return paired.status();
    ComparedModel entry;
    entry.model = models[m].model;
    entry.uid = models[m].uid;
    entry.weights_sha256 = models[m].weights_sha256;
    ProfileOf(models[m].samples, entry);
    entry.bands = StatisticsOf(*paired, m == options.reference);
    if (with_context) {
      auto context = CompareProfilesPaired(reference_context, ContextOf(models[m].samples), options);
      // A context of zeros (a model whose target ignores its context) has no shares: left out.
      if (context.ok()) entry.context = StatisticsOf(*context, m == options.reference);
    }
    compared.push_back(std::move(entry));
  }
  return compared;
}

}  // namespace posbias::statistics
