// The precompiled header of src/tensor's files (cmake/dtensorBuildSpeed.cmake):
// dtensor/tensor.h, which every one of them includes, and so nothing a
// kernel file does not see already (the kernels compile to the code they
// would without it).
#pragma once

#include "dtensor/tensor.h"
