// Terminal and SVG loss charts (plot.h).
#include "plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace dtensor::cli {

namespace {

struct Range {
  double lo = 0, hi = 1;
  size_t steps = 0;
};

Range range_of(const std::vector<Series>& series) {
  Range r{INFINITY, -INFINITY, 0};
  for (const Series& s : series) {
    r.steps = std::max(r.steps, s.values.size());
    for (double v : s.values)
      if (std::isfinite(v)) r.lo = std::min(r.lo, v), r.hi = std::max(r.hi, v);
  }
  if (!(r.lo <= r.hi)) r.lo = 0, r.hi = 1;
  if (r.hi - r.lo < 1e-12) r.lo -= 0.5, r.hi += 0.5;
  return r;
}

}  // namespace

std::string svg_escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string fixed_text(double v, int digits) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string terminal_chart(const std::vector<Series>& series, int width, int height,
                           int64_t first) {
  const Range r = range_of(series);
  if (r.steps == 0) return "";
  std::vector<std::string> grid(static_cast<size_t>(height),
                                std::string(static_cast<size_t>(width), ' '));
  for (const Series& s : series) {
    for (size_t i = 0; i < s.values.size(); ++i) {
      if (!std::isfinite(s.values[i])) continue;
      // Steps spread over the columns (several steps share one when there
      // are more steps than columns).
      const size_t col = r.steps == 1 ? 0 : i * static_cast<size_t>(width - 1) / (r.steps - 1);
      const double y = (s.values[i] - r.lo) / (r.hi - r.lo);
      const auto row = static_cast<size_t>(std::lround((1 - y) * (height - 1)));
      grid[row][col] = s.mark;
    }
  }
  std::ostringstream os;
  for (int row = 0; row < height; ++row) {
    const double y = r.hi - (r.hi - r.lo) * row / (height - 1);
    const bool label = row == 0 || row == height - 1 || row == height / 2;
    os << (label ? fixed_text(y, 3) : std::string());
    os << std::string(label ? 8 - std::min<size_t>(8, fixed_text(y, 3).size()) : 8, ' ') << "|"
       << grid[static_cast<size_t>(row)] << "\n";
  }
  os << std::string(8, ' ') << "+" << std::string(static_cast<size_t>(width), '-') << "\n";
  const std::string lo = std::to_string(first);
  const std::string last = std::to_string(first + static_cast<int64_t>(r.steps) - 1);
  os << std::string(9, ' ') << lo
     << std::string(static_cast<size_t>(width) - lo.size() - last.size(), ' ') << last
     << "  step\n";
  os << std::string(9, ' ');
  for (size_t i = 0; i < series.size(); ++i)
    os << (i ? "   " : "") << series[i].mark << " " << series[i].label;
  os << "\n";
  return os.str();
}

std::string svg_chart(const std::vector<Series>& series, const std::string& title,
                      const std::string& x_label, const std::string& y_label, int64_t first) {
  const Range r = range_of(series);
  const double w = 720, h = 400, left = 70, right = 20, top = 40, bottom = 60;
  const double pw = w - left - right, ph = h - top - bottom;
  const auto x_of = [&](size_t i) {
    return left +
           (r.steps <= 1 ? 0 : pw * static_cast<double>(i) / static_cast<double>(r.steps - 1));
  };
  const auto y_of = [&](double v) { return top + ph * (1 - (v - r.lo) / (r.hi - r.lo)); };
  std::ostringstream os;
  os << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << w << "\" height=\"" << h
     << "\" viewBox=\"0 0 " << w << " " << h << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
     << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
     << "<text x=\"" << w / 2 << "\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">"
     << svg_escape(title) << "</text>\n";
  // Axes, horizontal grid lines with y ticks, x ticks at five steps.
  os << "<g stroke=\"#999\" stroke-width=\"1\">\n<line x1=\"" << left << "\" y1=\"" << top
     << "\" x2=\"" << left << "\" y2=\"" << top + ph << "\"/>\n<line x1=\"" << left << "\" y1=\""
     << top + ph << "\" x2=\"" << left + pw << "\" y2=\"" << top + ph << "\"/>\n</g>\n";
  for (int t = 0; t <= 4; ++t) {
    const double v = r.lo + (r.hi - r.lo) * t / 4, y = y_of(v);
    os << "<line x1=\"" << left << "\" y1=\"" << y << "\" x2=\"" << left + pw << "\" y2=\"" << y
       << "\" stroke=\"#eee\"/>\n<text x=\"" << left - 6 << "\" y=\"" << y + 4
       << "\" text-anchor=\"end\">" << fixed_text(v, 2) << "</text>\n";
  }
  for (int t = 0; t <= 4 && r.steps > 0; ++t) {
    const size_t i = (r.steps - 1) * static_cast<size_t>(t) / 4;
    os << "<text x=\"" << x_of(i) << "\" y=\"" << top + ph + 18 << "\" text-anchor=\"middle\">"
       << first + static_cast<int64_t>(i) << "</text>\n";
  }
  os << "<text x=\"" << left + pw / 2 << "\" y=\"" << h - 18 << "\" text-anchor=\"middle\">"
     << svg_escape(x_label) << "</text>\n<text x=\"18\" y=\"" << top + ph / 2
     << "\" text-anchor=\"middle\" transform=\"rotate(-90 18 " << top + ph / 2 << ")\">"
     << svg_escape(y_label) << "</text>\n";
  for (size_t s = 0; s < series.size(); ++s) {
    const Series& se = series[s];
    os << "<polyline fill=\"none\" stroke=\"" << se.color << "\" stroke-width=\"2\""
       << (se.dashed ? " stroke-dasharray=\"6 4\"" : "") << " points=\"";
    for (size_t i = 0; i < se.values.size(); ++i)
      if (std::isfinite(se.values[i])) os << x_of(i) << "," << y_of(se.values[i]) << " ";
    os << "\"/>\n";
    const double ly = top + 14 + 18 * static_cast<double>(s);
    os << "<line x1=\"" << left + pw - 200 << "\" y1=\"" << ly << "\" x2=\"" << left + pw - 170
       << "\" y2=\"" << ly << "\" stroke=\"" << se.color << "\" stroke-width=\"2\""
       << (se.dashed ? " stroke-dasharray=\"6 4\"" : "") << "/>\n<text x=\"" << left + pw - 164
       << "\" y=\"" << ly + 4 << "\">" << svg_escape(se.label) << "</text>\n";
  }
  os << "</svg>\n";
  return os.str();
}

}  // namespace dtensor::cli
