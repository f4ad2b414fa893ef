#include "checkpoint/common.h"

#include <algorithm>
#include <cstring>
#include <sstream>

#include "comm/backend.h"
#include "common/parallel.h"
#include "dtensor/error.h"

namespace dtensor::checkpoint::detail {

namespace {
FaultHook& hook() {
  static FaultHook h;
  return h;
}
}  // namespace

void set_save_fault_hook(FaultHook h) { hook() = std::move(h); }

void fault_point(const char* point, int rank) {
  if (hook()) hook()(point, rank);
}

World world_of(const StateDict& state, const std::optional<World>& given, const char* op) {
  // The first DTensor's world (or the given one); the rest must match it.
  const World* world = given ? &*given : nullptr;
  std::string first;
  for (const auto& [name, entry] : state) {
    const auto* d = std::get_if<DTensor>(&entry);
    if (d == nullptr || !d->defined()) continue;
    const World& w = d->mesh().world();
    if (world == nullptr) {
      world = &w;
      first = name;
    } else {
      DT_CHECK(*world == w, op, ": DTensor '", name, "' lives on another world than ",
               first.empty() ? std::string("the options' world") : "'" + first + "'",
               "; a checkpoint is saved and loaded by one world");
    }
  }
  DT_CHECK(world != nullptr, op,
           ": the state has no DTensor, so it does not say which world's ranks take part; "
           "give one in the options (world = ...)");
  return *world;
}

std::vector<int64_t> all_gather_values(const World& world, const std::vector<int64_t>& counts,
                                       const std::function<std::vector<int64_t>(int)>& mine) {
  const DeviceMesh mesh(world, Shape{world.size()});
  LocalTensor local;
  for (int r : world.held_ranks()) {
    std::vector<int64_t> v = mine(r);
    DT_CHECK(static_cast<int64_t>(v.size()) == counts[static_cast<size_t>(r)],
             "checkpoint: internal error: rank ", r, " gives ", v.size(), " values, expected ",
             counts[static_cast<size_t>(r)]);
    local.set(r, Tensor::from_vector(v, Shape{static_cast<int64_t>(v.size())}));
  }
  const LocalTensor all = world.backend().all_gather(local, mesh, 0, 0);
  return all.shard(world.held_ranks().front()).to_vector<int64_t>();
}

void Failures::agree(const World& world, const std::string& suffix,
                     const std::function<void()>& cleanup) {
  const auto n = static_cast<size_t>(world.size());
  const std::vector<int64_t> ones(n, 1);
  // Each rank's message length + 1 (0: it succeeded).
  const std::vector<int64_t> lengths = all_gather_values(world, ones, [&](int r) {
    const auto it = messages_.find(r);
    const int64_t length = it == messages_.end() ? 0 : static_cast<int64_t>(it->second.size()) + 1;
    return std::vector<int64_t>{length};
  });
  std::vector<int> failed;
  for (size_t r = 0; r < n; ++r)
    if (lengths[r] != 0) failed.push_back(static_cast<int>(r));
  if (failed.empty()) return;
  // The lowest failed rank sends its message, 8 bytes to a value.
  const int first = failed.front();
  const auto length = static_cast<size_t>(lengths[static_cast<size_t>(first)] - 1);
  std::vector<int64_t> counts(n, 0);
  counts[static_cast<size_t>(first)] = static_cast<int64_t>((length + 7) / 8);
  const std::vector<int64_t> packed = all_gather_values(world, counts, [&](int r) {
    std::vector<int64_t> v(static_cast<size_t>(counts[static_cast<size_t>(r)]), 0);
    if (r == first) std::memcpy(v.data(), messages_.at(r).data(), length);
    return v;
  });
  std::string message(length, '\0');
  std::memcpy(message.data(), packed.data(), length);
  if (cleanup) cleanup();
  std::ostringstream os;
  os << message << " (on rank " << first;
  if (failed.size() > 1) {
    os << "; rank" << (failed.size() > 2 ? "s " : " ");
    for (size_t i = 1; i < failed.size(); ++i) os << (i > 1 ? ", " : "") << failed[i];
    os << " failed too";
  }
  os << ")" << suffix;
  DT_THROW(os.str());
}

Box box_of(const DTensorSpec& spec, int rank) {
  const std::optional<ShardExtent> e = spec.extent_of_rank(rank);
  DT_CHECK(e.has_value(), "checkpoint: internal error: rank ", rank, " is not in the mesh");
  return Box{e->global_offset, e->local_shape};
}

Box whole(const Shape& shape) { return Box{Shape(shape.size(), 0), shape}; }

Placements without_partial(const Placements& p) {
  Placements out = p;
  for (Placement& q : out)
    if (q.is_partial()) q = Replicate();
  return out;
}

bool holds_zeros(const DTensorSpec& spec, int rank) {
  const std::optional<DimVector> coord = spec.mesh().coordinate(rank);
  const Placements& p = spec.placements();
  for (size_t d = 0; d < p.size(); ++d)
    if (p[d].is_partial() && p[d].reduce_op() == ReduceOp::Sum && (*coord)[d] != 0) return true;
  return false;
}

void fill_shard(Tensor& shard, const std::function<void(char* data)>& fill) {
  if (shard.numel() == 0) return;
  if (shard.is_contiguous()) {
    fill(static_cast<char*>(shard.raw_data()));
    shard.storage()->bump_version();
  } else {
    Tensor tmp = Tensor::empty(shard.shape(), shard.dtype());
    fill(static_cast<char*>(tmp.raw_data()));
    shard.copy_(tmp);
  }
}

namespace {

// Fills `dest` (the box `box` of tensor `name`) with what read() gives in
// the `stored` dtype: straight into it when the dtypes agree, else through
// a buffer of the stored dtype, converted by copy_.
using ReadOne = std::function<void(const std::string& name, const Box& box, char* data)>;
void read_into(Tensor& dest, const std::string& name, const Box& box, DType stored,
               const ReadOne& read) {
  if (dest.dtype() == stored) {
    fill_shard(dest, [&](char* data) { read(name, box, data); });
    return;
  }
  if (dest.numel() == 0) return;
  Tensor buffer = Tensor::empty(dest.shape(), stored);
  read(name, box, static_cast<char*>(buffer.raw_data()));
  dest.copy_(buffer);
}

bool convertible(DType d) { return is_floating(d); }

}  // namespace

void check_dtype(const std::string& what, DType stored, DType dest, bool convert,
                 const char* verb) {
  if (stored == dest) return;
  if (convert && convertible(stored) && convertible(dest)) return;
  std::ostringstream os;
  os << what << " but " << dtype_name(dest) << " in the state";
  if (!convert && convertible(stored) && convertible(dest)) {
    os << "; " << verb << " with convert_dtype = true to convert it to " << dtype_name(dest);
  } else if (convert) {
    os << "; convert_dtype converts between floating dtypes only (float64, float32, bfloat16, "
          "float16)";
  }
  DT_THROW(os.str());
}

void read_state(const World& world, StateDict& state, const std::vector<std::string>& names,
                const ReadBox& read, const std::function<DType(const std::string&)>& stored,
                const std::function<Tensor(const std::string&)>& new_plain,
                const std::map<std::string, Value>& values) {
  const std::vector<int>& held = world.held_ranks();
  const int first = held.front();
  std::map<std::string, Tensor> plain;  // filled by the task of rank `first` only
  Failures failures;
  // One rank's shards, read through its task's scratch block.
  const auto read_rank = [&](int r, std::vector<char>& scratch) {
    const auto read_r = [&](const std::string& name, const Box& box, char* data) {
      read(name, box, data, scratch);
    };
    for (const std::string& name : names) {
      Entry& entry = state.at(name);
      if (auto* d = std::get_if<DTensor>(&entry)) {
        if (!d->mesh().contains(r)) continue;
        Tensor shard = d->to_local(r);
        if (holds_zeros(d->spec(), r)) {
          shard.zero_();
        } else {
          read_into(shard, name, box_of(d->spec(), r), stored(name), read_r);
        }
      } else if (auto* p = std::get_if<Tensor>(&entry); p != nullptr && r == first) {
        Tensor out = p->defined() ? *p : new_plain(name);
        read_into(out, name, whole(out.shape()), stored(name), read_r);
        plain[name] = out;
      }
    }
  };
  // The simulated world's ranks read on the thread pool, as MPI's
  // processes do at once: each fills only its own shards, so the bytes land
  // where they did one rank after another, while different ranks' pread
  // copies and checksums use different cores.
  const auto ranks = static_cast<int64_t>(held.size());
  dtensor::detail::parallel_for(ranks, 1, [&](int64_t begin, int64_t end) {
    std::vector<char> scratch;
    for (int64_t i = begin; i < end; ++i) {
      const int r = held[static_cast<size_t>(i)];
      failures.run(r, [&] { read_rank(r, scratch); });
    }
  });
  failures.agree(world, " (the state's DTensors may be partly loaded)");
  for (const std::string& name : names) {
    Entry& entry = state.at(name);
    if (std::holds_alternative<Value>(entry)) {
      entry = values.at(name);
    } else if (auto it = plain.find(name); it != plain.end()) {
      entry = it->second;
    }
  }
}

std::optional<TensorKind> tensor_kind(const Entry& entry, const std::string& name,
                                      const char* op) {
  if (const auto* d = std::get_if<DTensor>(&entry)) {
    DT_CHECK(d->defined(), op, ": entry '", name,
             "' is an empty DTensor (make it with its layout first)");
    return TensorKind{d->shape(), d->dtype()};
  }
  const Tensor& p = std::get<Tensor>(entry);
  if (!p.defined()) return std::nullopt;
  return TensorKind{p.shape(), p.dtype()};
}

const char* kind_of(const Entry& e) {
  if (std::holds_alternative<DTensor>(e)) return "a DTensor";
  if (std::holds_alternative<Tensor>(e)) return "a Tensor";
  return "a value";
}

std::string normalize_dir(const std::string& dir) {
  DT_CHECK(!dir.empty(), "checkpoint: the directory is empty (expected a path)");
  std::string d = dir;
  while (d.size() > 1 && d.back() == '/') d.pop_back();
  return d;
}

}  // namespace dtensor::checkpoint::detail
