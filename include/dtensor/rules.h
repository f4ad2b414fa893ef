// The sharding-rule validator: for every DTensor op and every layout of its
// inputs on small meshes, whether the op's rule gives the right result,
// whether it communicated, and whether a layout without communication
// existed that the rule does not offer.
//
//   RuleCheckReport r = check_rules();          // every op, the default meshes
//   r.incorrect();                              // 0, or a rule is wrong
//   std::cout << r.table();                     // what `dtensor rules` prints
//
// For each op (a fixed case: shapes with uneven and empty shards on the
// meshes used, and the plain op as reference) and each combination of input
// placements (Replicate, Shard(d), and every Partial kind for value inputs),
// the inputs are built adversarially: Partial(sum) and Partial(avg) pieces
// are uneven with alternating signs (never x/n), Partial(max) and
// Partial(min) pieces differ from the value by a distinct amount on every
// rank but one, which rank holds the value varying by element. The op runs
// as a user calls it, and its full_tensor() is compared with the plain op on
// the full inputs:
//  - incorrect: the result differs. A bug; the test in CI fails on it.
//  - local: right, and no collective ran.
//  - communicated: right, with collectives, and no layout reachable without
//    communication gives the right result: communication was needed.
//  - missing: right, with collectives, but the validator found a layout
//    without communication that gives the right result (the inputs as they
//    are, or with replicated inputs taken as a local chunk or a Partial),
//    by running the op's own kernel under it (dispatch::ForcedLayout). The
//    table lists one such layout per op.
// On the exhaustive meshes the search for missing layouts also tries the
// free local moves of replicated inputs (R -> S, R -> P); on the sampled
// meshes it tries only other output placements. An op made of other ops
// (a composite) is checked for correctness; its parts are searched.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dtensor/tensor.h"

namespace dtensor {

struct RuleCheckOptions {
  // Only the ops whose case name contains this; empty: every op.
  std::string op;
  // Only the op whose case name is `op` exactly ("add", not also "addmm"
  // and "index_add(1)").
  bool exact_op = false;
  // Meshes on which every combination of input placements is checked (up
  // to max_layouts per op; more are sampled, seeded).
  std::vector<Shape> meshes = {{3}, {4}, {2, 3}};
  // Meshes on which `samples` random combinations are checked.
  std::vector<Shape> sampled_meshes = {{2, 2, 2}};
  int64_t max_layouts = 2048;
  int64_t samples = 48;
  // Forced layouts tried per search for a missing one (sampled beyond).
  int64_t max_search = 256;
  bool search_missing = true;
  uint64_t seed = 1;
  // The floating dtype value inputs are made in (their values are small
  // integers, exact in every floating dtype; a custom op's examples keep
  // theirs, and are compared likewise). In bfloat16 and float16 a
  // DTensor result rounds on every rank and after every collective where
  // the plain op rounds once, so results are compared within a few steps
  // of the 16-bit type at the Partial pieces' magnitude (rtol 2^-5, atol 4
  // for bfloat16; rtol 2^-8, atol 0.5 for float16; check.cc says why)
  // instead of exactly.
  DType dtype = DType::Float32;
};

struct RuleCheckRow {
  std::string op;
  Shape mesh;
  bool sampled = false;
  // Whether the op dispatches under its own id, so that missing layouts
  // could be searched for (false: a composite, checked for correctness).
  bool searched = false;
  int64_t layouts = 0, local = 0, communicated = 0, missing = 0, incorrect = 0;
  // A few of each, "inputs -> output" with placements.
  std::vector<std::string> missing_examples, incorrect_examples;
};

struct RuleCheckReport {
  std::vector<RuleCheckRow> rows;
  int64_t incorrect() const;
  int64_t missing() const;
  int64_t layouts() const;
  // Distinct op case names checked.
  int64_t ops() const;
  // Markdown: one line per op and mesh, the totals, then the examples.
  std::string table() const;
};

// The op cases the validator knows, in table order.
std::vector<std::string> rule_check_cases();

// Runs the validator in simulated worlds of the meshes' sizes.
RuleCheckReport check_rules(const RuleCheckOptions& options = {});

class CustomOp;
// The same for an op of your own (custom_op.h), on example full inputs:
// floating inputs take every placement (Partials with adversarial pieces),
// others only Replicate and Shard. `options.op` is ignored.
RuleCheckReport check_rules(const CustomOp& op, const std::vector<Tensor>& examples,
                            const RuleCheckOptions& options = {});

}  // namespace dtensor
