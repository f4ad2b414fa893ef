// `dtensor plan`: the redistribution plan between two layouts, its steps and
// estimated cost under the topology cost model; --verify also runs it on a
// simulated world and checks the result against the original tensor.
#include <cmath>
#include <iostream>

#include "cli.h"
#include "dtensor/dtensor.h"

namespace dtensor::cli {

namespace {

// A number as JSON: an integer when it is one (bytes usually are).
nlohmann::ordered_json number_json(double x) {
  if (std::floor(x) == x && std::abs(x) < 9e15) return static_cast<int64_t>(x);
  return x;
}

// Registers --flatten groups: names ("A,B") or mesh dims ("0,1").
void declare_flattened(const DeviceMesh& mesh, const std::vector<std::string>& groups) {
  for (const std::string& g : groups) {
    const std::vector<std::string> items = split_list(g);
    bool numeric = true;
    for (const std::string& it : items)
      numeric = numeric && !it.empty() && it.find_first_not_of("0123456789") == std::string::npos;
    if (numeric) {
      std::vector<int> dims;
      for (const std::string& it : items) dims.push_back(std::stoi(it));
      mesh.flatten(dims);
    } else {
      mesh.flatten(items);
    }
  }
}

// Random data of the dtype whose partial pieces reduce exactly (small integers).
Tensor random_full(const Shape& shape, DType dtype) {
  Tensor t = Tensor::randint(-50, 50, shape, /*seed=*/2026);
  if (dtype == DType::Bool) return gt(t, Scalar(0));
  return t.to(dtype);
}

// Runs the plan on random data and checks full_tensor, every shard's shape,
// and that the collectives run are the plan's. Prints what differs.
bool verify(const DTensorSpec& from, const DTensorSpec& to, const RedistributePlan& plan,
            const RedistributeOptions& options) {
  const Tensor full = random_full(from.shape(), from.dtype());
  // distribute_tensor splits Partial placements as R->P does (x/n for sum).
  const DTensor source = distribute_tensor(full, from.mesh(), from.placements());
  CommDebugMode comm;
  const DTensor out = source.redistribute(to.placements(), options);
  bool ok = true;
  const std::pair<StepKind, CollectiveKind> kinds[] = {
      {StepKind::AllGather, CollectiveKind::AllGather},
      {StepKind::AllReduce, CollectiveKind::AllReduce},
      {StepKind::ReduceScatter, CollectiveKind::ReduceScatter},
      {StepKind::AllToAll, CollectiveKind::AllToAll}};
  for (const auto& [step, coll] : kinds) {
    if (comm.count(coll) != plan.count(step)) {
      std::cerr << "verify: ran " << comm.count(coll) << ' ' << to_string(coll) << " but the plan has "
                << plan.count(step) << "\n";
      ok = false;
    }
  }
  for (int rank : to.mesh().ranks()) {
    const Shape want = to.extent_of_rank(rank)->local_shape;
    if (out.to_local(rank).shape() != want) {
      std::cerr << "verify: rank " << rank << " holds a shard of shape " << out.to_local(rank).shape()
                << ", the target layout gives it " << want << "\n";
      ok = false;
    }
  }
  const Tensor got = out.full_tensor();
  const bool same = is_floating(full.dtype()) ? allclose(got, full, 1e-5, 1e-5) : equal(got, full);
  if (!same) {
    std::cerr << "verify: full_tensor differs from the original (max |diff| "
              << max_abs_diff(got.to(DType::Float64), full.to(DType::Float64)) << ")\n";
    ok = false;
  }
  return ok;
}

nlohmann::ordered_json plan_json(const DeviceMesh& mesh, const RedistributePlan& plan) {
  nlohmann::ordered_json out;
  out["mesh"] = dims_json(mesh.shape());
  out["names"] = mesh_names_json(mesh);
  out["shape"] = dims_json(plan.from.shape());
  out["dtype"] = dtype_short_name(plan.from.dtype());
  out["from"] = to_string(plan.from.placements());
  out["to"] = to_string(plan.to.placements());
  nlohmann::ordered_json steps = nlohmann::ordered_json::array();
  for (const RedistributeStep& s : plan.steps) {
    nlohmann::ordered_json j;
    j["collective"] = to_string(s.kind);
    j["mesh_dims"] = dims_json(s.mesh_dims);
    j["from"] = to_string(s.from);
    j["to"] = to_string(s.to);
    if (!s.group.empty()) {
      j["group"] = s.group;
      j["created_group"] = s.created_group;
    }
    if (s.tensor_dim >= 0) j["tensor_dim"] = s.tensor_dim;
    if (s.to_tensor_dim >= 0) j["to_tensor_dim"] = s.to_tensor_dim;
    if (s.kind == StepKind::AllReduce || s.kind == StepKind::ReduceScatter) {
      j["reduce_op"] = to_string(s.op);
      if (s.divisor != 1) j["divisor"] = number_json(s.divisor);
    }
    j["bytes"] = number_json(s.bytes);
    j["cost_us"] = s.cost_us;
    steps.push_back(std::move(j));
  }
  out["steps"] = std::move(steps);
  out["counts"] = {{"all_gather", plan.count(StepKind::AllGather)},
                   {"all_reduce", plan.count(StepKind::AllReduce)},
                   {"reduce_scatter", plan.count(StepKind::ReduceScatter)},
                   {"all_to_all", plan.count(StepKind::AllToAll)}};
  out["groups"] = plan.groups;
  out["cost_us"] = plan.cost_us;
  return out;
}

}  // namespace

int run_plan(const PlanArgs& args) {
  DeviceMesh mesh = make_mesh(args.mesh, args.names);
  Topology topology;
  topology.devices_per_host = args.devices_per_host;
  mesh.set_topology(topology);
  declare_flattened(mesh, args.flatten);
  const Shape shape = parse_shape_list(args.shape);
  const DType dtype = parse_dtype(args.dtype);
  const DTensorSpec from(mesh, parse_placements(args.from), shape, dtype);
  const DTensorSpec to(mesh, parse_placements(args.to), shape, dtype);
  RedistributeOptions options;
  options.auto_flatten = !args.no_auto_flatten;
  auto plan = plan_redistribute(from, to, options);
  const bool ok = !args.verify || verify(from, to, *plan, options);
  if (args.json) {
    nlohmann::ordered_json out = plan_json(mesh, *plan);
    if (args.verify) out["verified"] = ok;
    std::cout << out.dump(2) << "\n";
  } else {
    std::cout << plan->explain();
    if (args.verify) std::cout << (ok ? "verified\n" : "MISMATCH\n");
  }
  return ok ? 0 : 1;
}

}  // namespace dtensor::cli
