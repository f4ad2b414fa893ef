// The one way the `dtensor` program takes a number: add_number. Its text
// must be a number of the option's C++ type within the range the option
// accepts, else a usage error (exit 2) naming the option, the value given
// and the range. CLI11 alone would wrap --seed -1 to 2^64-1, saturate
// 18446744073709551616, read 010 as octal 8 and cut 1e23 for an integer.
// check_number_options refuses to start a program in which an option of a
// numeric type was added another way, so a new option cannot skip this.
#pragma once

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <set>
#include <sstream>
#include <string>
#include <type_traits>

#include <CLI/CLI.hpp>

#include "cli.h"
#include "dtensor/error.h"

namespace dtensor::cli {

// The options made by add_number (check_number_options knows them).
inline std::set<const CLI::Option*>& number_options() {
  static std::set<const CLI::Option*> options;
  return options;
}

// An integer of type T in [lo, hi], written in decimal (an optional '+');
// the text is rewritten to its canonical digits for CLI11's conversion.
template <class T>
CLI::Validator integer_in(T lo, T hi) {
  static_assert(std::is_integral_v<T>);
  const std::string expected =
      "expected an integer from " + std::to_string(lo) + " to " + std::to_string(hi);
  return CLI::Validator(
      [lo, hi, expected](std::string& text) -> std::string {
        using Wide = std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>;
        Wide v = 0;
        const char* first = text.data();
        const char* last = first + text.size();
        if (first != last && *first == '+') ++first;
        const auto [next, ec] = std::from_chars(first, last, v);
        if (first == last || next != last || ec != std::errc() || v < static_cast<Wide>(lo) ||
            v > static_cast<Wide>(hi))
          return expected + ", got " + quote(text);
        text = std::to_string(v);
        return {};
      },
      "INT in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
}

// A finite number > lo (open) or >= lo, and <= hi.
inline CLI::Validator real_in(double lo, bool lo_open, double hi) {
  std::string expected = std::string("must be a finite number ") + (lo_open ? "> " : ">= ");
  std::ostringstream bounds;
  bounds << lo;
  if (hi < std::numeric_limits<double>::max()) bounds << " and <= " << hi;
  expected += bounds.str();
  return CLI::Validator(
      [lo, lo_open, hi, expected](std::string& text) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        if (text.empty() || *end != '\0' || !std::isfinite(v) || (lo_open ? !(v > lo) : !(v >= lo)) ||
            v > hi)
          return expected + ", got " + quote(text);
        return {};
      },
      (lo_open ? "> " : ">= ") + bounds.str());
}

// Adds --name (a number of type T) to cmd, accepted in [lo, hi].
template <class T>
CLI::Option* add_number(CLI::App* cmd, const std::string& name, T& value, const std::string& help,
                        T lo, T hi) {
  CLI::Option* opt = cmd->add_option(name, value, help)->capture_default_str();
  opt->check(integer_in<T>(lo, hi));
  number_options().insert(opt);
  return opt;
}
// A floating-point option: > lo (lo_open) or >= lo, and finite.
inline CLI::Option* add_number(CLI::App* cmd, const std::string& name, double& value,
                               const std::string& help, double lo, bool lo_open,
                               double hi = std::numeric_limits<double>::max()) {
  CLI::Option* opt = cmd->add_option(name, value, help)->capture_default_str();
  opt->check(real_in(lo, lo_open, hi));
  number_options().insert(opt);
  return opt;
}

// Throws dtensor::Error (an internal error: a bug in the program) when an
// option of app or its commands has CLI11's numeric type (INT, UINT,
// FLOAT) but was not added by add_number.
inline void check_number_options(const CLI::App& app) {
  for (const CLI::Option* opt : app.get_options()) {
    const std::string type = opt->get_type_name();
    const bool numeric = type.rfind("INT", 0) == 0 || type.rfind("UINT", 0) == 0 ||
                         type.rfind("FLOAT", 0) == 0 || type.rfind("NUMBER", 0) == 0;
    if (numeric && number_options().count(opt) == 0)
      DT_THROW("internal error: option ", opt->get_name(), " of ", app.get_name(),
               " takes a number but has no range check (add it with add_number)");
  }
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
    check_number_options(*sub);
}

}  // namespace dtensor::cli
