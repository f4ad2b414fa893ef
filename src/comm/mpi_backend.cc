// MpiBackend: each collective over the calling rank's group communicator
// (see mpi_backend.h).
//
// Buffers: MPI moves runs of elements, so a shard is made contiguous first
// (free when it already is). A piece along a dim other than the leading one
// is described in place by a derived datatype wherever a redistribution
// runs it (all_gather, all_to_all, reduce_scatter, exchange_boxes), so a
// step holds its input, its output and, for a reduce_scatter or a small
// all_reduce, a receive buffer bounded by the group size (fold_temp.h);
// only scatter and the native reduce_scatter pack chunks into one buffer
// (datatypes and packing: mpi_pack.h).
// Reductions fold what arrived with reduce_kernel.h in member order, the
// kernel the simulated backend uses, so both worlds give the same bits
// (mpi_fold.h). The desync check's records: mpi_desync.h.
#include "comm/mpi_backend.h"

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <functional>
#include <sstream>
#include <string>

#include "comm/around.h"
#include "comm/fold_temp.h"
#include "comm/mpi_desync.h"
#include "comm/mpi_fold.h"
#include "comm/mpi_pack.h"
#include "comm/reduce_kernel.h"
#include "dtensor/debug.h"
#include "dtensor/error.h"

namespace dtensor {

using namespace mpi_detail;

namespace {

// This process's shard of the input.
const Tensor& own_shard(const LocalTensor& in, int rank, const char* coll) {
  DT_CHECK(in.holds(rank), coll, ": no input shard for rank ", rank);
  const Tensor& t = in.shard(rank);
  DT_CHECK(t.defined(), coll, ": the input shard of rank ", rank, " is undefined");
  return t;
}

int64_t check_dim(const Tensor& t, int64_t dim, const char* coll, const char* what) {
  const int64_t nd = t.dim();
  DT_CHECK(nd > 0 && dim >= -nd && dim < nd, coll, ": ", what, " ", dim,
           " out of range for shards of shape ", t.shape(), " (expected ", -nd, " <= dim < ", nd,
           ")");
  return dim < 0 ? dim + nd : dim;
}

// The mesh dim CommDebugMode records: 0..ndim-1, as the simulated
// backend's (group_of has checked its range).
int mesh_dim_index(const DeviceMesh& mesh, int mesh_dim) {
  return mesh_dim < 0 ? mesh_dim + mesh.ndim() : mesh_dim;
}

// DTENSOR_MPI_NATIVE_REDUCE=1 (read once): all_reduce and reduce_scatter
// on MPI_Allreduce / MPI_Reduce_scatter, whose order of terms is the MPI
// library's, instead of the deterministic exchange plus ordered fold.
bool native_reduce() {
  static const bool on = [] {
    const char* env = std::getenv("DTENSOR_MPI_NATIVE_REDUCE");
    return env != nullptr && *env != '\0' && std::string(env) != "0";
  }();
  return on;
}

}  // namespace

MpiBackend::MpiBackend(MPI_Comm comm) : world_(comm) {
  check_mpi(MPI_Comm_rank(comm, &rank_), "MPI_Comm_rank");
  // Collective over the world, like the constructor's caller (World::mpi,
  // world_from_mpi_comm): every rank makes its backend at the same point.
  check_mpi(MPI_Comm_dup(comm, &ctrl_), "MPI_Comm_dup");
  monitor_ = std::make_unique<CollectiveMonitor>(comm);
  const char* env = std::getenv("DTENSOR_MPI_CHECK");
  check_ = env != nullptr && *env != '\0' && std::string(env) != "0";
}

MpiBackend::~MpiBackend() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  monitor_.reset();
  for (auto& [ranks, state] : comms_)
    if (state.comm != MPI_COMM_NULL) MPI_Comm_free(&state.comm);
  MPI_Comm_free(&ctrl_);
  MPI_Comm_free(&world_);
}

int64_t MpiBackend::calls_on(uint64_t h) const {
  for (const auto& [ranks, state] : comms_)
    if (state.hash == h) return state.seq;
  return 0;
}

MpiBackend::Group MpiBackend::group_of(const DeviceMesh& mesh, int mesh_dim, Kind kind) {
  const int ndim = mesh.ndim();
  DT_CHECK(mesh_dim >= -ndim && mesh_dim < ndim, "mesh dim ", mesh_dim, " out of range for ",
           mesh.to_string());
  if (mesh_dim < 0) mesh_dim += ndim;
  if (!mesh.contains(rank_)) return Group{MPI_COMM_NULL, 0, 0, nullptr, 0, 0, {}};
  std::vector<int> ranks = mesh.group(rank_, mesh_dim);
  const int index = static_cast<int>(mesh.group_index(rank_, mesh_dim));
  const int size = static_cast<int>(ranks.size());
  if (size == 1) return Group{MPI_COMM_SELF, 0, 1, nullptr, 0, 0, {}};
  auto it = comms_.find(ranks);
  if (it == comms_.end()) {
    const uint64_t hash = group_hash(ranks);
    it = comms_.emplace(std::move(ranks), GroupState{MPI_COMM_NULL, 0, hash}).first;
  }
  GroupState& state = it->second;
  Group g{state.comm, index, size, &it->first, ++state.seq, state.hash, {}};
  // Watched from here (communicator creation and the desync check
  // included) until the collective returns and drops its Group.
  monitor_->enter(static_cast<int>(kind), mesh_dim, g.ranks, g.hash, g.seq);
  g.watch = Group::Watch(monitor_.get());
  if (g.comm == MPI_COMM_NULL) {
    if (check_) {
      // Before MPI_Comm_create_group, which waits for every member of the
      // group: members that disagree on the group would wait there forever.
      check_same_call(g, make_call(kind, mesh_dim, size, (*g.ranks)[0], nullptr, -1, -1, -1),
                      mesh, rank_);
    }
    // Collective over the group's members only: they all reach this call
    // for the same collective, since every rank runs the same plan. The tag
    // tells apart creations of overlapping groups in flight at once.
    MPI_Group world_group, group;
    check_mpi(MPI_Comm_group(world_, &world_group), "MPI_Comm_group");
    check_mpi(MPI_Group_incl(world_group, size, g.ranks->data(), &group), "MPI_Group_incl");
    MPI_Comm comm = MPI_COMM_NULL;
    const int tag = static_cast<int>(state.hash % 32000);
    check_mpi(MPI_Comm_create_group(world_, group, tag, &comm), "MPI_Comm_create_group");
    MPI_Group_free(&group);
    MPI_Group_free(&world_group);
    state.comm = comm;
    g.comm = comm;
  }
  return g;
}

namespace {

// CollectiveTrace: this rank's part, `bytes` (its input shard; for
// broadcast and scatter, its output), in its group of mesh_dim.
void trace_own(CollectiveKind kind, int64_t bytes, DType dtype, const DeviceMesh& mesh,
               int mesh_dim, int rank) {
  if (collective_trace() == nullptr) [[likely]]
    return;
  if (mesh_dim < 0) mesh_dim += mesh.ndim();
  const std::vector<int> group = mesh.group(rank, mesh_dim);
  trace_collective(kind, dtype, group, mesh, mesh_dim, [bytes](size_t) { return bytes; });
  trace_call(kind, dtype, bytes, group, mesh, mesh_dim);
}

}  // namespace

LocalTensor MpiBackend::all_gather(const LocalTensor& in, const DeviceMesh& mesh, int mesh_dim,
                                   int64_t gather_dim) {
  const CollectiveTimer timer;  // collective_seconds
  const Group g = group_of(mesh, mesh_dim, Kind::AllGather);
  if (g.size == 0) return {};
  const Tensor& t = own_shard(in, rank_, "all_gather");
  gather_dim = check_dim(t, gather_dim, "all_gather", "gather dim");
  if (check_)
    check_same_call(g, make_call(Kind::AllGather, mesh_dim, g.size, mesh.group(rank_, mesh_dim)[0],
                                 &t, gather_dim, -1, gather_dim),
                    mesh, rank_);
  record_collective(CollectiveKind::AllGather, static_cast<int64_t>(t.nbytes()), t.dtype(),
                    mesh_dim_index(mesh, mesh_dim));
  trace_own(CollectiveKind::AllGather, static_cast<int64_t>(t.nbytes()), t.dtype(), mesh, mesh_dim,
            rank_);
  LocalTensor out;
  if (g.size == 1) {
    out.set(rank_, t.clone());
    return out;
  }
  // The members' lengths along the gather dim (shards may be uneven).
  const int64_t len = t.shape()[gather_dim];
  std::vector<int64_t> lens(static_cast<size_t>(g.size));
  check_mpi(MPI_Allgather(&len, 1, MPI_INT64_T, lens.data(), 1, MPI_INT64_T, g.comm),
            "MPI_Allgather");
  if (check_) check_received_lengths(g, lens, mesh, "all_gather", "gather dim");
  const Tensor src = t.contiguous();
  const Around a = around(src.shape(), gather_dim);
  Shape out_shape = src.shape();
  out_shape[gather_dim] = 0;
  for (int64_t l : lens) out_shape[gather_dim] += l;
  Tensor result = Tensor::empty(out_shape, t.dtype());
  const MPI_Datatype type = mpi_type(t.dtype());
  if (a.outer == 1) {
    // Nothing before the gather dim: the members' shards follow one another
    // in the result, so MPI writes them straight into place.
    std::vector<int> counts;
    for (int64_t l : lens) counts.push_back(count_of(l * a.inner, "all_gather"));
    const std::vector<int> displs = displacements(counts);
    check_mpi(MPI_Allgatherv(src.raw_data(), counts[g.index], type, result.raw_data(),
                             counts.data(), displs.data(), type, g.comm),
              "MPI_Allgatherv");
  } else {
    // Member j's shard lands in rows [at_j, at_j + len_j) of the gather dim
    // under every outer index: a subarray of the result, which MPI writes
    // in place (MPI_Alltoallw, the same contiguous shard sent to every
    // member), so the step holds its input and its output and no flat
    // receive buffer to reorder. Uneven lengths are one type per member.
    const size_t n = static_cast<size_t>(g.size);
    const int whole = count_of(src.numel(), "all_gather");
    std::vector<int> send_counts(n, whole), recv_counts(n, 0), zeros(n, 0);
    std::vector<MPI_Datatype> send_types(n, type), recv_types;
    int64_t at = 0;
    for (size_t j = 0; j < n; ++j) {
      recv_types.push_back(block_type(out_shape, gather_dim, at, lens[j], type));
      recv_counts[j] = lens[j] == 0 || result.numel() == 0 ? 0 : 1;
      at += lens[j];
    }
    const int rc = MPI_Alltoallw(src.raw_data(), send_counts.data(), zeros.data(),
                                 send_types.data(), result.raw_data(), recv_counts.data(),
                                 zeros.data(), recv_types.data(), g.comm);
    for (MPI_Datatype& rt : recv_types) MPI_Type_free(&rt);
    check_mpi(rc, "MPI_Alltoallw");
  }
  out.set(rank_, std::move(result));
  return out;
}

namespace {

// A started collective: one MPI request, the buffers it reads and writes
// kept alive until it is done, and what makes the result of the received
// data (the all_gather's buffer as it is; the reduce_scatter's pieces
// folded). wait() is watched by the collective monitor as the collective
// it belongs to (the group and call number of its start), so a peer that
// never starts it still ends the job at the timeout.
class MpiPending final : public Backend::Pending {
 public:
  using Finish = std::function<Tensor()>;
  MpiPending(CollectiveMonitor* monitor, MpiBackend::Kind kind, int mesh_dim,
             const MpiBackend::Group& g, MPI_Request request, std::vector<Tensor> buffers,
             Finish finish, int rank, int64_t event)
      : monitor_(monitor), kind_(kind), mesh_dim_(mesh_dim), ranks_(g.ranks), hash_(g.hash),
        seq_(g.seq), request_(request), buffers_(std::move(buffers)), finish_(std::move(finish)),
        rank_(rank), event_(event) {}
  ~MpiPending() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (request_ != MPI_REQUEST_NULL && !finalized) MPI_Wait(&request_, MPI_STATUS_IGNORE);
  }
  void progress() override {
    if (request_ == MPI_REQUEST_NULL || done_) return;
    const CollectiveTimer timer;  // collective_seconds: data moves here too
    int flag = 0;
    check_mpi(MPI_Test(&request_, &flag, MPI_STATUS_IGNORE), "MPI_Test (started collective)");
    // A completed request is freed and set to MPI_REQUEST_NULL by MPI_Test.
    if (flag) done_ = true;
  }
  LocalTensor wait() override {
    DT_CHECK(request_ != MPI_REQUEST_NULL || done_,
             "wait() called twice on one started collective");
    const CollectiveTimer timer;  // collective_seconds: the time waited
    monitor_->enter(static_cast<int>(kind_), mesh_dim_, ranks_, hash_, seq_);
    const int rc = done_ ? MPI_SUCCESS : MPI_Wait(&request_, MPI_STATUS_IGNORE);
    monitor_->leave();
    check_mpi(rc, "MPI_Wait (started collective)");
    request_ = MPI_REQUEST_NULL;
    done_ = false;
    trace_wait(event_);
    LocalTensor out;
    out.set(rank_, finish_());
    buffers_.clear();
    finish_ = nullptr;
    return out;
  }

 private:
  CollectiveMonitor* monitor_;
  MpiBackend::Kind kind_;
  int mesh_dim_;
  const std::vector<int>* ranks_;
  uint64_t hash_;
  int64_t seq_;
  MPI_Request request_;
  bool done_ = false;            // progress() saw it complete
  std::vector<Tensor> buffers_;  // alive until the transfer is done
  Finish finish_;
  int rank_;
  int64_t event_;  // the start's StepEvent (CollectiveTrace), or -1
};

}  // namespace

std::unique_ptr<Backend::Pending> MpiBackend::start_all_gather_flat(const LocalTensor& in,
                                                                    const DeviceMesh& mesh,
                                                                    int mesh_dim) {
  const CollectiveTimer timer;  // collective_seconds: the start
  const Group g = group_of(mesh, mesh_dim, Kind::AllGather);
  if (g.size == 0) return std::make_unique<Done>(LocalTensor{}, -1);
  const Tensor& t = own_shard(in, rank_, "all_gather");
  DT_CHECK(t.dim() == 1, "all_gather (started): expected a 1-d shard, got shape ", t.shape());
  if (check_)
    check_same_call(g, make_call(Kind::AllGather, mesh_dim, g.size, mesh.group(rank_, mesh_dim)[0],
                                 &t, 0, -1, 0),
                    mesh, rank_);
  record_collective(CollectiveKind::AllGather, static_cast<int64_t>(t.nbytes()), t.dtype(),
                    mesh_dim_index(mesh, mesh_dim));
  {
    const TraceStarted started;
    trace_own(CollectiveKind::AllGather, static_cast<int64_t>(t.nbytes()), t.dtype(), mesh,
              mesh_dim, rank_);
  }
  if (g.size == 1) {
    LocalTensor out;
    out.set(rank_, t.clone());
    return std::make_unique<Done>(std::move(out), last_traced());
  }
  Tensor src = t.contiguous();
  Tensor result = Tensor::empty({g.size * src.numel()}, t.dtype());
  // The rank holds its result from the start (RankMemoryTracker), as the
  // simulated world's, which is made at once.
  result.storage()->count_on_rank(rank_);
  const int count = count_of(src.numel(), "all_gather");
  const MPI_Datatype type = mpi_type(t.dtype());
  MPI_Request request = MPI_REQUEST_NULL;
  check_mpi(MPI_Iallgather(src.raw_data(), count, type, result.raw_data(), count, type, g.comm,
                           &request),
            "MPI_Iallgather");
  return std::make_unique<MpiPending>(monitor_.get(), Kind::AllGather,
                                      mesh_dim_index(mesh, mesh_dim), g, request,
                                      std::vector<Tensor>{src, result},
                                      [result] { return result; }, rank_, last_traced());
}

std::unique_ptr<Backend::Pending> MpiBackend::start_reduce_scatter_flat(const LocalTensor& in,
                                                                        const DeviceMesh& mesh,
                                                                        int mesh_dim, ReduceOp op) {
  const CollectiveTimer timer;  // collective_seconds: the start
  const Group g = group_of(mesh, mesh_dim, Kind::ReduceScatter);
  if (g.size == 0) return std::make_unique<Done>(LocalTensor{}, -1);
  const Tensor& t = own_shard(in, rank_, "reduce_scatter");
  DT_CHECK(t.dim() == 1 && t.numel() % g.size == 0,
           "reduce_scatter (started): expected a 1-d shard whose length the group size ", g.size,
           " divides, got shape ", t.shape());
  DT_CHECK(op != ReduceOp::Avg || is_floating(t.dtype()), "reduce_scatter over mesh dim ",
           mesh_dim, ": reduce op avg needs a floating dtype, got ", t.dtype());
  if (check_)
    check_same_call(g, make_call(Kind::ReduceScatter, mesh_dim, g.size,
                                 mesh.group(rank_, mesh_dim)[0], &t, 0, -1, -1,
                                 static_cast<int>(op)),
                    mesh, rank_);
  record_collective(CollectiveKind::ReduceScatter, static_cast<int64_t>(t.nbytes()), t.dtype(),
                    mesh_dim_index(mesh, mesh_dim));
  {
    const TraceStarted started;
    trace_own(CollectiveKind::ReduceScatter, static_cast<int64_t>(t.nbytes()), t.dtype(), mesh,
              mesh_dim, rank_);
  }
  const int64_t piece = t.numel() / g.size;
  if (g.size == 1) {
    // One member: the fold of one piece is the piece (avg divides by 1);
    // recorded once above, not again by a blocking call.
    LocalTensor out;
    out.set(rank_, t.clone());
    return std::make_unique<Done>(std::move(out), last_traced());
  }
  Tensor src = t.contiguous();
  const int count = count_of(piece, "reduce_scatter");
  const MPI_Datatype type = mpi_type(t.dtype());
  const DType dtype = t.dtype();
  MPI_Request request = MPI_REQUEST_NULL;
  if (native_reduce() && !is_half(dtype)) {
    // As the blocking call under DTENSOR_MPI_NATIVE_REDUCE: the library's sum.
    Tensor result = Tensor::empty({piece}, dtype);
    result.storage()->count_on_rank(rank_);  // held from the start, as simulated
    check_mpi(MPI_Ireduce_scatter_block(src.raw_data(), result.raw_data(), count, type,
                                        mpi_op(op, dtype), g.comm, &request),
              "MPI_Ireduce_scatter_block");
    const double n = static_cast<double>(g.size);
    auto finish = [result, op, n]() mutable {
      if (op == ReduceOp::Avg) result.div_(n);
      return result;
    };
    return std::make_unique<MpiPending>(monitor_.get(), Kind::ReduceScatter,
                                        mesh_dim_index(mesh, mesh_dim), g, request,
                                        std::vector<Tensor>{src, result}, finish, rank_,
                                        last_traced());
  }
  // Member k's piece j goes to member j, into slot k of its receive
  // buffer: the exchange of whole pieces that the blocking call makes in
  // bounded rounds (mpi_fold.h), here at once, so that it runs while
  // backward computes.
  Tensor received = Tensor::empty({t.numel()}, dtype);
  // The result, held from the start (RankMemoryTracker) as the simulated
  // world's is; the receive buffer is the backend's own, uncounted.
  Tensor result = Tensor::empty({piece}, dtype);
  result.storage()->count_on_rank(rank_);
  check_mpi(MPI_Ialltoall(src.raw_data(), count, type, received.raw_data(), count, type, g.comm,
                          &request),
            "MPI_Ialltoall");
  const size_t n = static_cast<size_t>(g.size);
  auto fold_pieces = [received, result, piece, dtype, op, n] {
    // In member order with the blocking call's kernel: the same bits.
    std::vector<const void*> pieces;
    const size_t bytes = static_cast<size_t>(piece) * itemsize(dtype);
    for (size_t k = 0; k < n; ++k) pieces.push_back(bytes_of(received) + k * bytes);
    reduce_kernel::fold(dtype, op, pieces.data(), n, result.raw_data(), piece);
    return result;
  };
  return std::make_unique<MpiPending>(monitor_.get(), Kind::ReduceScatter,
                                      mesh_dim_index(mesh, mesh_dim), g, request,
                                      std::vector<Tensor>{src, received}, fold_pieces, rank_,
                                      last_traced());
}

LocalTensor MpiBackend::all_reduce(const LocalTensor& in, const DeviceMesh& mesh, int mesh_dim,
                                   ReduceOp op) {
  const CollectiveTimer timer;  // collective_seconds
  const Group g = group_of(mesh, mesh_dim, Kind::AllReduce);
  if (g.size == 0) return {};
  const Tensor& t = own_shard(in, rank_, "all_reduce");
  DT_CHECK(op != ReduceOp::Avg || is_floating(t.dtype()), "all_reduce over mesh dim ", mesh_dim,
           ": reduce op avg needs a floating dtype, got ", t.dtype(), " shards of shape ",
           t.shape());
  if (check_)
    check_same_call(g, make_call(Kind::AllReduce, mesh_dim, g.size, mesh.group(rank_, mesh_dim)[0],
                                 &t, -1, -1, -1, static_cast<int>(op)),
                    mesh, rank_);
  record_collective(CollectiveKind::AllReduce, static_cast<int64_t>(t.nbytes()), t.dtype(),
                    mesh_dim_index(mesh, mesh_dim));
  trace_own(CollectiveKind::AllReduce, static_cast<int64_t>(t.nbytes()), t.dtype(), mesh, mesh_dim,
            rank_);
  const Tensor src = t.contiguous();
  Tensor result = Tensor::empty(t.shape(), t.dtype());
  if (native_reduce() && g.size > 1 && !is_half(t.dtype())) {
    check_mpi(MPI_Allreduce(src.raw_data(), result.raw_data(), count_of(t.numel(), "all_reduce"),
                            mpi_type(t.dtype()), mpi_op(op, t.dtype()), g.comm),
              "MPI_Allreduce");
    if (op == ReduceOp::Avg) result.div_(static_cast<double>(g.size));
  } else if (fold_temp::small_all_reduce(g.size, static_cast<int64_t>(t.nbytes()))) {
    // Small shards: latency, not bandwidth, is the cost, so one exchange
    // (every member gets every shard) and every member folds all of them.
    Tensor all = Tensor::empty({g.size * t.numel()}, t.dtype());
    const int count = count_of(t.numel(), "all_reduce");
    const MPI_Datatype type = mpi_type(t.dtype());
    check_mpi(MPI_Allgather(src.raw_data(), count, type, all.raw_data(), count, type, g.comm),
              "MPI_Allgather");
    std::vector<const void*> pieces;
    for (int64_t k = 0; k < g.size; ++k)
      pieces.push_back(bytes_of(all) + k * static_cast<int64_t>(t.nbytes()));
    reduce_kernel::fold(t.dtype(), op, pieces.data(), pieces.size(), result.raw_data(),
                        t.numel());
  } else {
    // A reduce_scatter of n flat pieces as equal as can be (member j folds
    // piece j of every member's shard in member order, straight into its
    // place in the result), then an all_gather of the folded pieces in
    // place: the bytes of a ring all-reduce, in a fixed order of terms.
    const int64_t total = src.numel(), n = g.size;
    std::vector<int64_t> counts, displs;
    for (int64_t j = 0, at = 0; j < n; ++j) {
      counts.push_back(total / n + (j < total % n ? 1 : 0));
      displs.push_back(at);
      at += counts.back();
    }
    Pieces pieces{Around{1, total, 1}, {}};
    for (int64_t j = 0; j < n; ++j) pieces.ranges.push_back(ChunkRange{counts[j], displs[j]});
    // Member k's part of this member's share lands where member k's folded
    // piece arrives afterwards, so the step holds its input and its output
    // and nothing more; pieces differ by one element at most, so the
    // smallest gives every slot its room (one round, or two when uneven).
    const size_t isz = itemsize(t.dtype());
    Landing landing{bytes_of(result), {}, *std::min_element(counts.begin(), counts.end())};
    for (int64_t k = 0; k < n; ++k) landing.at.push_back(bytes_of(result) + displs[k] * isz);
    exchange_and_fold(src.raw_data(), pieces, t.dtype(), op, g,
                      bytes_of(result) + displs[g.index] * isz, "all_reduce", &landing);
    if (g.size > 1) {
      std::vector<int> gather_counts, gather_displs;
      for (int64_t j = 0; j < n; ++j) {
        gather_counts.push_back(count_of(counts[j], "all_reduce"));
        gather_displs.push_back(count_of(displs[j], "all_reduce"));
      }
      const MPI_Datatype type = mpi_type(t.dtype());
      check_mpi(MPI_Allgatherv(MPI_IN_PLACE, 0, type, result.raw_data(), gather_counts.data(),
                               gather_displs.data(), type, g.comm),
                "MPI_Allgatherv");
    }
  }
  LocalTensor out;
  out.set(rank_, std::move(result));
  return out;
}

LocalTensor MpiBackend::reduce_scatter(const LocalTensor& in, const DeviceMesh& mesh, int mesh_dim,
                                       ReduceOp op, int64_t scatter_dim) {
  const CollectiveTimer timer;  // collective_seconds
  const Group g = group_of(mesh, mesh_dim, Kind::ReduceScatter);
  if (g.size == 0) return {};
  const Tensor& t = own_shard(in, rank_, "reduce_scatter");
  DT_CHECK(op != ReduceOp::Avg || is_floating(t.dtype()), "reduce_scatter over mesh dim ",
           mesh_dim, ": reduce op avg needs a floating dtype, got ", t.dtype(),
           " shards of shape ", t.shape());
  scatter_dim = check_dim(t, scatter_dim, "reduce_scatter", "scatter dim");
  if (check_)
    check_same_call(g, make_call(Kind::ReduceScatter, mesh_dim, g.size,
                                 mesh.group(rank_, mesh_dim)[0], &t, scatter_dim, -1, -1,
                                 static_cast<int>(op)),
                    mesh, rank_);
  record_collective(CollectiveKind::ReduceScatter, static_cast<int64_t>(t.nbytes()), t.dtype(),
                    mesh_dim_index(mesh, mesh_dim));
  trace_own(CollectiveKind::ReduceScatter, static_cast<int64_t>(t.nbytes()), t.dtype(), mesh, mesh_dim,
            rank_);
  const Tensor src = t.contiguous();
  Pieces pieces{around(src.shape(), scatter_dim), {}};
  for (int64_t j = 0; j < g.size; ++j) pieces.ranges.push_back(chunk_range(pieces.a.len, g.size, j));
  Shape result_shape = src.shape();
  result_shape[scatter_dim] = pieces.ranges[g.index].size;
  Tensor result = Tensor::empty(result_shape, t.dtype());
  if (native_reduce() && g.size > 1 && !is_half(t.dtype())) {
    std::vector<int> counts;
    const Tensor send = pack_chunks(src, g.size, scatter_dim, counts, "reduce_scatter");
    check_mpi(MPI_Reduce_scatter(send.raw_data(), result.raw_data(), counts.data(),
                                 mpi_type(t.dtype()), mpi_op(op, t.dtype()), g.comm),
              "MPI_Reduce_scatter");
    if (op == ReduceOp::Avg) result.div_(static_cast<double>(g.size));
  } else {
    // Chunk j of every member goes to member j, which folds the n chunks in
    // member order: the bytes of a ring reduce-scatter, in a fixed order of
    // terms, read from the shard in place (exchange_and_fold).
    exchange_and_fold(src.raw_data(), pieces, t.dtype(), op, g, result.raw_data(),
                      "reduce_scatter");
  }
  LocalTensor out;
  out.set(rank_, std::move(result));
  return out;
}

LocalTensor MpiBackend::all_to_all(const LocalTensor& in, const DeviceMesh& mesh, int mesh_dim,
                                   int64_t split_dim, int64_t concat_dim) {
  const CollectiveTimer timer;  // collective_seconds
  const Group g = group_of(mesh, mesh_dim, Kind::AllToAll);
  if (g.size == 0) return {};
  const Tensor& t = own_shard(in, rank_, "all_to_all");
  split_dim = check_dim(t, split_dim, "all_to_all", "split dim");
  concat_dim = check_dim(t, concat_dim, "all_to_all", "concat dim");
  DT_CHECK(split_dim != concat_dim, "all_to_all over mesh dim ", mesh_dim,
           ": split dim and concat dim must differ, both are ", split_dim, " (shards of shape ",
           t.shape(), ")");
  if (check_)
    check_same_call(g, make_call(Kind::AllToAll, mesh_dim, g.size, mesh.group(rank_, mesh_dim)[0],
                                 &t, split_dim, concat_dim, concat_dim),
                    mesh, rank_);
  record_collective(CollectiveKind::AllToAll, static_cast<int64_t>(t.nbytes()), t.dtype(),
                    mesh_dim_index(mesh, mesh_dim));
  trace_own(CollectiveKind::AllToAll, static_cast<int64_t>(t.nbytes()), t.dtype(), mesh, mesh_dim,
            rank_);
  LocalTensor out;
  if (g.size == 1) {
    out.set(rank_, t.clone());
    return out;
  }
  // What arrives from member j: j's shard (its own concat length) cut to
  // this member's chunk of the split dim.
  const int64_t concat_len = t.shape()[concat_dim];
  std::vector<int64_t> lens(static_cast<size_t>(g.size));
  check_mpi(MPI_Allgather(&concat_len, 1, MPI_INT64_T, lens.data(), 1, MPI_INT64_T, g.comm),
            "MPI_Allgather");
  const Tensor src = t.contiguous();
  const int64_t split_len = t.shape()[split_dim];
  const int64_t my_split = chunk_range(split_len, g.size, g.index).size;
  Shape out_shape = t.shape();
  out_shape[split_dim] = my_split;
  out_shape[concat_dim] = 0;
  for (int64_t l : lens) out_shape[concat_dim] += l;
  Tensor result = Tensor::empty(out_shape, t.dtype());
  // Each piece is described in place by a subarray datatype, so MPI reads
  // the chunks straight from the shard and writes them straight into the
  // result: no packing copy on either side.
  const MPI_Datatype base = mpi_type(t.dtype());
  std::vector<MPI_Datatype> send_types, recv_types;
  std::vector<int> ones(static_cast<size_t>(g.size), 1), zeros(static_cast<size_t>(g.size), 0);
  std::vector<int> send_counts = ones, recv_counts = ones;
  int64_t at = 0;
  for (int j = 0; j < g.size; ++j) {
    const ChunkRange piece = chunk_range(split_len, g.size, j);
    send_types.push_back(block_type(t.shape(), split_dim, piece.start, piece.size, base));
    recv_types.push_back(block_type(out_shape, concat_dim, at, lens[j], base));
    if (piece.size == 0 || src.numel() == 0) send_counts[j] = 0;
    if (lens[j] == 0 || result.numel() == 0) recv_counts[j] = 0;
    at += lens[j];
  }
  const int rc = MPI_Alltoallw(src.raw_data(), send_counts.data(), zeros.data(), send_types.data(),
                               result.raw_data(), recv_counts.data(), zeros.data(),
                               recv_types.data(), g.comm);
  for (MPI_Datatype& type : send_types) MPI_Type_free(&type);
  for (MPI_Datatype& type : recv_types) MPI_Type_free(&type);
  check_mpi(rc, "MPI_Alltoallw");
  out.set(rank_, std::move(result));
  return out;
}

namespace {

// The root's dtype and shape, sent to every member: [dtype, ndim, sizes...].
struct Header {
  int64_t dtype = 0;
  int64_t ndim = 0;
  int64_t shape[kMaxDims] = {};
};

Header share_header(const Tensor* root_shard, int root, MPI_Comm comm) {
  Header h;
  if (root_shard != nullptr) {
    h.dtype = static_cast<int64_t>(root_shard->dtype());
    h.ndim = root_shard->dim();
    for (int64_t d = 0; d < h.ndim; ++d) h.shape[d] = root_shard->shape()[d];
  }
  check_mpi(MPI_Bcast(&h, sizeof(Header), MPI_BYTE, root, comm), "MPI_Bcast");
  return h;
}

// With the desync check on: the header that arrived is the shard the root
// announced in its check record.
void check_header_against(const Header& h, const MpiBackend::Call& root_call, int root_rank,
                          int rank, const DeviceMesh& mesh, const char* coll) {
  bool same = root_call.dtype == h.dtype && root_call.ndim == h.ndim;
  for (int64_t d = 0; same && d < h.ndim; ++d) same = root_call.shape[d] == h.shape[d];
  if (same) return;
  std::ostringstream got, announced;
  got << dtype_name(static_cast<DType>(h.dtype)) << " [";
  for (int64_t d = 0; d < h.ndim && d < kMaxDims; ++d) got << (d ? ", " : "") << h.shape[d];
  got << "]";
  announced << (root_call.dtype >= 0 ? dtype_name(static_cast<DType>(root_call.dtype)) : "?")
            << " [";
  for (int d = 0; d < root_call.ndim; ++d) announced << (d ? ", " : "") << root_call.shape[d];
  announced << "]";
  DT_THROW(coll, " on ", mesh.to_string(), ": rank ", rank, " received a root shard of ",
           got.str(), " from rank ", root_rank, ", which announced ", announced.str(),
           " in the desync check (collective traffic crossed: a desync)");
}

Shape shape_of(const Header& h) {
  Shape s;
  for (int64_t d = 0; d < h.ndim; ++d) s.push_back(h.shape[d]);
  return s;
}

}  // namespace

template <class H>
void MpiBackend::check_received_header(const Group& g, const H& h, int root,
                                       const DeviceMesh& mesh, const char* coll) const {
  if (g.ranks == nullptr || last_calls_.size() != static_cast<size_t>(g.size)) return;
  check_header_against(h, last_calls_[root], (*g.ranks)[root], rank_, mesh, coll);
}

LocalTensor MpiBackend::broadcast(const LocalTensor& in, const DeviceMesh& mesh, int mesh_dim,
                                  int64_t root) {
  const CollectiveTimer timer;  // collective_seconds
  const Group g = group_of(mesh, mesh_dim, Kind::Broadcast);
  if (g.size == 0) return {};
  DT_CHECK(root >= 0 && root < g.size, "broadcast over mesh dim ", mesh_dim, ": root ", root,
           " out of range for a group of ", g.size, " ranks (expected 0 <= root < ", g.size, ")");
  const bool is_root = g.index == root;
  const Tensor* mine = is_root ? &own_shard(in, rank_, "broadcast") : nullptr;
  if (check_)
    check_same_call(g, make_call(Kind::Broadcast, mesh_dim, g.size, mesh.group(rank_, mesh_dim)[0],
                                 mine, root, -1, -1),
                    mesh, rank_);
  const Header h = share_header(mine, static_cast<int>(root), g.comm);
  if (check_) check_received_header(g, h, static_cast<int>(root), mesh, "broadcast");
  const DType dtype = static_cast<DType>(h.dtype);
  Tensor result = is_root ? mine->contiguous().clone() : Tensor::empty(shape_of(h), dtype);
  record_collective(CollectiveKind::Broadcast, static_cast<int64_t>(result.nbytes()), dtype,
                    mesh_dim_index(mesh, mesh_dim));
  trace_own(CollectiveKind::Broadcast, static_cast<int64_t>(result.nbytes()), dtype, mesh,
            mesh_dim, rank_);
  if (g.size > 1)
    check_mpi(MPI_Bcast(result.raw_data(), count_of(result.numel(), "broadcast"), mpi_type(dtype),
                        static_cast<int>(root), g.comm),
              "MPI_Bcast");
  LocalTensor out;
  out.set(rank_, std::move(result));
  return out;
}

LocalTensor MpiBackend::scatter(const LocalTensor& in, const DeviceMesh& mesh, int mesh_dim,
                                int64_t root, int64_t scatter_dim) {
  const CollectiveTimer timer;  // collective_seconds
  const Group g = group_of(mesh, mesh_dim, Kind::Scatter);
  if (g.size == 0) return {};
  DT_CHECK(root >= 0 && root < g.size, "scatter over mesh dim ", mesh_dim, ": root ", root,
           " out of range for a group of ", g.size, " ranks (expected 0 <= root < ", g.size, ")");
  const bool is_root = g.index == root;
  const Tensor* mine = is_root ? &own_shard(in, rank_, "scatter") : nullptr;
  if (check_)  // the dim as given: only the root knows the shape to normalise it
    check_same_call(g, make_call(Kind::Scatter, mesh_dim, g.size, mesh.group(rank_, mesh_dim)[0],
                                 mine, root, scatter_dim, -1),
                    mesh, rank_);
  if (is_root) scatter_dim = check_dim(*mine, scatter_dim, "scatter", "scatter dim");
  const Header h = share_header(mine, static_cast<int>(root), g.comm);
  if (check_) check_received_header(g, h, static_cast<int>(root), mesh, "scatter");
  const DType dtype = static_cast<DType>(h.dtype);
  const Shape whole = shape_of(h);
  if (!is_root) {
    DT_CHECK(scatter_dim >= -h.ndim && scatter_dim < h.ndim, "scatter: scatter dim ",
             scatter_dim, " out of range for the root's shard of shape ", whole);
    if (scatter_dim < 0) scatter_dim += h.ndim;
  }
  // Every member computes the chunking of the root's shape.
  std::vector<int> counts;
  Shape my_shape;
  for (int64_t i = 0; i < g.size; ++i) {
    const ChunkRange r = chunk_range(whole[scatter_dim], g.size, i);
    Shape s = whole;
    s[scatter_dim] = r.size;
    counts.push_back(count_of(s.product(), "scatter"));
    if (i == g.index) my_shape = s;
  }
  record_collective(CollectiveKind::Scatter,
                    whole.product() * static_cast<int64_t>(itemsize(dtype)), dtype,
                    mesh_dim_index(mesh, mesh_dim));
  trace_own(CollectiveKind::Scatter, my_shape.product() * static_cast<int64_t>(itemsize(dtype)),
            dtype, mesh, mesh_dim, rank_);
  Tensor result = Tensor::empty(my_shape, dtype);
  if (g.size == 1) {
    result.copy_(*mine);
  } else {
    std::vector<int> unused;
    const Tensor send = is_root ? pack_chunks(*mine, g.size, scatter_dim, unused, "scatter") : Tensor();
    const std::vector<int> displs = displacements(counts);
    check_mpi(MPI_Scatterv(is_root ? send.raw_data() : nullptr, counts.data(), displs.data(),
                           mpi_type(dtype), result.raw_data(), counts[g.index], mpi_type(dtype),
                           static_cast<int>(root), g.comm),
              "MPI_Scatterv");
  }
  LocalTensor out;
  out.set(rank_, std::move(result));
  return out;
}

// One MPI_Alltoallw over the group, every piece described in place by a
// subarray datatype: MPI reads the boxes straight from the shard and writes
// them straight into the result, so the step holds its input and its output
// and no packed copy. Members that share no box pass count 0 to each other
// (no message moves); the call is still collective over the group, which
// keeps the watchdog's and the desync check's conventions of every other
// collective (a member that fails or never comes is named, never waited
// for silently).
LocalTensor MpiBackend::exchange_boxes(const LocalTensor& in, const DeviceMesh& mesh, int mesh_dim,
                                       const BoxRoutes& routes) {
  const CollectiveTimer timer;  // collective_seconds
  const Group g = group_of(mesh, mesh_dim, Kind::BoxExchange);
  if (g.size == 0) return {};
  const Tensor& t = own_shard(in, rank_, "box_exchange");
  if (check_) {
    // Shards and outputs legitimately differ in every dim: dtype and ndim only.
    Call c = make_call(Kind::BoxExchange, mesh_dim, g.size, mesh.group(rank_, mesh_dim)[0], &t,
                       -1, -1, -1);
    for (int d = 0; d < c.ndim; ++d) c.shape[d] = -1;
    check_same_call(g, c, mesh, rank_);
  }
  record_collective(CollectiveKind::BoxExchange, static_cast<int64_t>(t.nbytes()), t.dtype(), -1);
  trace_own(CollectiveKind::BoxExchange, static_cast<int64_t>(t.nbytes()), t.dtype(), mesh,
            mesh_dim, rank_);
  const Shape* out_shape = nullptr;
  for (const auto& [rank, shape] : routes.outputs)
    if (rank == rank_) out_shape = &shape;
  DT_CHECK(out_shape != nullptr, "box_exchange over mesh dim ", mesh_dim, " of ", mesh.to_string(),
           ": no output shape for rank ", rank_);
  Tensor result = Tensor::empty(*out_shape, t.dtype());
  const Tensor src = t.contiguous();
  // The member index of each peer (a size-1 group has no member list).
  auto member = [&](int rank) {
    if (g.size == 1) return rank == rank_ ? 0 : -1;
    for (int j = 0; j < g.size; ++j)
      if ((*g.ranks)[j] == rank) return j;
    return -1;
  };
  const MPI_Datatype base = mpi_type(t.dtype());
  const size_t n = static_cast<size_t>(g.size);
  std::vector<MPI_Datatype> send_types(n, base), recv_types(n, base);
  std::vector<int> send_counts(n, 0), recv_counts(n, 0), zeros(n, 0);
  std::vector<MPI_Datatype> made;
  for (const BoxMove& m : routes.moves) {
    if (m.from != rank_ && m.to != rank_) continue;
    const int peer = member(m.from == rank_ ? m.to : m.from);
    DT_CHECK(peer >= 0, "box_exchange over mesh dim ", mesh_dim, " of ", mesh.to_string(),
             ": rank ", m.from, " sends to rank ", m.to, ", outside its group");
    if (m.from == rank_) {
      DT_CHECK(send_counts[peer] == 0, "box_exchange: two boxes from rank ", m.from, " to ", m.to);
      made.push_back(box_type(src.shape(), m.from_start, m.size, base));
      send_types[peer] = made.back();
      send_counts[peer] = 1;
    }
    if (m.to == rank_) {
      DT_CHECK(recv_counts[peer] == 0, "box_exchange: two boxes from rank ", m.from, " to ", m.to);
      made.push_back(box_type(result.shape(), m.to_start, m.size, base));
      recv_types[peer] = made.back();
      recv_counts[peer] = 1;
    }
  }
  const int rc = MPI_Alltoallw(src.raw_data(), send_counts.data(), zeros.data(), send_types.data(),
                               result.raw_data(), recv_counts.data(), zeros.data(),
                               recv_types.data(), g.comm);
  for (MPI_Datatype& type : made) MPI_Type_free(&type);
  check_mpi(rc, "MPI_Alltoallw");
  LocalTensor out;
  out.set(rank_, std::move(result));
  return out;
}

}  // namespace dtensor
