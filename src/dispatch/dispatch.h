// The DTensor op dispatcher: OpSchema (what determines an op's layout), the
// per-op sharding rules, the cached propagation, and the helpers each op
// family (src/ops/) uses to run its local kernel on every held shard.
//
// A call: build the OpSchema on the stack (op id, pointers to the input
// specs, layout-relevant arguments; the hash is computed once) -> look it up
// in the propagation cache (no allocation on a hit) -> redistribute the
// inputs whose target spec differs (through the planner) -> run the kernel
// on each held shard (in parallel over the ranks of a simulated world,
// world/shard_map.h; so a kernel must not touch state shared between
// ranks) -> wrap the output with its spec.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "debug/verify.h"
#include "dtensor/ops.h"
#include "world/shard_map.h"

namespace dtensor::dispatch {

// Names the ops' strategies use in every file: Replicate(), and every
// Partial kind.
inline constexpr Placement kR = Replicate();
inline constexpr ReduceOp kAllOps[] = {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min};

// One id per DTensor op (the schema's first field). Ops sharing a kernel
// family still get their own id: the id is part of the cache key.
enum class OpId : uint16_t {
  // pointwise
  Add, Sub, Mul, Div, AddScalar, SubScalar, MulScalar, DivScalar, RSubScalar, RDivScalar, Neg,
  Relu, Exp, Log, Abs, Sqrt, Rsqrt, Tanh, Sigmoid, Gelu, Pow, Maximum, Minimum, Eq, Ne, Lt, Le,
  Gt, Ge, EqScalar, NeScalar, LtScalar, LeScalar, GtScalar, GeScalar, Where, WhereScalar,
  MaskedFill, Erf, GeluBackward, Silu,
  // more pointwise math (src/ops/pointwise_math.cc)
  Sin, Cos, Log1p, Expm1, Square, Sign, Floor, Round, Softplus, Isnan, LogicalNot, LogicalAnd,
  LogicalOr, LogicalXor, Addcmul, Addcdiv, Lerp, LerpScalar,
  // matmul family
  Mm, Addmm, Bmm, Baddbmm, Matmul, Linear,
  // reductions
  Sum, Mean, Prod, Amax, Amin, Argmax, Argmin, Var,
  // views
  View, Permute, Expand, Narrow, Slice, Select, SliceBackward,
  // tensor ops
  Cat, Stack, Clone, Contiguous, FullLike, IndexSelect, IndexSelectBackward,
  // NN math
  Softmax, LogSoftmax, LayerNorm, RmsNorm, NllLoss, Embedding, Dropout, NllLossBackward,
  EmbeddingBackward,
  // users' ops (custom_op.h; the registration's index is the schema's first argument)
  Custom,
  // scans, sorting, logical reductions (src/ops/scan.cc)
  Cumsum, CumsumReverse, Logsumexp, All, Any, SortIndices, TopkIndices, TakeAlongDim, ScatterAlongDim,
  // shape ops (src/ops/shape.cc)
  Repeat, Pad, EmptyLike,
  NormPart,  // norms (src/ops/norm.cc): vector_norm's per-shard part
  // attention (src/ops/attention.cc)
  ScaledDotProductAttention, ScaledDotProductAttentionBackward,
  // clamping, triangles, gather/scatter, indexed updates (ops/clamp_triangle.cc, ops/indexing.cc)
  Clamp, Tril, Triu, Gather, Scatter, ScatterValue, ScatterAdd, IndexAdd, IndexPut, IndexGet,
  // structural ops (src/ops/structural.cc)
  Flip, Roll, Cumprod, CumprodBackward, Diagonal, DiagonalBackward,
};

// cat/stack of more tensors join them in groups of kMaxInputs.
inline constexpr int kMaxInputs = 8;
inline constexpr int kMaxArgs = kMaxDims + 4;

inline constexpr size_t kSchemaHashPrime = 0x100000001B3ull;

// Built on the stack by every op, so its constructor and hash are inline:
// at a call site the lists have a known length and the copies unroll (out
// of line they were two memmove calls through the PLT), and only the
// first num_inputs / num_args entries are ever read, so the rest stays
// unset.
struct OpSchema {
  OpId op{};
  int num_inputs = 0;
  const DTensorSpec* inputs[kMaxInputs];
  int num_args = 0;
  int64_t args[kMaxArgs];
  size_t hash = 0;

  OpSchema(OpId id, std::initializer_list<const DTensorSpec*> specs,
           std::initializer_list<int64_t> arguments = {})
      : op(id) {
    for (const DTensorSpec* s : specs) inputs[num_inputs++] = s;
    for (int64_t a : arguments) args[num_args++] = a;
    rehash();
  }
  // Each keeps the hash up to date (push_arg in O(1): args hash last).
  void push_arg(int64_t a);
  void push_input(const DTensorSpec* spec);
  void set_input(int i, const DTensorSpec* spec);
  const DTensorSpec& input(int i) const { return *inputs[i]; }

 private:
  void rehash() {
    size_t h = static_cast<size_t>(op) * 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < num_inputs; ++i) h = (h ^ inputs[i]->hash()) * kSchemaHashPrime;
    for (int i = 0; i < num_args; ++i) h = (h ^ static_cast<size_t>(args[i])) * kSchemaHashPrime;
    hash = h;
  }
};

// One candidate for one mesh dim: the placement each input must have and
// the output's.
struct DimStrategy {
  Placement in[kMaxInputs];
  Placement out;
};

struct OutputSharding;

struct OpRule {
  const char* name;
  // The output's meta; throws the plain op's error on bad shapes.
  TensorMeta (*output_meta)(const OpSchema&);
  // Appends the candidates for one mesh dim (the same for every mesh dim),
  // best first: ties in cost go to the earlier one.
  // nullptr: the op has no sharding rule; it runs on replicated inputs and
  // gives a replicated output (correct, noted once in the debug notes).
  void (*strategies)(const OpSchema&, const TensorMeta& out, std::vector<DimStrategy>&);
  // Optional check of a whole candidate (input placements, output
  // placements) for what one mesh dim at a time cannot judge, e.g. whether
  // a view keeps nested uneven chunking. nullptr accepts every candidate.
  bool (*accepts)(const OpSchema&, const TensorMeta& out, const Placements* inputs,
                  const Placements& output) = nullptr;
  // Elementwise: output element i depends on element i of each input alone
  // (no broadcasting counted). Lets inputs with shard orders keep their
  // layout (see choose() in sharding_prop.cc).
  bool elementwise = false;
  // Optional: decides the whole layout itself instead of the search over
  // `strategies` (in-place ops, whose self never moves, src/ops/inplace_rule.cc).
  // Its result is cached like a chosen one; it throws when no layout is valid.
  OutputSharding (*decide)(const OpSchema&, const OpRule&) = nullptr;
  // The kernel only makes views of its input shards: O(1) work per shard,
  // so the rank loop never wakes the thread pool (whatever the bytes), and
  // the kernel runs the shards in rank order on the calling thread.
  bool views = false;
  // The kernel is a Tensor method that keeps meta shards meta (a copy, or
  // the input itself when it is already so): a shape-only world runs it,
  // so that contiguous() of a contiguous shard, which returns its input,
  // counts no new memory there either. (Views' kernels always run.)
  bool meta_kernel = false;
  // Optional: whether the op, called with these arguments, keeps any layout
  // of its input as it is: the output takes the input's placements (shard
  // orders, uneven shards and Partials included) and the kernel, run on
  // each rank's input shard, gives that rank's output shard. Ops returning
  // their input as it is (a full-range slice, a reshape or expand to the
  // same shape, an identity permutation, a repeat by ones) and cuts to
  // nothing. The op then runs where its input is, unmoved: no candidate is
  // cheaper, and `strategies` need not offer it (a cut gathers the dim it
  // cuts, which a full-range one need not). nullptr: never.
  bool (*keeps_layout)(const OpSchema&, const TensorMeta& out) = nullptr;
};

// OpRule::keeps_layout of the ops that return their input as it is
// whenever they keep its shape: view, reshape, expand, repeat.
inline bool keeps_shape(const OpSchema& s, const TensorMeta& out) {
  return s.input(0).shape() == out.shape;
}

struct OutputSharding {
  DTensorSpec output;
  // The spec each input must have (equal to the input's when no move is needed).
  std::optional<DTensorSpec> input_targets[kMaxInputs];
  bool needs_redistribute = false;
  double cost_us = 0;
  // The output's local shape when every rank's is the same (each sharded
  // dim divides evenly), so that kernels asking per rank (views) skip the
  // extent arithmetic; empty otherwise. Set by propagate().
  std::optional<Shape> uniform_local_shape = std::nullopt;
  // The output's mesh is of a World::shape_only: kernels do not run (but
  // views', which make views of meta shards as of any); each rank's output
  // is a meta tensor of its local shape (meta_outputs). Set by propagate().
  bool shape_only = false;
};

// The cached propagation of `schema` under `rule`. Throws dtensor::Error
// naming the op and placements for shape errors or inputs on different meshes.
std::shared_ptr<const OutputSharding> propagate(const OpSchema& schema, const OpRule& rule);

// The rule validator's hook (src/rules/): while a ForcedLayout is alive on
// this thread, the next propagation of an op with id `op` returns exactly
// these input and output placements, uncached, instead of the rule's
// choice; the inputs are then moved there as usual (the validator asks only
// for moves without communication: R -> S, R -> P). So the op's own kernel
// runs under a layout its rule may not offer, and the validator learns
// whether that layout would have been correct.
class ForcedLayout {
 public:
  ForcedLayout(OpId op, std::vector<Placements> inputs, Placements output);
  ~ForcedLayout();
  ForcedLayout(const ForcedLayout&) = delete;
  ForcedLayout& operator=(const ForcedLayout&) = delete;
  // Whether an op with the id took the layout (a composite op may never
  // dispatch its own id).
  bool used() const { return used_; }

 private:
  friend std::shared_ptr<const OutputSharding> propagate(const OpSchema&, const OpRule&);
  OpId op_;
  std::vector<Placements> inputs_;
  Placements output_;
  bool used_ = false;
  ForcedLayout* outer_;
};

// The inputs moved to the layouts the sharding asks for.
DTensor prepare_input(const DTensor& x, const OutputSharding& s, int i);

// The output DTensor; checks that the kernel produced the dtype the rule
// promised (a rule bug, never a user error).
DTensor wrap(const OutputSharding& s, LocalTensor local);

// The shape of `rank`'s shard of the output.
Shape output_local_shape(const OutputSharding& s, int rank);

// World::shape_only: the output, a meta tensor of its local shape for each
// rank inputs[0] holds, in place of running the kernel; traced (trace_op)
// with the most FLOPs and bytes of any rank's shard. inputs: the op's
// schema.num_inputs inputs as the kernel would get them.
LocalTensor meta_outputs(const OpSchema& schema, const OpRule& rule, const OutputSharding& s,
                         const LocalTensor* const* inputs);
// Whether the op runs shapes only (OutputSharding::shape_only) rather than its kernel.
inline bool skips_kernel(const OutputSharding& s, const OpRule& rule) {
  return s.shape_only && !rule.views && !rule.meta_kernel;
}

// VerifyMode: `got` (the op's result) against `rerun` of the same op on the
// inputs redistributed to Replicate, compared as full tensors. Throws naming
// the op and the input placements on a mismatch. The helpers below call it
// when verify_detail::should_verify().
void verify_op(const OpSchema& schema, const OpRule& rule, const DTensor* const* inputs,
               const DTensor& got,
               const std::function<DTensor(const OpSchema&, const DTensor* const*)>& rerun);

// Selective activation checkpointing (nn::CheckpointPolicy): while a
// checkpoint region whose policy keeps some ops' outputs runs on this
// thread (its first run, or its recomputation in backward), it is here.
// An op whose rule's name it keeps hands it its output in the first run;
// in the recomputation it takes that output instead of running again
// (its autograd is recorded as usual, by the op, after). PyTorch does the
// same below autograd, in a dispatch mode.
class KeptOutputs {
 public:
  virtual ~KeptOutputs() = default;
  virtual bool keeps(const char* op) const = 0;
  // The recomputation: the output the first run kept (nullopt in the first run).
  virtual std::optional<DTensor> replay(const char* op) = 0;
  // The first run: the output just computed.
  virtual void keep(const char* op, const DTensor& out) = 0;
};
extern constinit thread_local KeptOutputs* kept_outputs;

// compute(), or, under a region that keeps this op's output, the output
// kept from its first run (a recomputation) or compute() kept (the first).
// One thread-local read when no region keeps anything.
template <class F>
DTensor kept_or(const OpRule& rule, F&& compute) {
  KeptOutputs* k = kept_outputs;
  if (k == nullptr || !k->keeps(rule.name)) [[likely]]
    return compute();
  if (std::optional<DTensor> out = k->replay(rule.name)) return std::move(*out);
  DTensor out = compute();
  k->keep(rule.name, out);
  return out;
}

// run() without the check.
template <class F>
DTensor run_unchecked(const OpSchema& schema, const OpRule& rule, const DTensor* const* inputs,
                      F&& kernel) {
  auto s = propagate(schema, rule);
  // The moved inputs live in an array made only when some input moves: an
  // array of kMaxInputs optional DTensors was zeroed on every call (2.5 KiB,
  // a third of a cache hit's overhead), and even an empty vector's
  // destructor is an out-of-line call.
  std::unique_ptr<DTensor[]> moved;
  const LocalTensor* locals[kMaxInputs];
  for (int i = 0; i < schema.num_inputs; ++i) locals[i] = &inputs[i]->local();
  if (s->needs_redistribute) {
    moved = std::make_unique<DTensor[]>(static_cast<size_t>(schema.num_inputs));
    for (int i = 0; i < schema.num_inputs; ++i) {
      if (*s->input_targets[i] == inputs[i]->spec()) continue;
      moved[i] = prepare_input(*inputs[i], *s, i);
      locals[i] = &moved[i].local();
    }
  }
  auto bytes = [&] {
    if (rule.views) return int64_t{0};
    int64_t total = 0;
    for (int i = 0; i < schema.num_inputs; ++i) {
      if (!locals[i]->empty()) total += static_cast<int64_t>(locals[i]->shards()[0].second.nbytes());
    }
    return total;
  };
  if (skips_kernel(*s, rule)) return wrap(*s, meta_outputs(schema, rule, *s, locals));
  LocalTensor out = detail::map_shards(*locals[0], bytes, [&](int64_t k) {
    const Tensor* ts[kMaxInputs];
    for (int i = 0; i < schema.num_inputs; ++i) ts[i] = &locals[i]->shards()[k].second;
    return kernel(locals[0]->shards()[k].first, static_cast<const Tensor* const*>(ts), *s);
  });
  return wrap(*s, std::move(out));
}

// The general form: kernel(rank, locals) -> Tensor, where locals[i] is
// input i's shard of `rank` (after redistribution).
template <class F>
DTensor run(const OpSchema& schema, const OpRule& rule, const DTensor* const* inputs, F&& kernel) {
  return kept_or(rule, [&] {
    if (!verify_detail::should_verify()) return run_unchecked(schema, rule, inputs, kernel);
    DTensor got = run_unchecked(schema, rule, inputs, kernel);
    verify_op(schema, rule, inputs, got, [&](const OpSchema& sc, const DTensor* const* in) {
      return run_unchecked(sc, rule, in, kernel);
    });
    return got;
  });
}

template <class F>
DTensor run_unary(const OpSchema& schema, const OpRule& rule, const DTensor& x, F&& kernel) {
  auto apply = [&](const LocalTensor& x) {
    const auto& sh = x.shards();
    auto bytes = [&] { return static_cast<int64_t>(sh[0].second.nbytes()); };
    return detail::map_shards(x, bytes, [&](int64_t k) { return kernel(sh[k].first, sh[k].second); });
  };
  auto compute = [&](const OpSchema& sc, const DTensor& in) {
    auto s = propagate(sc, rule);
    if (!s->needs_redistribute) [[likely]] {
      if (skips_kernel(*s, rule)) {
        const LocalTensor* locals[] = {&in.local()};
        return wrap(*s, meta_outputs(sc, rule, *s, locals));
      }
      return wrap(*s, apply(in.local()));
    }
    const DTensor moved = prepare_input(in, *s, 0);
    if (skips_kernel(*s, rule)) {
      const LocalTensor* locals[] = {&moved.local()};
      return wrap(*s, meta_outputs(sc, rule, *s, locals));
    }
    return wrap(*s, apply(moved.local()));
  };
  return kept_or(rule, [&] {
    if (!verify_detail::should_verify()) return compute(schema, x);
    DTensor got = compute(schema, x);
    const DTensor* inputs[] = {&x};
    verify_op(schema, rule, inputs, got,
              [&](const OpSchema& sc, const DTensor* const* in) { return compute(sc, *in[0]); });
    return got;
  });
}

template <class F>
DTensor run_binary(const OpSchema& schema, const OpRule& rule, const DTensor& a, const DTensor& b,
                   F&& kernel) {
  auto apply = [&](const LocalTensor& x, const LocalTensor& y) {
    const auto &sx = x.shards(), &sy = y.shards();
    auto bytes = [&] { return static_cast<int64_t>(sx[0].second.nbytes() + sy[0].second.nbytes()); };
    return detail::map_shards(x, bytes, [&](int64_t k) {
      return kernel(sx[k].first, sx[k].second, sy[k].second);
    });
  };
  auto compute = [&](const OpSchema& sc, const DTensor& x, const DTensor& y) {
    auto s = propagate(sc, rule);
    if (!s->needs_redistribute) [[likely]] {
      if (skips_kernel(*s, rule)) {
        const LocalTensor* locals[] = {&x.local(), &y.local()};
        return wrap(*s, meta_outputs(sc, rule, *s, locals));
      }
      return wrap(*s, apply(x.local(), y.local()));
    }
    const DTensor rx = prepare_input(x, *s, 0), ry = prepare_input(y, *s, 1);
    if (skips_kernel(*s, rule)) {
      const LocalTensor* locals[] = {&rx.local(), &ry.local()};
      return wrap(*s, meta_outputs(sc, rule, *s, locals));
    }
    return wrap(*s, apply(rx.local(), ry.local()));
  };
  return kept_or(rule, [&] {
    if (!verify_detail::should_verify()) return compute(schema, a, b);
    DTensor got = compute(schema, a, b);
    const DTensor* inputs[] = {&a, &b};
    verify_op(schema, rule, inputs, got, [&](const OpSchema& sc, const DTensor* const* in) {
      return compute(sc, *in[0], *in[1]);
    });
    return got;
  });
}

}  // namespace dtensor::dispatch
