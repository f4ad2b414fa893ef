// Users' ops with their own sharding rule (include/dtensor/custom_op.h).
//
// Each registration gets an index and an OpRule of its own (so errors carry
// its name); its schema is OpId::Custom with the index as first argument,
// so the propagation cache keeps registrations apart. The rule's functions
// find the registration by that index. Registrations live for the program:
// the cache may hold their layouts at any time.
#include <deque>
#include <mutex>

#include "autograd/graph.h"
#include "dispatch/dispatch.h"
#include "dtensor/custom_op.h"

namespace dtensor {

using namespace dispatch;

namespace {

struct Entry {
  CustomOpDef def;
  OpRule rule;
};

struct Registry {
  std::mutex mu;
  std::deque<Entry> entries;  // a deque: entries never move
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: ops may run during exit
  return *r;
}

const Entry& entry(int64_t id) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  DT_CHECK(id >= 0 && id < static_cast<int64_t>(r.entries.size()),
           "internal error: no custom op ", id);
  return r.entries[static_cast<size_t>(id)];
}

std::vector<TensorMeta> metas_of(const OpSchema& s) {
  std::vector<TensorMeta> metas;
  for (int i = 0; i < s.num_inputs; ++i) metas.push_back(s.input(i).meta());
  return metas;
}

TensorMeta custom_meta(const OpSchema& s) {
  const CustomOpDef& def = entry(s.args[0]).def;
  const std::vector<TensorMeta> metas = metas_of(s);
  if (def.output_meta) return def.output_meta(metas);
  std::vector<Tensor> zeros;
  for (const TensorMeta& m : metas) zeros.push_back(Tensor::zeros(m.shape, m.dtype));
  const Tensor out = def.kernel(zeros);
  return {out.shape(), contiguous_strides(out.shape()), out.dtype()};
}

void custom_strategies(const OpSchema& s, const TensorMeta&, std::vector<DimStrategy>& c) {
  const CustomOpDef& def = entry(s.args[0]).def;
  for (const OpStrategy& st : def.strategies(metas_of(s))) {
    DT_CHECK(static_cast<int>(st.inputs.size()) == s.num_inputs, def.name, ": a strategy names ",
             st.inputs.size(), " input placements, the op has ", s.num_inputs, " inputs");
    DimStrategy d;
    for (int i = 0; i < s.num_inputs; ++i) d.in[i] = st.inputs[static_cast<size_t>(i)];
    d.out = st.output;
    c.push_back(d);
  }
}

}  // namespace

CustomOp register_sharding(CustomOpDef def) {
  DT_CHECK(!def.name.empty(), "register_sharding: the op needs a name");
  DT_CHECK(def.kernel != nullptr, "register_sharding: ", def.name, " has no kernel");
  DT_CHECK(def.strategies != nullptr, "register_sharding: ", def.name,
           " has no strategies (give an empty list to compute on Replicate)");
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  for (const Entry& e : r.entries)
    DT_CHECK(e.def.name != def.name, "register_sharding: an op named '", def.name,
             "' is already registered");
  Entry& e = r.entries.emplace_back();
  e.def = std::move(def);
  e.rule = OpRule{e.def.name.c_str(), custom_meta, custom_strategies};
  return CustomOp(static_cast<int64_t>(r.entries.size()) - 1);
}

const std::string& CustomOp::name() const { return entry(id_).def.name; }

Tensor CustomOp::operator()(const std::vector<Tensor>& inputs) const {
  return entry(id_).def.kernel(inputs);
}

DTensor CustomOp::operator()(const std::vector<DTensor>& inputs) const {
  const Entry& e = entry(id_);
  const int n = static_cast<int>(inputs.size());
  DT_CHECK(n >= 1 && n <= kMaxInputs, e.def.name, ": takes 1 to ", kMaxInputs,
           " DTensor inputs, got ", n);
  OpSchema schema(OpId::Custom, {}, {id_});
  const DTensor* ptrs[kMaxInputs];
  for (int i = 0; i < n; ++i) {
    schema.push_input(&inputs[static_cast<size_t>(i)].spec());
    ptrs[i] = &inputs[static_cast<size_t>(i)];
  }
  std::vector<const DTensor*> grad_inputs(ptrs, ptrs + n);
  const bool recording = autograd::recording(grad_inputs);
  DT_CHECK(!recording || e.def.backward != nullptr, e.def.name,
           ": an input requires grad but the op was registered without a backward (give "
           "CustomOpDef::backward, or call it under no_grad)");
  DTensor out = run(schema, e.rule, ptrs, [&](int rank, const Tensor* const* t,
                                              const OutputSharding& s) {
    std::vector<Tensor> local;
    for (int i = 0; i < n; ++i) local.push_back(*t[i]);
    Tensor r = e.def.kernel(local);
    const Shape want = output_local_shape(s, rank);
    DT_CHECK(r.shape() == want, e.def.name, ": the kernel made a tensor of shape ", r.shape(),
             " on rank ", rank, "; the layout ", to_string(s.output.placements()), " needs ", want);
    return r;
  });
  if (recording) {
    autograd::record(out, e.def.name.c_str(), grad_inputs, inputs,
                     [&e, n](const autograd::Context& c) {
                       std::vector<DTensor> saved;
                       for (int i = 0; i < n; ++i) saved.push_back(c.saved(static_cast<size_t>(i)));
                       std::vector<DTensor> g = e.def.backward(c.grad, saved);
                       DT_CHECK(static_cast<int>(g.size()) == n, e.def.name, ": backward gave ",
                                g.size(), " gradients for ", n, " inputs");
                       autograd::Grads out;
                       for (DTensor& x : g) out.emplace_back(std::move(x));
                       return out;
                     });
  }
  return out;
}

}  // namespace dtensor
