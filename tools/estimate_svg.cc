// The estimated step as an SVG (estimate_svg.h).
#include "estimate_svg.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <sstream>

#include "dtensor/error.h"
#include "dtensor/memory.h"
#include "plot.h"

namespace dtensor::cli {

namespace {

// The picture's geometry, in pixels: a role's block is its label, the two
// lanes, the memory chart and the time axis under it.
constexpr double kSvgWidth = 1100, kSvgLeft = 150, kSvgRight = 30;
constexpr double kLaneHeight = 18, kMemoryTop = 78, kMemoryHeight = 110, kBlockHeight = 226;
constexpr double kBlocksTop = 84;

// Ops by how the time model runs them, collectives by kind.
constexpr const char* kProductColor = "#1f77b4";
constexpr const char* kOptimizerColor = "#9467bd";
constexpr const char* kOtherOpColor = "#9ecae1";
const char* collective_color(CollectiveKind k) {
  switch (k) {
    case CollectiveKind::AllGather:
      return "#2ca02c";
    case CollectiveKind::AllReduce:
      return "#ff7f0e";
    case CollectiveKind::ReduceScatter:
      return "#d62728";
    case CollectiveKind::AllToAll:
      return "#8c564b";
    case CollectiveKind::Broadcast:
      return "#e377c2";
    case CollectiveKind::Scatter:
      return "#7f7f7f";
    case CollectiveKind::BoxExchange:
      return "#bcbd22";
  }
  return "#000000";
}

// A span's color and its legend's words.
std::pair<const char*, std::string> span_kind(const estimate::Span& s) {
  if (s.lane == 1) {
    for (int k = 0; k < kNumCollectiveKinds; ++k) {
      const auto kind = static_cast<CollectiveKind>(k);
      if (s.name == to_string(kind)) return {collective_color(kind), s.name};
    }
    return {"#000000", s.name};
  }
  if (estimate::is_matrix_product(s.name.c_str())) return {kProductColor, "matrix products"};
  if (s.name == "optimizer step") return {kOptimizerColor, "optimizer step"};
  return {kOtherOpColor, "other ops"};
}

// 1, 2 or 5 times a power of ten: the smallest such step that divides
// `range` into at most `most` parts.
double tick_step(double range, int most) {
  if (!(range > 0)) return 1;
  const double raw = range / most, power = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0})
    if (m * power >= raw) return m * power;
  return 10 * power;
}

// Digits after the point that tell ticks `step` apart.
int tick_digits(double step) {
  return std::max(0, static_cast<int>(-std::floor(std::log10(step) + 1e-9)));
}

std::string px(double v) { return fixed_text(v, 2); }

// The lane's spans as rectangles; neighbours of one color less than a
// third of a pixel apart become one (a thousand small ops would otherwise
// each be a rectangle thinner than a pixel), with their count in its title.
void draw_lane(std::ostream& os, const std::vector<estimate::Span>& spans, int lane, double y,
               const std::function<double(double)>& x_of) {
  struct Box {
    double x0, x1, t0, t1;
    const char* color;
    std::string name;
    int count;
  };
  std::vector<Box> boxes;
  for (const estimate::Span& s : spans) {
    if (s.lane != lane) continue;
    const char* color = span_kind(s).first;
    const double x0 = x_of(s.start), x1 = x_of(s.end);
    if (!boxes.empty() && boxes.back().color == color && x0 - boxes.back().x1 < 0.34) {
      Box& b = boxes.back();
      b.x1 = std::max(b.x1, x1);
      b.t1 = std::max(b.t1, s.end);
      ++b.count;
      continue;
    }
    boxes.push_back({x0, x1, s.start, s.end, color, s.name, 1});
  }
  for (const Box& b : boxes) {
    // At least half a pixel wide, so that a short collective still shows.
    const double w = std::max(b.x1 - b.x0, 0.5);
    os << "<rect x=\"" << px(b.x0) << "\" y=\"" << px(y) << "\" width=\"" << px(w) << "\" height=\""
       << kLaneHeight << "\" fill=\"" << b.color << "\"><title>"
       << svg_escape(b.count == 1 ? b.name
                                  : std::to_string(b.count) + " " +
                                        (lane == 0 ? "ops" : "collectives") + " from " + b.name)
       << ", " << fixed_text(b.t0 * 1e3, 3) << " to " << fixed_text(b.t1 * 1e3, 3)
       << " ms</title></rect>\n";
  }
}

// The memory step line's points, thinned to a few per half pixel: within
// one, the first value, the highest, the lowest and the last, so that the
// line's extremes are kept exactly.
std::string memory_points(const std::vector<std::pair<double, int64_t>>& points,
                          const std::function<double(int64_t)>& y_of) {
  std::ostringstream os;
  size_t i = 0;
  while (i < points.size()) {
    const double x = points[i].first;
    size_t j = i;
    int64_t hi = points[i].second, lo = points[i].second;
    while (j + 1 < points.size() && points[j + 1].first - x < 0.5) {
      ++j;
      hi = std::max(hi, points[j].second);
      lo = std::min(lo, points[j].second);
    }
    for (int64_t v : {points[i].second, hi, lo, points[j].second})
      os << px(x) << "," << px(y_of(v)) << " ";
    if (j > i) os << px(points[j].first) << "," << px(y_of(points[j].second)) << " ";
    i = j + 1;
  }
  return os.str();
}

}  // namespace

std::string estimate_svg(const std::string& title, const estimate::Profile& profile,
                         const estimate::TimeEstimate& time, size_t first_phase,
                         const std::vector<SvgRole>& roles) {
  const double pw = kSvgWidth - kSvgLeft - kSvgRight;
  const double step = time.step > 0 ? time.step : 1;
  const auto x_of = [&](double t) { return kSvgLeft + pw * t / step; };
  const double height = kBlocksTop + kBlockHeight * static_cast<double>(roles.size()) + 10;
  const size_t begin =
      first_phase < profile.phase_events.size() ? profile.phase_events[first_phase] : 0;

  std::ostringstream os;
  os << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kSvgWidth << "\" height=\""
     << height << "\" viewBox=\"0 0 " << kSvgWidth << " " << height
     << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
     << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
     << "<text x=\"" << kSvgWidth / 2 << "\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">"
     << svg_escape(title) << "</text>\n"
     << "<text x=\"" << kSvgWidth / 2
     << "\" y=\"40\" text-anchor=\"middle\" fill=\"#555\">time: estimated, one timeline for "
        "all ranks (each op at the busiest rank's shard); memory: exact, per role "
        "(its first rank's tensors after each event)</text>\n";

  // The legend: the kinds that occur, in a fixed order.
  std::vector<std::pair<const char*, std::string>> legend;
  for (int lane : {0, 1})
    for (const estimate::Span& s : time.timeline) {
      if (s.lane != lane) continue;
      const auto kind = span_kind(s);
      if (std::none_of(legend.begin(), legend.end(),
                       [&](const auto& l) { return l.second == kind.second; }))
        legend.push_back(kind);
    }
  double lx = kSvgLeft;
  for (const auto& [color, words] : legend) {
    os << "<rect x=\"" << px(lx) << "\" y=\"52\" width=\"12\" height=\"12\" fill=\"" << color
       << "\"/><text x=\"" << px(lx + 16) << "\" y=\"62\">" << svg_escape(words) << "</text>\n";
    lx += 28 + 7 * static_cast<double>(words.size());
  }

  const double t_step = tick_step(step * 1e3, 10);  // ms
  for (size_t r = 0; r < roles.size(); ++r) {
    const SvgRole& role = roles[r];
    DT_CHECK(role.memory != nullptr && role.memory->size() == profile.events.size(),
             "estimate_svg: role ", role.ranks, " has no memory timeline of the profile's ",
             profile.events.size(), " events (ProfileOptions::memory_timeline)");
    const std::vector<estimate::MemorySample>& mem = *role.memory;
    const double top = kBlocksTop + kBlockHeight * static_cast<double>(r);
    const double lane0 = top + 24, lane1 = top + 24 + kLaneHeight + 6;
    const double m_top = top + kMemoryTop, m_bottom = m_top + kMemoryHeight;

    // The memory step line: after each event of the step, at the time the
    // program has reached then (TimeEstimate::event_times).
    std::vector<std::pair<double, int64_t>> points;
    int64_t now = begin > 0 ? mem[begin - 1].now : 0, peak = begin > 0 ? mem[begin - 1].peak : 0;
    points.emplace_back(x_of(0), now);
    int64_t most = now;
    double most_x = x_of(0);
    for (size_t i = begin; i < mem.size(); ++i) {
      const double x = x_of(time.event_times[i]);
      points.emplace_back(x, now);
      if (mem[i].peak > peak) points.emplace_back(x, mem[i].peak);
      points.emplace_back(x, mem[i].now);
      for (int64_t v : {mem[i].peak > peak ? mem[i].peak : mem[i].now, mem[i].now})
        if (v > most) most = v, most_x = x;
      now = mem[i].now;
      peak = mem[i].peak;
    }
    points.emplace_back(x_of(step), now);
    const double top_bytes = static_cast<double>(std::max<int64_t>(most, 1)) * 1.15;
    const auto y_of = [&](int64_t v) {
      return m_bottom - kMemoryHeight * static_cast<double>(v) / top_bytes;
    };

    os << "<g class=\"role\" data-ranks=\"" << svg_escape(role.ranks) << "\" data-peak-bytes=\""
       << role.peak << "\">\n"
       << "<text x=\"10\" y=\"" << px(top + 14) << "\" font-weight=\"bold\">ranks "
       << svg_escape(role.ranks) << "</text>\n";
    if (most < role.peak)
      os << "<text x=\"" << px(kSvgLeft) << "\" y=\"" << px(top + 14) << "\" fill=\"#a00\">"
         << "this role's peak, " << mib_text(role.peak)
         << ", is before the step drawn (in the first step or the model's construction); the "
            "step's own is marked</text>\n";
    // The phases: a dashed line where each begins, its name beside it.
    for (size_t ph = first_phase; ph < profile.phases.size(); ++ph) {
      const double x = x_of(time.phase_starts[ph]);
      os << "<line x1=\"" << px(x) << "\" y1=\"" << px(lane0 - 4) << "\" x2=\"" << px(x)
         << "\" y2=\"" << px(m_bottom) << "\" stroke=\"#444\" stroke-dasharray=\"3 3\"/>\n"
         << "<text x=\"" << px(x + 3) << "\" y=\"" << px(m_top - 4) << "\" fill=\"#444\">"
         << svg_escape(profile.phases[ph]) << "</text>\n";
    }
    for (int lane : {0, 1}) {
      const double y = lane == 0 ? lane0 : lane1;
      os << "<g class=\"lane\" data-lane=\"" << (lane == 0 ? "compute" : "communication")
         << "\">\n<text x=\"" << px(kSvgLeft - 8) << "\" y=\"" << px(y + 13)
         << "\" text-anchor=\"end\">" << (lane == 0 ? "compute" : "communication")
         << "</text>\n<rect x=\"" << px(kSvgLeft) << "\" y=\"" << px(y) << "\" width=\"" << px(pw)
         << "\" height=\"" << kLaneHeight << "\" fill=\"#f4f4f4\"/>\n";
      draw_lane(os, time.timeline, lane, y, x_of);
      os << "</g>\n";
    }

    // The memory chart: axes, ticks in MiB, the line, its peak.
    const double m_step = tick_step(top_bytes / 1048576.0, 4);
    for (double v = 0; v * 1048576.0 <= top_bytes; v += m_step) {
      const double y = y_of(static_cast<int64_t>(v * 1048576.0));
      os << "<line x1=\"" << px(kSvgLeft) << "\" y1=\"" << px(y) << "\" x2=\"" << px(kSvgLeft + pw)
         << "\" y2=\"" << px(y) << "\" stroke=\"#eee\"/>\n<text x=\"" << px(kSvgLeft - 6)
         << "\" y=\"" << px(y + 4) << "\" text-anchor=\"end\">"
         << fixed_text(v, tick_digits(m_step)) << " MiB</text>\n";
    }
    os << "<text x=\"10\" y=\"" << px(m_top + 12) << "\">memory</text>\n"
       << "<line x1=\"" << px(kSvgLeft) << "\" y1=\"" << px(m_bottom) << "\" x2=\""
       << px(kSvgLeft + pw) << "\" y2=\"" << px(m_bottom) << "\" stroke=\"#999\"/>\n"
       << "<polyline class=\"memory\" data-max-bytes=\"" << most << "\" data-top-bytes=\""
       << fixed_text(top_bytes, 1) << "\" data-y-bottom=\"" << px(m_bottom) << "\" data-y-top=\""
       << px(m_top) << "\" fill=\"none\" stroke=\"#333\" "
       << "stroke-width=\"1.2\" points=\"" << memory_points(points, y_of) << "\"/>\n";
    const bool right_half = most_x > kSvgLeft + pw / 2;
    os << "<circle cx=\"" << px(most_x) << "\" cy=\"" << px(y_of(most))
       << "\" r=\"3.5\" fill=\"#d62728\"/>\n<text x=\"" << px(most_x + (right_half ? -6 : 6))
       << "\" y=\"" << px(y_of(most) - 4) << "\" text-anchor=\"" << (right_half ? "end" : "start")
       << "\" fill=\"#d62728\">peak " << mib_text(most) << "</text>\n";

    // The time axis, in ms.
    for (double t = 0; t <= step * 1e3 + 1e-9; t += t_step) {
      const double x = x_of(t / 1e3);
      os << "<line x1=\"" << px(x) << "\" y1=\"" << px(m_bottom) << "\" x2=\"" << px(x)
         << "\" y2=\"" << px(m_bottom + 4) << "\" stroke=\"#999\"/>\n<text x=\"" << px(x)
         << "\" y=\"" << px(m_bottom + 16) << "\" text-anchor=\"middle\">"
         << fixed_text(t, tick_digits(t_step)) << "</text>\n";
    }
    os << "<text x=\"" << px(kSvgLeft + pw + 8) << "\" y=\"" << px(m_bottom + 16)
       << "\">ms</text>\n</g>\n";
  }
  os << "</svg>\n";
  return os.str();
}

}  // namespace dtensor::cli
