// MpiBackend: each collective over the calling rank's group communicator
// (see mpi_backend.h).
//
// Buffers: MPI moves runs of elements, so a shard is made contiguous first
// (free when it already is). A piece along a dim other than the leading one
// is described in place by a derived datatype wherever a redistribution
// runs it (all_gather, all_to_all, reduce_scatter, exchange_boxes), so a
// step holds its input, its output and, for a reduce_scatter or a small
// all_reduce, a receive buffer bounded by the group size (fold_temp.h);
// only scatter and the native reduce_scatter pack chunks into one buffer.
// Reductions fold what arrived with reduce_kernel.h in member order, the
// kernel the simulated backend uses, so both worlds give the same bits.
// Counts and displacements are MPI ints: more than 2^31-1 elements in a
// piece (or before one, in a buffer) is an error.
#include "comm/mpi_backend.h"

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>

#include "comm/around.h"
#include "comm/fold_temp.h"
#include "comm/reduce_kernel.h"
#include "dtensor/debug.h"
#include "dtensor/error.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace dtensor {

namespace {

MPI_Datatype mpi_type(DType d) {
  switch (d) {
    case DType::Float32: return MPI_FLOAT;
    case DType::Float64: return MPI_DOUBLE;
    case DType::Int64: return MPI_INT64_T;
    case DType::Bool: break;
  }
  return MPI_C_BOOL;
}

// bool + bool is logical or (as in PyTorch and the simulated backend).
MPI_Op mpi_op(ReduceOp op, DType d) {
  if (d == DType::Bool) return op == ReduceOp::Min ? MPI_LAND : MPI_LOR;
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg: return MPI_SUM;
    case ReduceOp::Max: return MPI_MAX;
    case ReduceOp::Min: break;
  }
  return MPI_MIN;
}

void check_mpi(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  DT_THROW(call, " failed: ", std::string(text, static_cast<size_t>(len)));
}

int count_of(int64_t n, const char* coll) {
  DT_CHECK(n <= INT_MAX, coll, ": a piece of ", n,
           " elements exceeds MPI's 32-bit count limit (", INT_MAX, ")");
  return static_cast<int>(n);
}

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

// One run of `run` bytes. stream: with non-temporal stores where the
// destination allows (16-byte aligned, whole 16-byte words), which skip the
// read-for-ownership of every destination line and leave the cache alone.
void copy_run(std::byte* dst, const std::byte* src, int64_t run, bool stream) {
#if defined(__SSE2__)
  if (stream && run % 16 == 0 && reinterpret_cast<uintptr_t>(dst) % 16 == 0) {
    auto* d = reinterpret_cast<__m128i*>(dst);
    const auto* s = reinterpret_cast<const __m128i*>(src);
    for (int64_t i = 0; i < run / 16; ++i) _mm_stream_si128(d + i, _mm_loadu_si128(s + i));
    return;
  }
#endif
  switch (run) {  // one element: a move, not a call
    case 1: std::memcpy(dst, src, 1); return;
    case 4: std::memcpy(dst, src, 4); return;
    case 8: std::memcpy(dst, src, 8); return;
    default: std::memcpy(dst, src, static_cast<size_t>(run));
  }
}

// One side of a block transpose between a strided buffer of `rows` rows of
// `wide` bytes and n contiguous pieces: piece j holds bytes [off[j], off[j]
// + run[j]) of every row, row after row. pack: rows -> pieces; otherwise
// pieces -> rows. A null piece is skipped.
// The strided side is walked in memory order (row by row, each row's runs in
// turn), the pieces as n sequential streams, and copies of 4 MiB or more
// write with streaming stores: packing the 4 column blocks of a 64 MiB
// [rows, 1024] float32 shard on each of 4 processes took 42 ms so, against
// 87 ms with memcpy per run, and 108 ms visiting the rows in tiles (each
// tile once per piece, so each piece is one long stream): reading a quarter
// of each row per pass defeats the prefetcher.
void block_copy(std::byte* rows_buf, int64_t rows, int64_t wide, const std::vector<int64_t>& off,
                const std::vector<int64_t>& run, const std::vector<std::byte*>& pieces,
                bool pack) {
  int64_t total = 0;
  for (size_t j = 0; j < pieces.size(); ++j)
    if (pieces[j] != nullptr) total += run[j] * rows;
  const bool stream = total >= (int64_t{4} << 20);
  for (int64_t r = 0; r < rows; ++r) {
    std::byte* row = rows_buf + r * wide;
    for (size_t j = 0; j < pieces.size(); ++j) {
      if (pieces[j] == nullptr || run[j] == 0) continue;
      std::byte* piece = pieces[j] + r * run[j];
      if (pack) copy_run(piece, row + off[j], run[j], stream);
      else copy_run(row + off[j], piece, run[j], stream);
    }
  }
#if defined(__SSE2__)
  if (stream) _mm_sfence();  // order the streaming stores before MPI or the caller reads them
#endif
}

std::byte* bytes_of(const Tensor& t) { return static_cast<std::byte*>(t.raw_data()); }

// Chunks `ranges` of a contiguous tensor along dim, copied to dst[j] (null:
// skipped), each as a contiguous block of shape [outer, ranges[j].size, inner].
void pack_ranges(const Tensor& src, int64_t dim, const std::vector<ChunkRange>& ranges,
                 const std::vector<std::byte*>& dst) {
  const Around a = around(src.shape(), dim);
  const int64_t isz = static_cast<int64_t>(itemsize(src.dtype()));
  std::vector<int64_t> off, run;
  for (const ChunkRange& r : ranges) {
    off.push_back(r.start * a.inner * isz);
    run.push_back(r.size * a.inner * isz);
  }
  block_copy(bytes_of(src), a.outer, a.len * a.inner * isz, off, run, dst, /*pack=*/true);
}

// The n chunks of t along dim (Tensor::chunk) packed one after the other
// into one contiguous buffer; counts[i] = elements of chunk i. No copy when
// each chunk is one block of t already (nothing before dim) and t is contiguous.
Tensor pack_chunks(const Tensor& t, int64_t n, int64_t dim, std::vector<int>& counts,
                   const char* coll) {
  const Tensor src = t.contiguous();
  const Around a = around(src.shape(), dim);
  const int64_t isz = static_cast<int64_t>(itemsize(src.dtype()));
  std::vector<ChunkRange> ranges;
  std::vector<std::byte*> dst;
  counts.resize(static_cast<size_t>(n));
  Tensor packed = a.outer == 1 ? src : Tensor::empty({src.numel()}, src.dtype());
  int64_t at = 0;
  for (int64_t i = 0; i < n; ++i) {
    ranges.push_back(chunk_range(a.len, n, i));
    const int64_t elems = a.outer * ranges.back().size * a.inner;
    counts[i] = count_of(elems, coll);
    dst.push_back(bytes_of(packed) + at * isz);
    at += elems;
  }
  if (a.outer != 1) pack_ranges(src, dim, ranges, dst);
  return packed;
}

// A committed datatype for the block [start, start + len) along dim of a
// contiguous tensor of `whole` shape (a subarray; one element's type when
// the block is empty, with count 0 at the call).
MPI_Datatype block_type(const Shape& whole, int64_t dim, int64_t start, int64_t len,
                        MPI_Datatype base) {
  MPI_Datatype type = MPI_DATATYPE_NULL;
  bool empty = len == 0;
  for (int64_t n : whole) empty = empty || n == 0;
  if (empty) {
    MPI_Type_dup(base, &type);
    return type;
  }
  int sizes[kMaxDims], subsizes[kMaxDims], starts[kMaxDims];
  const int nd = static_cast<int>(whole.size());
  for (int d = 0; d < nd; ++d) {
    sizes[d] = count_of(whole[d], "all_to_all");
    subsizes[d] = d == dim ? static_cast<int>(len) : sizes[d];
    starts[d] = d == dim ? static_cast<int>(start) : 0;
  }
  check_mpi(MPI_Type_create_subarray(nd, sizes, subsizes, starts, MPI_ORDER_C, base, &type),
            "MPI_Type_create_subarray");
  check_mpi(MPI_Type_commit(&type), "MPI_Type_commit");
  return type;
}

std::vector<int> displacements(const std::vector<int>& counts) {
  std::vector<int> displs(counts.size(), 0);
  for (size_t i = 1; i < counts.size(); ++i) displs[i] = displs[i - 1] + counts[i - 1];
  return displs;
}

// ---- deterministic reductions ---------------------------------------------------

// A reduction's pieces: the shard seen as [outer, len, inner] (around.h);
// piece j is rows [ranges[j].start, + size) of len under every outer index,
// taken in memory order, and member j folds piece j of every member's shard.
struct Pieces {
  Around a;
  std::vector<ChunkRange> ranges;
  int64_t row(int j) const { return ranges[j].size * a.inner; }  // elements per outer index
  int64_t elems(int j) const { return a.outer * row(j); }
  // Element e of piece j, as an element offset in the shard.
  int64_t at(int j, int64_t e) const {
    const int64_t w = row(j);
    return (e / w) * a.len * a.inner + ranges[j].start * a.inner + e % w;
  }
  // Whether piece j is one run of the shard (nothing before the dim, or the
  // whole dim), so it can be read in place.
  bool flat(int j) const { return a.outer == 1 || ranges[j].size == a.len || elems(j) == 0; }
};

// A committed datatype for elements [e0, e1) of piece j, in piece order,
// displaced in bytes from the shard's start: the rest of a row, whole rows
// (a vector), the start of a row. Three blocks at most, however many rows.
// REQUIRES: e0 < e1.
MPI_Datatype piece_range_type(const Pieces& p, int j, int64_t e0, int64_t e1, MPI_Datatype base,
                              int64_t isz, const char* coll) {
  const int64_t w = p.row(j), stride = p.a.len * p.a.inner;
  int counts[3];
  MPI_Aint displs[3];
  MPI_Datatype types[3];
  MPI_Datatype rows = MPI_DATATYPE_NULL;
  int blocks = 0;
  auto run = [&](int64_t from, int64_t count, MPI_Datatype type) {
    counts[blocks] = count_of(count, coll);
    displs[blocks] = static_cast<MPI_Aint>(p.at(j, from) * isz);
    types[blocks++] = type;
  };
  if (e0 / w == (e1 - 1) / w) {
    run(e0, e1 - e0, base);  // within one row
  } else {
    const int64_t first_whole = (e0 + w - 1) / w, end_whole = e1 / w;
    if (e0 % w != 0) run(e0, w - e0 % w, base);
    if (end_whole > first_whole) {
      check_mpi(MPI_Type_vector(count_of(end_whole - first_whole, coll), count_of(w, coll),
                                count_of(stride, coll), base, &rows),
                "MPI_Type_vector");
      run(first_whole * w, 1, rows);
    }
    if (e1 % w != 0) run(end_whole * w, e1 % w, base);
  }
  MPI_Datatype type = MPI_DATATYPE_NULL;
  check_mpi(MPI_Type_create_struct(blocks, counts, displs, types, &type), "MPI_Type_create_struct");
  check_mpi(MPI_Type_commit(&type), "MPI_Type_commit");
  if (rows != MPI_DATATYPE_NULL) MPI_Type_free(&rows);
  return type;
}

// Where the pieces of this member's share land before they are folded: by
// default a receive buffer of a slot per member (fold_temp.h); all_reduce
// passes its result instead, since member k's part of this member's share
// can wait where member k's folded piece arrives later.
struct Landing {
  std::byte* base = nullptr;   // the buffer the slots lie in
  std::vector<std::byte*> at;  // at[k]: member k's slot (k != this member)
  int64_t room = 0;            // elements in every slot, the same on every member
};

// A committed datatype for `count` elements at `disp` bytes from the buffer
// given to MPI: displacements travel as MPI_Aint, past the 2 GiB of the
// int byte displacements of MPI_Alltoallw.
MPI_Datatype run_at(int count, MPI_Aint disp, MPI_Datatype base) {
  MPI_Datatype type = MPI_DATATYPE_NULL;
  check_mpi(MPI_Type_create_struct(1, &count, &disp, &base, &type), "MPI_Type_create_struct");
  check_mpi(MPI_Type_commit(&type), "MPI_Type_commit");
  return type;
}

// Folds piece `me` of every member's shard, in member order, into `out`
// (elems(me) elements). The pieces arrive in rounds (MPI_Alltoallw, each
// range of a shard described in place by piece_range_type: no packed copy),
// each folded before the next, so what is received at a time is bounded by
// the slots: fold_temp::slot_bytes(n) per member, or the room of a landing
// area. Every element is folded on its own in the same order whatever the
// rounds, so the bits are those of one exchange of whole pieces, and of the
// simulated backend. The own piece is read where it lies when it is one run
// of the shard; otherwise the same call copies it into a slot of its own.
void exchange_and_fold(const void* shard, const Pieces& p, DType dtype, ReduceOp op,
                       const MpiBackend::Group& g, void* out, const char* coll,
                       const Landing* landing = nullptr) {
  const int n = g.size, me = g.index;
  const int64_t isz = static_cast<int64_t>(itemsize(dtype));
  int64_t most = 0;
  for (int k = 0; k < n; ++k) most = std::max(most, p.elems(k));
  if (most == 0) return;
  const bool own_in_place = p.flat(me);
  if (landing != nullptr && (landing->room == 0 || !own_in_place)) landing = nullptr;
  const int64_t slot =
      std::min(landing != nullptr ? landing->room : fold_temp::slot_bytes(n) / isz, most);
  // Without a landing area, member k's slot in a receive buffer (the own
  // one, if any, last).
  auto slot_of = [&](int k) { return k == me ? n - 1 : k < me ? k : k - 1; };
  const Tensor buffer =
      landing != nullptr ? Tensor() : Tensor::empty({(own_in_place ? n - 1 : n) * slot}, dtype);
  const auto* src = static_cast<const std::byte*>(shard);
  auto* recv_base = landing != nullptr ? landing->base : static_cast<std::byte*>(buffer.raw_data());
  auto recv_at = [&](int k) {
    return landing != nullptr ? landing->at[k]
                              : static_cast<std::byte*>(buffer.raw_data()) + slot_of(k) * slot * isz;
  };
  const MPI_Datatype base = mpi_type(dtype);
  // Every piece one run (nothing before the dim: all_reduce, or a leading
  // scatter dim): counts and element displacements (MPI_Alltoallv), which
  // Open MPI ran faster than the same moves as one-block datatypes of
  // MPI_Alltoallw (64 MiB all_reduce on 4 processes, alternating runs:
  // ~90-130 against ~130 ms).
  // (Counts and displacements are then MPI ints, as for MPI_Allgatherv.)
  const bool runs = p.a.outer == 1 && own_in_place;
  const size_t un = static_cast<size_t>(n);
  std::vector<int> send_counts(un), recv_counts(un), zeros(un, 0), send_displs(un), recv_displs(un);
  std::vector<MPI_Datatype> send_types(un, base), recv_types(un, base);
  std::vector<const void*> in(un);
  for (int64_t e0 = 0; e0 < most; e0 += slot) {
    const int64_t mine = std::clamp<int64_t>(p.elems(me) - e0, 0, slot);
    for (int k = 0; k < n; ++k) {
      const int64_t theirs = std::clamp<int64_t>(p.elems(k) - e0, 0, slot);
      const bool local = k == me && own_in_place;
      send_types[k] = recv_types[k] = base;
      send_counts[k] = recv_counts[k] = send_displs[k] = recv_displs[k] = 0;
      in[k] = local ? src + (mine > 0 ? p.at(me, e0) : 0) * isz : recv_at(k);
      if (local) continue;
      if (runs) {
        send_counts[k] = count_of(theirs, coll);
        send_displs[k] = theirs > 0 ? count_of(p.at(k, e0), coll) : 0;
        recv_counts[k] = count_of(mine, coll);
        recv_displs[k] = count_of((recv_at(k) - recv_base) / isz, coll);
        continue;
      }
      if (theirs > 0) {
        send_types[k] = piece_range_type(p, k, e0, e0 + theirs, base, isz, coll);
        send_counts[k] = 1;
      }
      if (mine > 0) {
        recv_types[k] = run_at(count_of(mine, coll), recv_at(k) - recv_base, base);
        recv_counts[k] = 1;
      }
    }
    int rc = MPI_SUCCESS;
    if (runs && n > 1) {
      rc = MPI_Alltoallv(shard, send_counts.data(), send_displs.data(), base, recv_base,
                         recv_counts.data(), recv_displs.data(), base, g.comm);
    } else if (!runs) {
      rc = MPI_Alltoallw(shard, send_counts.data(), zeros.data(), send_types.data(), recv_base,
                         recv_counts.data(), zeros.data(), recv_types.data(), g.comm);
      for (int k = 0; k < n; ++k) {
        if (send_counts[k] > 0) MPI_Type_free(&send_types[k]);
        if (recv_counts[k] > 0) MPI_Type_free(&recv_types[k]);
      }
    }
    check_mpi(rc, runs ? "MPI_Alltoallv" : "MPI_Alltoallw");
    if (mine > 0)
      reduce_kernel::fold(dtype, op, in.data(), in.size(), static_cast<std::byte*>(out) + e0 * isz,
                          mine);
  }
}

// ---- desync check ---------------------------------------------------------------

using Kind = MpiBackend::Kind;
using Call = MpiBackend::Call;

constexpr int32_t kCallMagic = 0x64744331;  // "dtC1"
constexpr int kCheckTag = 7301;

const char* kind_name(Kind k) { return collective_kind_name(static_cast<int>(k)); }

Call make_call(Kind kind, int mesh_dim, int group_size, int64_t first_rank, const Tensor* t,
               int64_t dim_a, int64_t dim_b, int64_t free_dim, int reduce_op = -1) {
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

LocalTensor MpiBackend::all_gather(const LocalTensor& in, const DeviceMesh& mesh, int mesh_dim,
                                   int64_t gather_dim) {
  const Group g = group_of(mesh, mesh_dim, Kind::AllGather);
  if (g.size == 0) return {};
  const Tensor& t = own_shard(in, rank_, "all_gather");
  gather_dim = check_dim(t, gather_dim, "all_gather", "gather dim");
  if (check_)
    check_same_call(g, make_call(Kind::AllGather, mesh_dim, g.size, mesh.group(rank_, mesh_dim)[0],
                                 &t, gather_dim, -1, gather_dim),
                    mesh, rank_);
  record_collective(CollectiveKind::AllGather, static_cast<int64_t>(t.nbytes()));
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

LocalTensor MpiBackend::all_reduce(const LocalTensor& in, const DeviceMesh& mesh, int mesh_dim,
                                   ReduceOp op) {
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
  record_collective(CollectiveKind::AllReduce, static_cast<int64_t>(t.nbytes()));
  const Tensor src = t.contiguous();
  Tensor result = Tensor::empty(t.shape(), t.dtype());
  if (native_reduce() && g.size > 1) {
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
  record_collective(CollectiveKind::ReduceScatter, static_cast<int64_t>(t.nbytes()));
  const Tensor src = t.contiguous();
  Pieces pieces{around(src.shape(), scatter_dim), {}};
  for (int64_t j = 0; j < g.size; ++j) pieces.ranges.push_back(chunk_range(pieces.a.len, g.size, j));
  Shape result_shape = src.shape();
  result_shape[scatter_dim] = pieces.ranges[g.index].size;
  Tensor result = Tensor::empty(result_shape, t.dtype());
  if (native_reduce() && g.size > 1) {
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
  record_collective(CollectiveKind::AllToAll, static_cast<int64_t>(t.nbytes()));
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
  record_collective(CollectiveKind::Broadcast, static_cast<int64_t>(result.nbytes()));
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
                    whole.product() * static_cast<int64_t>(itemsize(dtype)));
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

namespace {

// A committed datatype for the box [start, start + size) of a contiguous
// tensor of `whole` shape (a 0-d tensor: its one element).
MPI_Datatype box_type(const Shape& whole, const Shape& start, const Shape& size,
                      MPI_Datatype base) {
  MPI_Datatype type = MPI_DATATYPE_NULL;
  const int nd = static_cast<int>(whole.size());
  if (nd == 0) {
    check_mpi(MPI_Type_dup(base, &type), "MPI_Type_dup");
    return type;
  }
  int sizes[kMaxDims], subsizes[kMaxDims], starts[kMaxDims];
  for (int d = 0; d < nd; ++d) {
    sizes[d] = count_of(whole[d], "box_exchange");
    subsizes[d] = count_of(size[d], "box_exchange");
    starts[d] = count_of(start[d], "box_exchange");
  }
  check_mpi(MPI_Type_create_subarray(nd, sizes, subsizes, starts, MPI_ORDER_C, base, &type),
            "MPI_Type_create_subarray");
  check_mpi(MPI_Type_commit(&type), "MPI_Type_commit");
  return type;
}

}  // namespace

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
  record_collective(CollectiveKind::BoxExchange, static_cast<int64_t>(t.nbytes()));
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
