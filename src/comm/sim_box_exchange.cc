// SimBackend::exchange_boxes: every receiver's output is allocated once and
// filled by memcpy runs straight from its senders' shards (copy_box), so
// nothing is packed and nothing but the outputs is allocated: the step holds
// its input and its output, no more. Receivers run in parallel on the pool
// when the bytes pay for it; each writes only its own output, so the bits
// never depend on the thread count. Linear in the moves and the bytes.
#include <algorithm>
#include <unordered_map>

#include "comm/box_copy.h"
#include "comm/sim_backend.h"
#include "common/shard_map.h"
#include "dtensor/debug.h"
#include "dtensor/error.h"

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
  const int ndim = mesh.ndim();
  DT_CHECK(mesh_dim >= -ndim && mesh_dim < ndim, "box_exchange: mesh dim ", mesh_dim,
           " out of range for ", mesh.to_string(), " (expected ", -ndim, " <= mesh dim < ", ndim,
           ")");
  // Each sender's shard, contiguous; the dtype is the senders' (all agree).
  std::unordered_map<int, Tensor> sources;
  const Tensor* first = nullptr;
  int first_rank = -1;
  int64_t max_bytes = 0;
  for (const BoxMove& m : routes.moves) {
    if (sources.count(m.from) != 0) continue;
    DT_CHECK(mesh.contains(m.from) && in.holds(m.from) && in.shard(m.from).defined(),
             "box_exchange over ", mesh.to_string(), ": rank ", m.from,
             " sends a box but holds no shard");
    const Tensor& t = in.shard(m.from);
    if (first == nullptr) {
      first = &t;
      first_rank = m.from;
    }
    DT_CHECK(t.dtype() == first->dtype(), "box_exchange over ", mesh.to_string(), ": rank ",
             m.from, " holds ", t.dtype(), " where rank ", first_rank, " holds ", first->dtype());
    max_bytes = std::max<int64_t>(max_bytes, static_cast<int64_t>(t.nbytes()));
    sources.emplace(m.from, t.contiguous());
  }
  for (const auto& [rank, t] : in.shards())
    if (mesh.contains(rank) && t.defined()) {
      if (first == nullptr) first = &t;
      max_bytes = std::max<int64_t>(max_bytes, static_cast<int64_t>(t.nbytes()));
    }
  DT_CHECK(first != nullptr, "box_exchange over ", mesh.to_string(), ": no rank holds a shard");
  record_collective(CollectiveKind::BoxExchange, max_bytes);

  const DType dtype = first->dtype();
  const int64_t isz = static_cast<int64_t>(itemsize(dtype));
  std::unordered_map<int, size_t> slot;  // world rank -> index in routes.outputs
  std::vector<Tensor> outs;
  outs.reserve(routes.outputs.size());
  for (const auto& [rank, shape] : routes.outputs) {
    DT_CHECK(mesh.contains(rank) && slot.emplace(rank, outs.size()).second, "box_exchange over ",
             mesh.to_string(), ": output of rank ", rank, " listed twice or not in the mesh");
    outs.push_back(Tensor::empty(shape, dtype));
  }
  // The moves by receiver, each checked to lie inside both of its tensors.
  std::vector<std::vector<const BoxMove*>> to(outs.size());
  int64_t bytes = 0;
  for (const BoxMove& m : routes.moves) {
    auto at = slot.find(m.to);
    DT_CHECK(at != slot.end(), "box_exchange over ", mesh.to_string(), ": rank ", m.to,
             " receives a box but has no output shape");
    const Shape& src = sources.at(m.from).shape();
    const Shape& dst = outs[at->second].shape();
    DT_CHECK(inside(m.from_start, m.size, src) && inside(m.to_start, m.size, dst),
             "box_exchange over ", mesh.to_string(), ": the box of size ", m.size, " from rank ",
             m.from, " at ", m.from_start, " (shard ", src, ") to rank ", m.to, " at ",
             m.to_start, " (output ", dst, ") does not fit");
    to[at->second].push_back(&m);
    bytes += m.size.product() * isz;
  }
  detail::parallel_copies(static_cast<int64_t>(outs.size()), bytes, [&](int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k) {
      Tensor& out = outs[static_cast<size_t>(k)];
      auto* dst = static_cast<std::byte*>(out.raw_data());
      for (const BoxMove* m : to[static_cast<size_t>(k)]) {
        const Tensor& src = sources.at(m->from);
        comm_detail::copy_box(dst, out.shape(), m->to_start,
                              static_cast<const std::byte*>(src.raw_data()), src.shape(),
                              m->from_start, m->size, isz);
      }
    }
  });
  std::vector<std::pair<int, Tensor>> shards;
  shards.reserve(outs.size());
  for (size_t k = 0; k < outs.size(); ++k) shards.emplace_back(routes.outputs[k].first, std::move(outs[k]));
  std::sort(shards.begin(), shards.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  return LocalTensor(std::move(shards));
}

}  // namespace dtensor
