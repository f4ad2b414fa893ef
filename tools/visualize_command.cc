// `dtensor visualize`: which rank holds which part of a tensor.
#include <algorithm>
#include <iostream>

#include "cli.h"
#include "dtensor/debug.h"
#include "dtensor/spec.h"

namespace dtensor::cli {

namespace {

// Builds the spec the arguments describe over a simulated world of exactly
// the mesh's ranks; throws dtensor::Error naming the bad argument.
DTensorSpec visualize_spec(const VisualizeArgs& args) {
  DeviceMesh mesh = make_mesh(args.mesh, args.names);
  const Shape shape = parse_shape_list(args.shape);
  const Placements placements = parse_placements(args.placements);
  const DType dtype = parse_dtype(args.dtype);
  check_shape_fits(shape, dtype, args.shape);
  return DTensorSpec(mesh, placements, shape, dtype);
}

}  // namespace

int run_visualize(const VisualizeArgs& args) {
  const DTensorSpec spec = visualize_spec(args);
  if (!args.json) {
    std::cout << visualize_sharding(spec);
    return 0;
  }
  const DeviceMesh& mesh = spec.mesh();
  nlohmann::ordered_json out;
  out["mesh"] = dims_json(mesh.shape());
  out["names"] = mesh_names_json(mesh);
  out["shape"] = dims_json(spec.shape());
  out["dtype"] = dtype_short_name(spec.dtype());
  out["placements"] = to_string(spec.placements());
  nlohmann::ordered_json shards = nlohmann::ordered_json::array();
  std::vector<int> ranks = mesh.ranks();
  std::sort(ranks.begin(), ranks.end());
  for (int rank : ranks) {
    const DimVector coord = *mesh.coordinate(rank);
    const ShardExtent e = spec.extent(coord);
    nlohmann::ordered_json shard;
    shard["rank"] = rank;
    shard["coordinate"] = dims_json(coord);
    shard["local_shape"] = dims_json(e.local_shape);
    shard["global_offset"] = dims_json(e.global_offset);
    shards.push_back(std::move(shard));
  }
  out["shards"] = std::move(shards);
  std::cout << out.dump(2) << "\n";
  return 0;
}

}  // namespace dtensor::cli
