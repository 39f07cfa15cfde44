#include "client/cli/density_commands.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/cli/output.h"
#include "client/cli/profile_input.h"
#include "client/cli/svg_plot.h"

namespace posbias::cli {
namespace {

// The routing model as flags: --depth with --alpha or --alphas, and --window or --windows.
struct RoutingFlags {
  uint32_t depth = 0;
  double alpha = 0.5;
  std::vector<double> alphas;
  uint32_t window = 0;
  std::vector<uint32_t> windows;
  void AddWindows(CLI::App& command) {
    auto* w = command.add_option("--window", window,
                                 "Sliding attention window w in every layer (0 = full causal; Hugging Face's "
                                 "sliding_window)")
                  ->capture_default_str();
    command.add_option("--windows", windows, "Per-layer windows w_1..w_H, layer 1 first (comma separated)")
        ->delimiter(',')
        ->excludes(w);
  }
  void Add(CLI::App& command) {
    command.add_option("--depth,-H", depth, "Number of layers H")->required();
    auto* a = command.add_option("--alpha,-a", alpha, "Attention-branch weight alpha in [0, 1]")
                  ->capture_default_str();
    command.add_option("--alphas", alphas, "Per-layer alphas (comma separated; H = their count)")
        ->delimiter(',')
        ->excludes(a);
    AddWindows(command);
  }
  void To(v1::RoutingModel* model) const {
    model->set_attention_window(window);
    model->mutable_layer_windows()->Add(windows.begin(), windows.end());
    model->set_depth(depth);
    if (alphas.empty()) {
      model->set_alpha(alpha);
    } else {
      model->mutable_alpha_schedule()->mutable_alpha()->Add(alphas.begin(), alphas.end());
      if (depth == alphas.size()) model->set_depth(0);
    }
  }
};

std::vector<double> Doubles(const google::protobuf::RepeatedField<double>& field) {
  return {field.begin(), field.end()};
}

// A summary's fields. JSON and CSV keep every field (a stable schema); for people, a continuum
// summary (length 0) has no positions, so the fields that count positions (length, total, first
// weight, floor position, last-token jump, quantile positions) are left out rather than shown as
// zeros.
nlohmann::ordered_json SummaryJson(const v1::ProfileSummary& summary, bool for_people = false) {
  const bool discrete = summary.length() > 0 || !for_people;
  nlohmann::ordered_json json;
  if (discrete) {
    json["length"] = summary.length();
    json["total"] = summary.total();
    json["first_weight"] = summary.first_weight();
  }
  json["last_weight"] = summary.last_weight();
  json["floor_value"] = summary.floor_value();
  if (discrete) json["floor_position"] = summary.floor_position();
  json["floor_x"] = summary.floor_x();
  json["leading_mass"] = summary.leading_mass();
  json["middle_mass"] = summary.middle_mass();
  json["trailing_mass"] = summary.trailing_mass();
  if (discrete) json["last_token_jump"] = summary.last_token_jump();
  json["quantiles"] = nlohmann::ordered_json::array();
  for (const auto& q : summary.quantiles()) {
    nlohmann::ordered_json quantile = {{"level", q.level()}};
    if (discrete) quantile["position"] = q.position();
    quantile["x"] = q.x();
    json["quantiles"].push_back(quantile);
  }
  return json;
}

// Prints the table; with --plot, also draws `series` to that file.
int PrintWithPlot(const CliContext& context, const Table& table,
                  const std::vector<PlotSeries>& series, const PlotOptions& plot) {
  PrintResult(table, context.format, context.out);
  if (context.plot.empty()) return 0;
  std::string error;
  const std::string svg = RenderSvgPlot(series, plot, &error);
  std::ofstream file(context.plot);
  if (svg.empty() || !(file << svg)) {
    context.err << "error: cannot write plot " << context.plot
                << (error.empty() ? "" : ": " + error) << "\n";
    return kExitUsage;
  }
  context.err << "plot written to " << context.plot << "\n";
  return 0;
}

// The measured profile of --input (and --column); a message on err when it cannot be read.
absl::StatusOr<std::vector<double>> ReadInput(const CliContext& context, const std::string& input,
                                              const std::string& column) {
  auto values = ReadProfile(input, column);
  if (!values.ok()) context.UsageError(values.status().message());
  return values;
}

// ------------------------------------------------------------------------------------- health

struct HealthFlags {
  std::string service;
};

int RunHealth(const CliContext& context, const HealthFlags& flags) {
  auto status = context.client.Check(flags.service);
  if (!status.ok()) return context.Fail(status.status());
  const char* names[] = {"UNKNOWN", "SERVING", "NOT_SERVING", "SERVICE_UNKNOWN"};
  Table table;
  table.extras["service"] = flags.service.empty() ? "(overall)" : flags.service;
  table.extras["status"] = names[static_cast<int>(*status)];
  PrintWithPlot(context, table, {}, {});  // The exit code tells the health, even if --plot fails.
  return *status == ServingStatus::kServing ? 0 : kExitServerError;
}

// ------------------------------------------------------------------------------------ density

struct DensityFlags {
  RoutingFlags routing;
  std::vector<std::string> x;       // As typed: empty items are dropped, the rest must be numbers.
  CLI::Option* x_option = nullptr;  // --x given at all (even with only empty items)?
  std::string grid;
};

// Parses the --x items; false (with a message) when one is not a number.
bool ParsePoints(const std::vector<std::string>& items, std::vector<double>* points,
                 std::ostream& err) {
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

// The points of --grid or --x into the request; false (with a message) when they are invalid.
bool SetPoints(const CliContext& context, const DensityFlags& flags,
               v1::EvaluateContinuumRequest* request) {
  if (!flags.grid.empty()) {
    if (ParseGrid(flags.grid, request->mutable_grid())) return true;
    context.UsageError(
        absl::StrCat("--grid ", flags.grid, " is invalid: allowed START:STOP:COUNT[:log|linear]"));
    return false;
  }
  std::vector<double> points;
  if (!ParsePoints(flags.x, &points, context.err)) return false;
  request->mutable_point_list()->mutable_x()->Add(points.begin(), points.end());
  return true;
}

int RunDensity(const CliContext& context, const DensityFlags& flags) {
  if (flags.x_option->count() == 0 && flags.grid.empty()) {
    return context.UsageError("density needs --x or --grid");
  }
  v1::EvaluateContinuumRequest request;
  flags.routing.To(request.mutable_model());
  if (!SetPoints(context, flags, &request)) return kExitUsage;
  auto response = context.client.EvaluateContinuum(request);
  if (!response.ok()) return context.Fail(response.status());
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
                   .x_label = "x = j / L",
                   .y_label = "density",
                   .log_x = true,
                   .log_y = true};
  const PlotSeries curve{
      .label = "rho_H(x)", .x = Doubles(response->x()), .y = Doubles(response->density())};
  return PrintWithPlot(context, table, {curve}, plot);
}

// ----------------------------------------------------------------------------------- discrete

struct DiscreteFlags {
  RoutingFlags routing;
  uint64_t length = 0;
  std::vector<uint64_t> positions;
  std::string stride;
  std::string profile = "both";
  bool summaries_only = false;
};

// The positions of --positions or --stride into the request; false (with a message) when invalid.
bool SetPositions(const CliContext& context, const DiscreteFlags& flags,
                  v1::EvaluateDiscreteRequest* request) {
  if (!flags.positions.empty()) {
    request->mutable_positions()->mutable_position()->Add(flags.positions.begin(),
                                                          flags.positions.end());
  } else if (!flags.stride.empty()) {
    unsigned long long start = 0, stop = 0, step = 0;
    if (std::sscanf(flags.stride.c_str(), "%llu:%llu:%llu", &start, &stop, &step) != 3) {
      context.UsageError(
          absl::StrCat("--stride ", flags.stride, " is invalid: allowed START:STOP:STEP"));
      return false;
    }
    request->mutable_stride()->set_start(start);
    request->mutable_stride()->set_stop(stop);
    request->mutable_stride()->set_step(step);
  }
  return true;
}

int PrintDiscrete(const CliContext& context, const v1::EvaluateDiscreteResponse& response) {
  Table table;
  std::vector<double> positions(response.position().begin(), response.position().end());
  table.columns.push_back({"position", positions, true});
  table.columns.push_back({"coherent", Doubles(response.coherent())});
  table.columns.push_back({"incoherent", Doubles(response.incoherent())});
  if (response.has_coherent_summary()) {
    table.extras["coherent_summary"] = SummaryJson(response.coherent_summary());
  }
  if (response.has_incoherent_summary()) {
    table.extras["incoherent_summary"] = SummaryJson(response.incoherent_summary());
  }
  std::vector<PlotSeries> series;
  if (response.coherent_size()) {
    series.push_back({.label = "coherent", .x = positions, .y = Doubles(response.coherent())});
  }
  if (response.incoherent_size()) {
    series.push_back({.label = "incoherent (per unit width)",
                      .x = positions,
                      .y = Doubles(response.incoherent()),
                      .dashed = true});
  }
  PlotOptions plot{
      .title = absl::StrCat("exact profile, H = ", response.depth(), ", L = ", response.length()),
      .x_label = "position j",
      .y_label = "influence",
      .log_x = false,
      .log_y = true};
  return PrintWithPlot(context, table, series, plot);
}

int RunDiscrete(const CliContext& context, const DiscreteFlags& flags) {
  v1::EvaluateDiscreteRequest request;
  flags.routing.To(request.mutable_model());
  request.set_length(flags.length);
  if (!SetPositions(context, flags, &request)) return kExitUsage;
  if (flags.profile != "incoherent") request.add_profiles(v1::COHERENT);
  if (flags.profile != "coherent") request.add_profiles(v1::INCOHERENT);
  request.set_summaries_only(flags.summaries_only);
  auto response = context.client.EvaluateDiscrete(request);
  if (!response.ok()) return context.Fail(response.status());
  return PrintDiscrete(context, *response);
}

// ---------------------------------------------------------------------------------- summarize

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

int RunSummarize(const CliContext& context, const SummarizeFlags& flags) {
  if (flags.input.empty() && flags.routing.depth == 0) {
    return context.UsageError("summarize needs --input FILE or --depth H (with --alpha)");
  }
  v1::SummarizeProfileRequest request;
  if (!flags.input.empty()) {
    auto values = ReadInput(context, flags.input, flags.column);
    if (!values.ok()) return kExitUsage;
    request.mutable_measured()->mutable_values()->Add(values->begin(), values->end());
  } else {
    auto* theory = request.mutable_theory();
    flags.routing.To(theory->mutable_model());
    theory->set_length(flags.length);
    theory->set_profile(flags.profile == "incoherent" ? v1::INCOHERENT : v1::COHERENT);
  }
  auto* options = request.mutable_options();
  options->mutable_band_fractions()->set_leading(flags.leading);
  options->mutable_band_fractions()->set_trailing(flags.trailing);
  options->mutable_quantile_levels()->Add(flags.quantiles.begin(), flags.quantiles.end());
  auto response = context.client.SummarizeProfile(request);
  if (!response.ok()) return context.Fail(response.status());
  Table table;
  table.extras = SummaryJson(response->summary(), context.format == Format::kTable);
  return PrintWithPlot(context, table, {}, {});
}

// ---------------------------------------------------------------------------------------- fit

struct FitFlags {
  std::string input;
  std::string column;
  std::string quantity = "squared-norm";
  uint32_t depth = 24;
  std::string depth_range;
  std::string models = "both";
  uint32_t window = 0;
  std::vector<uint32_t> layer_windows;
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
  json["metrics"] = {{"spearman", m.spearman()},
                     {"pearson_log", m.pearson_log()},
                     {"rmse_log", m.rmse_log()},
                     {"ks", m.ks()},
                     {"wasserstein1", m.wasserstein1()},
                     {"measured_last_weight", m.measured_last_weight()},
                     {"model_last_weight", m.model_last_weight()},
                     {"measured_floor", m.measured_floor()},
                     {"model_floor", m.model_floor()},
                     {"measured_last_jump", m.measured_last_jump()},
                     {"model_last_jump", m.model_last_jump()}};
  return json;
}

// The fit's options (all but the profile) into the request; false (with a message) when invalid.
bool SetFitOptions(const CliContext& context, const FitFlags& flags,
                   v1::FitProfileRequest* request) {
  request->set_quantity(flags.quantity == "norm"     ? v1::NORM
                        : flags.quantity == "weight" ? v1::WEIGHT
                                                     : v1::SQUARED_NORM);
  // A pattern of windows: the coherent model (the server's choice for no models named).
  if (flags.layer_windows.empty()) {
    if (flags.models != "incoherent") request->add_models(v1::COHERENT);
    if (flags.models != "coherent") request->add_models(v1::INCOHERENT);
  } else if (flags.models == "incoherent") {
    request->add_models(v1::INCOHERENT);
  }
  if (!flags.depth_range.empty()) {
    unsigned min = 0, max = 0;
    if (std::sscanf(flags.depth_range.c_str(), "%u:%u", &min, &max) != 2) {
      context.UsageError(
          absl::StrCat("--depth-range ", flags.depth_range, " is invalid: allowed MIN:MAX"));
      return false;
    }
    request->mutable_depth()->mutable_range()->set_min(min);
    request->mutable_depth()->mutable_range()->set_max(max);
  } else {
    request->mutable_depth()->set_fixed(flags.depth);
  }
  request->set_include_profiles(true);
  request->set_attention_window(flags.window);
  request->mutable_layer_windows()->Add(flags.layer_windows.begin(), flags.layer_windows.end());
  return true;
}

int PrintFit(const CliContext& context, const std::vector<double>& values,
             const v1::FitProfileResponse& response) {
  Table table;
  std::vector<double> positions(values.size());
  for (size_t j = 0; j < positions.size(); ++j) positions[j] = static_cast<double>(j + 1);
  double total = 0;
  for (double v : values) total += v;
  std::vector<double> measured(values);
  for (double& v : measured) v /= total;
  table.columns.push_back({"position", positions, true});
  table.columns.push_back({"measured", measured});
  std::vector<PlotSeries> series = {
      {.label = "measured", .x = positions, .y = measured, .markers = true}};
  table.extras["fits"] = nlohmann::ordered_json::array();
  for (const auto& fit : response.fits()) {
    const std::string name = fit.model() == v1::COHERENT ? "coherent" : "incoherent";
    table.columns.push_back({name, Doubles(fit.profile())});
    table.extras["fits"].push_back(FitJson(fit));
    series.push_back({.label = absl::StrCat(name, " fit: H = ", fit.depth(),
                                            ", alpha = ", FormatNumber(fit.alpha())),
                      .x = positions,
                      .y = Doubles(fit.profile()),
                      .dashed = true});
  }
  table.extras["measured_summary"] = SummaryJson(response.measured_summary());
  PlotOptions plot{.title = "measured profile and fitted theory",
                   .x_label = "position j",
                   .y_label = "normalized influence",
                   .log_x = false,
                   .log_y = true};
  return PrintWithPlot(context, table, series, plot);
}

int RunFit(const CliContext& context, const FitFlags& flags) {
  auto values = ReadInput(context, flags.input, flags.column);
  if (!values.ok()) return kExitUsage;
  v1::FitProfileRequest request;
  request.mutable_measured()->mutable_values()->Add(values->begin(), values->end());
  if (!SetFitOptions(context, flags, &request)) return kExitUsage;
  auto response = context.client.FitProfile(request);
  if (!response.ok()) return context.Fail(response.status());
  return PrintFit(context, *values, *response);
}

}  // namespace

CommandRun DefineHealth(CLI::App& command) {
  auto flags = std::make_shared<HealthFlags>();
  command.add_option("--service", flags->service, "Service name, e.g. posbias.v1.DensityService");
  return RunWith(flags, RunHealth);
}

CommandRun DefineDensity(CLI::App& command) {
  auto flags = std::make_shared<DensityFlags>();
  flags->routing.Add(command);
  flags->x_option =
      command.add_option("--x", flags->x, "Points x in (0, 1], comma separated")->delimiter(',');
  command.add_option("--grid", flags->grid, "START:STOP:COUNT[:log|linear] instead of --x")
      ->excludes(flags->x_option);
  return RunWith(flags, RunDensity);
}

CommandRun DefineDiscrete(CLI::App& command) {
  auto flags = std::make_shared<DiscreteFlags>();
  flags->routing.Add(command);
  command.add_option("--length,-L", flags->length, "Sequence length L")->required();
  auto* positions =
      command.add_option("--positions", flags->positions, "Positions to return (comma separated)")
          ->delimiter(',');
  command.add_option("--stride", flags->stride, "START:STOP:STEP positions")->excludes(positions);
  command.add_option("--profile", flags->profile, "coherent, incoherent or both")
      ->check(CLI::IsMember({"coherent", "incoherent", "both"}))
      ->capture_default_str();
  command.add_flag("--summaries-only", flags->summaries_only, "Only the summaries (any L)");
  return RunWith(flags, RunDiscrete);
}

CommandRun DefineSummarize(CLI::App& command) {
  auto flags = std::make_shared<SummarizeFlags>();
  RoutingFlags& routing = flags->routing;
  command.add_option("--depth,-H", routing.depth, "Number of layers H (theory)");
  command.add_option("--alpha,-a", routing.alpha, "alpha (theory)")->capture_default_str();
  command.add_option("--alphas", routing.alphas, "Per-layer alphas (theory)")->delimiter(',');
  routing.AddWindows(command);
  command.add_option("--length,-L", flags->length, "L (theory; 0 = continuum)")
      ->capture_default_str();
  command.add_option("--profile", flags->profile, "coherent or incoherent (theory)")
      ->check(CLI::IsMember({"coherent", "incoherent"}))
      ->capture_default_str();
  command.add_option("--input,-i", flags->input,
                     "Measured profile file (CSV or JSON; - for stdin)");
  command.add_option("--column", flags->column, "Column (name or 1-based index) or JSON key");
  command.add_option("--leading", flags->leading, "Leading band fraction")->capture_default_str();
  command.add_option("--trailing", flags->trailing, "Trailing band fraction")
      ->capture_default_str();
  command.add_option("--quantiles", flags->quantiles, "Influence levels (default 0.5,0.9,0.99)")
      ->delimiter(',');
  return RunWith(flags, RunSummarize);
}

CommandRun DefineFit(CLI::App& command) {
  auto flags = std::make_shared<FitFlags>();
  command
      .add_option("--input,-i", flags->input, "Measured profile file (CSV or JSON; - for stdin)")
      ->required();
  command.add_option("--column", flags->column, "Column (name or 1-based index) or JSON key");
  command.add_option("--quantity", flags->quantity, "squared-norm, norm or weight")
      ->check(CLI::IsMember({"squared-norm", "norm", "weight"}))
      ->capture_default_str();
  auto* depth =
      command.add_option("--depth,-H", flags->depth, "Fixed depth H")->capture_default_str();
  command.add_option("--depth-range", flags->depth_range, "MIN:MAX depths to try (fits H too)")
      ->excludes(depth);
  command.add_option("--models", flags->models, "coherent, incoherent or both")
      ->check(CLI::IsMember({"coherent", "incoherent", "both"}))
      ->capture_default_str();
  command.add_option("--window", flags->window, "Sliding attention window w of every layer (0 = full causal)")
      ->capture_default_str();
  command.add_option("--layer-windows", flags->layer_windows,
                     "A model's windows per layer, layer 1 first, repeated over each depth's layers (comma "
                     "separated; 0 = full causal; the coherent model only: --models is then coherent)")
      ->delimiter(',');
  return RunWith(flags, RunFit);
}

}  // namespace posbias::cli
