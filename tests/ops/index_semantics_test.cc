// PyTorch's semantics for class indices and ids: vocab_parallel_cross_entropy
// honours ignore_index (mean over the targets that count) and rejects
// out-of-range targets like cross_entropy; embedding rejects negative and
// too-large ids, for plain tensors and DTensors of every layout.
#include <gtest/gtest.h>

#include <cmath>

#include "dtensor/dtensor.h"
#include "dtensor/parallel.h"
#include "layout_util.h"
#include "test_util.h"

using namespace dtensor;
using dtensor::testing::class_targets;
using dtensor::testing::error_of;
using dtensor::testing::expect_error;
using dtensor::testing::small_valued;

namespace {

double scalar(const Tensor& t) { return t.to(DType::Float64).to_vector<double>()[0]; }

class IndexSemanticsTest : public ::testing::Test {
 protected:
  World world = World::simulated(8);
};

}  // namespace

// The reported case: targets {0, -100, 2, 5} over 6 classes. The ignored
// target neither adds to the loss nor counts in the mean.
TEST_F(IndexSemanticsTest, VocabParallelCrossEntropyIgnoresIgnoreIndex) {
  const Tensor logits = small_valued({4, 6}, 1);
  const Tensor target = Tensor::from_vector(std::vector<int64_t>{0, -100, 2, 5});
  const double want = scalar(cross_entropy(logits, target));
  for (const Shape& mesh_shape : {Shape{2}, Shape{3}, Shape{4}, Shape{2, 2}, Shape{2, 3}}) {
    DeviceMesh mesh(world, mesh_shape);
    const int tp = mesh.ndim() - 1;  // the last mesh dim; a 2-d mesh's first is dp
    Placements lp, tgt;
    if (mesh.ndim() == 2) {  // batch over dp
      lp.push_back(Shard(0));
      tgt.push_back(Shard(0));
    }
    lp.push_back(Shard(1));
    tgt.push_back(Replicate());
    DTensor d = vocab_parallel_cross_entropy(distribute_tensor(logits, mesh, lp),
                                             distribute_tensor(target, mesh, tgt), tp);
    for (int r : mesh.ranks()) EXPECT_NEAR(scalar(d.to_local(r)), want, 1e-5) << mesh;
  }
  // Another ignore_index, and random targets with about one in five ignored.
  DeviceMesh mesh(world, {2, 4});
  const Tensor big = small_valued({3, 5, 13}, 2);
  for (int64_t ignore : {-100, -1, 4}) {
    const Tensor t = class_targets({3, 5}, 13, ignore, 3);
    const double expect = scalar(cross_entropy(big.reshape({15, 13}), t.reshape({15}),
                                               Reduction::Mean, ignore));
    DTensor d = vocab_parallel_cross_entropy(
        distribute_tensor(big, mesh, {Shard(0), Shard(2)}),
        distribute_tensor(t, mesh, {Shard(0), Replicate()}), 1, ignore);
    EXPECT_NEAR(scalar(d.full_tensor()), expect, 1e-5) << "ignore_index " << ignore;
  }
  // Every target ignored: 0/0, NaN, as cross_entropy.
  const Tensor none = Tensor::full({4}, -100, DType::Int64);
  EXPECT_TRUE(std::isnan(scalar(cross_entropy(logits, none))));
  DeviceMesh m2(world, {2});
  DTensor n = vocab_parallel_cross_entropy(distribute_tensor(logits, m2, {Shard(1)}),
                                           distribute_tensor(none, m2, {Replicate()}), 0);
  EXPECT_TRUE(std::isnan(scalar(n.to_local(0))));
}

// A target outside [0, classes) that is not ignore_index is an error naming
// it, as in cross_entropy (which said nothing before: it gave a number).
TEST_F(IndexSemanticsTest, VocabParallelCrossEntropyRejectsBadTargets) {
  DeviceMesh mesh(world, {2});
  const Tensor logits = small_valued({4, 6}, 1);
  DTensor dl = distribute_tensor(logits, mesh, {Shard(1)});
  for (int64_t bad : {7, 6, -1, -101}) {
    const Tensor target = Tensor::from_vector(std::vector<int64_t>{0, bad, 2, 5});
    const std::string plain = error_of([&] { cross_entropy(logits, target); });
    EXPECT_NE(plain.find("target " + std::to_string(bad)), std::string::npos) << plain;
    expect_error([&] {
      vocab_parallel_cross_entropy(dl, distribute_tensor(target, mesh, {Replicate()}), 0);
    }, {"vocab_parallel_cross_entropy", "target " + std::to_string(bad), "[0, 6)",
        "ignore_index (-100)"});
  }
  // The ignore_index itself may be any value, even one inside [0, classes).
  const Tensor t = Tensor::from_vector(std::vector<int64_t>{0, 3, 2, 3});
  DTensor d = vocab_parallel_cross_entropy(dl, distribute_tensor(t, mesh, {Replicate()}), 0, 3);
  EXPECT_NEAR(scalar(d.to_local(1)), scalar(cross_entropy(logits, t, Reduction::Mean, 3)), 1e-5);
}

// embedding: ids must be in [0, num_embeddings); negative ones do not wrap.
TEST_F(IndexSemanticsTest, EmbeddingRejectsOutOfRangeIds) {
  const Tensor table = small_valued({6, 4}, 4);
  for (int64_t bad : {-1, -6, 6, 100}) {
    const Tensor ids = Tensor::from_vector(std::vector<int64_t>{0, bad, 2});
    const std::string plain = error_of([&] { embedding(table, ids); });
    for (const std::string& piece : std::vector<std::string>{"embedding", "index " + std::to_string(bad), "[0, 6)"})
      EXPECT_NE(plain.find(piece), std::string::npos) << plain;
    DeviceMesh mesh(world, {2, 2});
    for (const char* text : {"R,R", "S(0),R", "R,S(1)", "S(0),S(1)"}) {
      DTensor w = distribute_tensor(table, mesh, parse_placements(text));
      for (const char* ids_layout : {"R,R", "S(0),R"}) {
        DTensor i = distribute_tensor(ids, mesh, parse_placements(ids_layout));
        EXPECT_EQ(error_of([&] { embedding(w, i); }), plain) << text << " ids " << ids_layout;
      }
    }
    // The vocabulary-parallel layer too.
    VocabParallelEmbedding layer(mesh, 1, table);
    EXPECT_EQ(error_of([&] { layer(distribute_tensor(ids, mesh, {Replicate(), Replicate()})); }),
              plain);
  }
  // In range: every layout gives the plain lookup.
  const Tensor ids = Tensor::from_vector(std::vector<int64_t>{5, 0, 3, 3, 1}, Shape{5});
  DeviceMesh mesh(world, {2, 2});
  for (const char* text : {"R,R", "S(0),R", "R,S(0)", "S(1),S(0)"}) {
    DTensor out = embedding(distribute_tensor(table, mesh, parse_placements(text)),
                            distribute_tensor(ids, mesh, {Replicate(), Replicate()}));
    EXPECT_TRUE(equal(out.full_tensor(), embedding(table, ids))) << text;
  }
}
