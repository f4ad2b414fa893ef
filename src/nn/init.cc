// nn::Init (a parameter's values as a recipe by global index) and the meta
// device of deferred initialisation (MetaDeviceGuard); Module::materialize
// is in module.cc.
//
// The whole tensor and a DTensor's shards run the same element-wise kernels
// on the same draws (the random ops are layout-invariant), so a parameter
// made shard by shard equals the one made whole, bit for bit.
#include <string>

#include "dtensor/error.h"
#include "dtensor/nn.h"
#include "dtensor/ops.h"

namespace dtensor::nn {

namespace {

thread_local int meta_device_depth = 0;

}  // namespace

MetaDeviceGuard::MetaDeviceGuard() { ++meta_device_depth; }
MetaDeviceGuard::~MetaDeviceGuard() { --meta_device_depth; }
bool MetaDeviceGuard::active() { return meta_device_depth > 0; }

Init::Init(Kind kind, const Shape& shape, uint64_t seed, double scale, double shift)
    : kind_(kind), shape_(shape), seed_(seed), scale_(scale), shift_(shift) {
  checked_numel(shape, "nn::Init");
}

Init::Init(Tensor values) : kind_(Kind::Values), values_(std::move(values)) {
  DT_CHECK(values_.defined(), "nn::Init: the tensor of values is undefined");
  shape_ = values_.shape();
  dtype_ = values_.dtype();
}

Init Init::normal(const Shape& shape, uint64_t seed, double std, double mean) {
  return Init(Kind::Normal, shape, seed, std, mean);
}

Init Init::uniform(const Shape& shape, uint64_t seed, double low, double high) {
  DT_CHECK(low <= high, "nn::Init::uniform: low ", low, " is above high ", high);
  return Init(Kind::Uniform, shape, seed, high - low, low);
}

Init Init::constant(const Shape& shape, double value) {
  return Init(Kind::Constant, shape, 0, 1, value);
}

namespace {

// scale * x + shift as two element-wise ops, each skipped when it is the
// identity, on a Tensor or a DTensor alike.
template <class T>
T affine(T x, double scale, double shift) {
  if (scale != 1) x = x * scale;
  if (shift != 0) x = x + shift;
  return x;
}

}  // namespace

Tensor Init::full() const {
  switch (kind_) {
    case Kind::Normal:
      return affine(Tensor::randn(shape_, seed_, 0, dtype_), scale_, shift_);
    case Kind::Uniform:
      return affine(Tensor::rand(shape_, seed_, 0, dtype_), scale_, shift_);
    case Kind::Constant:
      return Tensor::full(shape_, shift_, dtype_);
    case Kind::Values:
      return values_;
  }
  DT_THROW("nn::Init: unknown kind");
}

DTensor Init::distribute(const DeviceMesh& mesh, const Placements& placements) const {
  for (size_t d = 0; d < placements.size(); ++d)
    DT_CHECK(!placements[d].is_partial(), "nn::Init: a parameter's values are made as Shard or ",
             "Replicate, got ", to_string(placements), " (", placements[d], " on mesh dim ", d,
             ")");
  switch (kind_) {
    case Kind::Normal:
      return affine(randn(shape_, mesh, placements, seed_, dtype_), scale_, shift_);
    case Kind::Uniform:
      return affine(rand(shape_, mesh, placements, seed_, dtype_), scale_, shift_);
    case Kind::Constant: {
      const DTensorSpec spec(mesh, placements, shape_, dtype_);
      if (mesh.world().is_shape_only()) return DTensor::meta(spec);
      return from_local(
          [&](int rank) {
            return Tensor::full(spec.extent_of_rank(rank)->local_shape, shift_, dtype_);
          },
          mesh, placements, {.shape = shape_});
    }
    case Kind::Values:
      return distribute_tensor(values_, mesh, placements);
  }
  DT_THROW("nn::Init: unknown kind");
}

}  // namespace dtensor::nn
