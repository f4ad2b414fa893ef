// The Llama style of models/gpt.h (RMSNorm, SwiGLU, RoPE, no biases) and
// grouped-query attention on every world (see world_util.h): on fixed and
// random layouts (FSDP, tensor parallel with and without sequence
// parallelism, FSDP x TP, HSDP; kv_heads below heads) one forward and
// backward gives the loss and every parameter's gradient of the same model
// on one rank, within float32's rounding of a different summation order;
// the collectives of the Llama plan are pinned; and a kv_heads the tp size
// does not divide is refused, naming both.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "dtensor/fsdp.h"
#include "dtensor/models/gpt.h"
#include "dtensor/tensor_parallel.h"
#include "test_util.h"
#include "worlds/world_util.h"

using namespace dtensor;

namespace {

struct LlamaLayout {
  Shape mesh;
  bool fsdp = false;  // fully_shard over mesh dim 0 (HSDP: dim 1, replicated over dim 0)
  bool tp = false;    // tensor parallel over the last mesh dim
  bool sp = false;    // with sequence parallelism
  bool hsdp = false;
  int64_t kv_heads = 0;
  std::string text() const {
    std::string out = "mesh " + to_string(mesh);
    if (fsdp) out += hsdp ? " hsdp" : " fsdp";
    if (tp) out += sp ? " tp+sp" : " tp";
    return out + " kv_heads " + std::to_string(kv_heads);
  }
};

// Heads 4, head dim 4 (even, for the rotary pairs); ffn 40 (not 4 x
// hidden); vocabulary 14: uneven over 4 ranks; batch 4 over up to 4 dp ranks.
models::GPTConfig llama_test_config(int64_t kv_heads) {
  return {.batch = 4,
          .seq = 6,
          .hidden = 16,
          .heads = 4,
          .layers = 2,
          .vocab = 14,
          .kv_heads = kv_heads,
          .ffn = 40,
          .style = models::ModelStyle::Llama};
}

// The loss of one forward and backward on fixed random batches, with every
// parameter's gradient (whole tensors), by name.
struct LlamaStep {
  double loss = 0;
  std::vector<std::pair<std::string, Tensor>> grads;
};

LlamaStep llama_step(models::GPT& model, const DeviceMesh& mesh, const Placements& inputs) {
  const models::GPTConfig& c = model.config();
  const DTensor ids =
      distribute_tensor(Tensor::randint(0, c.vocab, {c.batch, c.seq}, 31), mesh, inputs);
  const DTensor targets =
      distribute_tensor(Tensor::randint(0, c.vocab, {c.batch, c.seq}, 32), mesh, inputs);
  const DTensor loss = models::gpt_loss(model(ids), targets);
  loss.backward();
  LlamaStep out;
  out.loss = loss.full_tensor().item();
  for (auto& [name, p] : model.named_parameters()) {
    const std::optional<DTensor> g = p->grad();
    out.grads.emplace_back(name, g ? g->full_tensor() : Tensor());
  }
  return out;
}

void lay_out_llama(models::GPT& model, const DeviceMesh& mesh, const LlamaLayout& l) {
  const int last = mesh.ndim() - 1;
  if (l.tp) parallelize_module(model, last, models::gpt_tensor_parallel_plan(model.config(), l.sp));
  if (l.fsdp) {
    FullyShardOptions o;
    o.mesh_dims = {l.hsdp ? 1 : 0};
    if (l.hsdp) o.replicate_mesh_dims = {0};
    for (const auto& [name, block] : model.submodule("blocks").named_modules())
      if (!name.empty() && name.find('.') == std::string::npos) fully_shard(*block, o);
    fully_shard(model, o);
  }
}

// The layouts every world runs, then random ones drawn alike on every rank.
std::vector<LlamaLayout> llama_layouts(const World& world) {
  std::vector<LlamaLayout> all = {
      {{4}, true, false, false, false, 0},     // FSDP
      {{4}, false, true, true, false, 0},      // TP + SP
      {{4}, false, true, false, false, 4},     // TP, kv_heads = heads given
      {{2}, false, true, true, false, 2},      // TP + SP, GQA (2 query heads per kv head)
      {{2, 2}, true, true, true, false, 0},    // FSDP x TP + SP
      {{2, 2}, true, true, true, false, 2},    // FSDP x TP + SP, GQA
      {{4}, true, false, false, false, 1},     // FSDP, multi-query attention
      {{2, 2, 2}, true, true, true, true, 2},  // HSDP x TP + SP, GQA
      {{3, 4}, true, true, true, false, 4},    // FSDP over 3 (batch 4: uneven) x TP 4 + SP
  };
  uint64_t state = 2024;
  const std::vector<Shape> meshes = {{2}, {4}, {2, 2}, {4, 2}, {2, 4}, {3, 2}};
  for (int i = 0; i < 8; ++i) {
    auto draw = [&](uint64_t n) { return (state = dtensor::testing::splitmix64(state)) % n; };
    LlamaLayout l;
    l.mesh = meshes[draw(meshes.size())];
    const bool two_d = l.mesh.size() == 2;
    l.tp = two_d || draw(2) == 1;
    l.fsdp = two_d || !l.tp;
    l.sp = l.tp && draw(2) == 1;
    // kv heads the tp size divides: 1 only without tp, 2 on tp 2, 4 always.
    const int64_t tp_size = l.tp ? l.mesh.back() : 1;
    std::vector<int64_t> kv = {0, 4};
    if (tp_size <= 2) kv.push_back(2);
    if (tp_size == 1) kv.push_back(1);
    l.kv_heads = kv[draw(kv.size())];
    all.push_back(l);
  }
  std::vector<LlamaLayout> out;
  for (const LlamaLayout& l : all)
    if (l.mesh.product() <= world.size()) out.push_back(l);
  return out;
}

// One Llama block's logits from the formulas, in double with plain loops
// (nothing shared with the model's code but its parameters): RMSNorm
// x / sqrt(mean(x^2) + 1e-5) * w; q, k, v; each feature pair (2i, 2i + 1)
// of a head at position p rotated by p * 500000^(-2i / head_dim); query
// head j reading kv head j / (heads / kv_heads); causal softmax attention;
// w2(silu(w1 y) * w3 y); the final norm and the head.
std::vector<double> llama_logits_by_formula(models::GPT& model, const std::vector<int64_t>& ids) {
  const models::GPTConfig& c = model.config();
  const int64_t h = c.hidden, nh = c.heads, kv = c.num_kv_heads(), hd = h / nh, f = c.ffn_hidden();
  const int64_t n = static_cast<int64_t>(ids.size()), s = c.seq;
  auto param = [&](const std::string& name) {
    return model.parameter(name).full_tensor().to_vector<double>();
  };
  // y = W x for W (out, in) row-major.
  auto linear = [](const std::vector<double>& w, const std::vector<double>& x, int64_t out) {
    const int64_t in = static_cast<int64_t>(x.size());
    std::vector<double> y(static_cast<size_t>(out));
    for (int64_t o = 0; o < out; ++o)
      for (int64_t i = 0; i < in; ++i) y[o] += w[static_cast<size_t>(o * in + i)] * x[i];
    return y;
  };
  auto rms = [&](const std::vector<double>& x, const std::vector<double>& w) {
    double ms = 0;
    for (double v : x) ms += v * v / static_cast<double>(h);
    std::vector<double> y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] / std::sqrt(ms + 1e-5) * w[i];
    return y;
  };
  auto rotate = [&](std::vector<double>& v, int64_t heads, int64_t pos) {
    for (int64_t j = 0; j < heads; ++j)
      for (int64_t i = 0; i < hd / 2; ++i) {
        const double angle =
            static_cast<double>(pos) *
            std::pow(500000.0, -2.0 * static_cast<double>(i) / static_cast<double>(hd));
        double& a = v[static_cast<size_t>(j * hd + 2 * i)];
        double& b = v[static_cast<size_t>(j * hd + 2 * i + 1)];
        const double ra = a * std::cos(angle) - b * std::sin(angle);
        const double rb = a * std::sin(angle) + b * std::cos(angle);
        a = ra, b = rb;
      }
  };
  const std::vector<double> tok = param("tok.weight");
  std::vector<std::vector<double>> x(static_cast<size_t>(n));
  for (int64_t t = 0; t < n; ++t)
    x[t].assign(tok.begin() + ids[t] * h, tok.begin() + (ids[t] + 1) * h);
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string b = "blocks." + std::to_string(l) + ".";
    const auto wq = param(b + "attention.wq.weight"), wk = param(b + "attention.wk.weight");
    const auto wv = param(b + "attention.wv.weight"), wo = param(b + "attention.wo.weight");
    const auto w1 = param(b + "mlp.w1.weight"), w2 = param(b + "mlp.w2.weight");
    const auto w3 = param(b + "mlp.w3.weight");
    const auto ln1 = param(b + "ln1.weight"), ln2 = param(b + "ln2.weight");
    std::vector<std::vector<double>> q(x.size()), k(x.size()), v(x.size());
    for (int64_t t = 0; t < n; ++t) {
      const std::vector<double> y = rms(x[t], ln1);
      q[t] = linear(wq, y, h), k[t] = linear(wk, y, kv * hd), v[t] = linear(wv, y, kv * hd);
      rotate(q[t], nh, t % s);
      rotate(k[t], kv, t % s);
    }
    for (int64_t t = 0; t < n; ++t) {
      const int64_t first = t - t % s;  // this sequence's first token
      std::vector<double> o(static_cast<size_t>(h));
      for (int64_t j = 0; j < nh; ++j) {
        const int64_t g = j / (nh / kv);
        std::vector<double> scores;
        double top = -1e300;
        for (int64_t u = first; u <= t; ++u) {
          double dot = 0;
          for (int64_t d = 0; d < hd; ++d) dot += q[t][j * hd + d] * k[u][g * hd + d];
          scores.push_back(dot / std::sqrt(static_cast<double>(hd)));
          top = std::max(top, scores.back());
        }
        double total = 0;
        for (double& sc : scores) total += (sc = std::exp(sc - top));
        for (int64_t u = first; u <= t; ++u)
          for (int64_t d = 0; d < hd; ++d)
            o[j * hd + d] += scores[static_cast<size_t>(u - first)] / total * v[u][g * hd + d];
      }
      const std::vector<double> attn = linear(wo, o, h);
      for (int64_t i = 0; i < h; ++i) x[t][i] += attn[i];
      const std::vector<double> y = rms(x[t], ln2);
      std::vector<double> gate = linear(w1, y, f);
      const std::vector<double> up = linear(w3, y, f);
      for (int64_t i = 0; i < f; ++i) gate[i] = gate[i] / (1 + std::exp(-gate[i])) * up[i];
      const std::vector<double> down = linear(w2, gate, h);
      for (int64_t i = 0; i < h; ++i) x[t][i] += down[i];
    }
  }
  const auto lnf = param("lnf.weight"), head = param("head.weight");
  std::vector<double> logits;
  for (int64_t t = 0; t < n; ++t) {
    const std::vector<double> y = linear(head, rms(x[t], lnf), c.vocab);
    logits.insert(logits.end(), y.begin(), y.end());
  }
  return logits;
}

class LlamaTest : public ::testing::Test {
 protected:
  World world = dtensor::testing::test_world();
  World one = World::simulated(1);
};

}  // namespace

// Float32 throughout: a sharded matmul or a reduce-scattered gradient sums
// in another order than one rank does, so values agree to a few float32
// ulps of the largest magnitude, not bit for bit: |loss - ref| <= 1e-5 and
// per parameter max |grad - ref| <= 1e-5 (1 + max |ref|). A misplaced
// rotation, kv head or gate gives differences of order 1e-2 and more.
TEST_F(LlamaTest, LayoutsGiveTheOneRankLossAndGradients) {
  const DeviceMesh one_mesh(one, {1});
  int ran = 0;
  for (const LlamaLayout& l : llama_layouts(world)) {
    SCOPED_TRACE(l.text());
    const models::GPTConfig c = llama_test_config(l.kv_heads);
    models::GPT reference(one_mesh, c, 7);
    const LlamaStep want = llama_step(reference, one_mesh, {Replicate()});
    const DeviceMesh mesh(world, l.mesh);
    // Under mpirun -np 12 the last ranks take part in the 12-rank layouts only.
    if (!dtensor::testing::takes_part(mesh)) continue;
    models::GPT model(mesh, c, 7);
    lay_out_llama(model, mesh, l);
    Placements inputs(static_cast<size_t>(mesh.ndim()), Replicate());
    if (l.fsdp) inputs[l.hsdp ? 1 : 0] = Shard(0);
    if (l.hsdp) inputs[0] = Shard(0);
    const LlamaStep got = llama_step(model, mesh, inputs);
    EXPECT_NEAR(got.loss, want.loss, 1e-5);
    ASSERT_EQ(got.grads.size(), want.grads.size());
    for (size_t i = 0; i < got.grads.size(); ++i) {
      const auto& [name, g] = got.grads[i];
      const Tensor& w = want.grads[i].second;
      ASSERT_EQ(name, want.grads[i].first);
      ASSERT_TRUE(g.defined() && w.defined()) << name << " got no gradient";
      ASSERT_EQ(g.shape(), w.shape()) << name;
      const double scale = 1 + max_abs_diff(w, Tensor::zeros(w.shape(), w.dtype()));
      EXPECT_LE(max_abs_diff(g, w), 1e-5 * scale) << name;
    }
    ++ran;
  }
  EXPECT_GT(ran, 0);
}

// The Llama model's names: no position table and no biases; wk and wv
// project to kv_heads x head_dim; w3 beside w1.
TEST_F(LlamaTest, ParametersHaveTheLlamaNamesAndShapes) {
  const DeviceMesh one_mesh(one, {1});
  models::GPTConfig c = llama_test_config(2);
  c.layers = 1;
  models::GPT model(one_mesh, c);
  std::vector<std::string> names;
  for (auto& [name, p] : model.named_parameters()) {
    names.push_back(name + " " + to_string(p->shape()));
  }
  const std::vector<std::string> want = {
      "tok.weight [14, 16]",
      "blocks.0.ln1.weight [16]",
      "blocks.0.attention.wq.weight [16, 16]",
      "blocks.0.attention.wk.weight [8, 16]",
      "blocks.0.attention.wv.weight [8, 16]",
      "blocks.0.attention.wo.weight [16, 16]",
      "blocks.0.ln2.weight [16]",
      "blocks.0.mlp.w1.weight [40, 16]",
      "blocks.0.mlp.w2.weight [16, 40]",
      "blocks.0.mlp.w3.weight [40, 16]",
      "lnf.weight [16]",
      "head.weight [14, 16]",
  };
  EXPECT_EQ(names, want);
}

// The collectives of one forward and backward of a 1-block Llama on tp 4
// with sequence parallelism, as GPT's (tensor_parallel_test.cc): forward
// reduce-scatters tok, wo and w2 and all-gathers the attention's and the
// MLP's inputs once each (w1 and w3 share one gather, as q, k and v do)
// and the head's; three all_reduces in the loss. Backward mirrors them.
// A plan that gathered for w1 and w3 apiece would show a fourth gather.
TEST_F(LlamaTest, SequenceParallelCollectivesArePinned) {
  const DeviceMesh mesh(world, {4});
  if (!dtensor::testing::takes_part(mesh)) return;
  models::GPTConfig c = llama_test_config(4);
  c.layers = 1;
  const DTensor ids =
      distribute_tensor(Tensor::randint(0, c.vocab, {c.batch, c.seq}, 1), mesh, {Replicate()});
  const DTensor targets =
      distribute_tensor(Tensor::randint(0, c.vocab, {c.batch, c.seq}, 2), mesh, {Replicate()});
  models::GPT model(mesh, c);
  parallelize_module(model, 0, models::gpt_tensor_parallel_plan(c, true));
  CommDebugMode forward;
  const DTensor loss = models::gpt_loss(model(ids), targets);
  EXPECT_EQ(forward.count(CollectiveKind::AllGather), 3) << forward.table();
  EXPECT_EQ(forward.count(CollectiveKind::ReduceScatter), 3) << forward.table();
  EXPECT_EQ(forward.count(CollectiveKind::AllReduce), 3) << forward.table();
  CommDebugMode backward;
  loss.backward();
  EXPECT_EQ(backward.count(CollectiveKind::AllGather), 3) << backward.table();
  EXPECT_EQ(backward.count(CollectiveKind::ReduceScatter), 3) << backward.table();
  EXPECT_EQ(backward.count(CollectiveKind::AllReduce), 0) << backward.table();
}

// Grouped-query attention keeps each rank's kv heads whole: kv_heads 2 over
// tp 4 throws at the first forward, naming both. The Llama plan on a GPT
// model names the module the model lacks.
TEST_F(LlamaTest, KvHeadsTheTpSizeDoesNotDivideAreRefused) {
  const DeviceMesh mesh(world, {4});
  if (!dtensor::testing::takes_part(mesh)) return;
  const models::GPTConfig c = llama_test_config(2);
  models::GPT model(mesh, c);
  parallelize_module(model, 0, models::gpt_tensor_parallel_plan(c, true));
  const DTensor ids =
      distribute_tensor(Tensor::randint(0, c.vocab, {c.batch, c.seq}, 1), mesh, {Replicate()});
  dtensor::testing::expect_error([&] { model(ids); },
                                 {"kv_heads 2 must be a multiple of the tensor-parallel size 4"});
  models::GPTConfig gpt = c;
  gpt.style = models::ModelStyle::GPT;
  models::GPT gpt_model(mesh, gpt);
  dtensor::testing::expect_error(
      [&] { parallelize_module(gpt_model, 0, models::gpt_tensor_parallel_plan(c, true)); },
      {"'blocks.*.mlp.w3'", "names no module"});
}

// Configurations that are no model are refused before any parameter is
// made, naming the sizes.
TEST_F(LlamaTest, BadConfigsNameTheSizes) {
  const DeviceMesh one_mesh(one, {1});
  models::GPTConfig c = llama_test_config(3);
  dtensor::testing::expect_error([&] { models::GPT(one_mesh, c); },
                                 {"heads 4 must be a multiple of kv_heads 3"});
  c = llama_test_config(0);
  c.hidden = 12;  // head dim 3
  dtensor::testing::expect_error([&] { models::GPT(one_mesh, c); },
                                 {"even head dim", "hidden 12 / heads 4 = 3"});
  c = llama_test_config(-1);
  dtensor::testing::expect_error([&] { models::GPT(one_mesh, c); }, {"kv_heads -1"});
}

// The model computes the Llama formulas (written out independently above):
// its float32 logits on one rank are those of the float64 loops within
// float32 rounding, with grouped-query attention (2 query heads per kv
// head) and 2 blocks. A swapped rotation, pairing or kv head, or a gate
// without silu, is off by order 0.1.
TEST_F(LlamaTest, OneRankLogitsAreTheLlamaFormulas) {
  const DeviceMesh one_mesh(one, {1});
  const models::GPTConfig c = llama_test_config(2);
  models::GPT model(one_mesh, c, 5);
  const Tensor ids = Tensor::randint(0, c.vocab, {c.batch, c.seq}, 9);
  const std::vector<double> got =
      model(distribute_tensor(ids, one_mesh, {Replicate()})).full_tensor().to_vector<double>();
  const std::vector<double> want = llama_logits_by_formula(model, ids.to_vector<int64_t>());
  ASSERT_EQ(got.size(), want.size());
  double worst = 0, largest = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    worst = std::max(worst, std::abs(got[i] - want[i]));
    largest = std::max(largest, std::abs(want[i]));
  }
  EXPECT_GT(largest, 0.1);  // logits of order one, not all zero
  EXPECT_LE(worst, 1e-5 * (1 + largest));
}
