// Loss curves for `dtensor train`: a compact chart for the terminal and an
// SVG file, both from the same series (no plotting library: the chart is a
// grid of characters and the SVG a few polylines).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dtensor::cli {

struct Series {
  std::string label;
  std::vector<double> values;  // one per step, x = first, first + 1, ...
  char mark = '*';             // the terminal chart's character
  std::string color = "#1f77b4";
  bool dashed = false;
};

// A chart `width` x `height` characters of plot area with the y range on
// the left and the steps below (the first value is step `first`, e.g. the
// step after a resumed checkpoint); where series overlap the later one shows.
std::string terminal_chart(const std::vector<Series>& series, int width = 60, int height = 12,
                           int64_t first = 1);

// Text for SVG (an element's text or an attribute's value): XML's
// specials escaped.
std::string svg_escape(const std::string& text);
// `v` with `digits` digits after the point ("%.*f").
std::string fixed_text(double v, int digits);

// A standalone SVG document (title, axes with ticks, one polyline per series
// and a legend).
std::string svg_chart(const std::vector<Series>& series, const std::string& title,
                      const std::string& x_label, const std::string& y_label, int64_t first = 1);

}  // namespace dtensor::cli
