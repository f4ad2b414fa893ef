// The redistribution planner: ask for the plan of a layout change without
// running it, read its steps and estimated cost, compare with the mesh-dim
// by mesh-dim plan, then run it and check the data.
// Run: build/bin/example_plan_redistribute
//
// The same plan from the shell:
//   dtensor plan --mesh 2x2x2 --names dp,cp,tp --shape 16,16,16 --from 'P,S(0),P' --to R,R,R
#include <dtensor/dtensor.h>

#include <iostream>

using namespace dtensor;

int main() {
  World world = World::simulated(8);
  DeviceMesh mesh(world, {2, 2, 2}, {"dp", "cp", "tp"});

  // Partial sums over dp and tp, rows split over cp: e.g. gradients after a
  // backward pass, before they are reduced and gathered.
  DTensorSpec from(mesh, parse_placements("P,S(0),P"), Shape{16, 16, 16});
  DTensorSpec to = from.with_placements(parse_placements("R,R,R"));

  // The cheapest plan: the two all_reduces over dp and tp become one over
  // the flattened group dp_tp, which the planner creates and names.
  auto plan = plan_redistribute(from, to);
  std::cout << plan->explain();

  // The plan that goes mesh dim by mesh dim, without merging, for comparison.
  RedistributeOptions naive;
  naive.search = false;
  naive.merge = false;
  auto per_dim = plan_redistribute(from, to, naive);
  std::cout << "mesh dim by mesh dim: " << per_dim->num_collectives() << " collectives, "
            << per_dim->cost_us << " us; planned: " << plan->num_collectives()
            << " collectives, " << plan->cost_us << " us\n";

  // Run it on data. distribute_tensor splits x into partial sums the way
  // R -> P(sum) does: each rank of dp and of tp keeps a share.
  Tensor x = Tensor::randn({16, 16, 16}, /*seed=*/7);
  DTensor d = distribute_tensor(x, mesh, from.placements());
  CommDebugMode comm;
  DTensor r = d.redistribute(to.placements());
  std::cout << "ran " << comm.total_count() << " collectives\n";
  const double diff = max_abs_diff(r.full_tensor(), x);
  std::cout << "max |difference| from the tensor: " << diff << "\n";
  // Hosts of 4 devices: the dp dim now crosses hosts and its links are
  // slower. A merged collective runs at the pace of its slowest dim, so the
  // planner now keeps the two all_reduces apart.
  Topology topo;
  topo.devices_per_host = 4;
  mesh.set_topology(topo);
  auto cross_host = plan_redistribute(from, to);
  std::cout << "with 4 devices per host:\n" << cross_host->explain();

  const bool ok = diff <= 1e-5 && comm.total_count() == plan->num_collectives() &&
                  plan->cost_us <= per_dim->cost_us &&
                  cross_host->count(StepKind::AllReduce) == 2;
  std::cout << (ok ? "ok" : "MISMATCH") << "\n";
  return ok ? 0 : 1;
}
