// S(a) -> S(b) on one mesh dim: all_to_all. Every rank splits its shard into
// n chunks along b and sends chunk i to member i, which concatenates what it
// receives along a: it ends with the whole (parent) extent of a and its own
// chunk of b.
#include "comm/backend.h"
#include "dtensor/world.h"
#include "redistribute/transforms.h"

namespace dtensor::redistribute_detail {

LocalTensor shard_to_shard(const LocalTensor& in, const DTensorSpec& from, int mesh_dim,
                           int64_t to_dim) {
  const int64_t a = from.placements()[mesh_dim].dim();
  DT_CHECK(a != to_dim, "S->S: mesh dim ", mesh_dim, " already shards tensor dim ", to_dim);
  check_innermost(from, mesh_dim, a, "S->S (all_to_all)");
  check_innermost(from, mesh_dim, to_dim, "S->S (all_to_all)");
  return from.mesh().world().backend().all_to_all(in, from.mesh(), mesh_dim, /*split_dim=*/to_dim,
                                                  /*concat_dim=*/a);
}

}  // namespace dtensor::redistribute_detail
