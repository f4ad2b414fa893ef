// The sharding-rule validator over every op case (include/dtensor/rules.h),
// one test per case so that ctest runs them in parallel: no layout may be
// incorrect, and every op with missing layouts (a layout without
// communication that the rule does not offer) must be explained below; an
// explanation whose op no longer misses any fails too, so the list stays true.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>

#include "dtensor/dtensor.h"

using namespace dtensor;

namespace {

// Ops whose rule communicates where the validator found a layout that does
// not need to, and why that stays so.
// (docs/rules.md gives the same reasons with the table.)
const std::map<std::string, std::string>& explained() {
  static const std::string sign =
      "the sign of the factor decides whether P(max) stays P(max) or becomes P(min); a "
      "scalar enters the schema by kind, not value (one cached layout for every value), and a "
      "tensor divisor's sign is data";
  static const std::string domain =
      "monotone only where defined: P(min) of positive pieces passes, but a piece outside the "
      "domain gives NaN/inf that the reduction does not undo";
  static const std::string compare =
      "a comparison of a P(max|min) operand with a replicated one is the any/all of the "
      "pieces' comparisons (a bool P(max|min)) for lt/le/gt/ge, and for eq/ne only when no "
      "piece meets the other value; dtensor makes no Partials of bool outputs";
  static const std::string empty =
      "a size-1 or tiny dim sharded over 2x3 ranks leaves empty shards on most ranks, and "
      "layouts that agree only on those empty shards line up by luck of the shape";
  static const std::string integers =
      "floor and round of the validator's integer-valued pieces are the pieces, so sums pass on "
      "its data; on fractional pieces floor(a) + floor(b) != floor(a + b)";
  static const std::string bools =
      "the output is bool and dtensor makes no Partials of bool outputs (and the validator's "
      "data has no NaN, so isnan is constantly false on it)";
  static const std::map<std::string, std::string> m = {
      {"floor", integers}, {"round", integers}, {"log1p", domain}, {"isnan", bools},
      {"logical_not", bools}, {"logical_and", bools}, {"logical_or", bools},
      {"logical_xor", bools}, {"addcdiv", sign},
      {"lerp_scalar", sign + "; a weight in [0, 1] keeps P(max|min), but the weight is a "
                             "scalar that enters the schema by kind"},
      {"add", empty}, {"sub", empty}, {"minimum", empty}, {"masked_fill", empty},
      {"where_scalar", empty}, {"squeeze(1)", empty}, {"gelu_backward", empty},
      // gelu'(x) is negative below about -0.75: a P(max) gradient times it
      // stays P(max) only where the data keeps it positive.
      {"gelu_backward_tanh", sign + "; and on 2x3, " + empty},
      {"div", sign}, {"mul_scalar", sign}, {"div_scalar", sign}, {"addmm(beta=-1)", sign},
      {"log", domain}, {"sqrt", domain}, {"rsqrt", domain}, {"rdiv_scalar", domain},
      {"eq", compare}, {"ne", compare}, {"lt", compare}, {"le", compare}, {"gt", compare},
      {"ge", compare}, {"eq_scalar", compare}, {"ne_scalar", compare}, {"lt_scalar", compare},
      {"le_scalar", compare}, {"gt_scalar", compare}, {"ge_scalar", compare},
      {"nll_loss(none)",
       "-log_probs[target] turns P(max) into P(min); a loss over Partial(max) log-probabilities "
       "does not arise, so the rule reduces first"},
      {"all(1)",
       "all() of P(max|min) pieces is all() of the value only when no piece is 0 where the value "
       "is not, a property of the data (the validator's pieces rarely hit 0); the rule reduces "
       "first"},
      {"index_add(1)",
       "adding a P(max|min) source into a replicated x keeps the Partial only when the index has "
       "no duplicates (two rows added are not the max of the sums), a property of the data"},
      {"view[2,2,5,2]",
       "a dim split into (2, 2) and sharded over both mesh dims maps onto the two new dims only "
       "when the outer size equals the first mesh dim's; the view rule keeps the outermost part"},
      {"slice(1,1,5,2)",
       "a strided slice of a sharded dim stays sharded only when the shard bounds fall on the "
       "stride, as 5 over 3 or 4 ranks happens to; the rule gathers"},
      {"slice_backward(1,1,5,2)",
       "the same shapes as slice(1,1,5,2): shard bounds on the stride by luck"},
  };
  return m;
}

// The sanitizer build runs fewer layouts (DTENSOR_RULES_QUICK=1, set by
// tests/CMakeLists.txt there).
bool quick() {
  const char* q = std::getenv("DTENSOR_RULES_QUICK");
  return q != nullptr && std::string(q) == "1";
}

RuleCheckOptions options_for(const std::string& name) {
  RuleCheckOptions o;
  o.op = name;
  o.exact_op = true;
  if (quick()) {
    o.max_layouts = 256;
    o.samples = 16;
    o.max_search = 64;
  }
  return o;
}

class RulesTest : public ::testing::TestWithParam<std::string> {};

TEST_P(RulesTest, CorrectAndExplained) {
  const std::string name = GetParam();
  RuleCheckReport report = check_rules(options_for(name));
  ASSERT_FALSE(report.rows.empty());
  for (const RuleCheckRow& r : report.rows) ASSERT_EQ(r.op, name);
  EXPECT_EQ(report.incorrect(), 0) << report.table();
  const bool has_reason = explained().count(name) > 0;
  if (report.missing() > 0) {
    EXPECT_TRUE(has_reason) << "missing layouts:\n" << report.table();
  }
  // Only when the whole search ran can "no longer missing" be told.
  if (has_reason && !quick()) {
    EXPECT_GT(report.missing(), 0) << name << " misses no layout any more; drop its explanation";
  }
  int64_t layouts = 0;
  for (const RuleCheckRow& r : report.rows) layouts += r.layouts;
  EXPECT_GT(layouts, 0);
}

std::string test_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string s;
  for (char ch : info.param) s += std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
  return s;
}

INSTANTIATE_TEST_SUITE_P(AllOps, RulesTest, ::testing::ValuesIn(rule_check_cases()), test_name);

// Every op's rule in bfloat16 and float16 (RuleCheckOptions::dtype): a few
// layouts per op on two small meshes, results within the tolerance check.cc
// states for 16-bit data (the float32 tests above check the rules exactly).
void check_all_in(DType dtype) {
  RuleCheckOptions o;
  o.meshes = {{4}, {2, 2}};
  o.sampled_meshes = {};
  o.max_layouts = quick() ? 16 : 256;
  o.search_missing = false;
  o.dtype = dtype;
  const RuleCheckReport report = check_rules(o);
  EXPECT_EQ(report.incorrect(), 0) << report.table();
  EXPECT_EQ(report.ops(), static_cast<int64_t>(rule_check_cases().size()));
}

TEST(RulesValidator, EveryOpInBFloat16) { check_all_in(DType::BFloat16); }
TEST(RulesValidator, EveryOpInFloat16) { check_all_in(DType::Float16); }

TEST(RulesValidator, KnowsItsOwnCases) {
  const auto names = rule_check_cases();
  EXPECT_GE(names.size(), 80u);
  EXPECT_THROW(check_rules({.op = "no such op"}), Error);
  // "ad" is part of many names and the name of none.
  EXPECT_THROW(check_rules({.op = "ad", .exact_op = true}), Error);
}

// out[i, j] = x[i, j] * scale[j], with a rule that is right but leaves out
// Partial(avg) x (mean_r(x_r * s) = mean_r(x_r) * s).
CustomOp scale_cols() {
  static const CustomOp op = register_sharding(
      {.name = "test_scale_cols",
       .kernel = [](const std::vector<Tensor>& t) { return mul(t[0], t[1]); },
       .strategies =
           [](const std::vector<TensorMeta>&) {
             return std::vector<OpStrategy>{{{Shard(0), Replicate()}, Shard(0)},
                                            {{Shard(1), Shard(0)}, Shard(1)},
                                            {{Partial(), Replicate()}, Partial()},
                                            {{Replicate(), Replicate()}, Replicate()}};
           },
       .backward = [](const DTensor& g, const std::vector<DTensor>& in) {
         return std::vector<DTensor>{mul(g, in[1]), sum(mul(g, in[0]), {0})};
       }});
  return op;
}

// A wrong rule: x + 1 on Partial(sum) pieces adds n, not 1.
CustomOp bad_add_one() {
  static const CustomOp op = register_sharding(
      {.name = "test_bad_add_one",
       .kernel = [](const std::vector<Tensor>& t) { return add(t[0], Scalar(1.0)); },
       .strategies = [](const std::vector<TensorMeta>&) {
         return std::vector<OpStrategy>{{{Partial()}, Partial()}, {{Shard(0)}, Shard(0)},
                                        {{Replicate()}, Replicate()}};
       }});
  return op;
}

const std::vector<Tensor> kScaleExamples = {Tensor::randint(-9, 10, {4, 5}, 1).to(DType::Float32),
                                            Tensor::randint(-9, 10, {5}, 2).to(DType::Float32)};

TEST(RegisterSharding, RunsTheRuleWithoutCommunication) {
  const CustomOp op = scale_cols();
  DeviceMesh mesh(World::simulated(4), {4});
  const DTensor x = distribute_tensor(kScaleExamples[0], mesh, {Shard(1)});
  const DTensor s = distribute_tensor(kScaleExamples[1], mesh, {Shard(0)});
  CommDebugMode comm;
  const DTensor y = op({x, s});
  EXPECT_EQ(comm.total_count(), 0);
  EXPECT_EQ(y.placements(), Placements({Shard(1)}));
  EXPECT_TRUE(equal(y.full_tensor(), mul(kScaleExamples[0], kScaleExamples[1])));
  EXPECT_TRUE(equal(op(kScaleExamples), mul(kScaleExamples[0], kScaleExamples[1])));
}

TEST(RegisterSharding, Backward) {
  const CustomOp op = scale_cols();
  DeviceMesh mesh(World::simulated(3), {3});
  DTensor x = distribute_tensor(kScaleExamples[0], mesh, {Shard(0)});
  DTensor s = distribute_tensor(kScaleExamples[1], mesh, {Replicate()});
  x.requires_grad_();
  s.requires_grad_();
  sum(op({x, s})).backward();
  EXPECT_TRUE(equal(x.grad()->full_tensor(), kScaleExamples[1].expand({4, 5}).contiguous()));
  EXPECT_TRUE(equal(s.grad()->full_tensor(), sum(kScaleExamples[0], {0})));
}

TEST(RegisterSharding, BadInput) {
  scale_cols();
  EXPECT_THROW(register_sharding({.name = "test_scale_cols",
                                  .kernel = [](const std::vector<Tensor>& t) { return t[0]; },
                                  .strategies = [](const std::vector<TensorMeta>&) {
                                    return std::vector<OpStrategy>{};
                                  }}),
               Error);  // the name is taken
  EXPECT_THROW(register_sharding({.name = "test_no_kernel"}), Error);
  const CustomOp op = bad_add_one();
  DeviceMesh mesh(World::simulated(2), {2});
  DTensor x = distribute_tensor(kScaleExamples[0], mesh, {Shard(0)});
  x.requires_grad_();
  EXPECT_THROW(op({x}), Error);  // no backward registered
}

// The validator on users' rules: the wrong one is called incorrect, the
// incomplete one missing (with the Partial(avg) layout it leaves out).
TEST(RegisterSharding, ValidatorFindsWrongAndMissingRules) {
  RuleCheckOptions o;
  o.meshes = {{3}};
  o.sampled_meshes = {};
  const RuleCheckReport bad = check_rules(bad_add_one(), {kScaleExamples[0]}, o);
  EXPECT_GT(bad.incorrect(), 0) << bad.table();
  // In float16 too, within its tolerance (atol 0.5; the wrong rule adds 3).
  const RuleCheckReport bad16 =
      check_rules(bad_add_one(), {kScaleExamples[0].to(DType::Float16)}, o);
  EXPECT_GT(bad16.incorrect(), 0) << bad16.table();
  const RuleCheckReport scale = check_rules(scale_cols(), kScaleExamples, o);
  EXPECT_EQ(scale.incorrect(), 0) << scale.table();
  EXPECT_GT(scale.missing(), 0) << scale.table();
  EXPECT_NE(scale.table().find("P(avg)"), std::string::npos) << scale.table();
}

}  // namespace
