// The validator's engine (rules.h): for one op case on one mesh, every
// combination of input placements (or a seeded sample), each run as a user
// runs it and, when it communicated, a search among layouts without
// communication run under dispatch::ForcedLayout.
#include <algorithm>
#include <cmath>
#include <map>
#include <random>

#include "dtensor/custom_op.h"
#include "dtensor/debug.h"
#include "dtensor/rules.h"
#include "rules/cases.h"

namespace dtensor {

namespace rules {

namespace {

bool takes_partial(InputKind k) { return k != InputKind::Mask && k != InputKind::Index; }

// The placements one tensor of `ndim` dims may have on one mesh dim.
std::vector<Placement> options_of(int64_t ndim, bool partial) {
  std::vector<Placement> o{Replicate()};
  for (int64_t d = 0; d < ndim; ++d) o.push_back(Shard(d));
  if (partial)
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min})
      o.push_back(Partial(op));
  return o;
}

// One spec may not mix Partial kinds, except sum with avg.
bool valid(const Placements& p) {
  bool sum_avg = false, max = false, min = false;
  for (const Placement& q : p) {
    if (!q.is_partial()) continue;
    sum_avg = sum_avg || q.reduce_op() == ReduceOp::Sum || q.reduce_op() == ReduceOp::Avg;
    max = max || q.reduce_op() == ReduceOp::Max;
    min = min || q.reduce_op() == ReduceOp::Min;
  }
  return static_cast<int>(sum_avg) + static_cast<int>(max) + static_cast<int>(min) <= 1;
}

std::string describe(const std::vector<Placements>& in, const Placements& out) {
  std::string s;
  for (size_t i = 0; i < in.size(); ++i) {
    if (i) s += " · ";
    s += to_string(in[i]);
  }
  return s + " -> " + to_string(out);
}

// |got - want| <= rtol * |want| + atol elementwise.
struct Tolerance {
  double rtol = 0, atol = 0;
};

// NaN equal to NaN: a reference and a result that both give NaN agree.
bool same(const Tensor& got, const Tensor& want, Tolerance tol) {
  if (got.shape() != want.shape() || got.dtype() != want.dtype()) return false;
  return allclose(got.to(DType::Float64), want.to(DType::Float64), tol.rtol, tol.atol, true);
}

// How a case's results are compared when its floating inputs are of
// `dtype`. In float32 and float64 with the case's own tolerance (rtol =
// atol = tol, 0: exactly): the data are small integers, so sums of pieces
// are exact in any order. In 16 bits they are not. Every input and every
// adversarial piece is exact there (integers and halves below 2^7 in
// magnitude, adversarial.cc), but a DTensor op rounds each rank's result
// on its piece and each collective's result where the plain op rounds
// once, and a piece's result can be far larger than the value's (a mean of
// pieces of +-50 whose sum is 3). So the error is a few steps of the type
// at the pieces' magnitude, not the result's: rtol = 2^-5 for bfloat16 (4
// steps: its step is 2^-7 relative at most) and 2^-8 for float16 (step
// 2^-10), and atol = rtol * 2^7. A wrong rule is still told: it is off by
// a whole piece (10 and more) or a factor of the mesh size on most elements.
// Products of pieces are larger still (a piece times a row of values): when
// the result's own pieces (its local shards) are larger than 2^7, atol
// scales with them.
Tolerance tolerance(double tol, DType dtype) {
  if (!is_half(dtype)) return {tol, tol};
  const double rtol = std::max(tol, dtype == DType::BFloat16 ? 0x1p-5 : 0x1p-8);
  return {rtol, std::max(tol, rtol * 0x1p7)};
}

// The tolerance for a result `got`: atol at least rtol times its largest
// local value when 16-bit (see above).
Tolerance for_result(Tolerance tol, const DTensor& got) {
  if (!is_half(got.dtype())) return tol;
  double m = 0;
  for (const auto& [rank, t] : got.local().shards())
    if (t.numel() > 0) m = std::max(m, amax(abs(t.to(DType::Float64))).item<double>());
  if (std::isfinite(m)) tol.atol = std::max(tol.atol, tol.rtol * m);
  return tol;
}

// Whether every held shard has the shape its spec gives: a kernel run under
// a forced layout it does not fit may make other shapes.
bool shapes_fit(const DTensor& d) {
  for (const auto& [rank, t] : d.local().shards()) {
    const auto extent = d.spec().extent_of_rank(rank);
    if (!extent || t.shape() != extent->local_shape || t.dtype() != d.dtype()) return false;
  }
  return true;
}

// Whether the ranks of every Replicate mesh dim hold the same bits:
// full_tensor() reads one of them, so a kernel that leaves replicas apart
// would otherwise pass.
bool replicas_agree(const DTensor& d) {
  const auto& shards = d.local().shards();
  std::map<int, const Tensor*> by_rank;
  for (const auto& [rank, t] : shards) by_rank[rank] = &t;
  const Placements& pl = d.placements();
  for (const auto& [rank, t] : shards) {
    int ref = rank;
    for (size_t m = 0; m < pl.size(); ++m)
      if (pl[m].is_replicate()) ref = d.mesh().group(ref, static_cast<int>(m)).front();
    if (ref != rank && !same(t, *by_rank.at(ref), {})) return false;
  }
  return true;
}

// The odometer: pick k of `sizes` choices from a flat index.
std::vector<size_t> unravel(uint64_t index, const std::vector<size_t>& sizes) {
  std::vector<size_t> pick(sizes.size());
  for (size_t j = sizes.size(); j-- > 0;) {
    pick[j] = index % sizes[j];
    index /= sizes[j];
  }
  return pick;
}

// Flat indices of a product of `sizes`: all of them when at most `limit`,
// else `limit` drawn (seeded) without repeats.
std::vector<uint64_t> indices(const std::vector<size_t>& sizes, int64_t limit, std::mt19937_64& rng) {
  constexpr uint64_t kCap = uint64_t{1} << 40;  // more than any limit; no overflow
  uint64_t total = 1;
  for (size_t s : sizes) total = std::min<uint64_t>(kCap, total * std::max<size_t>(s, 1));
  std::vector<uint64_t> out;
  if (total <= static_cast<uint64_t>(limit)) {
    for (uint64_t i = 0; i < total; ++i) out.push_back(i);
    return out;
  }
  while (static_cast<int64_t>(out.size()) < limit) {
    const uint64_t i = rng() % total;
    if (std::find(out.begin(), out.end(), i) == out.end()) out.push_back(i);
  }
  std::sort(out.begin(), out.end());
  return out;
}

class Checker {
 public:
  Checker(const OpCase& c, const Shape& mesh_shape, bool sampled, const RuleCheckOptions& opt,
          uint64_t seed)
      : c_(c), mesh_(World::simulated(static_cast<int>(mesh_shape.product())), mesh_shape),
        sampled_(sampled), opt_(opt), rng_(seed), seed_(seed) {
    // Two data sets: the second confirms a layout the search found, so
    // that no coincidence of values or pieces counts as a missing layout.
    // The first's Partial(max|min) pieces lie off the integers, the
    // second's on them (adversarial.cc): each catches what the other lets by.
    for (int k = 0; k < 2; ++k) {
      Data& d = data_[k];
      d.full = c.examples;
      if (d.full.empty()) {
        for (size_t i = 0; i < c.inputs.size(); ++i) {
          Tensor t = make_input(c.inputs[i], seed + i + 5000 * static_cast<uint64_t>(k));
          d.full.push_back(is_floating(t.dtype()) ? t.to(opt.dtype) : t);
        }
      }
      d.want = c.plain(d.full);
    }
    row_.op = c.name;
    row_.mesh = mesh_shape;
    row_.sampled = sampled;
    row_.searched = c.id.has_value() && opt.search_missing;
    tol_ = {c.tol, c.tol};
    for (const Tensor& t : data_[0].full)
      if (is_half(t.dtype())) tol_ = tolerance(c.tol, t.dtype());
  }

  RuleCheckRow run() {
    const int nd = mesh_.ndim();
    // One choice per (input, mesh dim), input-major.
    std::vector<std::vector<Placement>> choices;
    for (const CaseInput& in : c_.inputs)
      for (int m = 0; m < nd; ++m)
        choices.push_back(options_of(static_cast<int64_t>(in.shape.size()), takes_partial(in.kind)));
    std::vector<size_t> sizes;
    for (const auto& ch : choices) sizes.push_back(ch.size());
    const int64_t limit = sampled_ ? opt_.samples : opt_.max_layouts;
    for (uint64_t index : indices(sizes, limit, rng_)) {
      const std::vector<size_t> pick = unravel(index, sizes);
      std::vector<Placements> in(c_.inputs.size());
      bool ok = true;
      for (size_t i = 0; i < c_.inputs.size(); ++i) {
        for (int m = 0; m < nd; ++m) in[i].push_back(choices[i * nd + m][pick[i * nd + m]]);
        ok = ok && valid(in[i]);
      }
      if (ok) check(in);
    }
    return row_;
  }

 private:
  // The inputs of data set k laid out as `in`, with adversarial pieces.
  DTensors inputs(int k, const std::vector<Placements>& in) const {
    DTensors args;
    for (size_t i = 0; i < in.size(); ++i)
      args.push_back(
          adversarial(data_[k].full[i], mesh_, in[i], seed_ + 1000 * (k + 1) + i, k == 0));
    return args;
  }

  void check(const std::vector<Placements>& in) {
    const DTensors args = inputs(0, in);
    ++row_.layouts;
    int64_t collectives = 0;
    std::string failure;
    Placements got_out;
    try {
      CommDebugMode comm;
      const DTensor got = c_.dist(args);
      collectives = comm.total_count();
      got_out = got.placements();
      if (!replicas_agree(got)) failure = "replicas differ";
      else if (!same(got.full_tensor(), data_[0].want, for_result(tol_, got)))
        failure = "wrong values";
    } catch (const Error& e) {
      failure = e.what();
    }
    if (!failure.empty()) {
      ++row_.incorrect;
      note(row_.incorrect_examples, describe(in, got_out) + ": " + failure.substr(0, 300));
      return;
    }
    if (collectives == 0) {
      ++row_.local;
      return;
    }
    if (row_.searched) {
      if (auto found = search(args, in)) {
        ++row_.missing;
        note(row_.missing_examples, *found + " (the rule communicates: " + describe(in, got_out) + ")");
        return;
      }
    }
    ++row_.communicated;
  }

  // A layout without communication whose kernel gives the right result.
  std::optional<std::string> search(const DTensors& args, const std::vector<Placements>& given) {
    const int nd = mesh_.ndim();
    const bool free_moves = !sampled_;
    std::vector<std::vector<Placement>> choices;
    for (size_t i = 0; i < given.size(); ++i) {
      for (int m = 0; m < nd; ++m) {
        const Placement p = given[i][static_cast<size_t>(m)];
        if (free_moves && p.is_replicate())
          choices.push_back(options_of(args[i].dim(), takes_partial(c_.inputs[i].kind)));
        else
          choices.push_back({p});
      }
    }
    // Partial(sum|avg) of a bool output means nothing: max (any) and min (all) do.
    const Tensor& want = data_[0].want;
    for (int m = 0; m < nd; ++m) {
      std::vector<Placement> o = options_of(want.dim(), true);
      if (want.dtype() == DType::Bool)
        std::erase_if(o, [](Placement p) {
          return p == Partial(ReduceOp::Sum) || p == Partial(ReduceOp::Avg);
        });
      choices.push_back(std::move(o));
    }
    std::vector<size_t> sizes;
    for (const auto& ch : choices) sizes.push_back(ch.size());
    for (uint64_t index : indices(sizes, opt_.max_search, rng_)) {
      const std::vector<size_t> pick = unravel(index, sizes);
      std::vector<Placements> in(given.size());
      Placements out;
      bool ok = true;
      for (size_t i = 0; i < given.size(); ++i) {
        for (int m = 0; m < nd; ++m) in[i].push_back(choices[i * nd + m][pick[i * nd + m]]);
        ok = ok && valid(in[i]);
      }
      for (int m = 0; m < nd; ++m) {
        const size_t j = given.size() * nd + m;
        out.push_back(choices[j][pick[j]]);
      }
      if (ok && valid(out) && forced_right(args, data_[0].want, in, out) &&
          forced_right(inputs(1, given), data_[1].want, in, out))
        return describe(in, out);
    }
    return std::nullopt;
  }

  bool forced_right(const DTensors& args, const Tensor& want, const std::vector<Placements>& in,
                    const Placements& out) {
    try {
      CommDebugMode comm;
      dispatch::ForcedLayout force(*c_.id, in, out);
      const DTensor got = c_.dist(args);
      if (!force.used() || comm.total_count() != 0 || !(got.placements() == out)) return false;
      if (!shapes_fit(got) || !replicas_agree(got)) return false;
      return same(got.full_tensor(), want, for_result(tol_, got));
    } catch (const Error&) {
      return false;  // the kernel refuses the layout
    }
  }

  static void note(std::vector<std::string>& list, std::string s) {
    if (list.size() < 3) list.push_back(std::move(s));
  }

  const OpCase& c_;
  DeviceMesh mesh_;
  bool sampled_;
  const RuleCheckOptions& opt_;
  std::mt19937_64 rng_;
  uint64_t seed_;
  struct Data {
    Tensors full;
    Tensor want;
  };
  Data data_[2];
  RuleCheckRow row_;
  Tolerance tol_;
};

}  // namespace

const std::vector<OpCase>& all_cases() {
  static const std::vector<OpCase> cases = [] {
    std::vector<OpCase> c;
    add_pointwise_cases(c);
    add_matmul_cases(c);
    add_reduction_cases(c);
    add_view_cases(c);
    add_tensor_cases(c);
    add_nn_cases(c);
    add_scan_cases(c);
    add_shape_cases(c);
    add_index_cases(c);
    add_attention_cases(c);
    // Each case's data is seeded by its index here (check_rules): new cases
    // go last, so that the data of the others stays as it was.
    add_degenerate_view_cases(c);
    add_pointwise_backward_cases(c);
    add_late_pointwise_cases(c);
    add_structural_cases(c);
    return c;
  }();
  return cases;
}

}  // namespace rules

std::vector<std::string> rule_check_cases() {
  std::vector<std::string> names;
  for (const rules::OpCase& c : rules::all_cases()) names.push_back(c.name);
  return names;
}

namespace {

void check_case(const rules::OpCase& c, const RuleCheckOptions& options, uint64_t seed,
                RuleCheckReport& report) {
  for (const Shape& mesh : options.meshes)
    report.rows.push_back(rules::Checker(c, mesh, false, options, seed).run());
  for (const Shape& mesh : options.sampled_meshes)
    report.rows.push_back(rules::Checker(c, mesh, true, options, seed).run());
}

}  // namespace

RuleCheckReport check_rules(const CustomOp& op, const std::vector<Tensor>& examples,
                            const RuleCheckOptions& options) {
  DT_CHECK(!examples.empty(), "check_rules: ", op.name(), " needs example inputs");
  rules::OpCase c{op.name(), dispatch::OpId::Custom, {},
                  [op](const rules::Tensors& x) { return op(x); },
                  [op](const rules::DTensors& x) { return op(x); }};
  // Exact comparison unless the op is floating point (then float32 rounding).
  for (const Tensor& t : examples) {
    c.inputs.push_back({t.shape(), is_floating(t.dtype()) ? rules::InputKind::Values
                                                          : rules::InputKind::Index});
    if (is_floating(t.dtype())) c.tol = 1e-4;
  }
  c.examples = examples;
  RuleCheckReport report;
  check_case(c, options, options.seed, report);
  return report;
}

RuleCheckReport check_rules(const RuleCheckOptions& options) {
  RuleCheckReport report;
  const auto& cases = rules::all_cases();
  bool any = false;
  for (size_t k = 0; k < cases.size(); ++k) {
    const rules::OpCase& c = cases[k];
    if (options.exact_op ? c.name != options.op
                         : !options.op.empty() && c.name.find(options.op) == std::string::npos)
      continue;
    any = true;
    check_case(c, options, options.seed * 1000003 + k * 7919, report);
  }
  DT_CHECK(any, "rules: no op case matches '", options.op, "' (", cases.size(),
           " cases; `dtensor rules --list` names them)");
  return report;
}

}  // namespace dtensor
