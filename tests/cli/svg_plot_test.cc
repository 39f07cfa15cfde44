#include "client/cli/svg_plot.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <limits>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace posbias::cli {
namespace {

// ---------------------------------------------------------------- helpers

std::size_t CountOf(const std::string& haystack, const std::string& needle) {
  std::size_t n = 0;
  for (std::size_t pos = haystack.find(needle); pos != std::string::npos;
       pos = haystack.find(needle, pos + needle.size())) {
    ++n;
  }
  return n;
}

bool EntityAt(const std::string& s, std::size_t pos) {
  for (const char* e : {"&amp;", "&lt;", "&gt;", "&quot;", "&apos;"}) {
    if (s.compare(pos, std::string(e).size(), e) == 0) return true;
  }
  return false;
}

// Checks attribute syntax inside one tag body: name="value" pairs, values free of '<' and bare '&'.
std::string AttributeProblem(const std::string& tag, std::size_t pos) {
  while (pos < tag.size()) {
    if (tag[pos] == ' ' || tag[pos] == '\n' || tag[pos] == '/') {
      ++pos;
      continue;
    }
    const std::size_t eq = tag.find("=\"", pos);
    if (eq == std::string::npos) return "attribute without quoted value in <" + tag + ">";
    const std::size_t close = tag.find('"', eq + 2);
    if (close == std::string::npos) return "unterminated attribute in <" + tag + ">";
    for (std::size_t i = eq + 2; i < close; ++i) {
      if (tag[i] == '<' || (tag[i] == '&' && !EntityAt(tag, i)))
        return "bad attribute value in <" + tag + ">";
    }
    pos = close + 1;
  }
  return "";
}

// End of the tag starting at `start` ('<'), skipping '>' inside quoted attribute values.
std::size_t TagEnd(const std::string& xml, std::size_t start) {
  bool quoted = false;
  for (std::size_t i = start + 1; i < xml.size(); ++i) {
    if (xml[i] == '"') quoted = !quoted;
    if (xml[i] == '>' && !quoted) return i;
  }
  return std::string::npos;
}

// A tiny well-formedness check: tags balance, attributes are quoted, text uses known entities only.
// Returns "" when the document passes.
std::string XmlProblem(const std::string& xml) {
  std::vector<std::string> open;
  for (std::size_t i = 0; i < xml.size();) {
    if (xml[i] == '&' && !EntityAt(xml, i)) return "bare & in text";
    if (xml[i] != '<') {
      ++i;
      continue;
    }
    if (xml.compare(i, 2, "<?") == 0) {
      i = xml.find("?>", i) + 2;
      continue;
    }
    const std::size_t end = TagEnd(xml, i);
    if (end == std::string::npos) return "unterminated tag";
    const std::string tag = xml.substr(i + 1, end - i - 1);
    i = end + 1;
    if (tag.empty()) return "empty tag";
    if (tag[0] == '/') {
      if (open.empty() || open.back() != tag.substr(1))
        return "mismatched </" + tag.substr(1) + ">";
      open.pop_back();
      continue;
    }
    const std::string name = tag.substr(0, tag.find_first_of(" /"));
    if (std::string problem = AttributeProblem(tag, name.size()); !problem.empty()) return problem;
    if (tag.back() != '/') open.push_back(name);
  }
  if (open.size() != 0) return "unclosed <" + open.back() + ">";
  return xml.find("<svg") == std::string::npos ? "no <svg> element" : "";
}

// Texts of all <text class="<cls>"> elements, in document order.
std::vector<std::string> TextsOfClass(const std::string& svg, const std::string& cls) {
  std::vector<std::string> texts;
  const std::string marker = "class=\"" + cls + "\"";
  for (std::size_t pos = svg.find(marker); pos != std::string::npos;
       pos = svg.find(marker, pos + 1)) {
    const std::size_t start = svg.find('>', pos) + 1;
    texts.push_back(svg.substr(start, svg.find("</text>", start) - start));
  }
  return texts;
}

// All coordinate pairs of all polylines.
std::vector<std::pair<double, double>> PolylinePoints(const std::string& svg) {
  std::vector<std::pair<double, double>> points;
  for (std::size_t pos = svg.find("points=\""); pos != std::string::npos;
       pos = svg.find("points=\"", pos + 1)) {
    const char* p = svg.c_str() + pos + 8;
    while (*p != '"') {
      char* next = nullptr;
      const double x = std::strtod(p, &next);
      const double y = std::strtod(next + 1, &next);  // skip ','
      points.emplace_back(x, y);
      p = (*next == ' ') ? next + 1 : next;
    }
  }
  return points;
}

PlotSeries Series(std::string label, std::vector<double> x, std::vector<double> y) {
  PlotSeries s;
  s.label = std::move(label);
  s.x = std::move(x);
  s.y = std::move(y);
  return s;
}

std::string RenderOrFail(const std::vector<PlotSeries>& series, const PlotOptions& options) {
  std::string error;
  std::string svg = RenderSvgPlot(series, options, &error);
  EXPECT_FALSE(svg.empty()) << error;
  EXPECT_EQ(XmlProblem(svg), "");
  return svg;
}

std::vector<PlotSeries> TwoProfiles() {
  return {Series("attention", {1, 2, 3, 4, 5}, {0.5, 0.2, 0.1, 0.05, 0.01}),
          Series("loss", {1, 2, 3, 4, 5}, {0.9, 0.3, 0.2, 0.02, 0.002})};
}

// ---------------------------------------------------------------- basic rendering

TEST(SvgPlot, RendersStandaloneDocumentWithLegendAndOnePolylinePerSeries) {
  PlotOptions options;
  options.title = "Position bias";
  options.x_label = "position";
  options.y_label = "mass";
  const std::string svg = RenderOrFail(TwoProfiles(), options);
  EXPECT_EQ(svg.rfind("<?xml", 0), 0u);
  EXPECT_NE(svg.find("xmlns=\"http://www.w3.org/2000/svg\""), std::string::npos);
  EXPECT_EQ(CountOf(svg, "<polyline"), 2u);
  EXPECT_EQ(TextsOfClass(svg, "legend"), (std::vector<std::string>{"attention", "loss"}));
  EXPECT_EQ(TextsOfClass(svg, "title"), std::vector<std::string>{"Position bias"});
  EXPECT_EQ(TextsOfClass(svg, "xlabel"), std::vector<std::string>{"position"});
  EXPECT_EQ(TextsOfClass(svg, "ylabel"), std::vector<std::string>{"mass"});
}

// Found by a first session: the middle-share plot's x axis read "model (0 = step0)" with numbers.
TEST(SvgPlot, NamesCategoriesOnTheXAxisInsteadOfNumbers) {
  PlotOptions options;
  options.log_y = false;
  options.x_categories = {"step0", "init", "step800"};
  const std::string svg = RenderOrFail({Series("middle", {0, 1, 2}, {0.3, 0.2, 0.1})}, options);
  EXPECT_EQ(TextsOfClass(svg, "xtick"), (std::vector<std::string>{"step0", "init", "step800"}));
}

// Found by a first session: a legend label "alpha = 0.6753513" was cut at the document's edge. A
// long label widens the document; the plot area keeps two thirds of the width asked for.
TEST(SvgPlot, ALongLegendLabelWidensThePlotInsteadOfBeingCut) {
  PlotOptions options;
  options.width_px = 480;
  const std::string label = "incoherent, H 24, alpha 0.6753513 (fitted to the measured profile)";
  const std::string svg = RenderOrFail({Series(label, {1, 2, 3}, {0.5, 0.2, 0.1})}, options);
  EXPECT_EQ(TextsOfClass(svg, "legend"), std::vector<std::string>{label});
  const size_t at = svg.find("width=\"");
  ASSERT_NE(at, std::string::npos);
  const int width = std::stoi(svg.substr(at + 7));
  EXPECT_GE(width, static_cast<int>(46 + 7 * label.size() + 2 * 480 / 3)) << "room for the whole label";
  EXPECT_EQ(RenderOrFail(TwoProfiles(), options).find("width=\"480\""), RenderOrFail(TwoProfiles(), options).find("width=\""))
      << "short labels keep the asked width";
}

TEST(SvgPlot, GivesEachSeriesADistinctColor) {
  std::vector<PlotSeries> series;
  for (int i = 0; i < 5; ++i)
    series.push_back(Series("s" + std::to_string(i), {1, 2}, {1.0 + i, 2.0 + i}));
  const std::string svg = RenderOrFail(series, PlotOptions{});
  std::set<std::string> colors;
  const std::string marker = "<g class=\"series\" fill=\"none\" stroke=\"";
  for (std::size_t pos = svg.find(marker); pos != std::string::npos;
       pos = svg.find(marker, pos + 1)) {
    colors.insert(svg.substr(pos + marker.size(), 7));
  }
  EXPECT_EQ(colors.size(), 5u);
}

TEST(SvgPlot, DrawsDashedSeriesWithADashArrayInPlotAndLegend) {
  std::vector<PlotSeries> series = TwoProfiles();
  series[1].dashed = true;
  const std::string svg = RenderOrFail(series, PlotOptions{});
  EXPECT_EQ(CountOf(svg, "stroke-dasharray"), 2u);  // the series group and its legend sample
}

TEST(SvgPlot, DrawsMarkersAtEveryPointWhenRequested) {
  std::vector<PlotSeries> series = TwoProfiles();
  series[0].markers = true;
  const std::string svg = RenderOrFail(series, PlotOptions{});
  EXPECT_EQ(CountOf(svg, "<circle"), 5u + 1u);  // five points plus the legend sample
}

TEST(SvgPlot, DrawsAPointsOnlySeriesWithoutALine) {
  std::vector<PlotSeries> series = TwoProfiles();
  series.push_back(Series("document starts", {2, 4}, {0.2, 0.05}));
  series.back().line = false;
  const std::string svg = RenderOrFail(series, PlotOptions{});
  EXPECT_EQ(CountOf(svg, "<polyline"), 2u) << "only the two profiles are lines";
  EXPECT_EQ(CountOf(svg, "<circle"), 2u + 1u);  // its two points plus its legend sample
  EXPECT_EQ(TextsOfClass(svg, "legend").back(), "document starts");
}

TEST(SvgPlot, EscapesMarkupInAllText) {
  PlotOptions options;
  options.title = "a<b & \"c\"";
  options.x_label = "x > 'y'";
  options.y_label = "</svg>";
  const std::string svg = RenderOrFail({Series("<script>&amp;", {1, 2}, {1, 2})}, options);
  EXPECT_NE(svg.find("a&lt;b &amp; &quot;c&quot;"), std::string::npos);
  EXPECT_NE(svg.find("x &gt; &apos;y&apos;"), std::string::npos);
  EXPECT_NE(svg.find("&lt;/svg&gt;"), std::string::npos);
  EXPECT_NE(svg.find("&lt;script&gt;&amp;amp;"), std::string::npos);
  EXPECT_EQ(svg.find("<script"), std::string::npos);
  EXPECT_EQ(CountOf(svg, "</svg>"), 1u);
}

TEST(SvgPlot, DropsControlCharactersThatXmlForbids) {
  const std::string svg = RenderOrFail({Series(std::string("a\x01"
                                                           "b"),
                                               {1, 2}, {1, 2})},
                                       PlotOptions{});
  EXPECT_EQ(TextsOfClass(svg, "legend"), std::vector<std::string>{"ab"});
}

// ---------------------------------------------------------------- undrawable points and errors

TEST(SvgPlot, SkipsNonPositivePointsOnLogAxisAndBreaksThePolylineThere) {
  const std::string svg = RenderOrFail(
      {Series("p", {1, 2, 3, 4, 5, 6}, {1, 0.1, 0.0, 0.01, 0.001, -1})}, PlotOptions{});
  EXPECT_EQ(CountOf(svg, "<polyline"), 2u);
  EXPECT_EQ(PolylinePoints(svg).size(), 4u);
}

TEST(SvgPlot, SkipsNanAndInfinitePointsOnLinearAxes) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  PlotOptions options;
  options.log_y = false;
  const std::string svg =
      RenderOrFail({Series("p", {1, 2, 3, 4, nan, 6, 7}, {1, 2, nan, 3, 4, 5, inf})}, options);
  EXPECT_EQ(PolylinePoints(svg).size(), 2u);  // (1,1)-(2,2); (4,3) and (6,5) are lone points
  EXPECT_EQ(CountOf(svg, "<circle"), 2u);
  EXPECT_EQ(svg.find("nan"), std::string::npos);
  EXPECT_EQ(svg.find("inf"), std::string::npos);
}

TEST(SvgPlot, ReportsAnErrorWhenNoPointIsDrawable) {
  std::string error;
  EXPECT_EQ(RenderSvgPlot({Series("zeros", {1, 2, 3}, {0, 0, -1})}, PlotOptions{}, &error), "");
  EXPECT_NE(error.find("no drawable point"), std::string::npos) << error;
}

TEST(SvgPlot, ReportsAnErrorWhenThereAreNoSeries) {
  std::string error;
  EXPECT_EQ(RenderSvgPlot({}, PlotOptions{}, &error), "");
  EXPECT_FALSE(error.empty());
}

TEST(SvgPlot, ReportsAnErrorNamingTheSeriesWhoseLengthsDiffer) {
  std::string error;
  EXPECT_EQ(RenderSvgPlot({Series("ok", {1}, {1}), Series("short y", {1, 2, 3}, {1, 2})},
                          PlotOptions{}, &error),
            "");
  EXPECT_NE(error.find("short y"), std::string::npos) << error;
}

TEST(SvgPlot, AcceptsANullErrorPointer) {
  EXPECT_EQ(RenderSvgPlot({}, PlotOptions{}, nullptr), "");
  EXPECT_NE(RenderSvgPlot(TwoProfiles(), PlotOptions{}, nullptr), "");
}

// ---------------------------------------------------------------- decimation

TEST(SvgPlot, DecimatesAMillionPointsButKeepsTheSpike) {
  const std::size_t n = 1000000;
  PlotSeries s = Series("big", std::vector<double>(n), std::vector<double>(n));
  for (std::size_t i = 0; i < n; ++i) {
    s.x[i] = static_cast<double>(i + 1);
    s.y[i] = 1.0 + 0.5 * std::sin(static_cast<double>(i));
  }
  s.y[n / 2 + 7] = 1e6;  // one spike, six decades above everything else
  const std::string svg = RenderOrFail({s}, PlotOptions{});
  const auto points = PolylinePoints(svg);
  EXPECT_LE(points.size(), 4000u);
  EXPECT_LT(svg.size(), 200000u);
  double top = 1e9, bottom = -1e9;
  for (const auto& [x, y] : points) {
    top = std::min(top, y);
    bottom = std::max(bottom, y);
  }
  EXPECT_GT(bottom - top, 300.0);  // the spike reaches the top of the 0..6 decade axis
}

TEST(SvgPlot, BoundsDrawnPointsEvenWhenXIsNotMonotonic) {
  const std::size_t n = 200000;
  PlotSeries s = Series("scatter", std::vector<double>(n), std::vector<double>(n));
  for (std::size_t i = 0; i < n; ++i) {
    s.x[i] = static_cast<double>((i * 7919) % n + 1);
    s.y[i] = (i % 3 == 0) ? 0.0 : 1.0 + static_cast<double>(i % 10);  // zeros break it into pieces
  }
  const std::string svg = RenderOrFail({s}, PlotOptions{});
  EXPECT_LE(PolylinePoints(svg).size() + CountOf(svg, "<circle"), 4000u);
}

TEST(SvgPlot, LeavesSmallSeriesUndecimated) {
  const std::size_t n = 3000;
  PlotSeries s = Series("small", std::vector<double>(n), std::vector<double>(n, 2.0));
  for (std::size_t i = 0; i < n; ++i) s.x[i] = static_cast<double>(i);
  EXPECT_EQ(PolylinePoints(RenderOrFail({s}, PlotOptions{})).size(), n);
}

// ---------------------------------------------------------------- ticks

TEST(SvgPlot, LabelsLogTicksByDecade) {
  const std::string svg = RenderOrFail({Series("p", {1, 2, 3}, {0.002, 0.05, 0.7})}, PlotOptions{});
  EXPECT_EQ(TextsOfClass(svg, "ytick"), (std::vector<std::string>{"1e-3", "1e-2", "1e-1", "1"}));
}

TEST(SvgPlot, LabelsLogXAxisTooWhenRequested) {
  PlotOptions options;
  options.log_x = true;
  const std::string svg = RenderOrFail({Series("p", {1, 10, 100, 1000}, {1, 2, 3, 4})}, options);
  EXPECT_EQ(TextsOfClass(svg, "xtick"), (std::vector<std::string>{"1", "1e1", "1e2", "1e3"}));
}

TEST(SvgPlot, ThinsLogTickLabelsWhenThereAreManyDecades) {
  const std::string svg = RenderOrFail({Series("p", {1, 2}, {1e-40, 1.0})}, PlotOptions{});
  const std::vector<std::string> labels = TextsOfClass(svg, "ytick");
  EXPECT_GE(labels.size(), 3u);
  EXPECT_LE(labels.size(), 11u);
  EXPECT_EQ(labels.front(), "1e-40");
  EXPECT_EQ(labels.back(), "1");
}

TEST(SvgPlot, GivesLinearAxesFiveToEightNiceTicks) {
  const std::vector<std::pair<double, double>> ranges = {{0, 1},      {0, 10},       {0.013, 0.047},
                                                         {-3, 17},    {1, 1.9},      {0, 7.5},
                                                         {123, 4567}, {-1e-5, 3e-5}, {0, 2.1}};
  for (const auto& [lo, hi] : ranges) {
    const std::string svg = RenderOrFail({Series("p", {lo, hi}, {1, 2})}, PlotOptions{});
    const std::vector<std::string> labels = TextsOfClass(svg, "xtick");
    EXPECT_GE(labels.size(), 5u) << lo << ".." << hi;
    EXPECT_LE(labels.size(), 8u) << lo << ".." << hi;
    const double step = std::stod(labels[1]) - std::stod(labels[0]);
    const double mantissa = step / std::pow(10.0, std::floor(std::log10(step) + 1e-9));
    EXPECT_TRUE(std::abs(mantissa - 1) < 1e-6 || std::abs(mantissa - 2) < 1e-6 ||
                std::abs(mantissa - 5) < 1e-6)
        << "step " << step << " for " << lo << ".." << hi;
  }
}

TEST(SvgPlot, LabelsLinearTicksWithoutSpuriousDigits) {
  const std::string svg = RenderOrFail({Series("p", {0, 10}, {1, 2})}, PlotOptions{});
  EXPECT_EQ(TextsOfClass(svg, "xtick"), (std::vector<std::string>{"0", "2", "4", "6", "8", "10"}));
}

// ---------------------------------------------------------------- degenerate ranges

TEST(SvgPlot, PadsDegenerateRangesOfEqualValuesAndSinglePoints) {
  PlotOptions linear;
  linear.log_y = false;
  for (const PlotOptions& options : {PlotOptions{}, linear}) {
    for (const PlotSeries& s : {Series("flat", {1, 2, 3}, {3, 3, 3}), Series("one", {5}, {0.25}),
                                Series("zero", {0, 0}, {1, 1})}) {
      const std::string svg = RenderOrFail({s}, options);
      EXPECT_GE(TextsOfClass(svg, "xtick").size(), 2u) << s.label;
      EXPECT_GE(TextsOfClass(svg, "ytick").size(), 2u) << s.label;
      EXPECT_EQ(svg.find("nan"), std::string::npos) << s.label;
    }
  }
}

TEST(SvgPlot, StaysFiniteForExtremeMagnitudes) {
  const double big = std::numeric_limits<double>::max();
  PlotOptions linear;
  linear.log_y = false;
  for (const PlotSeries& s :
       {Series("wide", {-big, big}, {1, 2}), Series("huge", {big, big}, {-big, big}),
        Series("tiny", {1e-300, 2e-300}, {1e-300, 1e300})}) {
    const std::string svg = RenderOrFail({s}, linear);
    EXPECT_EQ(svg.find("nan"), std::string::npos) << s.label;
    EXPECT_EQ(svg.find("inf"), std::string::npos) << s.label;
  }
}

TEST(SvgPlot, RaisesTinySizesToAUsableMinimum) {
  PlotOptions options;
  options.width_px = 0;
  options.height_px = -5;
  const std::string svg = RenderOrFail({Series("a", {1, 2}, {0.5, 0.25})}, options);
  EXPECT_NE(svg.find("width=\"320\" height=\"240\""), std::string::npos) << "a short legend keeps the minimum width";
}

}  // namespace
}  // namespace posbias::cli
