// Helpers shared by the test suites: reading the message of a dtensor::Error,
// comparing tensors bit for bit, and the number of cases a property test runs.
#pragma once

#include <gtest/gtest.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "dtensor/error.h"
#include "dtensor/tensor.h"

namespace dtensor::testing {

// Whether got and want have one dtype and shape and the same bytes, element
// for element (NaN payloads included); a failure names the first element
// that differs.
inline ::testing::AssertionResult same_bits(const Tensor& got, const Tensor& want) {
  if (got.shape() != want.shape() || got.dtype() != want.dtype())
    return ::testing::AssertionFailure()
           << "got " << got.dtype() << " " << got.shape() << ", want " << want.dtype() << " "
           << want.shape();
  const Tensor g = got.contiguous(), w = want.contiguous();
  const auto* gb = static_cast<const unsigned char*>(g.raw_data());
  const auto* wb = static_cast<const unsigned char*>(w.raw_data());
  const size_t isz = itemsize(got.dtype());
  for (int64_t e = 0; e < g.numel(); ++e)
    if (std::memcmp(gb + e * isz, wb + e * isz, isz) != 0)
      return ::testing::AssertionFailure()
             << "element " << e << " of " << got.numel() << " differs: got "
             << g.reshape({-1}).select(0, e).item<double>() << ", want "
             << w.reshape({-1}).select(0, e).item<double>();
  return ::testing::AssertionSuccess();
}

// The message of the dtensor::Error that f throws, or "<no error>".
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

// Expects fn to throw dtensor::Error whose message contains every piece.
inline void expect_error(const std::function<void()>& fn, const std::vector<std::string>& pieces) {
  try {
    fn();
    ADD_FAILURE() << "expected dtensor::Error containing '" << pieces.front() << "'";
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const auto& p : pieces)
      EXPECT_NE(msg.find(p), std::string::npos) << "message '" << msg << "' lacks '" << p << "'";
  }
}

// The number of random cases a property test runs: DTENSOR_PROPERTY_CASES
// when set (e.g. DTENSOR_PROPERTY_CASES=100000 for a long soak), else
// default_cases. Throws std::invalid_argument on anything but a positive
// decimal integer that fits an int, so a typo fails the test instead of
// silently running the default.
inline int property_cases(int default_cases) {
  const char* text = std::getenv("DTENSOR_PROPERTY_CASES");
  if (text == nullptr || *text == '\0') return default_cases;
  char* end = nullptr;
  errno = 0;
  const long value = std::strtol(text, &end, 10);
  if (*end != '\0' || errno == ERANGE || value <= 0 || value > std::numeric_limits<int>::max())
    throw std::invalid_argument("DTENSOR_PROPERTY_CASES must be a positive integer, got '" +
                                std::string(text) + "'");
  return static_cast<int>(value);
}

}  // namespace dtensor::testing
