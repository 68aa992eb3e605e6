// The report's SVG charts (report_charts.hpp).
#include "controller/report/report_charts.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "controller/report/report_util.hpp"

namespace rc::controller::report_charts {
using namespace report_util;

namespace {

struct Axis {
  double max = 1;   // in display units
  double step = 1;  // tick step
};

// A round tick step (1, 2 or 5 x 10^k) that gives about `ticks` ticks up to v.
Axis niceAxis(double v, int ticks) {
  if (!(v > 0)) v = 1;
  double raw = v / ticks;
  double mag = std::pow(10, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * mag >= raw) {
      step = m * mag;
      break;
    }
  return {std::ceil(v / step) * step, step};
}

}  // namespace

std::string chart(const ChartInput& c) {
  const double W = 1120, H = c.height, L = 70, R = 18, T = 24, B = 30;
  const double pw = W - L - R, ph = H - T - B;
  double peak = 0;
  for (double b : c.bytes) peak = std::max(peak, b * 1e9 / double(c.binNs) * 8);
  for (double b : c.overlay) peak = std::max(peak, b * 1e9 / double(c.binNs) * 8);
  if (c.baseline) peak = std::max(peak, *c.baseline * 8);
  const double unit = peak >= 1e9 ? 1e9 : peak >= 1e6 ? 1e6 : 1e3;
  const char* unitName = peak >= 1e9 ? "Gb/s" : peak >= 1e6 ? "Mb/s" : "kb/s";
  Axis ya = niceAxis(peak / unit * 1.08, 4);
  const double span = double(c.t1 - c.t0) / 1e9;
  Axis xa = niceAxis(span, 10);
  auto X = [&](int64_t t) { return L + (double(t - c.t0) / 1e9) / span * pw; };
  auto Y = [&](double bitsPerSec) { return T + ph - std::min(bitsPerSec / unit / ya.max, 1.0) * ph; };
  std::ostringstream s;
  s << "<svg class=\"chart\" id=\"" << esc(c.id) << "\" viewBox=\"0 0 " << W << " " << H
    << "\" width=\"100%\" role=\"img\" aria-label=\"" << esc(c.title) << "\" xmlns=\"http://www.w3.org/2000/svg\">\n";
  s << "<text x=\"" << L << "\" y=\"15\" class=\"ctitle\">" << esc(c.title) << "</text>\n";
  // Grid and axes.
  for (double v = 0; v <= ya.max + 1e-9; v += ya.step) {
    double y = Y(v * unit);
    s << "<line class=\"grid\" x1=\"" << L << "\" x2=\"" << L + pw << "\" y1=\"" << fmt("%.1f", y) << "\" y2=\""
      << fmt("%.1f", y) << "\"/><text class=\"tick\" x=\"" << L - 6 << "\" y=\"" << fmt("%.1f", y + 4)
      << "\" text-anchor=\"end\">" << fmt("%g", v) << "</text>\n";
  }
  s << "<text class=\"tick\" x=\"12\" y=\"" << T + ph / 2 << "\" transform=\"rotate(-90 12 " << T + ph / 2
    << ")\" text-anchor=\"middle\">" << unitName << "</text>\n";
  for (double v = 0; v <= span + 1e-9; v += xa.step) {
    double x = L + v / span * pw;
    s << "<line class=\"xtick\" x1=\"" << fmt("%.1f", x) << "\" x2=\"" << fmt("%.1f", x) << "\" y1=\"" << T + ph
      << "\" y2=\"" << T + ph + 4 << "\"/><text class=\"tick\" x=\"" << fmt("%.1f", x) << "\" y=\"" << T + ph + 17
      << "\" text-anchor=\"middle\">" << fmt("%g", v) << "s</text>\n";
  }
  // Fault windows under the data.
  for (const auto& sh : c.shades) {
    double x0 = X(std::max(sh.fromNs, c.t0)), x1 = X(std::min(sh.toNs, c.t1));
    s << "<rect class=\"fault-window" << (sh.strong ? " target" : "") << "\" x=\"" << fmt("%.1f", x0) << "\" y=\"" << T
      << "\" width=\"" << fmt("%.1f", std::max(1.0, x1 - x0)) << "\" height=\"" << ph << "\"><title>"
      << esc(sh.title) << "</title></rect>\n";
  }
  // Phase boundaries and names.
  for (const auto& [name, start] : c.phases) {
    double x = X(start);
    if (start > c.t0)
      s << "<line class=\"phase\" x1=\"" << fmt("%.1f", x) << "\" x2=\"" << fmt("%.1f", x) << "\" y1=\"" << T
        << "\" y2=\"" << T + ph << "\"/>\n";
    s << "<text class=\"phasename\" x=\"" << fmt("%.1f", x + 4) << "\" y=\"" << T + 11 << "\">" << esc(name) << "</text>\n";
  }
  if (c.baseline) {
    double yb = Y(*c.baseline * 8), yt = Y((c.threshold ? *c.threshold : *c.baseline * (1 - c.epsilon)) * 8);
    s << "<line class=\"baseline\" x1=\"" << L << "\" x2=\"" << L + pw << "\" y1=\"" << fmt("%.1f", yb) << "\" y2=\""
      << fmt("%.1f", yb) << "\"><title>baseline " << esc(formatBitRate(*c.baseline * 8)) << "</title></line>\n";
    s << "<line class=\"threshold\" x1=\"" << L << "\" x2=\"" << L + pw << "\" y1=\"" << fmt("%.1f", yt) << "\" y2=\""
      << fmt("%.1f", yt) << "\"><title>impact and recovery threshold: min((1 - " << c.epsilon
      << ") x baseline, the baseline band's floor)</title></line>\n";
  }
  // The series, as steps: a bin is a constant rate over its width. Wide runs are averaged
  // down to about two points per pixel so the page stays light.
  auto steps = [&](const std::vector<double>& bytes) {
    const size_t count = std::min<size_t>(bytes.size(), size_t(std::max<int64_t>(0, (c.t1 - c.t0) / c.binNs)) + 1);
    const size_t stride = std::max<size_t>(1, count / 2200 + 1);
    std::ostringstream out;
    for (size_t i = 0; i < count; i += stride) {
      double sum = 0;
      size_t k = 0;
      for (; k < stride && i + k < count; k++) sum += bytes[i + k];
      double bps = sum / double(k) * 1e9 / double(c.binNs) * 8;
      double xa0 = X(c.t0 + int64_t(i) * c.binNs), xa1 = X(c.t0 + int64_t(i + k) * c.binNs);
      double y = Y(bps);
      out << (i == 0 ? "M" : "L") << fmt("%.1f", xa0) << "," << fmt("%.1f", y) << "L" << fmt("%.1f", xa1) << ","
          << fmt("%.1f", y);
    }
    return out.str();
  };
  if (!c.overlay.empty()) {
    s << "<path class=\"series overlay\" data-bins=\"" << c.overlay.size() << "\" d=\"" << steps(c.overlay)
      << "\"><title>" << esc(c.overlayName) << "</title></path>\n";
    s << "<text class=\"legend overlay\" x=\"" << L + pw - 4 << "\" y=\"15\" text-anchor=\"end\">"
      << "<tspan class=\"legend-series\">━ " << esc(c.seriesName) << "</tspan>   <tspan class=\"legend-overlay\">┅ "
      << esc(c.overlayName) << "</tspan></text>\n";
  }
  size_t n = c.bytes.size();
  std::ostringstream d, area;
  d << steps(c.bytes);
  if (n) {
    area << "M" << L << "," << T + ph << d.str().substr(1).insert(0, "L") << "L" << fmt("%.1f", X(c.t0 + int64_t(n) * c.binNs))
         << "," << T + ph << "Z";
    s << "<path class=\"area\" d=\"" << area.str() << "\"/>\n";
    s << "<path class=\"series\" data-bins=\"" << n << "\" d=\"" << d.str() << "\"/>\n";
  }
  if (c.recoveredAt) {
    double x = X(*c.recoveredAt);
    std::string label = "recovered " + (c.faultEnd ? "+" + formatDuration(Nanos(*c.recoveredAt - *c.faultEnd)) : "");
    s << "<line class=\"recovery-mark\" x1=\"" << fmt("%.1f", x) << "\" x2=\"" << fmt("%.1f", x) << "\" y1=\"" << T
      << "\" y2=\"" << T + ph << "\"><title>" << esc(label) << " after the fault ended</title></line>\n"
      << "<text class=\"recovery-label\" x=\"" << fmt("%.1f", x + 4) << "\" y=\"" << T + ph - 6 << "\">"
      << esc(label) << "</text>\n";
  } else if (c.notRecovered) {
    s << "<text class=\"recovery-mark not-recovered\" x=\"" << L + pw - 4 << "\" y=\"" << T + 26
      << "\" text-anchor=\"end\">not recovered</text>\n";
  }
  // Alerts: a span from firing to resolving, and a mark at the firing instant.
  for (const auto& a : c.alerts) {
    double x = X(c.t0 + a.firedNs);
    double x1 = a.resolvedNs >= 0 ? X(c.t0 + a.resolvedNs) : L + pw;
    std::string tip = a.name + " (" + (a.kind == "false_alarm" ? std::string("false alarm") : a.kind) + "): fired +" +
                      formatDuration(Nanos(a.firedNs)) +
                      (a.resolvedNs >= 0 ? ", resolved +" + formatDuration(Nanos(a.resolvedNs)) : ", still firing");
    s << "<rect class=\"alert-span alert-" << a.kind << "\" x=\"" << fmt("%.1f", x) << "\" y=\"" << T << "\" width=\""
      << fmt("%.1f", std::max(1.0, x1 - x)) << "\" height=\"6\"><title>" << esc(tip) << "</title></rect>\n"
      << "<line class=\"alert-mark alert-" << a.kind << "\" x1=\"" << fmt("%.1f", x) << "\" x2=\"" << fmt("%.1f", x)
      << "\" y1=\"" << T << "\" y2=\"" << T + ph << "\"><title>" << esc(tip) << "</title></line>\n";
  }
  s << "<rect class=\"frame\" x=\"" << L << "\" y=\"" << T << "\" width=\"" << pw << "\" height=\"" << ph << "\"/>\n";
  s << "</svg>\n";
  return s.str();
}


std::string counterChart(const std::string& id, const std::string& title, int64_t t0, int64_t t1,
                         const std::vector<Shade>& shades, const std::vector<CounterLine>& lines) {
  const double W = 1120, H = 170, L = 70, R = 18, T = 24, B = 30;
  const double pw = W - L - R, ph = H - T - B;
  double peak = 1;
  for (const auto& l : lines)
    for (const auto& [t, v] : l.points)
      if (t >= t0 && t <= t1) peak = std::max(peak, v);
  Axis ya = niceAxis(peak * 1.08, 4);
  const double span = std::max(1e-9, double(t1 - t0) / 1e9);
  Axis xa = niceAxis(span, 10);
  auto X = [&](int64_t t) { return L + std::clamp(double(t - t0) / 1e9 / span, 0.0, 1.0) * pw; };
  auto Y = [&](double v) { return T + ph - std::min(v / ya.max, 1.0) * ph; };
  std::ostringstream s;
  s << "<svg class=\"chart fabric\" id=\"" << esc(id) << "\" viewBox=\"0 0 " << W << " " << H
    << "\" width=\"100%\" role=\"img\" aria-label=\"" << esc(title) << "\" xmlns=\"http://www.w3.org/2000/svg\">\n";
  s << "<text x=\"" << L << "\" y=\"15\" class=\"ctitle\">" << esc(title) << "</text>\n";
  for (double v = 0; v <= ya.max + 1e-9; v += ya.step)
    s << "<line class=\"grid\" x1=\"" << L << "\" x2=\"" << L + pw << "\" y1=\"" << fmt("%.1f", Y(v)) << "\" y2=\""
      << fmt("%.1f", Y(v)) << "\"/><text class=\"tick\" x=\"" << L - 6 << "\" y=\"" << fmt("%.1f", Y(v) + 4)
      << "\" text-anchor=\"end\">" << fmt("%g", v) << "</text>\n";
  s << "<text class=\"tick\" x=\"12\" y=\"" << T + ph / 2 << "\" transform=\"rotate(-90 12 " << T + ph / 2
    << ")\" text-anchor=\"middle\">per s</text>\n";
  for (double v = 0; v <= span + 1e-9; v += xa.step)
    s << "<text class=\"tick\" x=\"" << fmt("%.1f", L + v / span * pw) << "\" y=\"" << T + ph + 17
      << "\" text-anchor=\"middle\">" << fmt("%g", v) << "s</text>\n";
  for (const auto& sh : shades) {
    double x0 = X(std::max(sh.fromNs, t0)), x1 = X(std::min(sh.toNs, t1));
    s << "<rect class=\"fault-window\" x=\"" << fmt("%.1f", x0) << "\" y=\"" << T << "\" width=\""
      << fmt("%.1f", std::max(1.0, x1 - x0)) << "\" height=\"" << ph << "\"><title>" << esc(sh.title)
      << "</title></rect>\n";
  }
  double legendX = L + 8;
  for (const auto& l : lines) {
    std::ostringstream d;
    bool first = true;
    double prevY = Y(0);
    for (const auto& [t, v] : l.points) {
      if (t < t0 || t > t1) continue;
      double x = X(t), y = Y(v);
      if (first) d << "M" << fmt("%.1f", x) << "," << fmt("%.1f", y);
      else d << "L" << fmt("%.1f", x) << "," << fmt("%.1f", prevY) << "L" << fmt("%.1f", x) << "," << fmt("%.1f", y);
      prevY = y;
      first = false;
    }
    if (first) continue;
    s << "<path class=\"counter " << esc(l.cls) << "\" d=\"" << d.str() << "\"><title>" << esc(l.label)
      << "</title></path>\n";
    s << "<text class=\"legend " << esc(l.cls) << "\" x=\"" << fmt("%.0f", legendX) << "\" y=\"" << T + 12 << "\">"
      << esc(l.label) << "</text>\n";
    legendX += 9.0 * double(l.label.size()) + 16;
  }
  s << "<rect class=\"frame\" x=\"" << L << "\" y=\"" << T << "\" width=\"" << pw << "\" height=\"" << ph << "\"/>\n";
  s << "</svg>\n";
  return s.str();
}

std::vector<double> slice(const json& arr, int64_t binNs, int64_t from, int64_t to) {
  std::vector<double> out;
  if (!arr.is_array()) return out;
  int64_t a = from / binNs, b = to / binNs;
  for (int64_t i = a; i < b; i++)
    out.push_back(size_t(i) < arr.size() && arr[size_t(i)].is_number() ? arr[size_t(i)].get<double>() : 0.0);
  return out;
}

}  // namespace rc::controller::report_charts
