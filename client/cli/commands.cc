#include "client/cli/commands.h"

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "client/cli/output.h"
#include "client/cli/profile_input.h"
#include "client/cli/resource_commands.h"
#include "client/cli/svg_plot.h"
#include "posbias/client.h"

#ifndef POSBIAS_VERSION
#define POSBIAS_VERSION "0.0.0"
#endif

namespace posbias::cli {
namespace {

constexpr int kExitServerError = 1;
constexpr int kExitUsage = 2;

// Options shared by every subcommand (accepted before or after the subcommand name).
struct Common {
  std::string server = "127.0.0.1:50051";
  std::string format = "table";
  std::string plot;
  double timeout_seconds = 60;
};

// The routing model as flags: --depth with --alpha or --alphas.
struct RoutingFlags {
  uint32_t depth = 0;
  double alpha = 0.5;
  std::vector<double> alphas;
  void Add(CLI::App* command) {
    command->add_option("--depth,-H", depth, "Number of layers H")->required();
    auto* a = command->add_option("--alpha,-a", alpha, "Attention-branch weight alpha in [0, 1]")
                  ->capture_default_str();
    command->add_option("--alphas", alphas, "Per-layer alphas (comma separated; H = their count)")
        ->delimiter(',')->excludes(a);
  }
  void To(v1::RoutingModel* model) const {
    model->set_depth(depth);
    if (alphas.empty()) {
      model->set_alpha(alpha);
    } else {
      model->mutable_alpha_schedule()->mutable_alpha()->Add(alphas.begin(), alphas.end());
      if (depth == alphas.size()) model->set_depth(0);
    }
  }
};

class Runner {
 public:
  Runner(const Common& common, std::ostream& out, std::ostream& err)
      : common_(common), out_(out), err_(err) {}

  Client MakeClient() const {
    ClientOptions options;
    options.target = common_.server;
    options.default_timeout = std::chrono::milliseconds(static_cast<long>(common_.timeout_seconds * 1000));
    return Client(options);
  }

  int Fail(const absl::Status& status) const {
    const std::string reason = ErrorReason(status);
    err_ << "error: " << absl::StatusCodeToString(status.code())
         << (reason.empty() ? "" : " [" + reason + "]") << " " << status.message() << "\n";
    return kExitServerError;
  }

  int Print(const Table& table, const std::vector<PlotSeries>& series, const PlotOptions& plot) const {
    Format format = Format::kTable;
    ParseFormat(common_.format, &format);
    PrintResult(table, format, out_);
    if (common_.plot.empty()) return 0;
    std::string error;
    const std::string svg = RenderSvgPlot(series, plot, &error);
    std::ofstream file(common_.plot);
    if (svg.empty() || !(file << svg)) {
      err_ << "error: cannot write plot " << common_.plot << (error.empty() ? "" : ": " + error) << "\n";
      return kExitUsage;
    }
    err_ << "plot written to " << common_.plot << "\n";
    return 0;
  }

  std::ostream& err() const { return err_; }

 private:
  const Common& common_;
  std::ostream& out_;
  std::ostream& err_;
};

std::vector<double> Doubles(const google::protobuf::RepeatedField<double>& field) {
  return {field.begin(), field.end()};
}

nlohmann::ordered_json SummaryJson(const v1::ProfileSummary& summary) {
  nlohmann::ordered_json json;
  json["length"] = summary.length();
  json["total"] = summary.total();
  json["first_weight"] = summary.first_weight();
  json["last_weight"] = summary.last_weight();
  json["floor_value"] = summary.floor_value();
  json["floor_position"] = summary.floor_position();
  json["floor_x"] = summary.floor_x();
  json["leading_mass"] = summary.leading_mass();
  json["middle_mass"] = summary.middle_mass();
  json["trailing_mass"] = summary.trailing_mass();
  json["last_token_jump"] = summary.last_token_jump();
  json["quantiles"] = nlohmann::ordered_json::array();
  for (const auto& q : summary.quantiles()) {
    json["quantiles"].push_back({{"level", q.level()}, {"position", q.position()}, {"x", q.x()}});
  }
  return json;
}

// ---------------------------------------------------------------------------------------------

struct HealthFlags {
  std::string service;
};

int RunHealth(const Runner& runner, const HealthFlags& flags) {
  auto status = runner.MakeClient().Check(flags.service);
  if (!status.ok()) return runner.Fail(status.status());
  const char* names[] = {"UNKNOWN", "SERVING", "NOT_SERVING", "SERVICE_UNKNOWN"};
  Table table;
  table.extras["service"] = flags.service.empty() ? "(overall)" : flags.service;
  table.extras["status"] = names[static_cast<int>(*status)];
  runner.Print(table, {}, {});
  return *status == ServingStatus::kServing ? 0 : kExitServerError;
}

struct DensityFlags {
  RoutingFlags routing;
  std::vector<std::string> x;  // As typed: empty items are dropped, the rest must be numbers.
  std::string grid;
};

// Parses the --x items; false (with a message) when one is not a number.
bool ParsePoints(const std::vector<std::string>& items, std::vector<double>* points, std::ostream& err) {
  for (const std::string& item : items) {
    if (item.empty()) continue;
    char* end = nullptr;
    const double value = std::strtod(item.c_str(), &end);
    if (end == item.c_str() || *end != '\0') {
      err << "error: --x item '" << item << "' is not a number\n";
      return false;
    }
    points->push_back(value);
  }
  return true;
}

// "start:stop:count[:log|linear]" -> Grid.
bool ParseGrid(const std::string& text, v1::Grid* grid) {
  std::vector<std::string> parts;
  std::stringstream in(text);
  for (std::string part; std::getline(in, part, ':');) parts.push_back(part);
  if (parts.size() < 3 || parts.size() > 4) return false;
  try {
    grid->set_start(std::stod(parts[0]));
    grid->set_stop(std::stod(parts[1]));
    grid->set_count(static_cast<uint32_t>(std::stoul(parts[2])));
  } catch (const std::exception&) {
    return false;
  }
  if (parts.size() == 4 && parts[3] != "log" && parts[3] != "linear") return false;
  grid->set_spacing(parts.size() == 4 && parts[3] == "linear" ? v1::LINEAR : v1::LOG);
  return true;
}

int RunDensity(const Runner& runner, const DensityFlags& flags) {
  v1::EvaluateContinuumRequest request;
  flags.routing.To(request.mutable_model());
  if (!flags.grid.empty()) {
    if (!ParseGrid(flags.grid, request.mutable_grid())) {
      runner.err() << "error: --grid " << flags.grid << " is invalid: allowed START:STOP:COUNT[:log|linear]\n";
      return kExitUsage;
    }
  } else {
    std::vector<double> points;
    if (!ParsePoints(flags.x, &points, runner.err())) return kExitUsage;
    request.mutable_point_list()->mutable_x()->Add(points.begin(), points.end());
  }
  auto response = runner.MakeClient().EvaluateContinuum(request);
  if (!response.ok()) return runner.Fail(response.status());
  Table table;
  table.columns = {{"x", Doubles(response->x())},
                   {"density", Doubles(response->density())},
                   {"log_density", Doubles(response->log_density())},
                   {"cdf", Doubles(response->cdf())},
                   {"ccdf", Doubles(response->ccdf())}};
  table.extras["atom"] = response->atom();
  table.extras["floor"] = response->floor();
  table.extras["depth"] = response->depth();
  PlotOptions plot{.title = absl::StrCat("continuum profile, H = ", response->depth()),
                   .x_label = "x = j / L", .y_label = "density", .log_x = true, .log_y = true};
  return runner.Print(table, {{.label = "rho_H(x)", .x = Doubles(response->x()), .y = Doubles(response->density())}}, plot);
}

struct DiscreteFlags {
  RoutingFlags routing;
  uint64_t length = 0;
  std::vector<uint64_t> positions;
  std::string stride;
  std::string profile = "both";
  bool summaries_only = false;
};

int RunDiscrete(const Runner& runner, const DiscreteFlags& flags) {
  v1::EvaluateDiscreteRequest request;
  flags.routing.To(request.mutable_model());
  request.set_length(flags.length);
  if (!flags.positions.empty()) {
    request.mutable_positions()->mutable_position()->Add(flags.positions.begin(), flags.positions.end());
  } else if (!flags.stride.empty()) {
    unsigned long long start = 0, stop = 0, step = 0;
    if (std::sscanf(flags.stride.c_str(), "%llu:%llu:%llu", &start, &stop, &step) != 3) {
      runner.err() << "error: --stride " << flags.stride << " is invalid: allowed START:STOP:STEP\n";
      return kExitUsage;
    }
    request.mutable_stride()->set_start(start);
    request.mutable_stride()->set_stop(stop);
    request.mutable_stride()->set_step(step);
  }
  if (flags.profile != "incoherent") request.add_profiles(v1::COHERENT);
  if (flags.profile != "coherent") request.add_profiles(v1::INCOHERENT);
  request.set_summaries_only(flags.summaries_only);
  auto response = runner.MakeClient().EvaluateDiscrete(request);
  if (!response.ok()) return runner.Fail(response.status());
  Table table;
  std::vector<double> positions(response->position().begin(), response->position().end());
  table.columns.push_back({"position", positions, true});
  table.columns.push_back({"coherent", Doubles(response->coherent())});
  table.columns.push_back({"incoherent", Doubles(response->incoherent())});
  if (response->has_coherent_summary()) table.extras["coherent_summary"] = SummaryJson(response->coherent_summary());
  if (response->has_incoherent_summary()) table.extras["incoherent_summary"] = SummaryJson(response->incoherent_summary());
  std::vector<PlotSeries> series;
  if (response->coherent_size()) series.push_back({.label = "coherent", .x = positions, .y = Doubles(response->coherent())});
  if (response->incoherent_size()) series.push_back({.label = "incoherent (per unit width)", .x = positions, .y = Doubles(response->incoherent()), .dashed = true});
  PlotOptions plot{.title = absl::StrCat("exact profile, H = ", response->depth(), ", L = ", response->length()),
                   .x_label = "position j", .y_label = "influence", .log_x = false, .log_y = true};
  return runner.Print(table, series, plot);
}

struct SummarizeFlags {
  RoutingFlags routing;
  uint64_t length = 0;
  std::string profile = "coherent";
  std::string input;
  std::string column;
  double leading = 0.1;
  double trailing = 0.1;
  std::vector<double> quantiles;
};

int RunSummarize(const Runner& runner, const SummarizeFlags& flags) {
  v1::SummarizeProfileRequest request;
  if (!flags.input.empty()) {
    auto values = ReadProfile(flags.input, flags.column);
    if (!values.ok()) {
      runner.err() << "error: " << values.status().message() << "\n";
      return kExitUsage;
    }
    request.mutable_measured()->mutable_values()->Add(values->begin(), values->end());
  } else {
    flags.routing.To(request.mutable_theory()->mutable_model());
    request.mutable_theory()->set_length(flags.length);
    request.mutable_theory()->set_profile(flags.profile == "incoherent" ? v1::INCOHERENT : v1::COHERENT);
  }
  request.mutable_options()->mutable_band_fractions()->set_leading(flags.leading);
  request.mutable_options()->mutable_band_fractions()->set_trailing(flags.trailing);
  request.mutable_options()->mutable_quantile_levels()->Add(flags.quantiles.begin(), flags.quantiles.end());
  auto response = runner.MakeClient().SummarizeProfile(request);
  if (!response.ok()) return runner.Fail(response.status());
  Table table;
  table.extras = SummaryJson(response->summary());
  return runner.Print(table, {}, {});
}

struct FitFlags {
  std::string input;
  std::string column;
  std::string quantity = "squared-norm";
  uint32_t depth = 24;
  std::string depth_range;
  std::string models = "both";
};

nlohmann::ordered_json FitJson(const v1::ModelFit& fit) {
  nlohmann::ordered_json json;
  json["model"] = fit.model() == v1::COHERENT ? "coherent" : "incoherent";
  json["depth"] = fit.depth();
  json["alpha"] = fit.alpha();
  json["lambda"] = fit.lambda();
  json["lambda_low"] = fit.lambda_low();
  json["lambda_high"] = fit.lambda_high();
  const auto& m = fit.metrics();
  json["metrics"] = {{"spearman", m.spearman()}, {"pearson_log", m.pearson_log()},
                     {"rmse_log", m.rmse_log()}, {"ks", m.ks()}, {"wasserstein1", m.wasserstein1()},
                     {"measured_last_weight", m.measured_last_weight()},
                     {"model_last_weight", m.model_last_weight()},
                     {"measured_floor", m.measured_floor()}, {"model_floor", m.model_floor()},
                     {"measured_last_jump", m.measured_last_jump()},
                     {"model_last_jump", m.model_last_jump()}};
  return json;
}

int RunFit(const Runner& runner, const FitFlags& flags) {
  auto values = ReadProfile(flags.input, flags.column);
  if (!values.ok()) {
    runner.err() << "error: " << values.status().message() << "\n";
    return kExitUsage;
  }
  v1::FitProfileRequest request;
  request.mutable_measured()->mutable_values()->Add(values->begin(), values->end());
  request.set_quantity(flags.quantity == "norm" ? v1::NORM : flags.quantity == "weight" ? v1::WEIGHT : v1::SQUARED_NORM);
  if (flags.models != "incoherent") request.add_models(v1::COHERENT);
  if (flags.models != "coherent") request.add_models(v1::INCOHERENT);
  if (!flags.depth_range.empty()) {
    unsigned min = 0, max = 0;
    if (std::sscanf(flags.depth_range.c_str(), "%u:%u", &min, &max) != 2) {
      runner.err() << "error: --depth-range " << flags.depth_range << " is invalid: allowed MIN:MAX\n";
      return kExitUsage;
    }
    request.mutable_depth()->mutable_range()->set_min(min);
    request.mutable_depth()->mutable_range()->set_max(max);
  } else {
    request.mutable_depth()->set_fixed(flags.depth);
  }
  request.set_include_profiles(true);
  auto response = runner.MakeClient().FitProfile(request);
  if (!response.ok()) return runner.Fail(response.status());
  Table table;
  std::vector<double> positions(values->size());
  for (size_t j = 0; j < positions.size(); ++j) positions[j] = static_cast<double>(j + 1);
  double total = 0;
  for (double v : *values) total += v;
  std::vector<double> measured(*values);
  for (double& v : measured) v /= total;
  table.columns.push_back({"position", positions, true});
  table.columns.push_back({"measured", measured});
  std::vector<PlotSeries> series = {{.label = "measured", .x = positions, .y = measured, .markers = true}};
  table.extras["fits"] = nlohmann::ordered_json::array();
  for (const auto& fit : response->fits()) {
    const std::string name = fit.model() == v1::COHERENT ? "coherent" : "incoherent";
    table.columns.push_back({name, Doubles(fit.profile())});
    table.extras["fits"].push_back(FitJson(fit));
    series.push_back({.label = absl::StrCat(name, " fit: H = ", fit.depth(), ", alpha = ", FormatNumber(fit.alpha())),
                      .x = positions, .y = Doubles(fit.profile()), .dashed = true});
  }
  table.extras["measured_summary"] = SummaryJson(response->measured_summary());
  PlotOptions plot{.title = "measured profile and fitted theory", .x_label = "position j",
                   .y_label = "normalized influence", .log_x = false, .log_y = true};
  return runner.Print(table, series, plot);
}

}  // namespace

int RunCli(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
  CLI::App app{"posbias: transformer position-bias theory from a posbias server"};
  app.set_version_flag("--version", std::string("posbias ") + POSBIAS_VERSION);
  app.require_subcommand(1);
  app.fallthrough();
  Common common;
  if (const char* env = std::getenv("POSBIAS_SERVER")) common.server = env;
  app.add_option("--server,-s", common.server, "Server HOST:PORT (env POSBIAS_SERVER)")->capture_default_str();
  app.add_option("--format,-f", common.format, "Output: table, json or csv")
      ->check(CLI::IsMember({"table", "json", "csv"}))->capture_default_str();
  app.add_option("--plot", common.plot, "Also draw the curve(s) to this SVG file (log scale)");
  app.add_option("--timeout", common.timeout_seconds, "Deadline per call, seconds")
      ->check(CLI::PositiveNumber)->capture_default_str();

  HealthFlags health;
  auto* health_cmd = app.add_subcommand("health", "Check the server's health (overall or one service)");
  health_cmd->add_option("--service", health.service, "Service name, e.g. posbias.v1.DensityService");

  DensityFlags density;
  auto* density_cmd = app.add_subcommand("density", "Continuum profile rho_H(x): density, log-density, CDF");
  density.routing.Add(density_cmd);
  auto* x_opt = density_cmd->add_option("--x", density.x, "Points x in (0, 1], comma separated")->delimiter(',');
  density_cmd->add_option("--grid", density.grid, "START:STOP:COUNT[:log|linear] instead of --x")->excludes(x_opt);

  DiscreteFlags discrete;
  auto* discrete_cmd = app.add_subcommand("discrete", "Exact finite-L profile (coherent and incoherent)");
  discrete.routing.Add(discrete_cmd);
  discrete_cmd->add_option("--length,-L", discrete.length, "Sequence length L")->required();
  auto* pos_opt = discrete_cmd->add_option("--positions", discrete.positions, "Positions to return (comma separated)")->delimiter(',');
  discrete_cmd->add_option("--stride", discrete.stride, "START:STOP:STEP positions")->excludes(pos_opt);
  discrete_cmd->add_option("--profile", discrete.profile, "coherent, incoherent or both")
      ->check(CLI::IsMember({"coherent", "incoherent", "both"}))->capture_default_str();
  discrete_cmd->add_flag("--summaries-only", discrete.summaries_only, "Only the summaries (any L)");

  SummarizeFlags summarize;
  auto* summarize_cmd = app.add_subcommand("summarize", "Summaries of a theory or measured profile");
  summarize_cmd->add_option("--depth,-H", summarize.routing.depth, "Number of layers H (theory)");
  summarize_cmd->add_option("--alpha,-a", summarize.routing.alpha, "alpha (theory)")->capture_default_str();
  summarize_cmd->add_option("--alphas", summarize.routing.alphas, "Per-layer alphas (theory)")->delimiter(',');
  summarize_cmd->add_option("--length,-L", summarize.length, "L (theory; 0 = continuum)")->capture_default_str();
  summarize_cmd->add_option("--profile", summarize.profile, "coherent or incoherent (theory)")
      ->check(CLI::IsMember({"coherent", "incoherent"}))->capture_default_str();
  summarize_cmd->add_option("--input,-i", summarize.input, "Measured profile file (CSV or JSON; - for stdin)");
  summarize_cmd->add_option("--column", summarize.column, "Column (name or 1-based index) or JSON key");
  summarize_cmd->add_option("--leading", summarize.leading, "Leading band fraction")->capture_default_str();
  summarize_cmd->add_option("--trailing", summarize.trailing, "Trailing band fraction")->capture_default_str();
  summarize_cmd->add_option("--quantiles", summarize.quantiles, "Influence levels (default 0.5,0.9,0.99)")->delimiter(',');

  FitFlags fit;
  auto* fit_cmd = app.add_subcommand("fit", "Fit alpha (and a depth) to a measured profile");
  fit_cmd->add_option("--input,-i", fit.input, "Measured profile file (CSV or JSON; - for stdin)")->required();
  fit_cmd->add_option("--column", fit.column, "Column (name or 1-based index) or JSON key");
  fit_cmd->add_option("--quantity", fit.quantity, "squared-norm, norm or weight")
      ->check(CLI::IsMember({"squared-norm", "norm", "weight"}))->capture_default_str();
  auto* depth_opt = fit_cmd->add_option("--depth,-H", fit.depth, "Fixed depth H")->capture_default_str();
  fit_cmd->add_option("--depth-range", fit.depth_range, "MIN:MAX depths to try (fits H too)")->excludes(depth_opt);
  fit_cmd->add_option("--models", fit.models, "coherent, incoherent or both")
      ->check(CLI::IsMember({"coherent", "incoherent", "both"}))->capture_default_str();

  auto resources = AddResourceCommands(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    const int code = app.exit(error, out, err);
    return code == 0 ? 0 : kExitUsage;
  }
  Runner runner(common, out, err);
  if (*health_cmd) return RunHealth(runner, health);
  if (app.got_subcommand("models") || app.got_subcommand("jobs")) {
    Client client = runner.MakeClient();
    return RunResourceCommands(*resources, {&client, common.format, common.plot, &out, &err});
  }
  if (*density_cmd) {
    if (x_opt->count() == 0 && density.grid.empty()) {
      err << "error: density needs --x or --grid\n";
      return kExitUsage;
    }
    return RunDensity(runner, density);
  }
  if (*discrete_cmd) return RunDiscrete(runner, discrete);
  if (*summarize_cmd) {
    if (summarize.input.empty() && summarize.routing.depth == 0) {
      err << "error: summarize needs --input FILE or --depth H (with --alpha)\n";
      return kExitUsage;
    }
    return RunSummarize(runner, summarize);
  }
  return RunFit(runner, fit);
}

}  // namespace posbias::cli
