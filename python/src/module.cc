// PYBIND11_MODULE for dtensor._dtensor: registers dtensor.Error, then lets
// each binding file (bindings.h) add its names. The pure-Python package
// (python/dtensor/__init__.py) re-exports them and adds init_device_mesh.
#include <pybind11/pybind11.h>

#include "bindings.h"
#include "dtensor/error.h"

namespace dtensor::python {

// dtensor::Error becomes dtensor.Error, a RuntimeError (as PyTorch raises
// RuntimeError for the same misuses: shape mismatches, bad layouts), with
// the C++ message unchanged.
void bind_errors(py::module_& m) {
  py::register_exception<dtensor::Error>(m, "Error", PyExc_RuntimeError);
}

}  // namespace dtensor::python

PYBIND11_MODULE(_dtensor, m) {
  namespace dp = dtensor::python;
  m.doc() = "dtensor: distributed tensors (DeviceMesh + Shard/Replicate/Partial) in C++20";
  dp::bind_errors(m);
  dp::bind_tensor(m);
  dp::bind_interop(m);
  dp::bind_world(m);
  dp::bind_current_rank(m);
  dp::bind_mesh(m);
  dp::bind_placement(m);
  dp::bind_dtensor(m);
  dp::bind_ops(m);
  dp::bind_conversions(m);
  dp::bind_plan(m);
  dp::bind_debug(m);
  dp::bind_autograd(m);
  dp::bind_optim(m);
  dp::bind_nn(m);
  dp::bind_parallel(m);
  dp::bind_loss_parallel(m);
  dp::bind_checkpoint(m);
  dp::bind_memory(m);
  dp::bind_custom_op(m);
  dp::bind_estimate(m);
  dp::install_fast_ops(m);
}
