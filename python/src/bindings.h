// The binding files of the dtensor._dtensor extension: one concept per file,
// each adding its names to the module through one bind_xxx function that
// module.cc calls in the order below (a file may use the types of those
// before it, e.g. dtensor.cc the Tensor of tensor.cc).
//
// To add a file: write python/src/<concept>.cc with
//   void bind_<concept>(py::module_& m) { ... }
// declare it here and call it from module.cc. The CMake glob picks the file
// up. Conversions of Shape, Scalar, Placements and DType are in casters.h;
// long-running calls release the GIL (py::call_guard<py::gil_scoped_release>,
// `release_gil` in math_ops.h). A file adds methods to a class bound by
// another (e.g. requires_grad_ on DTensor) through
//   auto cls = py::reinterpret_borrow<py::class_<DTensor>>(m.attr("DTensor"));
// as interop.cc does for Tensor. Errors: throw dtensor::Error (DT_CHECK);
// it reaches Python as dtensor.Error with the message unchanged. A user's
// Python value converted inside a binding goes through cast_arg (casters.h),
// whose TypeError names where it went and what was expected; data becoming
// a Tensor goes through tensor_from_python (torch.tensor's dtype rules).
#pragma once

#include <pybind11/pybind11.h>

namespace dtensor::python {

namespace py = pybind11;

void bind_errors(py::module_& m);     // module.cc: dtensor.Error
void bind_tensor(py::module_& m);     // tensor.cc: dtype, Tensor and its ops
void bind_interop(py::module_& m);    // interop.cc: buffer protocol, NumPy, DLPack
void bind_world(py::module_& m);      // world.cc: World
void bind_current_rank(py::module_& m);  // current_rank.cc: current_rank, get_current_rank
void bind_mesh(py::module_& m);       // mesh.cc: DeviceMesh
void bind_placement(py::module_& m);  // placement.cc: Shard, Replicate, Partial, DTensorSpec
void bind_dtensor(py::module_& m);    // dtensor.cc: DTensor, distribute_tensor, from_local
void bind_ops(py::module_& m);        // ops.cc: the ops of ops.h and tensor.h as functions
void bind_conversions(py::module_& m);  // conversions.cc: item(), float(x), int(x), bool(x)
void bind_plan(py::module_& m);       // plan.cc: plan_redistribute, RedistributePlan
void bind_debug(py::module_& m);      // debug.cc: CommDebugMode, VerifyMode, visualize_sharding
void bind_autograd(py::module_& m);    // autograd.cc: requires_grad, backward, no_grad
void bind_optim(py::module_& m);       // optim.cc: dtensor.optim (SGD, AdamW, schedules)
void bind_nn(py::module_& m);          // nn.cc: dtensor.nn (Module, Linear, ...); after optim
void bind_parallel(py::module_& m);    // parallel.cc: parallelize_module, styles, fully_shard
void bind_loss_parallel(py::module_& m);  // loss_parallel.cc: dtensor.parallel.loss_parallel
void bind_checkpoint(py::module_& m);  // checkpoint.cc: dtensor.checkpoint (save, load)
void bind_memory(py::module_& m);      // memory.cc: MemoryTracker, utils.checkpoint
void bind_custom_op(py::module_& m);   // custom_op.cc: register_sharding, check_rules
void bind_estimate(py::module_& m);    // estimate.cc: dtensor.estimate, estimate_phase
// fast_ops.cc: C slots for + - * / of two DTensors or two Tensors; called
// last, once every class has its operators.
void install_fast_ops(py::module_& m);

}  // namespace dtensor::python
