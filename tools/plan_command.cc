// `dtensor plan`: the redistribution plan between two layouts, its steps,
// estimated cost under the topology cost model and peak memory per rank;
// --verify also runs it on a simulated world and checks the result against
// the original tensor.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <iostream>
#include <sstream>

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
      for (const std::string& it : items) {
        int64_t d = 0;
        const auto [next, ec] = std::from_chars(it.data(), it.data() + it.size(), d);
        DT_CHECK(ec == std::errc() && next == it.data() + it.size() && d < mesh.ndim(),
                 "--flatten ", quote(g), ": mesh dim ", quote(it), " out of range for the ",
                 mesh.ndim(), "-d mesh (expected 0 <= dim < ", mesh.ndim(), ")");
        dims.push_back(static_cast<int>(d));
      }
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

// The bytes a layout holds over all ranks: every mesh dim that does not
// shard the tensor holds a full copy per rank (Replicate) or a full-size
// piece (Partial).
double layout_bytes(const DTensorSpec& spec) {
  double copies = 1;
  for (size_t i = 0; i < spec.placements().size(); ++i)
    if (!spec.placements()[i].is_shard()) copies *= static_cast<double>(spec.mesh().size(static_cast<int>(i)));
  return static_cast<double>(spec.global_bytes()) * copies;
}

// Refuses a --verify that would not fit in memory, before allocating any of
// it: the random source (int64, then the dtype), the two layouts, one
// intermediate layout of the plan, the gathered result and the comparison's
// temporaries (float64).
void check_verify_memory(const DTensorSpec& from, const DTensorSpec& to) {
  const double numel = static_cast<double>(from.shape().product());
  const double item = static_cast<double>(itemsize(from.dtype()));
  const double layouts = layout_bytes(from) + layout_bytes(to);
  const double estimate = numel * (8 + 3 * item + 16) + layouts + std::max(layout_bytes(from), layout_bytes(to));
  check_memory_estimate(estimate, "--verify of shape " + to_string(from.shape()) + " (" +
                                      dtype_short_name(from.dtype()) + ") on mesh " +
                                      to_string(from.mesh().shape()),
                        "drop --verify or give a smaller --shape");
}

// Runs the plan on random data and checks full_tensor, every shard's shape,
// and that the collectives run are the plan's. Prints what differs, on one
// line of stderr.
bool verify(const DTensorSpec& from, const DTensorSpec& to, const RedistributePlan& plan,
            const RedistributeOptions& options) {
  check_verify_memory(from, to);
  std::ostringstream problems;
  const auto problem = [&problems]() -> std::ostream& {
    return problems << (problems.tellp() > 0 ? "; " : "");
  };
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
      {StepKind::AllToAll, CollectiveKind::AllToAll},
      {StepKind::BoxExchange, CollectiveKind::BoxExchange}};
  for (const auto& [step, coll] : kinds) {
    if (comm.count(coll) != plan.count(step)) {
      problem() << "ran " << comm.count(coll) << ' ' << to_string(coll) << " but the plan has "
                << plan.count(step);
      ok = false;
    }
  }
  // A redistribution moves the tensor's own dtype: a collective in another
  // (a widened bfloat16, say) would cost other bytes than the plan's.
  for (const CollectiveRecord& c : comm.collectives()) {
    if (c.dtype != from.dtype()) {
      problem() << "ran " << to_string(c) << " but the plan moves " << dtype_name(from.dtype());
      ok = false;
    }
  }
  for (int rank : to.mesh().ranks()) {
    const Shape want = to.extent_of_rank(rank)->local_shape;
    if (out.to_local(rank).shape() != want) {
      problem() << "rank " << rank << " holds a shard of shape " << out.to_local(rank).shape()
                << ", the target layout gives it " << want;
      ok = false;
    }
  }
  const Tensor got = out.full_tensor();
  const bool same = is_floating(full.dtype()) ? allclose(got, full, 1e-5, 1e-5) : equal(got, full);
  if (!same) {
    problem() << "full_tensor differs from the original (max |diff| "
              << max_abs_diff(got.to(DType::Float64), full.to(DType::Float64)) << ")";
    ok = false;
  }
  if (!ok) std::cerr << "dtensor plan: verify failed: " << one_line(problems.str()) << "\n";
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
    j["peak_bytes"] = number_json(s.peak_bytes);
    steps.push_back(std::move(j));
  }
  out["steps"] = std::move(steps);
  out["counts"] = {{"all_gather", plan.count(StepKind::AllGather)},
                   {"all_reduce", plan.count(StepKind::AllReduce)},
                   {"reduce_scatter", plan.count(StepKind::ReduceScatter)},
                   {"all_to_all", plan.count(StepKind::AllToAll)}};
  if (plan.count(StepKind::BoxExchange) > 0)
    out["counts"]["box_exchange"] = plan.count(StepKind::BoxExchange);
  out["groups"] = plan.groups;
  out["cost_us"] = plan.cost_us;
  // Bytes per rank: the output, and the most any step holds live at once.
  out["output_bytes"] = number_json(plan.output_bytes);
  out["peak_bytes"] = number_json(plan.peak_bytes);
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
  check_shape_fits(shape, dtype, args.shape);
  const DTensorSpec from(mesh, parse_placements(args.from), shape, dtype);
  const DTensorSpec to(mesh, parse_placements(args.to), shape, dtype);
  RedistributeOptions options;
  options.auto_flatten = !args.no_auto_flatten;
  options.box_exchange = !args.no_box_exchange;
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
