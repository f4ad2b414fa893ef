// Helpers shared by the test suites: reading the message of a dtensor::Error.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "dtensor/error.h"

namespace dtensor::testing {

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

}  // namespace dtensor::testing
