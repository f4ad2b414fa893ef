// The basic modules of nn.h: Linear, Embedding, LayerNorm.
//
// Every constructor checks all its sizes (check_parameter_sizes) before it
// makes the first parameter: Linear(2^28, 2^28) used to fill a 1 GiB bias
// (and its copies) before the weight was refused.
#include <cmath>
#include <string>

#include "dtensor/error.h"
#include "dtensor/nn.h"
#include "dtensor/ops.h"

namespace dtensor::nn {

namespace {

// Uniform in [-bound, bound): nn.Linear's default initialisation.
Tensor uniform(const Shape& shape, double bound, uint64_t seed) {
  return Tensor::rand(shape, seed) * (2 * bound) - bound;
}

void check_positive(const char* module, const char* what, int64_t n) {
  DT_CHECK(n > 0, module, ": ", what, " must be positive, got ", n);
}

std::string linear_name(int64_t in, int64_t out) {
  return "Linear(in_features=" + std::to_string(in) + ", out_features=" + std::to_string(out) + ")";
}

// A constructor from sizes holds the full tensors, their arithmetic's
// temporaries (uniform's product) and the Replicate copies at once.
constexpr int64_t kFromSizesExtra = 2;

}  // namespace

Linear::Linear(const DeviceMesh& mesh, const Tensor& weight, const std::optional<Tensor>& bias)
    : Module(mesh) {
  DT_CHECK(weight.dim() == 2, "Linear: weight must be (out, in), got shape ", weight.shape());
  if (bias)
    DT_CHECK(bias->dim() == 1 && bias->size(0) == weight.size(0), "Linear: bias must be (out) = (",
             weight.size(0), "), got shape ", bias->shape());
  std::vector<PlannedTensor> params{{"weight", weight.shape(), weight.dtype()}};
  if (bias) params.push_back({"bias", bias->shape(), bias->dtype()});
  check_parameter_sizes(linear_name(weight.size(1), weight.size(0)), params, 0);
  weight_ = register_parameter("weight", weight);
  if (bias) bias_ = register_parameter("bias", *bias);
}

Linear::Linear(const DeviceMesh& mesh, int64_t in_features, int64_t out_features, bool bias,
               std::optional<uint64_t> seed)
    : Module(mesh) {
  check_positive("Linear", "in_features", in_features);
  check_positive("Linear", "out_features", out_features);
  std::vector<PlannedTensor> params{{"weight", {out_features, in_features}}};
  if (bias) params.push_back({"bias", {out_features}});
  check_parameter_sizes(linear_name(in_features, out_features), params, kFromSizesExtra);
  // An explicit seed gives W seed and b seed + 1, as it always has.
  const uint64_t weight_seed = seed ? *seed : next_seed();
  const double bound = 1 / std::sqrt(static_cast<double>(in_features));
  weight_ = register_parameter("weight", uniform({out_features, in_features}, bound, weight_seed));
  if (bias)
    bias_ = register_parameter("bias",
                               uniform({out_features}, bound, seed ? *seed + 1 : next_seed()));
}

DTensor Linear::forward(const DTensor& x) {
  return bias_ ? linear(x, *weight_, *bias_) : linear(x, *weight_);
}

Embedding::Embedding(const DeviceMesh& mesh, const Tensor& weight) : Module(mesh) {
  DT_CHECK(weight.dim() == 2, "Embedding: weight must be (num, dim), got shape ", weight.shape());
  check_parameter_sizes("Embedding", {{"weight", weight.shape(), weight.dtype()}}, 0);
  weight_ = register_parameter("weight", weight);
}

Embedding::Embedding(const DeviceMesh& mesh, int64_t num_embeddings, int64_t embedding_dim,
                     std::optional<uint64_t> seed)
    : Module(mesh) {
  check_positive("Embedding", "num_embeddings", num_embeddings);
  check_positive("Embedding", "embedding_dim", embedding_dim);
  check_parameter_sizes("Embedding(num_embeddings=" + std::to_string(num_embeddings) +
                            ", embedding_dim=" + std::to_string(embedding_dim) + ")",
                        {{"weight", {num_embeddings, embedding_dim}}}, kFromSizesExtra);
  weight_ = register_parameter(
      "weight", Tensor::randn({num_embeddings, embedding_dim}, seed ? *seed : next_seed()));
}

DTensor Embedding::forward(const DTensor& ids) { return embedding(*weight_, ids); }

LayerNorm::LayerNorm(const DeviceMesh& mesh, const Tensor& weight, const Tensor& bias, double eps)
    : Module(mesh), eps_(eps) {
  DT_CHECK(weight.dim() == 1 && bias.shape() == weight.shape(),
           "LayerNorm: weight and bias must be (dim), got shapes ", weight.shape(), " and ",
           bias.shape());
  check_parameter_sizes("LayerNorm", {{"weight", weight.shape(), weight.dtype()},
                                      {"bias", bias.shape(), bias.dtype()}}, 0);
  weight_ = register_parameter("weight", weight);
  bias_ = register_parameter("bias", bias);
}

LayerNorm::LayerNorm(const DeviceMesh& mesh, int64_t normalized_shape, double eps)
    : Module(mesh), eps_(eps) {
  check_positive("LayerNorm", "normalized_shape", normalized_shape);
  check_parameter_sizes("LayerNorm(" + std::to_string(normalized_shape) + ")",
                        {{"weight", {normalized_shape}}, {"bias", {normalized_shape}}},
                        kFromSizesExtra);
  weight_ = register_parameter("weight", Tensor::ones({normalized_shape}));
  bias_ = register_parameter("bias", Tensor::zeros({normalized_shape}));
}

DTensor LayerNorm::forward(const DTensor& x) {
  return layer_norm(x, {weight_->shape()[0]}, *weight_, *bias_, eps_);
}

}  // namespace dtensor::nn
