// Module: named parameters, children and forward hooks (nn.h).
#include <algorithm>
#include <functional>
#include <iterator>
#include <optional>
#include <sstream>

#include "autograd/graph.h"
#include "dtensor/error.h"
#include "dtensor/nn.h"
#include "tensor/allocator.h"

namespace dtensor::nn {

const DeviceMesh& local_mesh() {
  // Never destroyed: modules made without a mesh may outlive any static.
  static const auto* mesh = new DeviceMesh(World::simulated(1), {1}, {"local"});
  return *mesh;
}

Module::~Module() = default;

DTensor Module::operator()(const DTensor& x) {
  if (checkpoint_policy_)
    return checkpoint([this](const DTensor& in) { return call(in); }, x, *checkpoint_policy_);
  return call(x);
}

DTensor Module::operator()(const DTensor& x, const std::function<DTensor(const DTensor&)>& fn) {
  DT_CHECK(fn != nullptr, "Module: the forward function is empty");
  // The region keeps its own copy of fn: backward's recomputation runs it again.
  if (checkpoint_policy_)
    return checkpoint([this, fn](const DTensor& in) { return call(in, &fn); }, x,
                      *checkpoint_policy_);
  return call(x, &fn);
}

bool Module::is_local() const { return mesh_ == local_mesh(); }

void Module::train(bool mode) {
  for (auto& [name, module] : named_modules()) module->training_ = mode;
}

namespace {

// `old` (whole on the local mesh) as a Replicate parameter on `mesh`.
DTensor replicate_onto(const DTensor& old, const DeviceMesh& mesh) {
  const Placements replicate(static_cast<size_t>(mesh.ndim()), Replicate());
  // Counted as register_parameter counts a new parameter: the copy each rank ends with.
  std::optional<detail::RankCountingPause> pause(std::in_place);
  DTensor value;
  if (old.is_deferred()) {
    value = DTensor::meta(DTensorSpec(mesh, replicate, old.shape(), old.dtype()));
    value.local().for_each([](int, const Tensor& t) { t.storage()->set_deferred(true); });
  } else {
    value = Init(old.to_local(0)).distribute(mesh, replicate);
  }
  pause.reset();
  value.local().count_ranks();
  if (old.requires_grad()) value.requires_grad_();
  return value;
}

}  // namespace

int64_t Module::adopt(const DeviceMesh& mesh, const std::string& by) {
  DT_CHECK(!(mesh == local_mesh()), by, ": cannot lay a module out on the local mesh itself");
  // A tied parameter (one DTensor in several slots) moves once and stays tied.
  std::vector<std::pair<DTensor, DTensor>> moved;
  for (auto& [module_name, module] : named_modules()) {
    if (!module->is_local()) continue;
    for (Param& p : module->params_) {
      auto it = std::find_if(moved.begin(), moved.end(),
                             [&](const auto& m) { return same_parameter(m.first, *p.slot); });
      if (it == moved.end()) {
        DT_CHECK(!p.slot->is_deferred() || p.init.has_value(), by, ": parameter '",
                 module_name.empty() ? p.name : module_name + "." + p.name,
                 "' is a meta tensor with no recipe for its values");
        moved.emplace_back(*p.slot, replicate_onto(*p.slot, mesh));
        it = std::prev(moved.end());
      }
      replace_parameter(*p.slot, it->second, by);
    }
    module->mesh_ = mesh;
  }
  return static_cast<int64_t>(moved.size());
}

void Module::set_activation_checkpointing(bool enabled) {
  if (!enabled)
    checkpoint_policy_.reset();
  else if (!checkpoint_policy_)
    checkpoint_policy_ = std::make_shared<const CheckpointPolicy>();
}

void Module::set_activation_checkpointing(const CheckpointPolicy& policy) {
  check_checkpoint_policy(policy);
  checkpoint_policy_ = std::make_shared<const CheckpointPolicy>(policy);
}

DTensor Module::call(const DTensor& x, const std::function<DTensor(const DTensor&)>* fn) {
  // The common case (no hooks) passes x straight through without a copy.
  if (pre_hooks_.empty() && hooks_.empty()) return fn ? (*fn)(x) : forward(x);
  DTensor in = x;
  for (const ForwardPreHook& hook : pre_hooks_) in = hook(*this, in);
  DTensor out = fn ? (*fn)(in) : forward(in);
  for (const ForwardHook& hook : hooks_) out = hook(*this, in, out);
  return out;
}

std::vector<std::pair<std::string, DTensor*>> Module::named_parameters(bool remove_duplicate) {
  std::vector<std::pair<std::string, DTensor*>> out;
  for (auto& [module_name, module] : named_modules()) {
    const std::string prefix = module_name.empty() ? "" : module_name + ".";
    for (Param& p : module->params_) {
      const bool seen = remove_duplicate && std::any_of(out.begin(), out.end(), [&](const auto& o) {
                          return same_parameter(*o.second, *p.slot);
                        });
      if (!seen) out.emplace_back(prefix + p.name, p.slot.get());
    }
  }
  return out;
}

std::vector<DTensor> Module::parameters() {
  std::vector<DTensor> out;
  for (auto& [name, p] : named_parameters()) out.push_back(*p);
  return out;
}

std::vector<std::pair<std::string, Module*>> Module::named_modules() {
  std::vector<std::pair<std::string, Module*>> out{{"", this}};
  // Breadth is not what PyTorch does: parents first, depth first, in
  // registration order, so "blocks.0" and its children precede "blocks.1".
  for (auto& [name, child] : children_)
    for (auto& [sub, module] : child->named_modules())
      out.emplace_back(sub.empty() ? name : name + "." + sub, module);
  return out;
}

Module& Module::submodule(const std::string& name) {
  if (name.empty()) return *this;
  const size_t dot = name.find('.');
  const std::string head = name.substr(0, dot);
  for (auto& [child_name, child] : children_)
    if (child_name == head)
      return dot == std::string::npos ? *child : child->submodule(name.substr(dot + 1));
  std::ostringstream names;
  for (size_t i = 0; i < children_.size(); ++i) names << (i ? ", " : "") << children_[i].first;
  DT_THROW("no submodule '", head, "' (in '", name, "'); the children here are [", names.str(),
           "]");
}

DTensor& Module::parameter(const std::string& name) {
  const size_t dot = name.rfind('.');
  Module& owner = dot == std::string::npos ? *this : submodule(name.substr(0, dot));
  const std::string leaf = dot == std::string::npos ? name : name.substr(dot + 1);
  for (Param& p : owner.params_)
    if (p.name == leaf) return *p.slot;
  std::ostringstream names;
  for (size_t i = 0; i < owner.params_.size(); ++i)
    names << (i ? ", " : "") << owner.params_[i].name;
  DT_THROW("no parameter '", name, "'; the module there has [", names.str(), "]");
}

int64_t Module::materialize() {
  // Each meta parameter once: tied slots share one parameter's shards.
  struct Todo {
    std::string name;
    DTensor* slot;
    const Init* init;
  };
  std::vector<Todo> todo;
  std::vector<PlannedTensor> shards;
  for (auto& [module_name, module] : named_modules()) {
    for (Param& p : module->params_) {
      const std::string name = module_name.empty() ? p.name : module_name + "." + p.name;
      if (!p.slot->defined() || !p.slot->is_deferred()) continue;
      if (std::any_of(todo.begin(), todo.end(),
                      [&](const Todo& t) { return t.slot->same_shards(*p.slot); }))
        continue;
      DT_CHECK(p.init.has_value(), "materialize: parameter '", name, "' is a meta tensor with no ",
               "recipe for its values (it was assigned, not made under nn::MetaDeviceGuard)");
      for (size_t d = 0; d < p.slot->placements().size(); ++d)
        DT_CHECK(!p.slot->placements()[d].is_partial(), "materialize: parameter '", name,
                 "' is laid out as ", to_string(p.slot->placements()), "; a parameter is made ",
                 "as Shard or Replicate");
      p.slot->local().for_each([&](int rank, const Tensor& t) {
        shards.push_back(
            {"parameter '" + name + "' (rank " + std::to_string(rank) + ")", t.shape(), t.dtype()});
      });
      todo.push_back({name, p.slot.get(), &*p.init});
    }
  }
  // A shape-only world has no values to make: its parameters stay meta
  // tensors, whose bytes count as the made ones' do. Their recipes still
  // run, into meta tensors, for the memory they hold while they do.
  const bool shapes = !todo.empty() && todo.front().slot->mesh().world().is_shape_only();
  if (!shapes) check_allocation("materialize", shards);
  for (const Todo& t : todo) {
    const DTensor values = t.init->distribute(t.slot->mesh(), t.slot->placements());
    // Its memory counts from now on, on each rank (RankMemoryTracker).
    t.slot->local().for_each([](int, const Tensor& s) { s.storage()->set_deferred(false); });
    t.slot->local().count_ranks();
    if (shapes) continue;
    t.slot->local().for_each([&](int rank, const Tensor& shard) {
      shard.storage()->materialize();
      Tensor(shard).copy_(values.to_local(rank));
    });
  }
  // The recipes are done with (one may hold a full tensor of values).
  for (auto& [module_name, module] : named_modules())
    for (Param& p : module->params_)
      if (p.init && !p.slot->is_deferred()) p.init.reset();
  return static_cast<int64_t>(todo.size());
}

void Module::register_forward_pre_hook(ForwardPreHook hook) {
  DT_CHECK(hook != nullptr, "register_forward_pre_hook: the hook is empty");
  pre_hooks_.push_back(std::move(hook));
}

void Module::register_forward_hook(ForwardHook hook) {
  DT_CHECK(hook != nullptr, "register_forward_hook: the hook is empty");
  hooks_.push_back(std::move(hook));
}

void Module::check_new_name(const std::string& name) const {
  DT_CHECK(!name.empty() && name.find('.') == std::string::npos,
           "a parameter or module name must be non-empty without '.', got '", name, "'");
  const bool param =
      std::any_of(params_.begin(), params_.end(), [&](const Param& p) { return p.name == name; });
  const bool child = std::any_of(children_.begin(), children_.end(),
                                 [&](const auto& c) { return c.first == name; });
  DT_CHECK(!param && !child, "the name '", name,
           "' is already a parameter or module of this module");
}

DTensor* Module::register_parameter(const std::string& name, const Init& init) {
  const Placements replicate(static_cast<size_t>(mesh_.ndim()), Replicate());
  const bool meta = MetaDeviceGuard::active();
  // Made uncounted (RankMemoryTracker): a meta parameter holds no memory
  // until materialize(), in a shape-only world too (Storage::is_deferred);
  // the others count as the copy each rank ends with, as distribute_tensor
  // counts them (not the whole tensor, nor a shape-only world's steps).
  std::optional<detail::RankCountingPause> pause(std::in_place);
  DTensor value = meta ? DTensor::meta(DTensorSpec(mesh_, replicate, init.shape(), init.dtype()))
                  // A shape-only world makes no values (init.full() would, whole).
                  : mesh_.world().is_shape_only()
                      ? init.distribute(mesh_, replicate)
                      : distribute_tensor(init.full(), mesh_, replicate);
  if (meta) value.local().for_each([](int, const Tensor& t) { t.storage()->set_deferred(true); });
  pause.reset();
  value.local().count_ranks();
  if (is_floating(init.dtype())) value.requires_grad_();
  DTensor* slot = register_parameter(name, std::move(value));
  if (meta) params_.back().init = init;
  return slot;
}

DTensor* Module::register_parameter(const std::string& name, DTensor value) {
  check_new_name(name);
  DT_CHECK(value.mesh() == mesh_, "parameter '", name, "' lives on mesh ", value.mesh().to_string(),
           " but the module's is ", mesh_.to_string());
  params_.push_back({name, std::make_unique<DTensor>(std::move(value)), std::nullopt});
  return params_.back().slot.get();
}

void Module::check_parameter_sizes(const std::string& op, std::vector<PlannedTensor> params,
                                   int64_t extra_copies) const {
  // Meta parameters take no memory: the sizes' arithmetic is still checked.
  const auto held =
      MetaDeviceGuard::active() ? int64_t{0} : static_cast<int64_t>(mesh_.held_ranks().size());
  for (PlannedTensor& p : params)
    p.copies =
        checked_mul(p.copies, held == 0 ? 0 : held + extra_copies, "check_parameter_sizes: copies");
  check_allocation(op, params);
}

void Module::add_child(const std::string& name, std::unique_ptr<Module> child) {
  check_new_name(name);
  DT_CHECK(child != nullptr, "register_module: module '", name, "' is null");
  children_.emplace_back(name, std::move(child));
}

void replace_parameter(DTensor& slot, DTensor value, const std::string& by) {
  // The mark lives in the autograd state the optimizer's copy shares. A
  // parameter without one (it requires no grad) is in no optimizer.
  const auto& meta = autograd::meta_of(slot);
  if (meta && meta != autograd::meta_of(value)) meta->superseded_by = by;
  slot = std::move(value);
}

bool same_parameter(const DTensor& a, const DTensor& b) {
  if (a.requires_grad() || b.requires_grad()) return a.is_same(b);
  // A process holding no shard cannot tell: not tied.
  return !a.local().empty() && a.same_shards(b);
}

std::optional<std::string> superseded_by(const DTensor& param) {
  const auto& meta = autograd::meta_of(param);
  return meta ? meta->superseded_by : std::nullopt;
}

}  // namespace dtensor::nn
