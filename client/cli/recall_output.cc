#include "client/cli/recall_output.h"

#include <fstream>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "client/cli/svg_plot.h"

namespace posbias::cli {
namespace {

// Every model's recall table with its name: a comparison's models in order, else the job's one.
std::vector<std::pair<std::string, const v1::RecallSummary*>> Tables(const v1::JacobianNormResult& result,
                                                                     const std::string& measured) {
  std::vector<std::pair<std::string, const v1::RecallSummary*>> tables;
  for (const auto& model : result.comparison()) {
    if (model.has_recall()) tables.emplace_back(model.model(), &model.recall());
  }
  if (tables.empty() && result.has_recall()) tables.emplace_back(measured, &result.recall());
  return tables;
}

std::string Correlation(const v1::RecallCorrelation& c) {
  return absl::StrFormat("r = %+.3f, 95 %% interval [%+.3f, %+.3f] over %u cells", c.r(), c.low(), c.high(), c.cells());
}

std::string PathBeside(const std::string& plot, const std::string& suffix) {
  std::string path = plot;
  if (path.size() > 4 && path.compare(path.size() - 4, 4, ".svg") == 0) path.resize(path.size() - 4);
  return path + "-" + suffix + ".svg";
}

}  // namespace

void PrintRecall(std::ostream& out, const v1::JacobianNormResult& result) {
  for (const auto& [name, table] : Tables(result, "the job's model")) {
    out << "recall of " << name << " (chance " << absl::StrFormat("%.4g", table->chance())
        << "; accuracy with its 95 % Clopper-Pearson interval; pair share of sum ||J||^2 over the context 1..L-1)\n";
    if (!table->probes().empty()) out << "probes: " << table->probes() << "\n";
    out << "   depth  probes  correct  accuracy  [low, high]         log p(answer) +- se   pair share (context) +- se\n";
    for (const auto& d : table->depths()) {
      out << absl::StrFormat("%8.4g  %6u  %7u  %8.4f  [%.4f, %.4f]  %10.4f +- %-8.4f  %10.6f +- %-10.4g\n", d.depth(),
                             d.probes(), d.correct(), d.accuracy(), d.accuracy_low(), d.accuracy_high(), d.log_prob_mean(),
                             d.log_prob_stderr(), d.pair_context_share_mean(), d.pair_context_share_stderr());
    }
    if (table->has_share_accuracy()) {
      out << "pair share against accuracy across depths: " << Correlation(table->share_accuracy()) << "\n";
    } else {
      out << "pair share against accuracy across depths: undefined (fewer than 4 depths, or no spread)\n";
    }
  }
  if (result.has_recall_correlation()) {
    out << "pair share against accuracy across models and depths: " << Correlation(result.recall_correlation()) << "\n";
  }
}

std::string PlotRecall(const std::string& plot, const std::string& measured, const v1::JacobianNormResult& result,
                       std::ostream& notes) {
  const auto tables = Tables(result, measured);
  if (tables.empty()) return "";
  std::vector<PlotSeries> accuracy, scatter;
  int color = 0;
  for (const auto& [name, table] : tables) {
    PlotSeries mean{.label = name, .x = {}, .y = {}, .markers = true, .color = color};
    PlotSeries low{.label = "", .x = {}, .y = {}, .dashed = true, .color = color};
    PlotSeries high = low;
    PlotSeries points{.label = name, .x = {}, .y = {}, .markers = true, .line = false, .color = color};
    for (const auto& d : table->depths()) {
      mean.x.push_back(d.depth()), mean.y.push_back(d.accuracy());
      low.x.push_back(d.depth()), low.y.push_back(d.accuracy_low());
      high.x.push_back(d.depth()), high.y.push_back(d.accuracy_high());
      points.x.push_back(d.pair_context_share_mean()), points.y.push_back(d.accuracy());
    }
    accuracy.push_back(std::move(mean));
    accuracy.push_back(std::move(low));
    accuracy.push_back(std::move(high));
    scatter.push_back(std::move(points));
    ++color;
  }
  const auto& depths = tables.front().second->depths();
  if (!depths.empty()) {
    accuracy.push_back(PlotSeries{.label = "chance", .x = {depths.begin()->depth(), depths.rbegin()->depth()},
                                  .y = {tables.front().second->chance(), tables.front().second->chance()},
                                  .dashed = true, .color = 7});
  }
  std::string error;
  const std::string by_depth = RenderSvgPlot(
      accuracy, {.title = "recall accuracy by depth (dashed: 95 % interval)", .x_label = "depth of the queried pair",
                 .y_label = "accuracy (top token = the answer)", .log_y = false}, &error);
  const std::string against = RenderSvgPlot(
      scatter, {.title = "mechanism against behaviour, one point per depth",
                .x_label = "queried pair's share of sum ||J_j||^2 over the context", .y_label = "recall accuracy",
                .log_y = false}, &error);
  if (by_depth.empty() || against.empty()) return "cannot draw the recall plots: " + error;
  std::ofstream(PathBeside(plot, "recall")) << by_depth;
  std::ofstream(PathBeside(plot, "recall-scatter")) << against;
  notes << "recall plots written to " << PathBeside(plot, "recall") << " and " << PathBeside(plot, "recall-scatter") << "\n";
  return "";
}

}  // namespace posbias::cli
