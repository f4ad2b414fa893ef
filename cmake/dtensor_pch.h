// The precompiled header of the library's files above src/tensor
// (cmake/dtensorBuildSpeed.cmake): the standard headers most of them include
// and the DTensor API's declarations with the dispatcher's and autograd's
// internal headers, which a file of src/ops parses for 1.5 s of its 3.
// Only a build aid: every file still includes what it uses, and the
// sanitized build (no precompiled header) checks that it does.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "autograd/graph.h"
#include "dispatch/dispatch.h"
#include "dtensor/distributed_tensor.h"
