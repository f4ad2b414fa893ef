// The basic modules of nn.h: Linear, Embedding, LayerNorm.
#include <cmath>

#include "dtensor/error.h"
#include "dtensor/nn.h"
#include "dtensor/ops.h"

namespace dtensor::nn {

Linear::Linear(const DeviceMesh& mesh, const Tensor& weight, const std::optional<Tensor>& bias)
    : Module(mesh) {
  DT_CHECK(weight.dim() == 2, "Linear: weight must be (out, in), got shape ", weight.shape());
  weight_ = register_parameter("weight", weight);
  if (bias) {
    DT_CHECK(bias->dim() == 1 && bias->size(0) == weight.size(0), "Linear: bias must be (out) = (",
             weight.size(0), "), got shape ", bias->shape());
    bias_ = register_parameter("bias", *bias);
  }
}

namespace {

// Uniform in [-bound, bound): nn.Linear's default initialisation.
Tensor uniform(const Shape& shape, double bound, uint64_t seed) {
  return Tensor::rand(shape, seed) * (2 * bound) - bound;
}

// Checked before any tensor of that size is made.
int64_t features(int64_t n, const char* which) {
  DT_CHECK(n > 0, "Linear: ", which, "_features must be positive, got ", n);
  return n;
}

}  // namespace

Linear::Linear(const DeviceMesh& mesh, int64_t in_features, int64_t out_features, bool bias,
               uint64_t seed)
    : Linear(mesh, uniform({features(out_features, "out"), features(in_features, "in")},
                           1 / std::sqrt(double(in_features)), seed),
             bias ? std::optional<Tensor>(
                        uniform({out_features}, 1 / std::sqrt(double(in_features)), seed + 1))
                  : std::nullopt) {}

DTensor Linear::forward(const DTensor& x) {
  return bias_ ? linear(x, *weight_, *bias_) : linear(x, *weight_);
}

Embedding::Embedding(const DeviceMesh& mesh, const Tensor& weight) : Module(mesh) {
  DT_CHECK(weight.dim() == 2, "Embedding: weight must be (num, dim), got shape ", weight.shape());
  weight_ = register_parameter("weight", weight);
}

DTensor Embedding::forward(const DTensor& ids) { return embedding(*weight_, ids); }

LayerNorm::LayerNorm(const DeviceMesh& mesh, const Tensor& weight, const Tensor& bias, double eps)
    : Module(mesh), eps_(eps) {
  DT_CHECK(weight.dim() == 1 && bias.shape() == weight.shape(),
           "LayerNorm: weight and bias must be (dim), got shapes ", weight.shape(), " and ",
           bias.shape());
  weight_ = register_parameter("weight", weight);
  bias_ = register_parameter("bias", bias);
}

DTensor LayerNorm::forward(const DTensor& x) {
  return layer_norm(x, {weight_->shape()[0]}, *weight_, *bias_, eps_);
}

}  // namespace dtensor::nn
