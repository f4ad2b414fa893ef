// The machinery behind VerifyMode (dtensor/debug.h): when to check, a scope
// that marks this thread as inside a check, and the comparison. The dispatch
// helpers (src/dispatch/dispatch.h) check ops; DTensor::redistribute checks
// redistributions.
#pragma once

#include <atomic>
#include <optional>
#include <string>
#include <vector>

#include "dtensor/tensor.h"

namespace dtensor {

// Counts one check into every live VerifyMode.
void record_verification();

namespace verify_detail {

// Live VerifyModes, plus one when DTENSOR_VERIFY is set: every op reads it,
// so the check costs one relaxed load when verification is off.
extern std::atomic<int> active;

// Whether this thread is inside a check (its own ops, redistributions and
// full_tensor calls are not checked again, nor counted by CommDebugMode).
bool inside_check();

// Whether a result computed now should be checked: verification is on and
// this thread is not already inside a check.
inline bool should_verify() {
  return active.load(std::memory_order_relaxed) != 0 && !inside_check();
}

// Marks this thread as inside a check while alive.
class CheckScope {
 public:
  CheckScope();
  ~CheckScope();
  CheckScope(const CheckScope&) = delete;
  CheckScope& operator=(const CheckScope&) = delete;

 private:
  bool outer_;
};

// Throws dtensor::Error "verify: <what>: ..." unless got matches want:
// exactly, or for floating dtypes within 1e-5 + 1e-4·|want| per element
// (NaN matching NaN). When the computation went through bfloat16 or
// float16 (`precision`: the least precise floating dtype of its inputs and
// result; unset: got's dtype), within 2 eps·(|want| + max|want|) of that
// type instead: each rank's piece was rounded to it where the replicated
// computation rounds once. `reference` says what want is, for the message.
void expect_match(const Tensor& got, const Tensor& want, const std::string& what,
                  const char* reference, std::optional<DType> precision = std::nullopt);

// The least precise of the dtypes for expect_match: bfloat16 if present,
// else float16, else nullopt.
std::optional<DType> least_precise(const std::vector<DType>& dtypes);

}  // namespace verify_detail
}  // namespace dtensor
