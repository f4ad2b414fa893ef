// Internal to the in-place DTensor ops (src/ops/inplace*.cc): what the op
// entry points (inplace.cc) share. The layout an operand must take while
// self stays where it is (inplace_rule.cc), applying the op shard by shard
// with VerifyMode's check (here), and recording the op for autograd by
// rebasing self onto a new node (inplace_autograd.cc).
#pragma once

#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "autograd/graph.h"
#include "debug/verify.h"
#include "dispatch/dispatch.h"

namespace dtensor::inplace_detail {

// ---- layout (inplace_rule.cc) --------------------------------------------------------

// Throws unless self is defined and may change in place (not a leaf that
// requires grad, in grad mode).
void check_self(const char* op, const DTensor& self);
// Throws unless `other` is defined and on self's mesh.
void check_operand(const char* op, const DTensor& self, const DTensor& other);

// The in-place form of the op `id` on self (and `other`, if given; args:
// the schema's arguments): the layout `other` must have (self's own
// placements when there is none), cached like any propagation. Throws when
// self would have to move; returns nullopt instead when `or_null` (the
// caller has another way).
std::optional<Placements> operand_layout(const char* op, dispatch::OpId id, const DTensor& self,
                                         const DTensor* other,
                                         std::initializer_list<int64_t> args = {},
                                         bool cast = true, bool or_null = false);

// `other` moved to `want` (detached: the op records its own node), or
// nullopt when it has that layout already (the caller reads its shards
// as they are; no copy of the DTensor on the common path). The
// planner refuses S->P and P(a)->P(b): a Partial target the operand lacks
// is reached through Replicate, and then taken locally and exactly: a
// Partial(sum) keeps the value on the first rank of each group and zeros
// on the others (R->P's x/n split would round), the other kinds keep it on
// every rank (their reduction of equal pieces is the value). With `zero`,
// those zeros are not made: zero[i] says shard i stands for zeros (its
// data is the value, to be ignored), which add_ skips and copy_ fills;
// `zero` stays empty when no shard does.
std::optional<DTensor> move_operand(const DTensor& other, const Placements& want,
                                    std::vector<char>* zero = nullptr);

// ---- shard by shard ------------------------------------------------------------------

// An in-place op that leaves a shard as it is still counts as a change of
// it, on every rank alike (under MPI a rank that skipped the bump would
// disagree with the others about a saved tensor).
inline void touch(Tensor& s) {
  if (s.storage()) s.storage()->bump_version();
}

// f(self's shard, other's shard) for every held rank; other holds the
// same ranks (same mesh). In a World::shape_only the shards have no values:
// the op only counts as a change (touch), as in PyTorch on meta tensors.
template <class F>
void each_shard(const DTensor& self, const DTensor& other, F&& f) {
  const auto& mine = self.local().shards();
  const auto& theirs = other.local().shards();
  DT_CHECK(mine.size() == theirs.size(), "internal error: in-place operand holds ",
           theirs.size(), " shards, self ", mine.size());
  const bool shapes = self.mesh().world().is_shape_only();
  for (size_t i = 0; i < mine.size(); ++i) {
    Tensor t = mine[i].second;  // shares the shard's storage
    if (shapes) {
      touch(t);
      continue;
    }
    f(t, theirs[i].second);
  }
}

template <class F>
void each_shard(const DTensor& self, F&& f) {
  const bool shapes = self.mesh().world().is_shape_only();
  for (const auto& [rank, shard] : self.local().shards()) {
    Tensor t = shard;
    if (shapes) {
      touch(t);
      continue;
    }
    f(t);
  }
}

// VerifyMode: self after the op against the plain in-place op applied to
// the full tensors of self and the operands as they were before it (taken
// before the op, since an operand may share self's memory).
class InplaceCheck {
 public:
  InplaceCheck(const DTensor& self, std::initializer_list<const DTensor*> operands) {
    if (!verify_detail::should_verify() || self.local().empty() ||
        self.mesh().world().is_shape_only())
      return;
    on_ = true;
    verify_detail::CheckScope scope;
    before_ = self.full_tensor().clone();
    for (const DTensor* o : operands) operands_.push_back(o->full_tensor().clone());
  }
  // f(want, operands) applies the plain op to `want`, a copy of self before.
  template <class F>
  void check(const DTensor& self, const char* op, F&& f) {
    if (!on_) return;
    verify_detail::CheckScope scope;
    Tensor want = before_.clone();
    f(want, operands_);
    verify_detail::expect_match(self.full_tensor(), want,
                                std::string(op) + " of " + self.spec().to_string(),
                                "the plain in-place op on the full tensors");
    record_verification();
  }

 private:
  bool on_ = false;
  Tensor before_;
  std::vector<Tensor> operands_;
};

// ---- autograd (inplace_autograd.cc) -------------------------------------------------

// Self as an input of the op's node: a DTensor whose gradient edge is
// self's history before the op (self's own Meta is about to be rebased).
DTensor before(const DTensor& self);

// Whether some held shard of b uses the storage of a's shard of that rank.
bool shares_memory(const DTensor& a, const DTensor& b);

// The value of self before the op, for a backward that reads it.
DTensor old_value(const DTensor& self);

// Makes self (and every copy sharing its Meta) the output of a node `op`
// over `inputs` (inputs[0]: before(self)).
void rebase(DTensor& self, const char* op, const std::vector<const DTensor*>& inputs,
            std::vector<DTensor> saved, autograd::BackwardFn fn);

}  // namespace dtensor::inplace_detail
