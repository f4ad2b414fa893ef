// dtensor::Error — the one exception type the library throws on bad input.
//
// Every misuse (a shape mismatch, a dim out of range, a placement naming a dim
// the tensor lacks, an op with no rule for a layout) throws an Error whose
// message names the op, the values given and what was expected, e.g.
//   matmul: inner dimensions differ: [2, 3] @ [4, 5] (expected 3 == 4)
// The throwing source location is kept apart from the message (where()) so the
// message stays readable for users while a developer can still find the check.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace dtensor {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message, const char* file = "", int line = 0)
      : std::runtime_error(message), file_(file), line_(line) {}

  // The source location of the check that failed ("src/tensor/view.cc:42").
  std::string where() const { return std::string(file_) + ":" + std::to_string(line_); }

 private:
  const char* file_;
  int line_;
};

namespace detail {
// Concatenates the arguments with operator<< into one message.
template <class... Args>
std::string str_cat(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}
}  // namespace detail

}  // namespace dtensor

// Throws dtensor::Error with the streamed arguments as the message.
#define DT_THROW(...) \
  throw ::dtensor::Error(::dtensor::detail::str_cat(__VA_ARGS__), __FILE__, __LINE__)

// Throws dtensor::Error with the streamed arguments unless `cond` holds.
// The message arguments are evaluated only on failure.
#define DT_CHECK(cond, ...)        \
  do {                             \
    if (__builtin_expect(!(cond), 0)) { \
      DT_THROW(__VA_ARGS__);       \
    }                              \
  } while (0)
