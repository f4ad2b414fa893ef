// dtensor.checkpoint: distributed checkpoints as torch.distributed.checkpoint
// (DCP) offers them:
//
//   import dtensor.checkpoint as dcp
//   dcp.save({"model": model.state_dict(), "step": 100}, checkpoint_id="ckpt/step-100")
//   state = {"model": model.state_dict(), "step": 0}          # any layout
//   dcp.load(state, checkpoint_id="ckpt/step-100")            # in place
//
// A state dict is a Python dict of DTensors, Tensors (or NumPy arrays) and
// plain values (bool, int, float, str, lists of ints or floats); nested
// dicts are flattened with dotted keys, as DCP does. load() writes DTensors
// and tensors in place (every copy sees the values: the module's parameter,
// the optimizer's) and puts loaded values back into the dict. save/load
// release the GIL while they run.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <utility>
#include <vector>

#include "bindings.h"
#include "casters.h"
#include "dtensor/checkpoint.h"
#include "dtensor/nn.h"
#include "dtensor/optim.h"

namespace dtensor::python {

namespace {

namespace ck = dtensor::checkpoint;

py::object value_to_python(const ck::Value& v) {
  return std::visit([](const auto& x) -> py::object { return py::cast(x); }, v);
}

// An int, or an integer scalar such as numpy.int64 (an ndarray has
// __index__ too, but is a sequence: it is a tensor entry).
bool is_int(py::handle h) {
  return !PyBool_Check(h.ptr()) && !PyFloat_Check(h.ptr()) &&
         (PyLong_Check(h.ptr()) || (PyIndex_Check(h.ptr()) && !PySequence_Check(h.ptr())));
}

// An int a checkpoint can hold: int64 (an int beyond it is an error, not a
// wrapped value).
int64_t int_value(py::handle h, const std::string& name) {
  return cast_arg<int64_t>(h, "checkpoint: '" + name + "'",
                           "an int that fits int64 (-2**63 .. 2**63-1; a checkpoint stores ints as int64)");
}

std::optional<ck::Value> value_from_python(py::handle h, const std::string& name) {
  if (PyBool_Check(h.ptr())) return ck::Value(h.cast<bool>());
  if (is_int(h)) return ck::Value(int_value(h, name));
  if (PyFloat_Check(h.ptr())) return ck::Value(h.cast<double>());
  if (PyUnicode_Check(h.ptr())) return ck::Value(h.cast<std::string>());
  if (py::isinstance<py::list>(h) || py::isinstance<py::tuple>(h)) {
    bool all_int = true, all_number = true;
    for (py::handle item : h) {
      all_int = all_int && is_int(item);
      all_number = all_number && (is_int(item) || PyFloat_Check(item.ptr()));
    }
    if (all_int) {
      std::vector<int64_t> v;
      for (py::handle item : h) v.push_back(int_value(item, name + "[" + std::to_string(v.size()) + "]"));
      return ck::Value(std::move(v));
    }
    if (all_number) return ck::Value(h.cast<std::vector<double>>());
  }
  return std::nullopt;
}

// One flattened entry: where it came from in the (nested) Python dict.
struct Slot {
  py::dict owner;
  py::object key;
};

void flatten(py::dict d, const std::string& prefix, ck::StateDict& out, std::map<std::string, Slot>& slots) {
  for (auto [k, v] : d) {
    const std::string name = prefix + py::str(k).cast<std::string>();
    if (py::isinstance<py::dict>(v)) {
      flatten(py::reinterpret_borrow<py::dict>(v), name + ".", out, slots);
      continue;
    }
    DT_CHECK(out.count(name) == 0, "checkpoint: the key '", name, "' appears twice after "
             "flattening nested dicts");
    slots.emplace(name, Slot{d, py::reinterpret_borrow<py::object>(k)});
    if (py::isinstance<DTensor>(v)) {
      out.emplace(name, v.cast<DTensor>());
    } else if (py::isinstance<Tensor>(v)) {
      out.emplace(name, v.cast<Tensor>());
    } else if (std::optional<ck::Value> value = value_from_python(v, name)) {
      out.emplace(name, *value);
    } else if (py::hasattr(v, "__array__") || py::hasattr(v, "__dlpack__")) {
      out.emplace(name, tensor_from_python(v, "checkpoint: '" + name + "'"));  // aliases a NumPy array when it can
    } else {
      DT_THROW("checkpoint: '", name, "' is a ", type_name(v),
               "; a state dict holds DTensors, Tensors, arrays, bool, int, float, str and lists "
               "of ints or floats");
    }
  }
}

// After load: the entries that are not loaded in place go back into the dict.
void write_back(const ck::StateDict& state, const std::map<std::string, Slot>& slots) {
  for (const auto& [name, entry] : state) {
    auto it = slots.find(name);
    if (it == slots.end()) continue;
    py::object current = it->second.owner[it->second.key];
    if (const auto* v = std::get_if<ck::Value>(&entry)) {
      it->second.owner[it->second.key] = value_to_python(*v);
    } else if (const auto* t = std::get_if<Tensor>(&entry)) {
      // A Tensor loaded in place still shares the given object's memory; a
      // new one (another shape) replaces it. A NumPy array stays an array.
      if (py::isinstance<Tensor>(current)) it->second.owner[it->second.key] = *t;
      else it->second.owner[it->second.key] = py::module_::import("numpy").attr("asarray")(*t);
    }
  }
}

// load() and import_safetensors(): read into the flattened state with the
// GIL released, then write plain values and replaced entries back into the
// Python dict. read(state, options) is the C++ loader.
template <class Read>
void load_into(py::dict state_dict, bool strict, const std::optional<World>& world, Read read) {
  ck::StateDict state;
  std::map<std::string, Slot> slots;
  flatten(state_dict, "", state, slots);
  ck::LoadOptions o;
  o.world = world;
  o.strict = strict;
  {
    py::gil_scoped_release release;
    read(state, o);
  }
  write_back(state, slots);
}

std::string path_of(py::handle p) {
  return py::str(py::module_::import("os").attr("fspath")(p)).cast<std::string>();
}

py::dict metadata_to_python(const ck::Metadata& md) {
  py::dict out, tensors, values;
  out["version"] = md.version;
  out["world_size"] = md.world_size;
  out["block_bytes"] = md.block_bytes;
  out["files"] = md.files;
  for (const auto& [name, t] : md.tensors) {
    py::dict e;
    e["shape"] = py::cast(t.shape);
    e["dtype"] = py::cast(t.dtype);
    e["saved_layout"] = t.saved_layout;
    py::list chunks;
    for (const auto& c : t.chunks) {
      py::dict cd;
      cd["offsets"] = py::cast(c.offsets);
      cd["sizes"] = py::cast(c.sizes);
      cd["file"] = c.file;
      cd["byte_offset"] = c.byte_offset;
      cd["byte_size"] = c.byte_size;
      chunks.append(cd);
    }
    e["chunks"] = chunks;
    tensors[py::str(name)] = e;
  }
  for (const auto& [name, v] : md.values) values[py::str(name)] = value_to_python(v);
  out["tensors"] = tensors;
  out["values"] = values;
  return out;
}

py::dict state_dict_to_python(const ck::StateDict& state) {
  py::dict out;
  for (const auto& [name, entry] : state)
    out[py::str(name)] = std::visit(
        [](const auto& e) -> py::object {
          if constexpr (std::is_same_v<std::decay_t<decltype(e)>, ck::Value>) return value_to_python(e);
          else return py::cast(e);
        },
        entry);
  return out;
}

}  // namespace

void bind_checkpoint(py::module_& m) {
  py::module_ cm = m.def_submodule(
      "checkpoint", "Distributed checkpoints (torch.distributed.checkpoint): save from any "
                    "layout, load into any other.");

  cm.def("save",
         [](py::dict state_dict, py::object checkpoint_id, std::optional<World> world, int64_t block_bytes) {
           DT_CHECK(!checkpoint_id.is_none(), "checkpoint.save: checkpoint_id (the directory) is required");
           ck::StateDict state;
           std::map<std::string, Slot> slots;
           flatten(state_dict, "", state, slots);
           ck::SaveOptions o;
           o.world = world;
           o.block_bytes = block_bytes;
           const std::string dir = path_of(checkpoint_id);
           py::gil_scoped_release release;
           ck::save(state, dir, o);
         },
         py::arg("state_dict"), py::arg("checkpoint_id") = py::none(), py::kw_only(),
         py::arg("world") = py::none(), py::arg("block_bytes") = int64_t{4} << 20, R"doc(
Saves the state dict into directory `checkpoint_id` (metadata.json and one data
file per writing rank; written to DIR.partial and renamed once complete). Every
rank calls it with the same names and layouts. `world` is needed only when
the state holds no DTensor.
)doc");

  cm.def("load",
         [](py::dict state_dict, py::object checkpoint_id, bool strict, std::optional<World> world) {
           DT_CHECK(!checkpoint_id.is_none(), "checkpoint.load: checkpoint_id (the directory) is required");
           const std::string dir = path_of(checkpoint_id);
           load_into(state_dict, strict, world,
                     [&](ck::StateDict& state, const ck::LoadOptions& o) { ck::load(state, dir, o); });
         },
         py::arg("state_dict"), py::arg("checkpoint_id") = py::none(), py::kw_only(),
         py::arg("strict") = true, py::arg("world") = py::none(), R"doc(
Loads `checkpoint_id` into the state dict, resharding into each DTensor's own
layout (in place: placements, storage and autograd state stay). Tensors are
loaded in place when their shape and dtype match; plain values are replaced in
the dict. strict=False leaves entries the checkpoint lacks as they are.
)doc");

  cm.def("read_metadata", [](py::object dir) { return metadata_to_python(ck::read_metadata(path_of(dir))); },
         py::arg("checkpoint_id"), "What metadata.json says (no data file is read).");
  cm.def("verify",
         [](py::object dir) {
           const std::string d = path_of(dir);
           py::gil_scoped_release release;
           ck::verify(d);
         },
         py::arg("checkpoint_id"), "Reads every data file and checks every block's checksum.");

  cm.def("export_safetensors",
         [](py::dict state_dict, py::object path, std::optional<World> world) {
           ck::StateDict state;
           std::map<std::string, Slot> slots;
           flatten(state_dict, "", state, slots);
           ck::SaveOptions o;
           o.world = world;
           const std::string p = path_of(path);
           py::gil_scoped_release release;
           ck::export_safetensors(state, p, o);
         },
         py::arg("state_dict"), py::arg("path"), py::kw_only(), py::arg("world") = py::none(),
         "Writes the tensors as one safetensors file (values into its __metadata__).");
  cm.def("import_safetensors",
         [](py::dict state_dict, py::object path, bool strict, std::optional<World> world) {
           const std::string p = path_of(path);
           load_into(state_dict, strict, world, [&](ck::StateDict& state, const ck::LoadOptions& o) {
             ck::import_safetensors(state, p, o);
           });
         },
         py::arg("state_dict"), py::arg("path"), py::kw_only(), py::arg("strict") = true,
         py::arg("world") = py::none(), "Loads a safetensors file into the state dict, as load().");

  cm.def("get_state_dict",
         [](nn::Module& model, optim::Optimizer* optimizer, optim::LRScheduler* scheduler) {
           return state_dict_to_python(ck::get_state_dict(model, optimizer, scheduler));
         },
         py::arg("model"), py::arg("optimizer") = py::none(), py::arg("lr_scheduler") = py::none(),
         R"doc(
The state of a model, its optimizer and schedule as one flat dict whose DTensors
alias the live parameters and optimizer buffers: "blocks.0.fc.weight",
"optim.<param>.exp_avg", "optim.<param>.step", "optim.lr",
"lr_scheduler.last_epoch". (PyTorch's get_state_dict returns the model's and
the optimizer's separately.)
)doc");
  cm.def("set_state_dict",
         [](py::dict state_dict, nn::Module& model, optim::Optimizer* optimizer,
            optim::LRScheduler* scheduler) {
           ck::StateDict state;
           std::map<std::string, Slot> slots;
           flatten(state_dict, "", state, slots);
           ck::set_state_dict(state, model, optimizer, scheduler);
         },
         py::arg("state_dict"), py::arg("model"), py::arg("optimizer") = py::none(),
         py::arg("lr_scheduler") = py::none(),
         "Applies a loaded get_state_dict() dict: step counts, lr, epoch, buffers.");

  cm.attr("FORMAT_VERSION") = ck::kFormatVersion;
  py::module_::import("sys").attr("modules")["dtensor.checkpoint"] = cm;
}

}  // namespace dtensor::python
