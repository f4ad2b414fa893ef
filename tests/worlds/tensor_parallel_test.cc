// parallelize_module and the parallel styles of tensor_parallel.h on every
// world (see world_util.h): each style's forward and gradients against the
// unparallelized module; the GPT of models/gpt.h trained a few SGD steps
// with tensor parallelism, with sequence parallelism, and on a (dp, tp) mesh
// with the batch sharded over dp, against the same model on one rank; the
// collectives of a GPT forward and backward; the plan's errors.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>

#include "dtensor/models/gpt.h"
#include "dtensor/tensor_parallel.h"
#include "test_util.h"
#include "worlds/world_util.h"

using namespace dtensor;
using dtensor::testing::error_of;

namespace {

class TensorParallelTest : public ::testing::Test {
 protected:
  World world = dtensor::testing::test_world();
};

// Meshes (tp) and (dp, tp) that fit the world; tp is the last dim.
std::vector<Shape> tp_meshes_tensor_parallel(const World& world, const std::vector<Shape>& shapes) {
  std::vector<Shape> out;
  for (const Shape& s : shapes)
    if (s.product() <= world.size()) out.push_back(s);
  return out;
}

Tensor randn64_tp(const Shape& shape, uint64_t seed, double scale) {
  return Tensor::randn(shape, seed, 0, DType::Float64) * scale;
}

Placements replicate_tp(const DeviceMesh& mesh) {
  return Placements(static_cast<size_t>(mesh.ndim()), Replicate());
}

// |a - b| <= tol (1 + max |b|).
void expect_close_tp(const std::optional<DTensor>& got, const std::optional<DTensor>& want,
                  const std::string& what, double tol = 1e-10) {
  ASSERT_TRUE(got.has_value()) << what << ": no gradient";
  ASSERT_TRUE(want.has_value()) << what << ": no reference gradient";
  const Tensor a = got->full_tensor(), b = want->full_tensor();
  ASSERT_EQ(a.shape(), b.shape()) << what;
  EXPECT_LE(max_abs_diff(a, b), tol * (1 + max_abs_diff(b, Tensor::zeros(b.shape(), b.dtype()))))
      << what;
}

// One child "m", called as it is: a root for parallelize_module.
class Wrap : public nn::Module {
 public:
  Wrap(const DeviceMesh& mesh, std::unique_ptr<nn::Module> m) : nn::Module(mesh) {
    m_ = register_module("m", std::move(m));
  }
  DTensor forward(const DTensor& x) override { return (*m_)(x); }

 private:
  nn::Module* m_;
};

using MakeModule = std::function<std::unique_ptr<nn::Module>(const DeviceMesh&)>;

struct StyleCase {
  std::string name;
  MakeModule make;
  ParallelStyle style;
  Tensor x;               // the full input
  Placement x_on_tp;      // where the input arrives on tp
  Placement want_out;     // the output's placement on tp
  int64_t forward_collectives;
};

// The module with the style applied against the same module unparallelized
// on replicated data: output, and the gradients of the input and of every
// parameter after backward of sum(y * w) for a random w.
void check_style(const DeviceMesh& mesh, const StyleCase& c) {
  const int tp = mesh.ndim() - 1;
  const std::string where = c.name + " on mesh " + mesh.to_string();
  Wrap par(mesh, c.make(mesh)), ref(mesh, c.make(mesh));
  parallelize_module(par, tp, {{"m", c.style}});
  Placements act = replicate_tp(mesh);
  if (mesh.ndim() == 2) act[0] = Shard(0);
  act[static_cast<size_t>(tp)] = c.x_on_tp;
  DTensor dx = distribute_tensor(c.x, mesh, act);
  DTensor rx = distribute_tensor(c.x, mesh, replicate_tp(mesh));
  const bool floating = c.x.dtype() == DType::Float64;
  if (floating) {
    dx.requires_grad_();
    rx.requires_grad_();
  }
  CommDebugMode comm;
  const DTensor y = par(dx);
  EXPECT_EQ(comm.total_count(), c.forward_collectives) << where << "\n" << comm.table();
  Placement want = c.want_out;
  if (want.is_shard() && want.dim() < 0) want = Shard(want.dim() + y.dim());
  EXPECT_EQ(y.placements()[static_cast<size_t>(tp)], want) << where;
  if (mesh.ndim() == 2) {
    EXPECT_EQ(y.placements()[0], Shard(0)) << where << ": the dp dim keeps its placement";
  }
  const DTensor ry = ref(rx);
  EXPECT_LE(max_abs_diff(y.full_tensor(), ry.full_tensor()), 1e-10) << where;

  const Tensor w = randn64_tp(y.shape(), 99, 1.0);
  sum(mul(y, distribute_tensor(w, mesh, replicate_tp(mesh)))).backward();
  sum(mul(ry, distribute_tensor(w, mesh, replicate_tp(mesh)))).backward();
  if (floating) expect_close_tp(dx.grad(), rx.grad(), where + " input");
  const auto pp = par.named_parameters(), rp = ref.named_parameters();
  ASSERT_EQ(pp.size(), rp.size()) << where;
  for (size_t i = 0; i < pp.size(); ++i)
    expect_close_tp(pp[i].second->grad(), rp[i].second->grad(), where + " " + pp[i].first);
}

MakeModule linear_of(const Tensor& w, const std::optional<Tensor>& b) {
  return [w, b](const DeviceMesh& mesh) { return std::make_unique<nn::Linear>(mesh, w, b); };
}

}  // namespace

// Each style on each module type it supports, with the input arriving
// replicated and sequence-sharded on tp. Features 10 and a vocabulary of 11
// give uneven shards on 3 and 4 ranks.
TEST_F(TensorParallelTest, EachStyleMatchesTheUnparallelizedModule) {
  const Tensor x = randn64_tp({4, 6, 8}, 1, 1.0);
  const Tensor w1 = randn64_tp({10, 8}, 2, 0.3), b1 = randn64_tp({10}, 3, 0.1);
  const Tensor w2 = randn64_tp({8, 10}, 4, 0.3), b2 = randn64_tp({8}, 5, 0.1);
  const Tensor h = randn64_tp({4, 6, 10}, 6, 1.0);
  const Tensor table = randn64_tp({11, 8}, 7, 1.0);
  const Tensor ids = Tensor::randint(0, 11, {4, 6}, 8);
  const Tensor g = 1.0 + randn64_tp({8}, 9, 0.1), gb = randn64_tp({8}, 10, 0.1);
  const MakeModule embedding_module = [table](const DeviceMesh& mesh) {
    return std::make_unique<nn::Embedding>(mesh, table);
  };
  const MakeModule norm_module = [g, gb](const DeviceMesh& mesh) {
    return std::make_unique<nn::LayerNorm>(mesh, g, gb);
  };
  const MakeModule rms_module = [g](const DeviceMesh& mesh) {
    return std::make_unique<nn::RMSNorm>(mesh, g, 1e-5);
  };
  const std::vector<StyleCase> cases = {
      {"colwise linear", linear_of(w1, b1), ColwiseParallel{}, x, Replicate(), Shard(-1), 0},
      {"colwise linear, replicated output", linear_of(w1, b1),
       ColwiseParallel{.output_layouts = Replicate()}, x, Replicate(), Replicate(), 1},
      {"colwise linear, sequence-sharded input", linear_of(w1, std::nullopt), ColwiseParallel{}, x,
       Shard(1), Shard(-1), 1},
      {"rowwise linear", linear_of(w2, b2), RowwiseParallel{}, h, Shard(2), Replicate(), 1},
      {"rowwise linear, replicated input", linear_of(w2, b2), RowwiseParallel{}, h, Replicate(),
       Replicate(), 1},
      {"rowwise linear, sequence-sharded output", linear_of(w2, b2),
       RowwiseParallel{.output_layouts = Shard(1)}, h, Shard(2), Shard(1), 1},
      {"rowwise embedding (vocabulary parallel)", embedding_module, RowwiseParallel{}, ids,
       Replicate(), Replicate(), 1},
      {"rowwise embedding, sequence-sharded output", embedding_module,
       RowwiseParallel{.output_layouts = Shard(1)}, ids, Replicate(), Shard(1), 1},
      {"colwise embedding", embedding_module, ColwiseParallel{}, ids, Replicate(), Shard(-1), 0},
      {"sequence-parallel layer norm", norm_module, SequenceParallel{}, x, Shard(1), Shard(1), 0},
      {"sequence-parallel layer norm, replicated input", norm_module, SequenceParallel{}, x,
       Replicate(), Shard(1), 0},
      {"sequence-parallel RMS norm", rms_module, SequenceParallel{}, x, Shard(1), Shard(1), 0},
      {"prepare input", linear_of(w1, b1), PrepareModuleInput{.desired_input_layouts = Shard(1)},
       x, Replicate(), Shard(1), 0},
      {"prepare output", linear_of(w1, b1),
       PrepareModuleOutput{.desired_output_layouts = Shard(1)}, x, Replicate(), Shard(1), 0},
  };
  for (const Shape& shape : tp_meshes_tensor_parallel(world, {{4}, {3}, {2, 2}, {2, 3}})) {
    DeviceMesh mesh(world, shape);
    if (!dtensor::testing::takes_part(mesh)) continue;
    for (const StyleCase& c : cases) check_style(mesh, c);
  }
}

// The styles lay out the parameters on tp and leave the other mesh dims as
// they were; the layers keep working after the layout change.
TEST_F(TensorParallelTest, StylesLayOutParametersOnTheTpDimOnly) {
  DeviceMesh mesh(world, {2, 2});
  if (!dtensor::testing::takes_part(mesh)) return;
  models::GPTConfig c{.batch = 2, .seq = 4, .hidden = 8, .heads = 2, .layers = 1, .vocab = 10};
  models::GPT model(mesh, c);
  parallelize_module(model, 1, models::gpt_tensor_parallel_plan(true));
  const auto on_tp = [&](const std::string& name) {
    const DTensor& p = model.parameter(name);
    EXPECT_EQ(p.placements()[0], Replicate()) << name;
    EXPECT_TRUE(p.requires_grad() && p.is_leaf()) << name;
    return p.placements()[1];
  };
  EXPECT_EQ(on_tp("tok.weight"), Shard(0));
  EXPECT_EQ(on_tp("pos"), Replicate());
  EXPECT_EQ(on_tp("blocks.0.ln1.weight"), Replicate());
  EXPECT_EQ(on_tp("blocks.0.attention.wq.weight"), Shard(0));
  EXPECT_EQ(on_tp("blocks.0.attention.wo.weight"), Shard(1));
  EXPECT_EQ(on_tp("blocks.0.attention.wo.bias"), Replicate());
  EXPECT_EQ(on_tp("blocks.0.mlp.w1.weight"), Shard(0));
  EXPECT_EQ(on_tp("blocks.0.mlp.w1.bias"), Shard(0));
  EXPECT_EQ(on_tp("blocks.0.mlp.w2.weight"), Shard(1));
  EXPECT_EQ(on_tp("head.weight"), Shard(0));
}

namespace {

// p -= lr * grad on the local shards, the gradient first moved to the
// parameter's layout (summing the Partial gradients of data and sequence
// parallelism).
void sgd_step_tensor_parallel(nn::Module& model, double lr) {
  NoGradGuard no_grad;
  for (auto& [name, p] : model.named_parameters()) {
    const std::optional<DTensor> g = p->grad();
    ASSERT_TRUE(g.has_value()) << name << " got no gradient";
    const DTensor grad = g->redistribute(p->placements());
    p->local().for_each(
        [&](int rank, const Tensor&) { p->to_local(rank).sub_(grad.to_local(rank) * lr); });
    p->zero_grad();
  }
}

// Steps of SGD on fixed random batches; the losses of each step.
std::vector<double> train(models::GPT& model, const DeviceMesh& mesh, const Placements& inputs,
                          int steps) {
  const models::GPTConfig& c = model.config();
  std::vector<double> losses;
  for (int step = 0; step < steps; ++step) {
    const uint64_t seed = 100 + 2 * static_cast<uint64_t>(step);
    const DTensor ids =
        distribute_tensor(Tensor::randint(0, c.vocab, {c.batch, c.seq}, seed), mesh, inputs);
    const DTensor targets =
        distribute_tensor(Tensor::randint(0, c.vocab, {c.batch, c.seq}, seed + 1), mesh, inputs);
    const DTensor loss = models::gpt_loss(model(ids), targets);
    losses.push_back(loss.full_tensor().item());
    loss.backward();
    sgd_step_tensor_parallel(model, 0.5);
  }
  return losses;
}

}  // namespace

// The GPT trained with tensor parallelism (loss parallel or not), with
// sequence parallelism, and with the batch sharded over a data-parallel
// mesh dim gives the losses and the parameters of the same model trained on
// one rank. Heads 4 over tp 2 and 4; vocabulary 10: uneven on 4.
TEST_F(TensorParallelTest, GptTrainsLikeTheOneRankModel) {
  const models::GPTConfig c{.batch = 4, .seq = 4, .hidden = 16, .heads = 4, .layers = 2,
                            .vocab = 10};
  constexpr int kSteps = 3;
  World one = World::simulated(1);
  const DeviceMesh one_mesh(one, {1});
  models::GPT reference(one_mesh, c);
  const std::vector<double> want = train(reference, one_mesh, {Replicate()}, kSteps);
  ASSERT_LT(want.back(), want.front()) << "the reference does not learn";
  struct Variant {
    bool sequence_parallel, loss_parallel;
  };
  for (const Shape& shape : tp_meshes_tensor_parallel(world, {{4}, {2}, {2, 2}, {2, 4}})) {
    DeviceMesh mesh(world, shape);
    if (!dtensor::testing::takes_part(mesh)) continue;
    const int tp = mesh.ndim() - 1;
    for (const Variant v : {Variant{false, true}, Variant{true, true}, Variant{true, false}}) {
      const std::string where = "mesh " + mesh.to_string() + (v.sequence_parallel ? " SP" : " TP") +
                                (v.loss_parallel ? " loss-parallel" : "");
      models::GPT model(mesh, c);
      parallelize_module(model, tp, models::gpt_tensor_parallel_plan(v.sequence_parallel, v.loss_parallel));
      Placements inputs = replicate_tp(mesh);
      if (mesh.ndim() == 2) inputs[0] = Shard(0);  // data parallel over dim 0
      const std::vector<double> got = train(model, mesh, inputs, kSteps);
      for (int s = 0; s < kSteps; ++s)
        EXPECT_NEAR(got[static_cast<size_t>(s)], want[static_cast<size_t>(s)], 1e-4)
            << where << " step " << s;
      const auto params = model.named_parameters(), ref_params = reference.named_parameters();
      ASSERT_EQ(params.size(), ref_params.size());
      for (size_t i = 0; i < params.size(); ++i) {
        EXPECT_LE(max_abs_diff(params[i].second->full_tensor(), ref_params[i].second->full_tensor()),
                  1e-4)
            << where << " " << params[i].first;
      }
    }
  }
}

// The collectives of one forward and backward of a 1-block GPT on tp 4.
// Tensor parallel, forward: one all_reduce each for tok, wo and w2, three
// small ones in the loss; backward: three all_reduces where a Partial
// input gradient of the column-parallel modules meets the residual
// stream's Replicate one (q, k and v read one input, so their Partial
// gradients add up first and are reduced once, as Megatron's fused qkv).
// Sequence parallel: tok, wo and w2 reduce-scatter and attention, w1 and
// head all-gather; backward mirrors them: an all_gather of each
// reduce-scattered output's gradient and one reduce_scatter each of the
// attention's (q, k and v summed), w1's and head's input gradients, no
// all_reduce (PyTorch's counts for its SP transformer: all_gathers and
// reduce_scatters only).
TEST_F(TensorParallelTest, GptForwardBackwardCollectivesArePinned) {
  DeviceMesh mesh(world, {4});
  if (!dtensor::testing::takes_part(mesh)) return;
  const models::GPTConfig c{.batch = 2, .seq = 4, .hidden = 16, .heads = 4, .layers = 1,
                            .vocab = 12};
  const DTensor ids =
      distribute_tensor(Tensor::randint(0, c.vocab, {c.batch, c.seq}, 1), mesh, {Replicate()});
  const DTensor targets =
      distribute_tensor(Tensor::randint(0, c.vocab, {c.batch, c.seq}, 2), mesh, {Replicate()});
  struct Want {
    bool sequence_parallel;
    int64_t fwd_ag, fwd_ar, fwd_rs, bwd_ag, bwd_ar, bwd_rs;
  };
  for (const Want& w : {Want{false, 0, 6, 0, 0, 3, 0}, Want{true, 3, 3, 3, 3, 0, 3}}) {
    const std::string where = w.sequence_parallel ? "SP" : "TP";
    models::GPT model(mesh, c);
    parallelize_module(model, 0, models::gpt_tensor_parallel_plan(w.sequence_parallel));
    CommDebugMode forward;
    const DTensor loss = models::gpt_loss(model(ids), targets);
    EXPECT_EQ(forward.count(CollectiveKind::AllGather), w.fwd_ag) << where << "\n" << forward.table();
    EXPECT_EQ(forward.count(CollectiveKind::AllReduce), w.fwd_ar) << where << "\n" << forward.table();
    EXPECT_EQ(forward.count(CollectiveKind::ReduceScatter), w.fwd_rs) << where << "\n" << forward.table();
    EXPECT_EQ(forward.count(CollectiveKind::AllToAll), 0) << where << "\n" << forward.table();
    CommDebugMode backward;
    loss.backward();
    EXPECT_EQ(backward.count(CollectiveKind::AllGather), w.bwd_ag) << where << "\n" << backward.table();
    EXPECT_EQ(backward.count(CollectiveKind::AllReduce), w.bwd_ar) << where << "\n" << backward.table();
    EXPECT_EQ(backward.count(CollectiveKind::ReduceScatter), w.bwd_rs) << where << "\n" << backward.table();
    EXPECT_EQ(backward.count(CollectiveKind::AllToAll), 0) << where << "\n" << backward.table();
  }
}

// A plan entry naming no module, or a style on a module type it does not
// apply to, is an error naming it, and leaves the model as it was.
TEST_F(TensorParallelTest, BadPlansNameTheEntryAndChangeNothing) {
  DeviceMesh mesh(world, {2, 2});
  if (!dtensor::testing::takes_part(mesh)) return;
  models::GPTConfig c{.batch = 2, .seq = 4, .hidden = 8, .heads = 2, .layers = 1, .vocab = 10};
  models::GPT model(mesh, c);
  dtensor::testing::expect_error(
      [&] {
        parallelize_module(model, 1, {{"tok", RowwiseParallel{}}, {"blocks.*.attn.wq", ColwiseParallel{}}});
      },
      {"parallelize_module: the plan entry 'blocks.*.attn.wq'", "names no module",
       "the modules are [tok, blocks, blocks.0, blocks.0.ln1, blocks.0.attention"});
  dtensor::testing::expect_error(
      [&] {
        parallelize_module(model, 1, {{"tok", RowwiseParallel{}}, {"blocks.*.mlp.w1", SequenceParallel{}}});
      },
      {"SequenceParallel applies to nn::LayerNorm and nn::RMSNorm, but module 'blocks.0.mlp.w1' is none of them"});
  dtensor::testing::expect_error(
      [&] { parallelize_module(model, 0, {{"blocks.0.ln1", ColwiseParallel{}}}); },
      {"ColwiseParallel applies to nn::Linear and nn::Embedding, but module 'blocks.0.ln1'"});
  dtensor::testing::expect_error(
      [&] { parallelize_module(model, 2, {{"tok", RowwiseParallel{}}}); },
      {"tensor-parallel mesh dim 2 is out of range for a mesh of 2 dims"});
  dtensor::testing::expect_error(
      [&] {
        parallelize_module(model, 1, {{"head", RowwiseParallel{.output_layouts = Partial(ReduceOp::Max)}}});
      },
      {"RowwiseParallel on 'head': output_layouts must be Replicate, Shard(d) or Partial(sum), got P(max)"});
  for (auto& [name, p] : model.named_parameters())
    EXPECT_EQ(p->placements(), replicate_tp(mesh)) << name << " changed by a refused plan";
}
