// svg_plot: a small, dependency-free renderer of 2-D line plots as standalone SVG documents.
//
// The CLI uses it to draw position-bias profiles (attention mass or loss against token position),
// which usually span many decades, so the y axis is logarithmic by default. A plot has a title,
// axis labels, tick marks with labels and light grid lines, one colour per series from a fixed
// palette (optionally dashed and/or with point markers), and a legend box to the right of the
// plot area. All text is XML-escaped, so labels may contain <, & and quotes.
//
// Points that cannot be drawn (NaN, infinite, or <= 0 on a log axis) are skipped and break the
// series' polyline into separate pieces. Series with more than ~4000 drawable points are decimated
// per pixel column, keeping each column's minimum and maximum so that spikes stay visible while the
// file stays small.
#pragma once

#include <string>
#include <vector>

namespace posbias::cli {

struct PlotSeries {
  std::string label;      // legend text
  std::vector<double> x;  // same length as y
  std::vector<double> y;
  bool markers = false;  // draw small circles at the points, in addition to the polyline
  bool dashed = false;
  bool line = true;      // false: points only (e.g. where documents begin), no polyline
  // Palette index; -1 = the next colour in series order (series with their own index skipped).
  // A series with an empty label is drawn but not listed in the legend.
  int color = -1;
};

struct PlotOptions {
  std::string title;
  std::string x_label;
  std::string y_label;
  bool log_x = false;
  bool log_y = true;  // position-bias profiles span many decades
  // Categories on a linear x axis: x = 0, 1, ... are labelled with these names (a comparison's
  // models) instead of numbers; empty = numeric ticks.
  std::vector<std::string> x_categories = {};
  int width_px = 800;
  int height_px = 500;
};

// Renders a complete standalone SVG document. Points that cannot be drawn on a log axis (<= 0, NaN,
// infinite) are skipped, and a polyline is broken at them. Returns an empty string and sets *error
// (when error is not null) when nothing at all can be drawn (no series, or no drawable point), or
// series x/y lengths differ. On success *error is left unchanged. Sizes below 320x240 px are
// raised to that minimum, and a plot whose legend labels need more room is made wider (a legend
// is never cut off).
std::string RenderSvgPlot(const std::vector<PlotSeries>& series, const PlotOptions& options,
                          std::string* error);

}  // namespace posbias::cli
