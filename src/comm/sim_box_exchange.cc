// SimBackend::exchange_boxes: every receiver's output is allocated once and
// filled by memcpy runs straight from its senders' shards (copy_box), so
// nothing is packed and nothing but the outputs is allocated: the step holds
// its input and its output, no more. Receivers run in parallel on the pool
// when the bytes pay for it; each writes only its own output, so the bits
// never depend on the thread count. Linear in the moves and the bytes.
#include <algorithm>
#include <vector>

#include "comm/box_copy.h"
#include "comm/sim_backend.h"
#include "dtensor/debug.h"
#include "dtensor/error.h"
#include "world/roles.h"
#include "world/shard_map.h"

namespace dtensor {

namespace {

bool inside(const Shape& start, const Shape& size, const Shape& whole) {
  if (start.size() != whole.size() || size.size() != whole.size()) return false;
  for (size_t d = 0; d < whole.size(); ++d)
    if (start[d] < 0 || size[d] < 0 || start[d] + size[d] > whole[d]) return false;
  return true;
}

}  // namespace

LocalTensor SimBackend::exchange_boxes(const LocalTensor& in, const DeviceMesh& mesh, int mesh_dim,
                                       const BoxRoutes& routes) {
  const CollectiveTimer timer;  // collective_seconds
  const int ndim = mesh.ndim();
  DT_CHECK(mesh_dim >= -ndim && mesh_dim < ndim, "box_exchange: mesh dim ", mesh_dim,
           " out of range for ", mesh.to_string(), " (expected ", -ndim, " <= mesh dim < ", ndim,
           ")");
  // Tables by world rank, not hash maps: a simulated world holds every rank,
  // and on 1024 ranks the maps' allocations and lookups cost more than the
  // copies of small boxes.
  const size_t world = static_cast<size_t>(mesh.world().size());
  auto checked_rank = [&](int rank, const char* what) {
    DT_CHECK(rank >= 0 && static_cast<size_t>(rank) < world && mesh.contains(rank),
             "box_exchange over ", mesh.to_string(), ": ", what, " rank ", rank,
             " is not in the mesh");
    return static_cast<size_t>(rank);
  };
  // Each sender's shard, contiguous; the dtype is the senders' (all agree).
  std::vector<Tensor> sources(world);
  const Tensor* first = nullptr;
  int first_rank = -1;
  int64_t max_bytes = 0;
  // A shape-only world computing by roles (world/roles.h) makes the
  // outputs it holds, each from the stand-ins of its senders.
  const bool roles = WorldRoles::active(mesh.world());
  auto received = [&](int rank) { return !roles || mesh.world().holds(rank); };
  auto sender = [&](int rank) { return roles ? WorldRoles::stand_in(mesh.world(), rank) : rank; };
  for (const BoxMove& m : routes.moves) {
    const size_t from = checked_rank(m.from, "sending");
    if (sources[from].defined() || !received(m.to)) continue;
    DT_CHECK(in.holds(sender(m.from)) && in.shard(sender(m.from)).defined(), "box_exchange over ",
             mesh.to_string(), ": rank ", m.from, " sends a box but holds no shard");
    const Tensor& t = in.shard(sender(m.from));
    if (first == nullptr) {
      first = &t;
      first_rank = m.from;
    }
    DT_CHECK(t.dtype() == first->dtype(), "box_exchange over ", mesh.to_string(), ": rank ",
             m.from, " holds ", t.dtype(), " where rank ", first_rank, " holds ", first->dtype());
    max_bytes = std::max<int64_t>(max_bytes, static_cast<int64_t>(t.nbytes()));
    sources[from] = t.contiguous();
  }
  for (const auto& [rank, t] : in.shards())
    if (mesh.contains(rank) && t.defined()) {
      if (first == nullptr) first = &t;
      max_bytes = std::max<int64_t>(max_bytes, static_cast<int64_t>(t.nbytes()));
    }
  DT_CHECK(first != nullptr, "box_exchange over ", mesh.to_string(), ": no rank holds a shard");
  record_collective(CollectiveKind::BoxExchange, max_bytes, first->dtype(), -1);
  if (collective_trace() != nullptr) {
    const int dim = mesh_dim < 0 ? mesh_dim + ndim : mesh_dim;
    const std::vector<std::vector<int>> groups = mesh.groups(dim);
    for (const std::vector<int>& group : groups)
      if (!roles || std::any_of(group.begin(), group.end(), received))
        trace_collective(CollectiveKind::BoxExchange, first->dtype(), group, mesh, dim,
                         [&](size_t i) {
                           return in.holds(group[i]) && in.shard(group[i]).defined()
                                      ? static_cast<int64_t>(in.shard(group[i]).nbytes())
                                      : int64_t{0};
                         });
    trace_call(CollectiveKind::BoxExchange, first->dtype(), max_bytes, groups[0], mesh, dim);
  }

  const DType dtype = first->dtype();
  const bool meta = first->is_meta();  // World::shape_only: shapes, no data
  const int64_t isz = static_cast<int64_t>(itemsize(dtype));
  std::vector<int64_t> slot(world, -1);  // world rank -> index in routes.outputs
  std::vector<Tensor> outs;
  std::vector<int> out_rank;
  outs.reserve(routes.outputs.size());
  for (const auto& [rank, shape] : routes.outputs) {
    const size_t r = checked_rank(rank, "receiving");
    if (!received(rank)) continue;
    DT_CHECK(slot[r] < 0, "box_exchange over ", mesh.to_string(), ": output of rank ", rank,
             " listed twice");
    slot[r] = static_cast<int64_t>(outs.size());
    out_rank.push_back(rank);
    outs.push_back(meta ? Tensor::meta(shape, dtype) : Tensor::empty(shape, dtype));
  }
  // The moves by receiver (a counting sort, in route order within each),
  // each checked to lie inside both of its tensors.
  std::vector<size_t> begin_of(outs.size() + 1, 0);
  for (const BoxMove& m : routes.moves) {
    if (!received(m.to)) continue;
    const int64_t k = slot[checked_rank(m.to, "receiving")];
    DT_CHECK(k >= 0, "box_exchange over ", mesh.to_string(), ": rank ", m.to,
             " receives a box but has no output shape");
    ++begin_of[static_cast<size_t>(k) + 1];
  }
  for (size_t k = 0; k < outs.size(); ++k) begin_of[k + 1] += begin_of[k];
  std::vector<const BoxMove*> to(routes.moves.size());
  std::vector<size_t> fill(begin_of.begin(), begin_of.end() - 1);
  int64_t bytes = 0;
  for (const BoxMove& m : routes.moves) {
    if (!received(m.to)) continue;
    const size_t k = static_cast<size_t>(slot[static_cast<size_t>(m.to)]);
    const Shape& src = sources[static_cast<size_t>(m.from)].shape();
    const Shape& dst = outs[k].shape();
    DT_CHECK(inside(m.from_start, m.size, src) && inside(m.to_start, m.size, dst),
             "box_exchange over ", mesh.to_string(), ": the box of size ", m.size, " from rank ",
             m.from, " at ", m.from_start, " (shard ", src, ") to rank ", m.to, " at ",
             m.to_start, " (output ", dst, ") does not fit");
    to[fill[k]++] = &m;
    bytes += m.size.product() * isz;
  }
  auto copy_boxes = [&](int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k) {
      Tensor& out = outs[static_cast<size_t>(k)];
      auto* dst = static_cast<std::byte*>(out.raw_data());
      for (size_t i = begin_of[static_cast<size_t>(k)]; i < begin_of[static_cast<size_t>(k) + 1]; ++i) {
        const BoxMove* m = to[i];
        const Tensor& src = sources[static_cast<size_t>(m->from)];
        comm_detail::copy_box(dst, out.shape(), m->to_start,
                              static_cast<const std::byte*>(src.raw_data()), src.shape(),
                              m->from_start, m->size, isz);
      }
    }
  };
  if (!meta) detail::parallel_copies(static_cast<int64_t>(outs.size()), bytes, copy_boxes);
  std::vector<std::pair<int, Tensor>> shards;
  shards.reserve(outs.size());
  for (size_t k = 0; k < outs.size(); ++k) shards.emplace_back(out_rank[k], std::move(outs[k]));
  std::sort(shards.begin(), shards.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  return LocalTensor(std::move(shards));
}

}  // namespace dtensor
