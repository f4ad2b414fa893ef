// Modules: the structure that parallelize_module and fully_shard work on,
// as torch.nn.Module is for PyTorch's parallel APIs.
//
// A Module owns named parameters (DTensors that are autograd leaves, like
// nn.Parameter) and named child modules, and runs forward hooks around its
// forward():
//
//   nn::Linear fc(mesh, weight, bias);       // parameters Replicate on every mesh dim
//   DTensor y = fc(x);                       // pre-hooks, forward(x), post-hooks
//   for (auto& [name, p] : model.named_parameters()) ...   // "blocks.0.fc.weight"
//
// Parameters are made from full tensors (every process passes the same
// values, e.g. from one seed or the global generator, manual_seed in ops.h)
// and start Replicate on the module's mesh. A constructor checks every size
// (element counts, bytes, the memory of all the copies together; see
// check_allocation) before it makes any parameter.
// Parallelizing a model changes their layout in place: parallelize_module
// and fully_shard assign new leaves through replace_parameter and register
// hooks that move inputs and outputs, so the module's own forward() is
// written once, as on one device. Make the optimizer after parallelizing
// (it holds the parameters as they are then), as in PyTorch: a parameter
// replaced by replace_parameter is marked superseded, and an optimizer still
// holding it throws at step() and zero_grad() instead of updating a tensor
// the model no longer reads.
//
// Models larger than a process (deferred initialisation, PyTorch's meta
// device): under an nn::MetaDeviceGuard a module's parameters are made on
// the meta device (a layout, no memory), each with the recipe (nn::Init) of
// its values. parallelize_module and fully_shard lay them out as usual
// (moving nothing), and materialize() then makes each process's shards
// alone, with the values the one-process model has:
//
//   std::unique_ptr<models::GPT> model;
//   { nn::MetaDeviceGuard meta; model = std::make_unique<models::GPT>(mesh, config); }
//   fully_shard(*model, ...);            // layouts only: nothing allocated
//   model->materialize();                // each rank makes its own shards
//
// No process ever holds a whole parameter it does not own (a parameter made
// from a full Tensor is the exception: that tensor is kept until
// materialize()). Ops on a parameter not yet materialized throw.
//
// Modules made without a mesh (PyTorch's way: build the model, then lay it
// out). Module() and the Python constructors without a mesh put a module on
// local_mesh(), one rank of a World::simulated(1) that every process has
// for itself: each process holds the whole parameters (made from the global
// generator or seeds, so every process makes the same values) and the
// model runs as is, as one process. parallelize_module and fully_shard (the
// Python ones) first call adopt(target.root()): every module of the subtree
// still on local_mesh() moves to the target's root mesh, each parameter
// distributed Replicate from its whole values (a meta one stays meta with
// its Init), then the style lays it out as for a module made on that mesh.
// Why a 1-rank mesh and not "no mesh": forward, autograd and the
// optimizers only know DTensors, so an unsharded model is an ordinary
// DTensor model on a mesh of one; and adopting the root mesh (not the
// 1-d sub-mesh a call names) lets the tp and dp layouts of later calls
// compose on the one mesh, as for modules built on it.
//
// Differences from torch.nn.Module: the C++ forward takes one DTensor and
// returns one (the Python Module takes any arguments, see python/src/nn.cc);
// train()/eval() set a flag that modules (Dropout) read; no state_dict()
// method in C++: a model's state (with its optimizer's) is
// checkpoint::get_state_dict / set_state_dict (dtensor/checkpoint.h), as
// torch.distributed.checkpoint.state_dict; buffers are the Python Module's.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dtensor/distributed_tensor.h"

namespace dtensor::nn {

// How a parameter's values are made, as a recipe that gives any block of
// the global tensor from global indices alone (the random ones are
// layout-invariant, ops.h): the whole tensor, or each rank's shard on its
// own, with the same values bit for bit. A Tensor converts to the recipe
// "these values".
class Init {
 public:
  // std * Tensor::randn(shape, seed) + mean (the product, then the sum;
  // either skipped when it is the identity).
  static Init normal(const Shape& shape, uint64_t seed, double std = 1, double mean = 0);
  // (high - low) * Tensor::rand(shape, seed) + low: uniform in [low, high).
  static Init uniform(const Shape& shape, uint64_t seed, double low, double high);
  static Init constant(const Shape& shape, double value);
  Init(Tensor values);  // NOLINT(google-explicit-constructor): a Tensor is its own recipe
  // Whether this is the Tensor form (its values exist already).
  bool holds_values() const { return kind_ == Kind::Values; }

  const Shape& shape() const { return shape_; }
  DType dtype() const { return dtype_; }
  // The whole tensor.
  Tensor full() const;
  // The tensor laid out on `mesh`, each held rank making only its own
  // shard (no communication). Placements must be Shard or Replicate.
  DTensor distribute(const DeviceMesh& mesh, const Placements& placements) const;

 private:
  enum class Kind { Normal, Uniform, Constant, Values };
  Init(Kind kind, const Shape& shape, uint64_t seed, double scale, double shift);
  Kind kind_;
  Shape shape_;
  DType dtype_ = DType::Float32;
  uint64_t seed_ = 0;
  double scale_ = 1, shift_ = 0;  // scale * draw + shift; shift_ is the constant's value
  Tensor values_;                  // Kind::Values
};

// While one is alive (on this thread), modules make their parameters on the
// meta device (DTensor::meta, Replicate on the module's mesh) and remember
// each one's Init, as PyTorch's `with torch.device("meta")`; nothing is
// allocated and no size limit applies until Module::materialize().
class MetaDeviceGuard {
 public:
  MetaDeviceGuard();
  ~MetaDeviceGuard();
  MetaDeviceGuard(const MetaDeviceGuard&) = delete;
  MetaDeviceGuard& operator=(const MetaDeviceGuard&) = delete;
  static bool active();
};

struct CheckpointPolicy;  // below, with checkpoint()

// The mesh of modules made without one: rank 0 of this process's own
// World::simulated(1) (see above). The same mesh for every call.
const DeviceMesh& local_mesh();

class Module {
 public:
  explicit Module(DeviceMesh mesh) : mesh_(std::move(mesh)) {}
  // On local_mesh(), until adopt().
  Module() : Module(local_mesh()) {}
  virtual ~Module();
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // Runs the pre-hooks (each may replace the input), forward(), then the
  // hooks (each may replace the output), in registration order.
  DTensor operator()(const DTensor& x);
  // The same hooks (and checkpointing) around `forward` in place of
  // forward(): the call of a module whose forward takes more than x (the
  // Python Module's extra arguments, captured by `forward`). Under
  // checkpointing `forward` is kept for the recomputation in backward.
  DTensor operator()(const DTensor& x, const std::function<DTensor(const DTensor&)>& forward);
  virtual DTensor forward(const DTensor& x) = 0;
  // Whether a call does more than forward(): hooks or checkpointing.
  bool has_hooks() const {
    return !pre_hooks_.empty() || !hooks_.empty() || checkpoint_policy_ != nullptr;
  }

  const DeviceMesh& mesh() const { return mesh_; }
  // Whether the module is on local_mesh() (made without a mesh, not yet adopted).
  bool is_local() const;
  // Moves this module and every descendant still on local_mesh() onto
  // `mesh`: each parameter distributed Replicate from its whole values (a
  // meta one becomes meta on `mesh`, keeping its Init), tied slots kept
  // tied, the old parameters marked superseded by `by` (replace_parameter);
  // gradients are not carried over. Modules on another mesh are left as
  // they are. Returns how many parameters moved.
  int64_t adopt(const DeviceMesh& mesh, const std::string& by);

  // PyTorch's training flag: true until train(false) (eval()), which sets
  // it on this module and every descendant. Modules such as Dropout read it.
  bool training() const { return training_; }
  void train(bool mode = true);

  // Parameters by dotted name: this module's own in registration order,
  // then each child's ("blocks.0.attention.wq.weight"). The pointers stay
  // valid while the module lives; assigning through one replaces the
  // parameter everywhere the module reads it. A parameter held by several
  // slots (tied weights: `head->weight() = tok->weight()`, copies sharing
  // the autograd state) is listed once, under its first name, as PyTorch's
  // remove_duplicate=True; remove_duplicate=false lists every slot.
  std::vector<std::pair<std::string, DTensor*>> named_parameters(bool remove_duplicate = true);
  // Copies of the parameters (sharing storage and autograd state), each once.
  std::vector<DTensor> parameters();
  // This module ("") and every descendant by dotted name, parents first.
  std::vector<std::pair<std::string, Module*>> named_modules();
  // The descendant at a dotted name ("" is this module); throws naming the
  // name and the children there are.
  Module& submodule(const std::string& name);
  DTensor& parameter(const std::string& name);

  // Makes every parameter of this module and its descendants that is still
  // on the meta device: allocates each held shard in place (so every copy
  // of the parameter, in fully_shard's state or an optimizer, sees it) and
  // fills it from the parameter's Init, in the layout it has now. All the
  // shards' bytes are checked (check_allocation) before the first is
  // allocated. Returns how many parameters it made (0 when none was meta).
  // In a World::shape_only it makes nothing (the parameters stay meta,
  // which is all that world has) and returns how many it would make.
  // PyTorch: to_empty() followed by reset_parameters()/init_weights().
  int64_t materialize();

  // Whether every call of this module (its hooks and forward) runs under
  // nn::checkpoint, and with what policy (set by checkpoint_wrapper).
  bool activation_checkpointing() const { return checkpoint_policy_ != nullptr; }
  void set_activation_checkpointing(bool enabled);
  void set_activation_checkpointing(const CheckpointPolicy& policy);

  // fn(module, input) -> the input forward() gets.
  using ForwardPreHook = std::function<DTensor(Module&, const DTensor&)>;
  // fn(module, input, output) -> the output the caller gets.
  using ForwardHook = std::function<DTensor(Module&, const DTensor&, const DTensor&)>;
  void register_forward_pre_hook(ForwardPreHook hook);
  void register_forward_hook(ForwardHook hook);

 protected:
  // A parameter made by `init` (a full Tensor converts to one), Replicate
  // on the module's mesh; floating ones require grad. Under a
  // MetaDeviceGuard it is meta and keeps `init` for materialize(). Returns
  // the slot forward() reads (stable address).
  DTensor* register_parameter(const std::string& name, const Init& init);
  DTensor* register_parameter(const std::string& name, DTensor value);
  // Throws (check_allocation, naming `op`) unless parameters of these
  // shapes can all be made: each (its `copies` times, e.g. once per block
  // of a model) is counted once per rank of the mesh this process holds
  // (its Replicate copies), plus `extra_copies` (the full tensors a
  // constructor from sizes makes first). Call it before making any
  // parameter. Under a MetaDeviceGuard only the sizes' arithmetic is
  // checked: nothing is allocated (materialize() checks the shards).
  void check_parameter_sizes(const std::string& op, std::vector<PlannedTensor> params,
                             int64_t extra_copies) const;
  template <class M>
  M* register_module(const std::string& name, std::unique_ptr<M> child) {
    M* raw = child.get();
    add_child(name, std::move(child));
    return raw;
  }

 private:
  void add_child(const std::string& name, std::unique_ptr<Module> child);
  void check_new_name(const std::string& name) const;

  struct Param {
    std::string name;
    std::unique_ptr<DTensor> slot;
    std::optional<Init> init;  // kept while the value is meta
  };
  DeviceMesh mesh_;
  std::vector<Param> params_;
  std::vector<std::pair<std::string, std::unique_ptr<Module>>> children_;
  std::vector<ForwardPreHook> pre_hooks_;
  std::vector<ForwardHook> hooks_;
  std::shared_ptr<const CheckpointPolicy> checkpoint_policy_;  // null: not checkpointed
  bool training_ = true;

  // The hooks and forward(), or *fn in its place when given.
  DTensor call(const DTensor& x, const std::function<DTensor(const DTensor&)>* fn = nullptr);
};

// ---- activation checkpointing (torch.utils.checkpoint, non-reentrant) --------------------
// fn(x) keeping nothing for backward: each tensor its ops save becomes a
// handle, and backward, at the first node that needs one, runs fn again
// from x (with the generator state and autocast of the first run, grad
// mode on) and takes the tensors it saves, in order. The gradients are the
// same, bit for bit, as without checkpointing, provided fn runs the same
// ops on the same values again (it may read no state that changed since);
// a recomputation that saves a different number of tensors throws. Costs
// one more forward of fn in backward (its collectives too). Under no_grad
// it is fn(x). Regions nest.
//
// Selective checkpointing (PyTorch's create_selective_checkpoint_contexts
// with MUST_SAVE for these ops, torchtitan's op-level policy): the region
// keeps the outputs of the ops named in policy.save_ops from its first
// run, and the recomputation takes them instead of running those ops
// again (their autograd is recorded as usual). So the costly ops are not
// run twice, for the memory of their outputs. Names: "mm", "addmm",
// "bmm", "baddbmm", "matmul", "linear", "scaled_dot_product_attention";
// any other is refused. A kept output changed in place before the
// recomputation throws. The gradients are the same, bit for bit.
struct CheckpointPolicy {
  std::vector<std::string> save_ops;
};
DTensor checkpoint(const std::function<DTensor(const DTensor&)>& fn, const DTensor& x,
                   const CheckpointPolicy& policy = {});
// Throws dtensor::Error naming an op of policy.save_ops that cannot be
// kept, and the ones that can.
void check_checkpoint_policy(const CheckpointPolicy& policy);
// Marks `module` so that each of its calls (hooks and forward, so a
// fully_shard module gathers its parameters again for the recomputation)
// runs under checkpoint with `policy`: PyTorch's checkpoint_wrapper,
// without the wrapper module (names and checkpoints are unchanged).
// Returns `module`.
Module& checkpoint_wrapper(Module& module, const CheckpointPolicy& policy = {});
// Whether a checkpoint region is recording on this thread: fully_shard
// then leaves its unsharded parameters to the region (which keeps nothing)
// instead of packing them itself.
bool in_checkpoint_region();
// Whether a checkpoint region is running again for backward on this thread
// (fully_shard then prefetches in backward's order).
bool in_recomputation();

// Replaces the parameter in `slot` (a pointer from named_parameters()) by
// `value` and marks the one it held superseded, naming `by` (e.g.
// "parallelize_module"): an optimizer made before holds the old one, and
// its step() and zero_grad() then throw saying so. Assigning through the
// pointer directly replaces without the mark.
void replace_parameter(DTensor& slot, DTensor value, const std::string& by);
// Whether two slots hold one parameter (tied): copies sharing the autograd
// state, or, for parameters that require no grad, the same shards.
bool same_parameter(const DTensor& a, const DTensor& b);
// What replaced `param` (replace_parameter's `by`), or nullopt while it is
// still a module's current parameter.
std::optional<std::string> superseded_by(const DTensor& param);

// y = x W^T + b; W (out, in), b (out).
class Linear : public Module {
 public:
  // Weight and bias from their values or recipes (Tensors convert to Init).
  Linear(const DeviceMesh& mesh, const Init& weight, const std::optional<Init>& bias);
  // W and b uniform in +-1/sqrt(in) as nn.Linear initialises, from `seed`
  // (W) and seed + 1 (b), or from two draws of the global generator
  // (next_seed) without a seed.
  Linear(const DeviceMesh& mesh, int64_t in_features, int64_t out_features, bool bias = true,
         std::optional<uint64_t> seed = std::nullopt);
  DTensor forward(const DTensor& x) override;
  DTensor& weight() { return *weight_; }
  DTensor* bias() { return bias_; }

 private:
  DTensor* weight_;
  DTensor* bias_ = nullptr;
};

// Rows of a (num, dim) table looked up by int64 ids.
class Embedding : public Module {
 public:
  Embedding(const DeviceMesh& mesh, const Init& weight);
  // A standard-normal table (nn.Embedding's) from `seed`, or from the global
  // generator without one.
  Embedding(const DeviceMesh& mesh, int64_t num_embeddings, int64_t embedding_dim,
            std::optional<uint64_t> seed = std::nullopt);
  DTensor forward(const DTensor& ids) override;
  DTensor& weight() { return *weight_; }

 private:
  DTensor* weight_;
};

// LayerNorm over the last dim with weight and bias (dim).
class LayerNorm : public Module {
 public:
  LayerNorm(const DeviceMesh& mesh, const Init& weight, const Init& bias, double eps = 1e-5);
  // Weight ones, bias zeros (nn.LayerNorm's).
  LayerNorm(const DeviceMesh& mesh, int64_t normalized_shape, double eps = 1e-5);
  DTensor forward(const DTensor& x) override;
  DTensor& weight() { return *weight_; }
  DTensor& bias() { return *bias_; }

 private:
  DTensor* weight_;
  DTensor* bias_;
  double eps_;
};

// RMSNorm over the last dim with a weight (dim) and no bias, as
// torch.nn.RMSNorm: x / sqrt(mean(x^2) + eps) * weight. Without eps, the
// machine epsilon of the dtype x computes in (PyTorch's default).
class RMSNorm : public Module {
 public:
  RMSNorm(const DeviceMesh& mesh, const Init& weight, std::optional<double> eps = std::nullopt);
  // Weight ones (nn.RMSNorm's).
  RMSNorm(const DeviceMesh& mesh, int64_t normalized_shape,
          std::optional<double> eps = std::nullopt);
  DTensor forward(const DTensor& x) override;
  DTensor& weight() { return *weight_; }

 private:
  DTensor* weight_;
  std::optional<double> eps_;
};

}  // namespace dtensor::nn
