// Internal: the shape arithmetic of repeat/tile and pad, shared by the plain
// ops (tensor/shape.cc) and the DTensor ops (ops/shape.cc) so that both
// validate with the same messages.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "dtensor/tensor.h"

namespace dtensor {

// repeat's output shape; throws on too few repeats, a negative repeat or
// an overflowing size.
Shape repeat_shape(const Shape& shape, const DimVector& repeats);
// tile's reps as repeat's: padded with leading 1s to `ndim` values.
DimVector tile_repeats(int64_t ndim, const DimVector& reps);

enum class PadMode { Constant, Reflect, Replicate };

// pad's arguments checked against an input of `shape` (PyTorch's rules),
// per dim: padding before (lo) and after (hi), and the output shape.
struct PadPlan {
  PadMode mode = PadMode::Constant;
  std::vector<int64_t> lo, hi;
  Shape out;
};
PadPlan pad_plan(const Shape& shape, const std::vector<int64_t>& pad, const std::string& mode,
                 bool has_value);
// The int64 index reflect/replicate gathers a dim of size n with: output
// position k reads input position index[k].
Tensor pad_index_for(int64_t n, int64_t lo, int64_t hi, PadMode mode);

}  // namespace dtensor
