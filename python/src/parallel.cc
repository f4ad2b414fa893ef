// dtensor.parallel: tensor parallelism and data parallelism on modules, with
// the names of torch.distributed.tensor.parallel and torch.distributed.fsdp:
//
//   parallelize_module(block, mesh["tp"], {"up": ColwiseParallel(),
//                                          "down": RowwiseParallel()})
//   fully_shard(block, mesh=mesh["dp"])
//
// plus the standalone Megatron layers of parallel.h (ColumnParallelLinear,
// RowParallelLinear, VocabParallelEmbedding, SequenceParallelLayerNorm),
// vocab_parallel_cross_entropy and with_placement. Also at the top level
// (dtensor.parallelize_module, dtensor.fully_shard, ...).
//
// A mesh dim may be named the PyTorch way, as the 1-d sub-mesh of it
// (mesh["tp"]), or by its index or name in the module's mesh. Layouts
// name the tp dim's placement only: a Placement, or a 1-tuple of one as
// PyTorch writes them.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bindings.h"
#include "casters.h"
#include "dtensor/fsdp.h"
#include "dtensor/parallel.h"
#include "dtensor/tensor_parallel.h"

namespace dtensor::python {

namespace {

using release_gil = py::call_guard<py::gil_scoped_release>;

// The dims of `mesh` that `which` covers: an index, a dim name, or a
// sub-mesh (or flattened dim) of the same root.
std::vector<int> mesh_dims_covering(const DeviceMesh& mesh, const DeviceMesh& sub,
                                    MeshDimMask wanted, const char* what);

std::vector<int> mesh_dims_of(const DeviceMesh& mesh, py::handle which, const char* what) {
  if (PyLong_Check(which.ptr())) return {cast_arg<int>(which, what, "a mesh dim index that fits an int")};
  if (PyUnicode_Check(which.ptr())) return {mesh.dim_index(which.cast<std::string>())};
  if (py::isinstance<py::list>(which) || py::isinstance<py::tuple>(which)) {
    std::vector<int> out;
    for (py::handle h : which) {
      std::vector<int> one = mesh_dims_of(mesh, h, what);
      out.insert(out.end(), one.begin(), one.end());
    }
    return out;
  }
  const auto& sub = cast_arg<const DeviceMesh&>(
      which, what, "a mesh dim (index, name, sub-mesh such as mesh[\"dp\"]) or a list of them");
  MeshDimMask wanted = 0;
  for (int d = 0; d < sub.ndim(); ++d) wanted |= sub.root_dims(d);
  return mesh_dims_covering(mesh, sub, wanted, what);
}

// The dims of `mesh` that make up the root dims `wanted` of its view `sub`.
std::vector<int> mesh_dims_covering(const DeviceMesh& mesh, const DeviceMesh& sub,
                                    MeshDimMask wanted, const char* what) {
  DT_CHECK(sub.root() == mesh.root(), what, ": mesh ", sub.to_string(),
           " is not a view of the module's mesh ", mesh.to_string());
  std::vector<int> out;
  MeshDimMask covered = 0;
  for (int d = 0; d < mesh.ndim(); ++d) {
    if ((mesh.root_dims(d) & wanted) == 0) continue;
    DT_CHECK((mesh.root_dims(d) & ~wanted) == 0, what, ": mesh ", sub.to_string(),
             " covers part of dim ", d, " of the module's mesh ", mesh.to_string());
    out.push_back(d);
    covered |= mesh.root_dims(d);
  }
  DT_CHECK(covered == wanted && !out.empty(), what, ": mesh ", sub.to_string(),
           " is not made of dims of the module's mesh ", mesh.to_string());
  return out;
}

int tp_dim_of(const DeviceMesh& mesh, py::handle which, const char* what) {
  std::vector<int> dims = mesh_dims_of(mesh, which, what);
  DT_CHECK(dims.size() == 1, what, ": the tensor-parallel mesh must be one dim of the module's "
           "mesh, got ", dims.size());
  return dims[0];
}

// A Placement, or a one-element sequence of one (PyTorch's (Shard(1),)).
Placement one_placement(py::handle h, const char* what) {
  if (py::isinstance<py::tuple>(h) || py::isinstance<py::list>(h)) {
    auto seq = py::reinterpret_borrow<py::sequence>(h);
    DT_CHECK(seq.size() == 1, what, ": one placement (for the tp mesh dim) expected, got ",
             seq.size());
    return cast_arg<Placement>(seq[0], what, "Shard, Replicate or Partial");
  }
  return cast_arg<Placement>(h, what, "Shard, Replicate or Partial (or a one-element tuple of one)");
}

std::optional<Placement> optional_placement(py::handle h, const char* what) {
  if (h.is_none()) return std::nullopt;
  return one_placement(h, what);
}

py::object optional_to_python(const std::optional<Placement>& p) {
  return p ? placement_to_python(*p) : py::none();
}

ParallelStyle style_from_python(py::handle h) {
  if (py::isinstance<ColwiseParallel>(h)) return h.cast<ColwiseParallel>();
  if (py::isinstance<RowwiseParallel>(h)) return h.cast<RowwiseParallel>();
  if (py::isinstance<SequenceParallel>(h)) return h.cast<SequenceParallel>();
  if (py::isinstance<PrepareModuleInput>(h)) return h.cast<PrepareModuleInput>();
  if (py::isinstance<PrepareModuleOutput>(h)) return h.cast<PrepareModuleOutput>();
  DT_THROW("parallelize_module: ", py::str(py::repr(h)).cast<std::string>(),
           " is not a parallel style (ColwiseParallel, RowwiseParallel, SequenceParallel, "
           "PrepareModuleInput, PrepareModuleOutput)");
}

ParallelizePlan plan_from_python(py::handle plan) {
  ParallelizePlan out;
  if (py::isinstance<py::dict>(plan)) {
    for (auto [k, v] : py::reinterpret_borrow<py::dict>(plan))
      out.emplace_back(cast_arg<std::string>(k, "parallelize_module: a plan key", "a module name (str)"),
                       style_from_python(v));
  } else if (py::isinstance<py::list>(plan) || py::isinstance<py::tuple>(plan)) {
    for (py::handle item : plan) {
      auto pair = cast_arg<py::tuple>(item, "parallelize_module: a plan item", "a (module name, style) tuple");
      DT_CHECK(pair.size() == 2, "parallelize_module: a plan item is (module name, style), got ",
               pair.size(), " items");
      out.emplace_back(cast_arg<std::string>(pair[0], "parallelize_module: a plan item", "a module name (str) first"),
                       style_from_python(pair[1]));
    }
  } else {
    out.emplace_back("", style_from_python(plan));  // one style for the module itself
  }
  return out;
}

std::string style_repr(const ParallelStyle& s) { return to_string(s); }

// PyTorch's use_local_output: a style's output converted with to_local().
// dtensor's modules return DTensors (nn::Module's forward is DTensor ->
// DTensor) and its plain Tensors have no autograd, so a local output would
// cut the graph: False (a DTensor, whose ops compute what the local code
// computes on its shard, viewed globally) is the only value taken; True is
// refused rather than silently ignored.
void check_use_local_output(py::handle value, const char* style) {
  if (value.is_none()) return;
  const bool local = cast_arg<bool>(value, std::string(style) + "(use_local_output)", "a bool");
  DT_CHECK(!local, style, "(use_local_output=True): not supported; dtensor modules return "
           "DTensors (their plain Tensors have no autograd, so a to_local() output would cut "
           "the graph). Pass use_local_output=False and compute on the DTensor output (its "
           "view(..., -1, ...) and ops give the global result of the local code)");
}

// fully_shard's and replicate's mp_policy (None: no mixed precision).
MixedPrecisionPolicy mp_policy_from(py::handle h, const char* what) {
  if (h.is_none()) return {};
  return cast_arg<MixedPrecisionPolicy>(h, std::string(what) + "(mp_policy)",
                                        "a dtensor.parallel.MixedPrecisionPolicy or None");
}

// FSDP2's offload_policy: OffloadPolicy() (its default: nothing offloaded)
// or None is accepted; CPUOffloadPolicy has no meaning on a CPU-only library
// whose parameters already live in host memory, and is refused.
struct OffloadPolicy {};
struct CPUOffloadPolicy {
  bool pin_memory = true;
};
void check_offload_policy(py::handle h) {
  if (h.is_none() || py::isinstance<OffloadPolicy>(h)) return;
  DT_CHECK(!py::isinstance<CPUOffloadPolicy>(h), "fully_shard(offload_policy=CPUOffloadPolicy()): "
           "not supported; dtensor runs on the CPU, so the parameters are in host memory "
           "already (pass None or OffloadPolicy())");
  throw py::type_error("fully_shard(offload_policy): expected OffloadPolicy, CPUOffloadPolicy "
                       "or None, got " + describe(h));
}

void bind_fsdp_policies(py::module_& pm) {
  py::class_<MixedPrecisionPolicy>(pm, "MixedPrecisionPolicy", R"doc(
FSDP2's MixedPrecisionPolicy (torch.distributed.fsdp): param_dtype (the
dtype the parameters are gathered and computed in), reduce_dtype (the
gradient reductions'; default param_dtype's), output_dtype (the module's
floating outputs are cast to it), cast_forward_inputs (the floating input is
cast to param_dtype). docs/mixed_precision.md.
)doc")
      .def(py::init([](std::optional<DType> param, std::optional<DType> reduce,
                       std::optional<DType> output, bool cast_forward_inputs) {
             return MixedPrecisionPolicy{param, reduce, output, cast_forward_inputs};
           }),
           py::kw_only(), py::arg("param_dtype") = py::none(), py::arg("reduce_dtype") = py::none(),
           py::arg("output_dtype") = py::none(), py::arg("cast_forward_inputs") = true)
      .def_readonly("param_dtype", &MixedPrecisionPolicy::param_dtype)
      .def_readonly("reduce_dtype", &MixedPrecisionPolicy::reduce_dtype)
      .def_readonly("output_dtype", &MixedPrecisionPolicy::output_dtype)
      .def_readonly("cast_forward_inputs", &MixedPrecisionPolicy::cast_forward_inputs);
  py::class_<OffloadPolicy>(pm, "OffloadPolicy", "FSDP2's default: nothing offloaded.")
      .def(py::init<>());
  py::class_<CPUOffloadPolicy>(pm, "CPUOffloadPolicy",
                               "FSDP2's CPU offloading: fully_shard refuses it (dtensor's "
                               "parameters are in host memory already).")
      .def(py::init([](bool pin) { return CPUOffloadPolicy{pin}; }), py::arg("pin_memory") = true);
}

template <class Layer>
void bind_layer_accessors(py::class_<Layer>& c) {
  c.def("__call__", &Layer::operator(), py::arg("input"), release_gil())
      .def_property_readonly("weight", &Layer::weight);
}

}  // namespace

void bind_parallel(py::module_& m) {
  py::module_ pm = m.def_submodule(
      "parallel", "Tensor and data parallelism on modules (torch.distributed.tensor.parallel, "
                  "torch.distributed.fsdp).");

  py::class_<ColwiseParallel>(pm, "ColwiseParallel", R"doc(
Column-parallel: Linear W (out, in) Shard(0) and its bias Shard(0) on tp, the
input made Replicate (all-gathered when sharded), the output Shard(-1). On an
Embedding the table is Shard(1).
)doc")
      .def(py::init([](py::object input_layouts, py::object output_layouts, py::object use_local_output) {
             check_use_local_output(use_local_output, "ColwiseParallel");
             ColwiseParallel s;
             s.input_layouts = optional_placement(input_layouts, "ColwiseParallel");
             if (!output_layouts.is_none()) s.output_layouts = one_placement(output_layouts, "ColwiseParallel");
             return s;
           }),
           py::kw_only(), py::arg("input_layouts") = py::none(), py::arg("output_layouts") = py::none(),
           py::arg("use_local_output") = py::none())
      .def_property_readonly("input_layouts", [](const ColwiseParallel& s) { return optional_to_python(s.input_layouts); })
      .def_property_readonly("output_layouts", [](const ColwiseParallel& s) { return placement_to_python(s.output_layouts); })
      .def("__repr__", [](const ColwiseParallel& s) { return style_repr(s); });

  py::class_<RowwiseParallel>(pm, "RowwiseParallel", R"doc(
Row-parallel: Linear W Shard(1) on tp, bias Replicate, the input made
Shard(-1), the output Replicate (an all_reduce; Shard(d) reduce-scatters;
Partial() leaves the sum). On an Embedding: vocabulary parallel (table Shard(0)).
)doc")
      .def(py::init([](py::object input_layouts, py::object output_layouts, py::object use_local_output) {
             check_use_local_output(use_local_output, "RowwiseParallel");
             RowwiseParallel s;
             s.input_layouts = optional_placement(input_layouts, "RowwiseParallel");
             if (!output_layouts.is_none()) s.output_layouts = one_placement(output_layouts, "RowwiseParallel");
             return s;
           }),
           py::kw_only(), py::arg("input_layouts") = py::none(), py::arg("output_layouts") = py::none(),
           py::arg("use_local_output") = py::none())
      .def_property_readonly("input_layouts", [](const RowwiseParallel& s) { return optional_to_python(s.input_layouts); })
      .def_property_readonly("output_layouts", [](const RowwiseParallel& s) { return placement_to_python(s.output_layouts); })
      .def("__repr__", [](const RowwiseParallel& s) { return style_repr(s); });

  py::class_<SequenceParallel>(pm, "SequenceParallel", R"doc(
Sequence-parallel LayerNorm: weight and bias Replicate, the input made
Shard(sequence_dim) on tp, each rank normalising its slice of the sequence.
)doc")
      .def(py::init([](int64_t sequence_dim, py::object use_local_output) {
             check_use_local_output(use_local_output, "SequenceParallel");
             return SequenceParallel{sequence_dim};
           }),
           py::kw_only(), py::arg("sequence_dim") = 1, py::arg("use_local_output") = py::none())
      .def_readwrite("sequence_dim", &SequenceParallel::sequence_dim)
      .def("__repr__", [](const SequenceParallel& s) { return style_repr(s); });

  py::class_<PrepareModuleInput>(pm, "PrepareModuleInput",
                                 "Any module: its input moved to desired_input_layouts on tp.")
      .def(py::init([](py::object input_layouts, py::object desired, py::object use_local_output) {
             check_use_local_output(use_local_output, "PrepareModuleInput");
             PrepareModuleInput s;
             s.input_layouts = optional_placement(input_layouts, "PrepareModuleInput");
             if (!desired.is_none()) s.desired_input_layouts = one_placement(desired, "PrepareModuleInput");
             return s;
           }),
           py::kw_only(), py::arg("input_layouts") = py::none(),
           py::arg("desired_input_layouts") = py::none(), py::arg("use_local_output") = py::none())
      .def("__repr__", [](const PrepareModuleInput& s) { return style_repr(s); });

  py::class_<PrepareModuleOutput>(pm, "PrepareModuleOutput",
                                  "Any module: its output moved to desired_output_layouts on tp.")
      .def(py::init([](py::object output_layouts, py::object desired, py::object use_local_output) {
             check_use_local_output(use_local_output, "PrepareModuleOutput");
             PrepareModuleOutput s;
             s.output_layouts = optional_placement(output_layouts, "PrepareModuleOutput");
             if (!desired.is_none()) s.desired_output_layouts = one_placement(desired, "PrepareModuleOutput");
             return s;
           }),
           py::kw_only(), py::arg("output_layouts") = py::none(),
           py::arg("desired_output_layouts") = py::none(), py::arg("use_local_output") = py::none())
      .def("__repr__", [](const PrepareModuleOutput& s) { return style_repr(s); });

  pm.def("parallelize_module",
         [](py::object module, py::object device_mesh, py::object plan) {
           auto& mod = cast_arg<nn::Module&>(module, "parallelize_module(module)", "a dtensor.nn.Module");
           const int tp = tp_dim_of(mod.mesh(), device_mesh, "parallelize_module");
           ParallelizePlan p = plan_from_python(plan);
           {
             py::gil_scoped_release release;
             parallelize_module(mod, tp, p);
           }
           return module;
         },
         py::arg("module"), py::arg("device_mesh"), py::arg("parallelize_plan"), R"doc(
Applies a plan of parallel styles ({dotted module name (may hold *): style},
or one style for the module itself) on the tensor-parallel mesh dim
`device_mesh` (mesh["tp"], or the dim's index or name). Parameters are
replaced in place (make the optimizer after); returns the module.
)doc");

  bind_fsdp_policies(pm);
  pm.def("fully_shard",
         [](py::object module, py::object mesh, py::object reshard_after_forward,
            py::object shard_placement_fn, py::object mp_policy, py::object offload_policy,
            bool prefetch, bool async_reduce_scatter) {
           auto& mod = cast_arg<nn::Module&>(module, "fully_shard(module)", "a dtensor.nn.Module");
           check_offload_policy(offload_policy);
           FullyShardOptions o;
           o.mp_policy = mp_policy_from(mp_policy, "fully_shard");
           o.prefetch = prefetch;
           o.async_reduce_scatter = async_reduce_scatter;
           if (!shard_placement_fn.is_none()) {
             // Called during fully_shard only (the GIL released around it).
             o.shard_placement_fn = [&shard_placement_fn](const std::string&,
                                                          const DTensor& p) -> std::optional<Placement> {
               py::gil_scoped_acquire gil;
               py::object r = shard_placement_fn(p);
               if (r.is_none()) return std::nullopt;
               return cast_arg<Placement>(r, "shard_placement_fn's result", "a Shard or None");
             };
           }
           if (py::isinstance<DeviceMesh>(mesh) && mesh.cast<const DeviceMesh&>().ndim() == 2) {
             // FSDP2's HSDP: a 2-d mesh is (replicate, shard).
             const auto& sub = mesh.cast<const DeviceMesh&>();
             o.replicate_mesh_dims =
                 mesh_dims_covering(mod.mesh(), sub, sub.root_dims(0), "fully_shard");
             o.mesh_dims = mesh_dims_covering(mod.mesh(), sub, sub.root_dims(1), "fully_shard");
           } else if (!mesh.is_none()) {
             o.mesh_dims = mesh_dims_of(mod.mesh(), mesh, "fully_shard");
           }
           // A bool, or FSDP2's int (the group size to reshard to).
           if (py::isinstance<py::bool_>(reshard_after_forward))
             o.reshard_after_forward = reshard_after_forward.cast<bool>();
           else
             o.reshard_after_forward = cast_arg<int>(reshard_after_forward,
                                                     "fully_shard's reshard_after_forward",
                                                     "a bool or an int");
           {
             py::gil_scoped_release release;
             fully_shard(mod, o);
           }
           return module;
         },
         py::arg("module"), py::kw_only(), py::arg("mesh") = py::none(),
         py::arg("reshard_after_forward") = true, py::arg("shard_placement_fn") = py::none(),
         py::arg("mp_policy") = py::none(), py::arg("offload_policy") = py::none(),
         py::arg("prefetch") = false, py::arg("async_reduce_scatter") = false,
         R"doc(
FSDP2: shards the module's parameters (those no inner fully_shard manages)
Shard(0) over the data-parallel mesh dims `mesh` (mesh["dp"], a dim index or
name, or a list of them, flattened; default dim 0), all-gathered as one group
around its forward and reduce-scattered in backward. A 2-d mesh
(mesh["replicate", "shard"]) is FSDP2's HSDP: replicated over its first dim,
sharded over its second, gradients reduce-scattered then all-reduced.
shard_placement_fn(param) -> Shard(d) or None (Shard(0)) picks another dim
to shard a parameter on. reshard_after_forward may be an int k: keep the
parameters sharded over runs of k consecutive ranks after forward, so
backward gathers over k ranks. prefetch=True starts the next module's gather
one module early (FSDP2's implicit prefetching; explicit lists with
Module.set_modules_to_forward_prefetch / backward). async_reduce_scatter=True
lets each module's gradient reduce_scatter run while the next module's
backward computes (the same bits). mp_policy: a MixedPrecisionPolicy.
offload_policy: None or OffloadPolicy() (CPUOffloadPolicy is refused). Apply
bottom-up, after tensor parallelism and before making the optimizer.
Returns the module.
)doc");
  pm.def("reduce_scatters_in_flight", [] { return reduce_scatters_in_flight(); }, R"doc(
How many gradient reduce_scatters fully_shard(async_reduce_scatter=True) has
started and not yet waited for: 1 while the next module's backward computes,
0 once backward has returned. For tests and debugging.
)doc");
  pm.def("replicate",
         [](py::object module, py::object mesh, py::object mp_policy) {
           auto& mod = cast_arg<nn::Module&>(module, "replicate(module)", "a dtensor.nn.Module");
           ReplicateOptions o;
           if (!mesh.is_none()) o.mesh_dims = mesh_dims_of(mod.mesh(), mesh, "replicate");
           o.mp_policy = mp_policy_from(mp_policy, "replicate");
           {
             py::gil_scoped_release release;
             replicate(mod, o);
           }
           return module;
         },
         py::arg("module"), py::kw_only(), py::arg("mesh") = py::none(),
         py::arg("mp_policy") = py::none(),
         "DDP: parameters Replicate over `mesh`, each gradient all-reduced over it in "
         "backward. Returns the module.");
  pm.def("is_fully_sharded", &is_fully_sharded, py::arg("module"));
  // What state_dict() calls first (FSDP2's state-dict hook): every
  // fully_shard group under the module drops its gathered values, if any.
  pm.def("_reshard_all", [](nn::Module& m) { reshard(m, /*recurse=*/true, /*if_any=*/true); },
         py::arg("module"));

  // FSDP2's FSDPModule methods, on every dtensor.nn.Module (they throw for
  // one fully_shard was not applied to).
  py::object module_cls = m.attr("nn").attr("Module");
  auto method = [&](const char* name, py::cpp_function f) { py::setattr(module_cls, name, f); };
  method("set_requires_gradient_sync",
         py::cpp_function(
             [](nn::Module& m, bool requires_gradient_sync, bool recurse) {
               set_requires_gradient_sync(m, requires_gradient_sync, recurse);
             },
             py::name("set_requires_gradient_sync"), py::is_method(module_cls),
             py::arg("requires_gradient_sync"), py::kw_only(), py::arg("recurse") = true,
             "FSDP2's: while False, backward reduce-scatters nothing and accumulates the "
             "unsharded gradients (gradient accumulation); the next backward with sync "
             "reduces their sum."));
  method("reshard",
         py::cpp_function([](nn::Module& m) { reshard(m); }, py::name("reshard"),
                          py::is_method(module_cls),
                          "FSDP2's: drop the module's gathered parameters (a root keeps them "
                          "from forward until backward); the parameters are the shards again."));
  method("set_reshard_after_forward",
         py::cpp_function(
             [](nn::Module& m, bool reshard_after_forward, bool recurse) {
               set_reshard_after_forward(m, reshard_after_forward, recurse);
             },
             py::name("set_reshard_after_forward"), py::is_method(module_cls),
             py::arg("reshard_after_forward"), py::kw_only(), py::arg("recurse") = true,
             "FSDP2's: whether to free the unsharded parameters after forward."));
  method("set_gradient_divide_factor",
         py::cpp_function([](nn::Module& m, double factor) { set_gradient_divide_factor(m, factor); },
                          py::name("set_gradient_divide_factor"), py::is_method(module_cls),
                          py::arg("factor"),
                          "FSDP2's: the module's reduced gradients are divided by factor "
                          "(default 1: dtensor's reduce-scatter sums, the loss being the "
                          "global batch's mean)."));

  for (const char* which : {"forward", "backward"}) {
    const bool forward = std::string(which) == "forward";
    const std::string name = std::string("set_modules_to_") + which + "_prefetch";
    method(name.c_str(),
           py::cpp_function(
               [forward](nn::Module& m, py::list modules) {
                 std::vector<nn::Module*> list;
                 for (py::handle h : modules)
                   list.push_back(&cast_arg<nn::Module&>(py::reinterpret_borrow<py::object>(h),
                                                         "the modules to prefetch",
                                                         "dtensor.nn.Modules"));
                 if (forward)
                   set_modules_to_forward_prefetch(m, list);
                 else
                   set_modules_to_backward_prefetch(m, list);
               },
               py::name(name.c_str()), py::is_method(module_cls), py::arg("modules"),
               "FSDP2's: after this module gathers, start the gathers of these "
               "fully_shard'ed modules (explicit prefetching)."));
  }

  // ---- the standalone layers of parallel.h -----------------------------------------
  py::class_<ColumnParallelLinear> col(pm, "ColumnParallelLinear",
                                      "Megatron's column-parallel Linear: W Shard(0) on tp.");
  col.def(py::init([](const DeviceMesh& mesh, py::object tp, py::object w, py::object b, py::object out) {
            std::optional<Tensor> bias;
            if (!b.is_none()) bias = tensor_from_python(b);
            return ColumnParallelLinear(mesh, tp_dim_of(mesh, tp, "ColumnParallelLinear"),
                                        tensor_from_python(w), bias,
                                        out.is_none() ? Shard(-1) : one_placement(out, "ColumnParallelLinear"));
          }),
          py::arg("device_mesh"), py::arg("tp"), py::arg("weight"), py::arg("bias") = py::none(),
          py::arg("output") = py::none());
  bind_layer_accessors(col);
  col.def_property_readonly("bias", [](const ColumnParallelLinear& l) -> std::optional<DTensor> {
    if (l.bias() == nullptr) return std::nullopt;
    return *l.bias();
  });

  py::class_<RowParallelLinear> row(pm, "RowParallelLinear",
                                   "Megatron's row-parallel Linear: W Shard(1) on tp.");
  row.def(py::init([](const DeviceMesh& mesh, py::object tp, py::object w, py::object b, py::object out) {
            std::optional<Tensor> bias;
            if (!b.is_none()) bias = tensor_from_python(b);
            return RowParallelLinear(mesh, tp_dim_of(mesh, tp, "RowParallelLinear"),
                                     tensor_from_python(w), bias,
                                     out.is_none() ? Replicate() : one_placement(out, "RowParallelLinear"));
          }),
          py::arg("device_mesh"), py::arg("tp"), py::arg("weight"), py::arg("bias") = py::none(),
          py::arg("output") = py::none());
  bind_layer_accessors(row);
  row.def_property_readonly("bias", [](const RowParallelLinear& l) -> std::optional<DTensor> {
    if (l.bias() == nullptr) return std::nullopt;
    return *l.bias();
  });

  py::class_<VocabParallelEmbedding> emb(pm, "VocabParallelEmbedding",
                                        "Megatron's vocabulary-parallel embedding: the table Shard(0) on tp.");
  emb.def(py::init([](const DeviceMesh& mesh, py::object tp, py::object table, py::object out) {
            return VocabParallelEmbedding(mesh, tp_dim_of(mesh, tp, "VocabParallelEmbedding"),
                                          tensor_from_python(table),
                                          out.is_none() ? Replicate() : one_placement(out, "VocabParallelEmbedding"));
          }),
          py::arg("device_mesh"), py::arg("tp"), py::arg("weight"), py::arg("output") = py::none());
  bind_layer_accessors(emb);

  py::class_<SequenceParallelLayerNorm> ln(pm, "SequenceParallelLayerNorm",
                                          "A LayerNorm on sequence shards over tp.");
  ln.def(py::init([](const DeviceMesh& mesh, py::object tp, py::object w, py::object b,
                     int64_t sequence_dim, double eps) {
           return SequenceParallelLayerNorm(mesh, tp_dim_of(mesh, tp, "SequenceParallelLayerNorm"),
                                            tensor_from_python(w), tensor_from_python(b),
                                            sequence_dim, eps);
         }),
         py::arg("device_mesh"), py::arg("tp"), py::arg("weight"), py::arg("bias"),
         py::arg("sequence_dim") = 1, py::arg("eps") = 1e-5);
  bind_layer_accessors(ln);
  ln.def_property_readonly("bias", &SequenceParallelLayerNorm::bias);

  pm.def("vocab_parallel_cross_entropy",
         [](const DTensor& logits, const DTensor& target, py::object tp, int64_t ignore_index,
            std::optional<DTensor> weight, const std::string& reduction, int64_t class_dim) {
           const int d = tp_dim_of(logits.mesh(), tp, "vocab_parallel_cross_entropy");
           VocabParallelLossOptions o;
           o.ignore_index = ignore_index;
           o.weight = std::move(weight);
           o.reduction = parse_reduction(reduction);
           o.class_dim = class_dim;
           py::gil_scoped_release release;
           return vocab_parallel_cross_entropy(logits, target, d, o);
         },
         py::arg("logits"), py::arg("target"), py::arg("tp"), py::arg("ignore_index") = -100,
         py::kw_only(), py::arg("weight") = py::none(), py::arg("reduction") = "mean",
         py::arg("class_dim") = -1,
         "Cross-entropy of logits sharded on the class dim over tp (loss_parallel), without "
         "gathering them: F.cross_entropy's weight (per class), reduction ('mean', 'sum', "
         "'none') and ignore_index; class_dim -1 (last) or 1 (F.cross_entropy's (N, C, ...)).");
  pm.def("with_placement",
         [](const DTensor& x, py::object mesh_dim, const Placement& p) {
           const int d = tp_dim_of(x.mesh(), mesh_dim, "with_placement");
           py::gil_scoped_release release;
           return with_placement(x, d, p);
         },
         py::arg("input"), py::arg("mesh_dim"), py::arg("placement"),
         "x redistributed so that one mesh dim has placement p (the others keep theirs).");

  // The PyTorch spellings at the top level too: dtensor.parallelize_module, ...
  for (const char* name : {"ColwiseParallel", "RowwiseParallel", "SequenceParallel",
                           "PrepareModuleInput", "PrepareModuleOutput", "parallelize_module",
                           "fully_shard", "replicate", "is_fully_sharded",
                           "MixedPrecisionPolicy", "OffloadPolicy", "CPUOffloadPolicy"})
    m.attr(name) = pm.attr(name);
  py::module_::import("sys").attr("modules")["dtensor.parallel"] = pm;
}

}  // namespace dtensor::python
