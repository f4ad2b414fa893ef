// The plan side of tensor_parallel.h: name patterns, styles' names, the
// style a plan gives a module, and the GPT's module names and plan (the
// numerics are in tests/worlds/tensor_parallel_test.cc, on both worlds).
#include <gtest/gtest.h>

#include "dtensor/models/gpt.h"
#include "dtensor/tensor_parallel.h"
#include "test_util.h"

namespace dtensor {
namespace {

TEST(ParallelizePlanTest, WildcardsMatchWithinOneNamePart) {
  EXPECT_TRUE(module_name_matches("blocks.*.mlp.w1", "blocks.0.mlp.w1"));
  EXPECT_TRUE(module_name_matches("blocks.*.mlp.w1", "blocks.17.mlp.w1"));
  EXPECT_FALSE(module_name_matches("blocks.*.mlp.w1", "blocks.0.x.mlp.w1"));
  EXPECT_FALSE(module_name_matches("blocks.*.mlp.w1", "blocks.0.mlp.w12"));
  EXPECT_TRUE(module_name_matches("blocks.*.attention.w*", "blocks.1.attention.wq"));
  EXPECT_TRUE(module_name_matches("*", "head"));
  EXPECT_FALSE(module_name_matches("*", "blocks.0"));
  EXPECT_TRUE(module_name_matches("", ""));
  EXPECT_FALSE(module_name_matches("", "head"));
  EXPECT_TRUE(module_name_matches("b*s.1", "blocks.1"));
  EXPECT_FALSE(module_name_matches("head", "head.weight"));
}

// Each part as Python's fnmatch.fnmatchcase matches it (PyTorch's
// parallelize_module), the expectations being Python 3.11's answers.
TEST(ParallelizePlanTest, PartsMatchAsPythonFnmatch) {
  EXPECT_TRUE(module_name_matches("net?", "net1"));
  EXPECT_FALSE(module_name_matches("net?", "net"));
  EXPECT_FALSE(module_name_matches("net?", "net12"));
  EXPECT_TRUE(module_name_matches("net[1-2]", "net2"));
  EXPECT_FALSE(module_name_matches("net[1-2]", "net3"));
  EXPECT_TRUE(module_name_matches("layers.*.net[1]", "layers.0.net1"));
  EXPECT_FALSE(module_name_matches("layers.*.net[1]", "layers.0.net2"));
  EXPECT_TRUE(module_name_matches("net[!1]", "net2"));
  EXPECT_FALSE(module_name_matches("net[!1]", "net1"));
  EXPECT_TRUE(module_name_matches("w[qkv]", "wk"));
  EXPECT_FALSE(module_name_matches("w[qkv]", "wo"));
  EXPECT_TRUE(module_name_matches("a[-z]", "a-"));  // '-' first is itself
  EXPECT_TRUE(module_name_matches("a[z-]", "a-"));  // and last
  EXPECT_FALSE(module_name_matches("a[z-a]", "am"));  // a reversed range holds nothing
  EXPECT_TRUE(module_name_matches("a[]]", "a]"));     // ']' first is a member
  EXPECT_TRUE(module_name_matches("a[!]]", "ab"));
  EXPECT_FALSE(module_name_matches("a[!]]", "a]"));
  EXPECT_TRUE(module_name_matches("a[", "a["));       // no ']': '[' is itself
  EXPECT_FALSE(module_name_matches("a[", "ab"));
  EXPECT_TRUE(module_name_matches("a[!]", "a[!]"));
  EXPECT_TRUE(module_name_matches("*[0-9]", "blocks7"));
  EXPECT_FALSE(module_name_matches("*[0-9]", "blocks"));
  EXPECT_FALSE(module_name_matches("Net1", "net1"));  // case-sensitive (fnmatchcase)
}

TEST(ParallelizePlanTest, StylesPrintWithTheirLayouts) {
  EXPECT_EQ(to_string(ParallelStyle(ColwiseParallel{})),
            "ColwiseParallel(input_layouts=as given, output_layouts=S(-1))");
  EXPECT_EQ(to_string(ParallelStyle(RowwiseParallel{.input_layouts = Shard(-1),
                                                    .output_layouts = Shard(1)})),
            "RowwiseParallel(input_layouts=S(-1), output_layouts=S(1))");
  EXPECT_EQ(to_string(ParallelStyle(SequenceParallel{})), "SequenceParallel(sequence_dim=1)");
  EXPECT_EQ(to_string(ParallelStyle(PrepareModuleInput{})),
            "PrepareModuleInput(input_layouts=as given, desired_input_layouts=R)");
}

TEST(ParallelizePlanTest, TheLastMatchingEntryGivesTheStyle) {
  const ParallelizePlan plan = {{"blocks.*.mlp.w1", ColwiseParallel{}},
                                {"blocks.0.mlp.w1", RowwiseParallel{}}};
  EXPECT_TRUE(std::holds_alternative<RowwiseParallel>(*style_for(plan, "blocks.0.mlp.w1")));
  EXPECT_TRUE(std::holds_alternative<ColwiseParallel>(*style_for(plan, "blocks.1.mlp.w1")));
  EXPECT_FALSE(style_for(plan, "head").has_value());
}

TEST(GptModelTest, ModulesAndParametersHaveThePlanNames) {
  World world = World::simulated(1);
  DeviceMesh mesh(world, {1});
  models::GPT model(mesh, {.batch = 2, .seq = 4, .hidden = 8, .heads = 2, .layers = 2, .vocab = 10});
  std::vector<std::string> names;
  for (auto& [name, p] : model.named_parameters()) names.push_back(name);
  const std::vector<std::string> block = {"ln1.weight", "ln1.bias", "attention.wq.weight",
                                          "attention.wk.weight", "attention.wv.weight",
                                          "attention.wo.weight", "attention.wo.bias",
                                          "ln2.weight", "ln2.bias", "mlp.w1.weight",
                                          "mlp.w1.bias", "mlp.w2.weight", "mlp.w2.bias"};
  std::vector<std::string> want = {"pos", "tok.weight"};
  for (const char* b : {"blocks.0.", "blocks.1."})
    for (const std::string& n : block) want.push_back(b + n);
  for (const char* n : {"lnf.weight", "lnf.bias", "head.weight"}) want.push_back(n);
  EXPECT_EQ(names, want);
  // Every plan entry names modules of the model (parallelize_module would
  // throw otherwise), on a 1-rank mesh too.
  parallelize_module(model, 0, models::gpt_tensor_parallel_plan(true));
  testing::expect_error(
      [&] { models::GPT(mesh, {.hidden = 10, .heads = 4}); },
      {"GPT: hidden 10 must be a multiple of heads 4"});
}

}  // namespace
}  // namespace dtensor
