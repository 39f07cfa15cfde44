#include "client/cli/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <initializer_list>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace posbias::cli {
namespace {

constexpr std::size_t kMaxDrawnPoints = 4000;  // per series, after decimation
constexpr int kMaxColumns = 1800;  // decimation columns: at most 2 points kept per column
constexpr int kMinWidth = 320;
constexpr int kMinHeight = 240;
constexpr int kMaxLogLabels = 10;
constexpr const char* kPalette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                    "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
constexpr std::size_t kPaletteSize = sizeof(kPalette) / sizeof(kPalette[0]);

struct Tick {
  double pos;         // in axis space (log10 of the value on a log axis)
  std::string label;  // empty for a minor, unlabelled tick
};

struct Axis {
  bool log = false;
  double lo = 0.0, hi = 1.0;          // axis space
  double pix_lo = 0.0, pix_hi = 1.0;  // pixel coordinates of lo and hi
  std::vector<Tick> ticks;
};

struct Range {
  double lo = std::numeric_limits<double>::infinity();
  double hi = -std::numeric_limits<double>::infinity();
  bool Empty() const { return lo > hi; }
  void Add(double v) {
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
};

struct Frame {  // the plot area, in pixels
  double left, top, right, bottom;
};

struct Point {
  double x, y;  // pixels
};
using Piece = std::vector<Point>;  // an unbroken run of drawable points

// ---------------------------------------------------------------- text helpers

std::string Num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

bool AllowedInXml(char c) {
  return static_cast<unsigned char>(c) >= 0x20 || c == '\t' || c == '\n' || c == '\r';
}

// Escapes XML metacharacters and drops control characters that XML 1.0 forbids.
std::string EscapeXml(const std::string& text) {
  static const std::string kMeta = "&<>\"'";
  static const char* const kEntities[] = {"&amp;", "&lt;", "&gt;", "&quot;", "&apos;"};
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    const std::size_t meta = kMeta.find(c);
    if (meta != std::string::npos) {
      out += kEntities[meta];
    } else if (AllowedInXml(c)) {
      out += c;
    }
  }
  return out;
}

std::size_t CountUtf8Chars(const std::string& text) {
  return static_cast<std::size_t>(std::count_if(text.begin(), text.end(), [](char c) {
    return (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  }));
}

bool Fail(std::string* error, std::string message) {
  if (error != nullptr) *error = std::move(message);
  return false;
}

// ---------------------------------------------------------------- data ranges

bool Drawable(double v, bool log) { return std::isfinite(v) && (!log || v > 0.0); }

double ToAxisSpace(double v, bool log) { return log ? std::log10(v) : v; }

bool Validate(const std::vector<PlotSeries>& series, std::string* error) {
  if (series.empty()) return Fail(error, "no series to plot");
  for (const PlotSeries& s : series) {
    if (s.x.size() != s.y.size()) {
      return Fail(error, "series '" + s.label + "' has " + std::to_string(s.x.size()) +
                             " x values but " + std::to_string(s.y.size()) + " y values");
    }
  }
  return true;
}

// Ranges, in axis space, of the points drawable on both axes. False when there is none.
bool DataRanges(const std::vector<PlotSeries>& series, const PlotOptions& opt, Range* xr,
                Range* yr) {
  for (const PlotSeries& s : series) {
    for (std::size_t i = 0; i < s.x.size(); ++i) {
      if (!Drawable(s.x[i], opt.log_x) || !Drawable(s.y[i], opt.log_y)) continue;
      xr->Add(ToAxisSpace(s.x[i], opt.log_x));
      yr->Add(ToAxisSpace(s.y[i], opt.log_y));
    }
  }
  return !xr->Empty();
}

// ---------------------------------------------------------------- log axes

std::string DecadeLabel(int k) { return k == 0 ? "1" : "1e" + std::to_string(k); }

// Labels every stride-th decade, stride in 1, 2, 5, 10, 20, 50, ..., so at most ~10 are labelled.
int LogLabelStride(int decades) {
  for (int scale = 1;; scale *= 10) {
    for (int m : {1, 2, 5}) {
      if (decades <= kMaxLogLabels * m * scale) return m * scale;
    }
  }
}

void AddLogTicks(Axis* a) {
  const int lo = static_cast<int>(a->lo), hi = static_cast<int>(a->hi);
  const int stride = LogLabelStride(hi - lo);
  for (int k = lo; k <= hi; ++k) {
    const bool labelled = ((k % stride) + stride) % stride == 0;
    if (labelled || stride <= 5) a->ticks.push_back({double(k), labelled ? DecadeLabel(k) : ""});
    if (hi - lo > 3 || k == hi) continue;
    for (int m = 2; m <= 9; ++m) a->ticks.push_back({k + std::log10(double(m)), ""});
  }
}

// Spans whole decades; a range inside a single decade boundary is widened by a decade each way.
Axis MakeLogAxis(Range r) {
  Axis a;
  a.log = true;
  a.lo = std::floor(r.lo + 1e-9);
  a.hi = std::ceil(r.hi - 1e-9);
  if (a.hi <= a.lo) {
    a.lo -= 1.0;
    a.hi += 1.0;
  }
  AddLogTicks(&a);
  return a;
}

// ---------------------------------------------------------------- linear axes

constexpr double kMaxDouble = std::numeric_limits<double>::max();

Range PadDegenerate(Range r) {
  if (r.hi > r.lo) return r;
  const double pad = r.lo == 0.0 ? 1.0 : std::abs(r.lo) * 0.1;
  return {std::max(r.lo - pad, -kMaxDouble), std::min(r.hi + pad, kMaxDouble)};
}

// Linear ticks are at first*step, (first+1)*step, ..., last*step.
struct TickPlan {
  double step, first, last;
  bool covers;  // the ticks span the whole range, so the axis can end on them
  double Count() const { return last - first + 1.0; }
};

// Ticks on whole steps that cover r (the axis is extended to them).
TickPlan Covering(Range r, double step) {
  return {step, std::floor(r.lo / step + 1e-9), std::ceil(r.hi / step - 1e-9), true};
}

// Ticks on whole steps inside r (the axis keeps the data range).
TickPlan Inside(Range r, double step) {
  return {step, std::ceil(r.lo / step - 1e-9), std::floor(r.hi / step + 1e-9), false};
}

// Step i of the sequence 1, 2, 5, 10, 20, 50, ... x 10^e0.
double NiceStep(double e0, int i) {
  constexpr double kMantissas[] = {1.0, 2.0, 5.0};
  return kMantissas[i % 3] * std::pow(10.0, e0 + i / 3);
}

// The smallest 1, 2 or 5 x 10^k step whose covering ticks number at most 8. When those are fewer
// than 5, the next smaller step's ticks inside the range (5 to 8 of them) are used instead.
TickPlan NiceTicks(Range r) {
  const double half_span = 0.5 * r.hi - 0.5 * r.lo;  // halved so that it cannot overflow
  const double e0 = std::floor(std::log10(2.0 * half_span)) - 2.0;
  for (int i = 0;; ++i) {
    const TickPlan covering = Covering(r, NiceStep(e0, i));
    if (covering.Count() > 8.0) continue;
    return covering.Count() >= 5.0 || i == 0 ? covering : Inside(r, NiceStep(e0, i - 1));
  }
}

int SignificantDigits(double v, double step) {
  const double digits = std::floor(std::log10(std::abs(v))) - std::floor(std::log10(step)) + 1.0;
  return static_cast<int>(std::clamp(digits, 1.0, 15.0));
}

std::string LinearLabel(double v, double step) {
  if (std::abs(v) < step * 1e-6) return "0";
  const int decimals = std::max(0, -static_cast<int>(std::floor(std::log10(step) + 1e-9)));
  char buf[48];
  if (decimals > 6 || std::abs(v) >= 1e7) {
    std::snprintf(buf, sizeof buf, "%.*g", SignificantDigits(v, step), v);
  } else {
    std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  }
  return buf;
}

// An axis over r with 5 to 8 labelled ticks, usually extended to whole nice steps.
Axis MakeLinearAxis(Range r) {
  r = PadDegenerate(r);
  const TickPlan plan = NiceTicks(r);
  Axis a;
  a.lo = plan.covers ? std::min(plan.first * plan.step, r.lo) : r.lo;
  a.hi = plan.covers ? std::max(plan.last * plan.step, r.hi) : r.hi;
  if (!std::isfinite(a.lo) || !std::isfinite(a.hi) || !(a.hi > a.lo)) {  // beyond double precision
    a.lo = r.lo;
    a.hi = r.hi;
    return a;
  }
  for (int k = 0; k < static_cast<int>(plan.Count()); ++k) {
    const double v = (plan.first + k) * plan.step;
    a.ticks.push_back({v, LinearLabel(v, plan.step)});
  }
  return a;
}

// ---------------------------------------------------------------- geometry

Axis MakeAxis(Range r, bool log, double pix_lo, double pix_hi) {
  Axis a = log ? MakeLogAxis(r) : MakeLinearAxis(r);
  a.pix_lo = pix_lo;
  a.pix_hi = pix_hi;
  return a;
}

double AxisToPixel(const Axis& a, double pos) {
  const double t = (0.5 * pos - 0.5 * a.lo) / (0.5 * a.hi - 0.5 * a.lo);  // halved: cannot overflow
  return a.pix_lo + t * (a.pix_hi - a.pix_lo);
}

double ValueToPixel(const Axis& a, double v) { return AxisToPixel(a, ToAxisSpace(v, a.log)); }

// Room for the longest label: the legend box, never cut (Compose widens the plot for it).
double LegendWidth(const std::vector<PlotSeries>& series) {
  std::size_t chars = 0;
  for (const PlotSeries& s : series) chars = std::max(chars, CountUtf8Chars(s.label));
  return 46.0 + 7.0 * static_cast<double>(chars);
}

Frame MakeFrame(int width, int height, double legend_width, bool has_title) {
  return {78.0, has_title ? 48.0 : 20.0, width - legend_width - 30.0, height - 52.0};
}

// ---------------------------------------------------------------- series geometry

// Pixel positions of the drawable points, split into pieces at the undrawable ones.
std::vector<Piece> Project(const PlotSeries& s, const Axis& xa, const Axis& ya) {
  std::vector<Piece> pieces(1);
  for (std::size_t i = 0; i < s.x.size(); ++i) {
    if (Drawable(s.x[i], xa.log) && Drawable(s.y[i], ya.log)) {
      pieces.back().push_back({ValueToPixel(xa, s.x[i]), ValueToPixel(ya, s.y[i])});
    } else if (!pieces.back().empty()) {
      pieces.emplace_back();
    }
  }
  if (pieces.back().empty()) pieces.pop_back();
  return pieces;
}

std::size_t CountPoints(const std::vector<Piece>& pieces) {
  std::size_t n = 0;
  for (const Piece& p : pieces) n += p.size();
  return n;
}

// Replaces each run of consecutive points in one column by its lowest and highest point.
Piece KeepColumnExtremes(const Piece& piece, const Frame& f, int columns) {
  const auto column = [&](double x) {
    return static_cast<int>((x - f.left) / (f.right - f.left) * columns);
  };
  Piece out;
  for (std::size_t i = 0, end = 0; i < piece.size(); i = end) {
    std::size_t top = i, bottom = i;
    for (end = i; end < piece.size() && column(piece[end].x) == column(piece[i].x); ++end) {
      if (piece[end].y < piece[top].y) top = end;
      if (piece[end].y > piece[bottom].y) bottom = end;
    }
    out.push_back(piece[std::min(top, bottom)]);
    if (top != bottom) out.push_back(piece[std::max(top, bottom)]);
  }
  return out;
}

// Last resort (x not monotonic, or many short pieces): keeps every stride-th point.
std::vector<Piece> KeepEveryNth(const std::vector<Piece>& pieces, std::size_t stride) {
  std::vector<Piece> out;
  std::size_t index = 0;
  for (const Piece& p : pieces) {
    out.emplace_back();
    for (const Point& pt : p) {
      if (index++ % stride == 0) out.back().push_back(pt);
    }
    if (out.back().empty()) out.pop_back();
  }
  return out;
}

std::vector<Piece> Decimate(std::vector<Piece> pieces, const Frame& f) {
  if (CountPoints(pieces) <= kMaxDrawnPoints) return pieces;
  const int columns = std::clamp(static_cast<int>(f.right - f.left), 1, kMaxColumns);
  for (Piece& p : pieces) p = KeepColumnExtremes(p, f, columns);
  const std::size_t total = CountPoints(pieces);
  if (total <= kMaxDrawnPoints) return pieces;
  return KeepEveryNth(pieces, (total + kMaxDrawnPoints - 1) / kMaxDrawnPoints);
}

// ---------------------------------------------------------------- SVG output

std::string SvgLine(double x1, double y1, double x2, double y2, const std::string& attrs) {
  return "<line x1=\"" + Num(x1) + "\" y1=\"" + Num(y1) + "\" x2=\"" + Num(x2) + "\" y2=\"" +
         Num(y2) + "\" " + attrs + "/>\n";
}

std::string SvgText(double x, double y, const std::string& text, const std::string& attrs) {
  return "<text x=\"" + Num(x) + "\" y=\"" + Num(y) + "\" " + attrs + ">" + EscapeXml(text) +
         "</text>\n";
}

std::string SvgCircle(double x, double y, double r) {
  return "<circle cx=\"" + Num(x) + "\" cy=\"" + Num(y) + "\" r=\"" + Num(r) + "\"/>\n";
}

std::string StrokeStyle(const char* color, bool dashed) {
  return std::string("fill=\"none\" stroke=\"") + color + "\" stroke-width=\"1.5\"" +
         (dashed ? " stroke-dasharray=\"6 4\"" : "");
}

void AppendPolyline(std::string& out, const Piece& piece) {
  out += "<polyline points=\"";
  for (std::size_t i = 0; i < piece.size(); ++i) {
    out += (i == 0 ? "" : " ") + Num(piece[i].x) + "," + Num(piece[i].y);
  }
  out += "\"/>\n";
}

void AppendSeries(std::string& out, const PlotSeries& s, const std::vector<Piece>& pieces,
                  const char* color) {
  out += "<g class=\"series\" " + StrokeStyle(color, s.dashed) + ">\n";
  for (const Piece& p : pieces) {
    if (s.line && p.size() >= 2) AppendPolyline(out, p);
  }
  out += std::string("<g fill=\"") + color + "\" stroke=\"none\">\n";
  for (const Piece& p : pieces) {
    for (const Point& pt : p) {
      if (s.markers || !s.line || p.size() == 1) out += SvgCircle(pt.x, pt.y, 2.5);
    }
  }
  out += "</g>\n</g>\n";
}

void AppendGrid(std::string& out, const Axis& xa, const Axis& ya, const Frame& f) {
  const std::string style = "stroke=\"#e4e4e4\" stroke-width=\"1\"";
  for (const Tick& t : xa.ticks) {
    if (!t.label.empty()) {
      out += SvgLine(AxisToPixel(xa, t.pos), f.top, AxisToPixel(xa, t.pos), f.bottom, style);
    }
  }
  for (const Tick& t : ya.ticks) {
    if (!t.label.empty()) {
      out += SvgLine(f.left, AxisToPixel(ya, t.pos), f.right, AxisToPixel(ya, t.pos), style);
    }
  }
}

void AppendXAxis(std::string& out, const Axis& a, const Frame& f) {
  const std::string style = "stroke=\"#333\" stroke-width=\"1\"";
  for (const Tick& t : a.ticks) {
    const double x = AxisToPixel(a, t.pos);
    out += SvgLine(x, f.bottom, x, f.bottom + (t.label.empty() ? 3.0 : 6.0), style);
    if (!t.label.empty()) {
      out += SvgText(x, f.bottom + 20.0, t.label, "class=\"xtick\" text-anchor=\"middle\"");
    }
  }
}

void AppendYAxis(std::string& out, const Axis& a, const Frame& f) {
  const std::string style = "stroke=\"#333\" stroke-width=\"1\"";
  for (const Tick& t : a.ticks) {
    const double y = AxisToPixel(a, t.pos);
    out += SvgLine(f.left - (t.label.empty() ? 3.0 : 6.0), y, f.left, y, style);
    if (!t.label.empty()) {
      out += SvgText(f.left - 9.0, y + 4.0, t.label, "class=\"ytick\" text-anchor=\"end\"");
    }
  }
}

void AppendFrameBox(std::string& out, const Frame& f) {
  out += "<rect x=\"" + Num(f.left) + "\" y=\"" + Num(f.top) + "\" width=\"" +
         Num(f.right - f.left) + "\" height=\"" + Num(f.bottom - f.top) +
         "\" fill=\"none\" stroke=\"#333\" stroke-width=\"1\"/>\n";
}

void AppendLabels(std::string& out, const PlotOptions& opt, const Frame& f, int height) {
  const double mid_x = (f.left + f.right) / 2.0, mid_y = (f.top + f.bottom) / 2.0;
  if (!opt.title.empty()) {
    out += SvgText(mid_x, 30.0, opt.title,
                   "class=\"title\" text-anchor=\"middle\" font-size=\"16\" font-weight=\"bold\"");
  }
  if (!opt.x_label.empty()) {
    out += SvgText(mid_x, height - 12.0, opt.x_label,
                   "class=\"xlabel\" text-anchor=\"middle\" font-size=\"13\"");
  }
  if (opt.y_label.empty()) return;
  out += SvgText(
      18.0, mid_y, opt.y_label,
      "class=\"ylabel\" text-anchor=\"middle\" font-size=\"13\" transform=\"rotate(-90 18 " +
          Num(mid_y) + ")\"");
}

void AppendLegendEntry(std::string& out, const PlotSeries& s, const char* color, double x,
                       double y) {
  if (s.line) out += SvgLine(x + 8.0, y, x + 32.0, y, StrokeStyle(color, s.dashed));
  if (s.markers || !s.line) {
    out += std::string("<g fill=\"") + color + "\">" + SvgCircle(x + 20.0, y, 2.5) + "</g>\n";
  }
  out += SvgText(x + 38.0, y + 4.0, s.label, "class=\"legend\"");
}

// A series' colour: its own palette index, else the next one in series order.
const char* ColorOf(const std::vector<PlotSeries>& series, std::size_t i) {
  if (series[i].color >= 0) return kPalette[static_cast<std::size_t>(series[i].color) % kPaletteSize];
  std::size_t next = 0;
  for (std::size_t k = 0; k < i; ++k) next += series[k].color < 0 ? 1 : 0;
  return kPalette[next % kPaletteSize];
}

void AppendLegend(std::string& out, const std::vector<PlotSeries>& series, const Frame& f,
                  double legend_width) {
  const double x = f.right + 15.0, y = f.top;
  std::size_t entries = 0;
  for (const PlotSeries& s : series) entries += s.label.empty() ? 0 : 1;
  out += "<rect x=\"" + Num(x) + "\" y=\"" + Num(y) + "\" width=\"" + Num(legend_width) +
         "\" height=\"" + Num(10.0 + 20.0 * static_cast<double>(entries)) + "\" fill=\"#fff\" stroke=\"#999\"/>\n";
  std::size_t row = 0;
  for (std::size_t i = 0; i < series.size(); ++i) {
    if (series[i].label.empty()) continue;  // Drawn, not listed (e.g. the second edge of a band).
    AppendLegendEntry(out, series[i], ColorOf(series, i), x, y + 15.0 + 20.0 * static_cast<double>(row++));
  }
}

std::string SvgHeader(int width, int height) {
  const std::string w = std::to_string(width), h = std::to_string(height);
  return "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
         "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" +
         w + "\" height=\"" + h + "\" viewBox=\"0 0 " + w + " " + h +
         "\" font-family=\"sans-serif\" font-size=\"12\">\n"
         "<rect width=\"100%\" height=\"100%\" fill=\"#fff\"/>\n";
}

std::string Compose(const std::vector<PlotSeries>& series, const PlotOptions& opt, Range xr,
                    Range yr) {
  const double legend_width = LegendWidth(series);
  // The plot area keeps at least two thirds of the asked width: long labels widen the document.
  const int asked = std::max(opt.width_px, kMinWidth);
  const int width = std::max(asked, static_cast<int>(std::ceil(legend_width + 2.0 * asked / 3.0)));
  const int height = std::max(opt.height_px, kMinHeight);
  const Frame f = MakeFrame(width, height, legend_width, !opt.title.empty());
  Axis xa = MakeAxis(xr, opt.log_x, f.left, f.right);
  if (!opt.x_categories.empty() && !opt.log_x) {  // One labelled tick per category.
    xa.ticks.clear();
    for (std::size_t i = 0; i < opt.x_categories.size(); ++i) {
      const double v = static_cast<double>(i);
      if (v >= xa.lo && v <= xa.hi) xa.ticks.push_back({v, opt.x_categories[i]});
    }
  }
  const Axis ya = MakeAxis(yr, opt.log_y, f.bottom, f.top);
  std::string out = SvgHeader(width, height);
  AppendGrid(out, xa, ya, f);
  for (std::size_t i = 0; i < series.size(); ++i) {
    AppendSeries(out, series[i], Decimate(Project(series[i], xa, ya), f), ColorOf(series, i));
  }
  AppendFrameBox(out, f);
  AppendXAxis(out, xa, f);
  AppendYAxis(out, ya, f);
  AppendLabels(out, opt, f, height);
  AppendLegend(out, series, f, legend_width);
  return out + "</svg>\n";
}

}  // namespace

std::string RenderSvgPlot(const std::vector<PlotSeries>& series, const PlotOptions& options,
                          std::string* error) {
  if (!Validate(series, error)) return "";
  Range xr, yr;
  if (!DataRanges(series, options, &xr, &yr)) {
    Fail(error, options.log_x || options.log_y
                    ? "no drawable point (log axes need positive, finite values)"
                    : "no drawable point (all values are NaN or infinite)");
    return "";
  }
  return Compose(series, options, xr, yr);
}

}  // namespace posbias::cli
