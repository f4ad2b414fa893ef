// The desync check of the MPI backend (see mpi_desync.h): making,
// exchanging and comparing the members' Call records.
#include "comm/mpi_desync.h"

#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "comm/mpi_pack.h"
#include "dtensor/error.h"

namespace dtensor {

namespace mpi_detail {

namespace {

constexpr int32_t kCallMagic = 0x64744331;  // "dtC1"
constexpr int kCheckTag = 7301;

const char* kind_name(Kind k) { return collective_kind_name(static_cast<int>(k)); }

// Whether the bytes that arrived are a record some member could have sent
// (describe() trusts its fields: a stray or truncated message must never
// index past the shape).
bool well_formed(const Call& c) {
  return c.magic == kCallMagic && c.kind >= 0 && c.kind <= static_cast<int32_t>(Kind::BoxExchange) &&
         c.ndim >= -1 && c.ndim <= kMaxDims && c.dtype >= -1 &&
         c.dtype <= static_cast<int32_t>(DType::Float64) && c.reduce_op >= -1 &&
         c.reduce_op <= static_cast<int32_t>(ReduceOp::Min);
}

bool matches(const Call& a, const Call& b) {
  if (a.kind != b.kind || a.mesh_dim != b.mesh_dim || a.group_size != b.group_size ||
      a.first_rank != b.first_rank || a.group != b.group || a.seq != b.seq ||
      a.dim_a != b.dim_a || a.dim_b != b.dim_b || a.reduce_op != b.reduce_op)
    return false;
  if (a.dtype < 0 || b.dtype < 0) return true;
  if (a.dtype != b.dtype || a.ndim != b.ndim) return false;
  for (int d = 0; d < a.ndim; ++d)
    if (a.shape[d] != b.shape[d]) return false;
  return true;
}

std::string describe(const Call& c) {
  std::ostringstream os;
  const Kind k = static_cast<Kind>(c.kind);
  os << kind_name(k) << " over mesh dim " << c.mesh_dim << " (group of " << c.group_size
     << " from rank " << c.first_rank << ", call #" << c.seq << " on it)";
  if (c.reduce_op >= 0) os << " op " << to_string(static_cast<ReduceOp>(c.reduce_op));
  if (k == Kind::Broadcast || k == Kind::Scatter) os << " root " << c.dim_a;
  if (k == Kind::AllGather || k == Kind::ReduceScatter || k == Kind::AllToAll ||
      k == Kind::Scatter)
    os << (k == Kind::AllToAll ? " split dim " : k == Kind::AllGather ? " gather dim "
                                                                       : " scatter dim ")
       << (k == Kind::Scatter ? c.dim_b : c.dim_a);
  if (k == Kind::AllToAll) os << " concat dim " << c.dim_b;
  if (c.dtype >= 0) {
    os << " of " << dtype_name(static_cast<DType>(c.dtype)) << " [";
    for (int d = 0; d < c.ndim; ++d) os << (d ? ", " : "") << (c.shape[d] < 0 ? "*" : std::to_string(c.shape[d]));
    os << "]";
  }
  return os.str();
}

}  // namespace

Call make_call(Kind kind, int mesh_dim, int group_size, int64_t first_rank, const Tensor* t,
               int64_t dim_a, int64_t dim_b, int64_t free_dim, int reduce_op) {
  Call c;
  c.magic = kCallMagic;
  c.kind = static_cast<int32_t>(kind);
  c.mesh_dim = mesh_dim;
  c.group_size = group_size;
  c.first_rank = first_rank;
  c.dim_a = dim_a;
  c.dim_b = dim_b;
  c.reduce_op = reduce_op;
  if (t != nullptr) {
    c.dtype = static_cast<int32_t>(t->dtype());
    c.ndim = static_cast<int32_t>(t->dim());
    for (int64_t d = 0; d < t->dim(); ++d) c.shape[d] = d == free_dim ? -1 : t->shape()[d];
    if (free_dim >= 0 && free_dim < t->dim()) c.free_len = t->shape()[free_dim];
  }
  return c;
}

}  // namespace mpi_detail

using namespace mpi_detail;

std::vector<Call> MpiBackend::exchange_calls(const Group& g, const Call& mine) {
  const std::vector<int>& members = *g.ranks;
  std::vector<Call> all(static_cast<size_t>(g.size));
  all[g.index] = mine;
  std::vector<MPI_Request> reqs;
  reqs.reserve(2 * members.size());
  for (int j = 0; j < g.size; ++j) {
    if (j == g.index) continue;
    reqs.emplace_back();
    check_mpi(MPI_Irecv(&all[j], sizeof(Call), MPI_BYTE, members[j], kCheckTag, ctrl_,
                        &reqs.back()),
              "MPI_Irecv");
  }
  for (int j = 0; j < g.size; ++j) {
    if (j == g.index) continue;
    reqs.emplace_back();
    check_mpi(MPI_Isend(&mine, sizeof(Call), MPI_BYTE, members[j], kCheckTag, ctrl_,
                        &reqs.back()),
              "MPI_Isend");
  }
  std::vector<MPI_Status> statuses(reqs.size());
  const int rc = MPI_Waitall(static_cast<int>(reqs.size()), reqs.data(), statuses.data());
  if (rc == MPI_ERR_IN_STATUS)
    for (const MPI_Status& st : statuses) check_mpi(st.MPI_ERROR, "MPI_Waitall (desync check)");
  check_mpi(rc, "MPI_Waitall (desync check)");
  return all;
}

void MpiBackend::check_same_call(const Group& g, const Call& call, const DeviceMesh& mesh,
                                 int rank) {
  if (g.size <= 1 || g.ranks == nullptr) return;
  Call mine = call;
  mine.magic = kCallMagic;
  mine.seq = g.seq;
  mine.group = g.hash;
  mine.created = g.comm != MPI_COMM_NULL ? 1 : 0;
  std::vector<Call> all = exchange_calls(g, mine);
  const std::vector<int>& ranks = *g.ranks;
  for (int j = 0; j < g.size; ++j) {
    DT_CHECK(well_formed(all[j]), "collective desync on ", mesh.to_string(), ": rank ", rank,
             " calls ", describe(mine), " but rank ", ranks[j],
             " of its group sent a malformed desync-check record (not a dtensor call record)");
    // A member whose communicator exists meets one about to create it: the
    // call numbers differ as well, but this says it more plainly.
    if (matches(mine, all[j]) && mine.created == all[j].created) continue;
    DT_THROW("collective desync on ", mesh.to_string(), ": rank ", rank, " calls ",
             describe(mine), mine.created ? "" : " (first use of the group)", " but rank ",
             ranks[j], " of its group calls ", describe(all[j]),
             all[j].created ? "" : " (first use of the group)");
  }
  last_calls_ = std::move(all);
}

void MpiBackend::check_received_lengths(const Group& g, const std::vector<int64_t>& lens,
                                        const DeviceMesh& mesh, const char* coll,
                                        const char* what) const {
  if (g.ranks == nullptr || last_calls_.size() != static_cast<size_t>(g.size)) return;
  for (int j = 0; j < g.size; ++j) {
    if (lens[j] == last_calls_[j].free_len) continue;
    DT_THROW(coll, " on ", mesh.to_string(), ": rank ", rank_, " received a length of ", lens[j],
             " along the ", what, " from rank ", (*g.ranks)[j], ", which announced ",
             last_calls_[j].free_len, " in the desync check (collective traffic crossed: a desync)");
  }
}

}  // namespace dtensor
