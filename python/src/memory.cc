// dtensor.MemoryTracker, dtensor.memory_stats and
// dtensor.utils.checkpoint.checkpoint (dtensor/memory.h, nn.h): what each
// rank holds, and activation checkpointing of a Python function.
#include "dtensor/memory.h"

#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>

#include "bindings.h"
#include "casters.h"
#include "dtensor/nn.h"
#include "dtensor/optim.h"

namespace dtensor::python {

namespace {

py::dict rank_dict(const RankMemory& m) {
  py::dict d;
  d["rank"] = m.rank;
  d["parameters"] = m.parameters;
  d["gradients"] = m.gradients;
  d["optimizer_state"] = m.optimizer_state;
  d["activations"] = m.activations;
  return d;
}

py::dict stats_dict(const MemoryStats& s) {
  py::dict d;
  d["allocated"] = s.allocated;
  d["peak_allocated"] = s.peak_allocated;
  d["reserved"] = s.reserved;
  d["peak_reserved"] = s.peak_reserved;
  d["unsharded_parameters"] = s.unsharded_parameters;
  d["peak_unsharded_parameters"] = s.peak_unsharded_parameters;
  d["communication_buffers"] = s.communication_buffers;
  d["peak_communication_buffers"] = s.peak_communication_buffers;
  return d;
}

}  // namespace

void bind_memory(py::module_& m) {
  m.def(
      "memory_stats", [] { return stats_dict(memory_stats()); },
      "This process's allocator figures in bytes: allocated, peak_allocated, reserved, "
      "peak_reserved (torch.cuda.memory_stats's, for dtensor's allocator), and "
      "fully_shard's unsharded_parameters and communication_buffers with their peaks.");
  m.def(
      "reset_peak_memory_stats",
      [] {
        reset_peak_memory_stats();
        reset_peak_resident();
      },
      "Starts the peaks (and the resident set's high-water mark) again from now.");

  py::class_<MemoryTracker>(m, "MemoryTracker", R"doc(
What each rank holds, by category, and the process's measured peaks
(PyTorch's fsdp2_mem_tracker):

    tracker = dtensor.MemoryTracker(model, optimizer)
    loss = loss_fn(model(x), y)
    tracker.after_forward(loss)      # the activations kept for backward
    loss.backward(); optimizer.step()
    report = tracker.report()        # {"ranks": [...], "peak_allocated": ..., ...}
)doc")
      .def(py::init([](nn::Module& model, optim::Optimizer* optimizer) {
             return std::make_unique<MemoryTracker>(model, optimizer);
           }),
           py::arg("model"), py::arg("optimizer") = nullptr, py::keep_alive<1, 2>(),
           py::keep_alive<1, 3>())
      .def("after_forward", &MemoryTracker::after_forward, py::arg("loss"))
      .def(
          "report",
          [](const MemoryTracker& t) {
            const MemoryReport r = t.report();
            py::dict d;
            py::list ranks;
            for (const RankMemory& m : r.ranks) ranks.append(rank_dict(m));
            d["ranks"] = ranks;
            d["peak_allocated"] = r.process.peak_allocated;
            d["peak_reserved"] = r.process.peak_reserved;
            d["peak_unsharded_parameters"] = r.process.peak_unsharded_parameters;
            d["peak_communication_buffers"] = r.process.peak_communication_buffers;
            d["reserved_at_start"] = r.reserved_at_start;
            d["resident_at_start"] = r.resident_at_start;
            d["peak_resident"] = r.peak_resident;
            d["table"] = r.table();
            return d;
          },
          "Bytes per held rank (parameters, gradients, optimizer_state, activations) and the "
          "process's peaks since the tracker started; 'table' is the printed form.");

  // torch.utils.checkpoint.checkpoint (non-reentrant).
  py::module_ utils = m.def_submodule("utils", "torch.utils's activation checkpointing.");
  py::module_ cp = utils.def_submodule("checkpoint", "torch.utils.checkpoint.");
  // create_selective_checkpoint_contexts's result: the ops to keep.
  py::class_<nn::CheckpointPolicy>(cp, "SelectiveCheckpointContexts", R"doc(
What create_selective_checkpoint_contexts returns: the ops whose outputs a
checkpointed region keeps (save_ops).
)doc")
      .def_readonly("save_ops", &nn::CheckpointPolicy::save_ops);
  cp.def(
      "create_selective_checkpoint_contexts",
      [](const py::iterable& ops) {
        nn::CheckpointPolicy policy;
        for (const py::handle& op : ops) {
          // A name, or a dtensor function (its __name__: dtensor.mm -> "mm").
          if (py::isinstance<py::str>(op)) policy.save_ops.push_back(op.cast<std::string>());
          else if (py::hasattr(op, "__name__"))
            policy.save_ops.push_back(op.attr("__name__").cast<std::string>());
          else
            DT_THROW("create_selective_checkpoint_contexts: expected op names or dtensor "
                     "functions, got ", py::str(op).cast<std::string>());
        }
        nn::check_checkpoint_policy(policy);
        return policy;
      },
      py::arg("ops_to_save"), R"doc(
Selective activation checkpointing (torch.utils.checkpoint's, with a list of
ops, all MUST_SAVE): pass as checkpoint(fn, x, context_fn=lambda:
create_selective_checkpoint_contexts(["mm", "scaled_dot_product_attention"])).
The region keeps these ops' outputs and the recomputation does not run them
again. Ops: names or dtensor functions among mm, addmm, bmm, baddbmm, matmul,
linear, scaled_dot_product_attention.
)doc");
  cp.def(
      "checkpoint",
      [](py::function fn, const DTensor& x, bool use_reentrant, py::object context_fn) {
        DT_CHECK(!use_reentrant,
                 "checkpoint: use_reentrant=True is not supported; dtensor's "
                 "checkpoint is PyTorch's non-reentrant one (use_reentrant=False)");
        nn::CheckpointPolicy policy;
        if (!context_fn.is_none())
          policy = cast_arg<nn::CheckpointPolicy>(
              context_fn(), "checkpoint's context_fn()",
              "the result of create_selective_checkpoint_contexts(...)");
        std::shared_ptr<py::object> f = keep(fn);
        return nn::checkpoint(
            [f](const DTensor& in) {
              py::gil_scoped_acquire gil;
              return cast_arg<DTensor>((*f)(in), "the checkpointed function's result", "a DTensor");
            },
            x, policy);
      },
      py::arg("function"), py::arg("input"), py::kw_only(), py::arg("use_reentrant") = false,
      py::arg("context_fn") = py::none(),
      R"doc(
function(input), keeping nothing for backward: backward runs it again from
`input` (with the random generator's state and autocast of the first run)
to remake the tensors its ops saved. The gradients are the same, bit for
bit, provided the function runs the same ops on the same values.
context_fn: a function returning create_selective_checkpoint_contexts(ops),
whose ops' outputs are kept and not run again.
)doc");
  py::object modules = py::module_::import("sys").attr("modules");
  modules["dtensor.utils"] = utils;
  modules["dtensor.utils.checkpoint"] = cp;
}

}  // namespace dtensor::python
