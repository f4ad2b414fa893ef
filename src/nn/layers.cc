// The basic modules of nn.h: Linear, Embedding, LayerNorm, RMSNorm.
//
// Every constructor checks all its sizes (check_parameter_sizes) before it
// makes the first parameter: Linear(2^28, 2^28) used to fill a 1 GiB bias
// (and its copies) before the weight was refused.
#include <algorithm>
#include <cmath>
#include <string>

#include "dtensor/error.h"
#include "dtensor/nn.h"
#include "dtensor/ops.h"

namespace dtensor::nn {

namespace {

void check_positive(const char* module, const char* what, int64_t n) {
  DT_CHECK(n > 0, module, ": ", what, " must be positive, got ", n);
}

std::string linear_name(int64_t in, int64_t out) {
  return "Linear(in_features=" + std::to_string(in) + ", out_features=" + std::to_string(out) + ")";
}

// Making a parameter from a recipe holds the full tensor, its arithmetic's
// temporaries (a product, a sum) and the Replicate copies at once; from
// values, only the copies.
int64_t extra_copies(const Init& init) { return init.holds_values() ? 0 : 2; }

PlannedTensor planned(const char* name, const Init& init) {
  return {name, init.shape(), init.dtype()};
}

}  // namespace

Linear::Linear(const DeviceMesh& mesh, const Init& weight, const std::optional<Init>& bias)
    : Module(mesh) {
  DT_CHECK(weight.shape().size() == 2, "Linear: weight must be (out, in), got shape ",
           weight.shape());
  if (bias)
    DT_CHECK(bias->shape().size() == 1 && bias->shape()[0] == weight.shape()[0],
             "Linear: bias must be (out) = (", weight.shape()[0], "), got shape ", bias->shape());
  std::vector<PlannedTensor> params{planned("weight", weight)};
  if (bias) params.push_back(planned("bias", *bias));
  check_parameter_sizes(linear_name(weight.shape()[1], weight.shape()[0]), params,
                        extra_copies(weight));
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
  check_parameter_sizes(linear_name(in_features, out_features), params, 2);
  // An explicit seed gives W seed and b seed + 1, as it always has.
  const uint64_t weight_seed = seed ? *seed : next_seed();
  // Uniform in [-bound, bound): nn.Linear's default initialisation.
  const double bound = 1 / std::sqrt(static_cast<double>(in_features));
  weight_ = register_parameter("weight",
                               Init::uniform({out_features, in_features}, weight_seed, -bound, bound));
  if (bias)
    bias_ = register_parameter(
        "bias", Init::uniform({out_features}, seed ? *seed + 1 : next_seed(), -bound, bound));
}

DTensor Linear::forward(const DTensor& x) {
  return bias_ ? linear(x, *weight_, *bias_) : linear(x, *weight_);
}

Embedding::Embedding(const DeviceMesh& mesh, const Init& weight) : Module(mesh) {
  DT_CHECK(weight.shape().size() == 2, "Embedding: weight must be (num, dim), got shape ",
           weight.shape());
  check_parameter_sizes("Embedding", {planned("weight", weight)}, extra_copies(weight));
  weight_ = register_parameter("weight", weight);
}

Embedding::Embedding(const DeviceMesh& mesh, int64_t num_embeddings, int64_t embedding_dim,
                     std::optional<uint64_t> seed)
    : Module(mesh) {
  check_positive("Embedding", "num_embeddings", num_embeddings);
  check_positive("Embedding", "embedding_dim", embedding_dim);
  check_parameter_sizes("Embedding(num_embeddings=" + std::to_string(num_embeddings) +
                            ", embedding_dim=" + std::to_string(embedding_dim) + ")",
                        {{"weight", {num_embeddings, embedding_dim}}}, 2);
  weight_ = register_parameter(
      "weight", Init::normal({num_embeddings, embedding_dim}, seed ? *seed : next_seed()));
}

DTensor Embedding::forward(const DTensor& ids) { return embedding(*weight_, ids); }

LayerNorm::LayerNorm(const DeviceMesh& mesh, const Init& weight, const Init& bias, double eps)
    : Module(mesh), eps_(eps) {
  DT_CHECK(weight.shape().size() == 1 && bias.shape() == weight.shape(),
           "LayerNorm: weight and bias must be (dim), got shapes ", weight.shape(), " and ",
           bias.shape());
  check_parameter_sizes("LayerNorm", {planned("weight", weight), planned("bias", bias)},
                        std::max(extra_copies(weight), extra_copies(bias)));
  weight_ = register_parameter("weight", weight);
  bias_ = register_parameter("bias", bias);
}

LayerNorm::LayerNorm(const DeviceMesh& mesh, int64_t normalized_shape, double eps)
    : Module(mesh), eps_(eps) {
  check_positive("LayerNorm", "normalized_shape", normalized_shape);
  check_parameter_sizes("LayerNorm(" + std::to_string(normalized_shape) + ")",
                        {{"weight", {normalized_shape}}, {"bias", {normalized_shape}}}, 2);
  weight_ = register_parameter("weight", Init::constant({normalized_shape}, 1));
  bias_ = register_parameter("bias", Init::constant({normalized_shape}, 0));
}

DTensor LayerNorm::forward(const DTensor& x) {
  return layer_norm(x, {weight_->shape()[0]}, *weight_, *bias_, eps_);
}

RMSNorm::RMSNorm(const DeviceMesh& mesh, const Init& weight, std::optional<double> eps)
    : Module(mesh), eps_(eps) {
  DT_CHECK(weight.shape().size() == 1, "RMSNorm: weight must be (dim), got shape ", weight.shape());
  check_parameter_sizes("RMSNorm", {planned("weight", weight)}, extra_copies(weight));
  weight_ = register_parameter("weight", weight);
}

RMSNorm::RMSNorm(const DeviceMesh& mesh, int64_t normalized_shape, std::optional<double> eps)
    : Module(mesh), eps_(eps) {
  check_positive("RMSNorm", "normalized_shape", normalized_shape);
  check_parameter_sizes("RMSNorm(" + std::to_string(normalized_shape) + ")",
                        {{"weight", {normalized_shape}}}, 2);
  weight_ = register_parameter("weight", Init::constant({normalized_shape}, 1));
}

DTensor RMSNorm::forward(const DTensor& x) {
  return rms_norm(x, {weight_->shape()[0]}, *weight_, eps_);
}

}  // namespace dtensor::nn
