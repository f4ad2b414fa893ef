// Saved-tensor hooks (autograd.h) on every world: what ops save goes
// through pack when recorded and unpack when backward runs; the gradients
// are those of the same program without hooks; the innermost scope applies;
// what pack returns is all the graph keeps.
#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "dtensor/dtensor.h"
#include "test_util.h"
#include "worlds/world_util.h"

using namespace dtensor;
using dtensor::testing::error_of;

namespace {

class SavedTensorHooksTest : public ::testing::Test {
 protected:
  World world = dtensor::testing::test_world();
};

struct Leaves {
  DTensor x, w;
};

Leaves leaves(const DeviceMesh& mesh) {
  DTensor x = distribute_tensor(Tensor::randn({6, 5}, 1), mesh, {Shard(0)});
  DTensor w = distribute_tensor(Tensor::randn({3, 5}, 2), mesh, {Replicate()});
  x.requires_grad_();
  w.requires_grad_();
  return {x, w};
}

// linear saves x and w, relu one tensor.
DTensor program(const Leaves& l) { return sum(relu(linear(l.x, l.w))); }

// A tensor moved out of the graph: its full value and layout.
struct Offloaded {
  Tensor full;
  DeviceMesh mesh;
  Placements placements;
};

}  // namespace

TEST_F(SavedTensorHooksTest, PackAndUnpackEverySavedTensor) {
  DeviceMesh mesh(world, {4});
  if (!dtensor::testing::takes_part(mesh)) return;
  Leaves ref = leaves(mesh);
  program(ref).backward();

  Leaves l = leaves(mesh);
  int packed = 0, unpacked = 0;
  DTensor loss = [&] {
    SavedTensorHooks hooks(
        [&](const DTensor& t) -> std::any {
          ++packed;
          return t;
        },
        [&](const std::any& a) {
          ++unpacked;
          return std::any_cast<DTensor>(a);
        });
    return program(l);
  }();
  EXPECT_GE(packed, 3);  // linear's x and w, relu's
  EXPECT_EQ(unpacked, 0);
  EXPECT_GT(graph_memory(loss).saved_bytes, 0);  // kept as DTensors: counted
  loss.backward();  // the scope has ended: unpack is still the one that packed
  EXPECT_EQ(unpacked, packed);
  EXPECT_EQ(max_abs_diff(l.w.grad()->full_tensor(), ref.w.grad()->full_tensor()), 0);
  EXPECT_EQ(max_abs_diff(l.x.grad()->full_tensor(), ref.x.grad()->full_tensor()), 0);
}

// Packing into something else frees the saved shards; unpacking makes them
// again, and backward gives the same gradients.
TEST_F(SavedTensorHooksTest, PackedTensorsLeaveTheGraph) {
  DeviceMesh mesh(world, {2});
  if (!dtensor::testing::takes_part(mesh)) return;
  Leaves ref = leaves(mesh);
  program(ref).backward();
  Leaves l = leaves(mesh);
  std::optional<SavedTensorHooks> hooks;
  hooks.emplace(
      [](const DTensor& t) -> std::any {
        return Offloaded{t.full_tensor(), t.mesh(), t.placements()};
      },
      [](const std::any& a) {
        const auto& o = std::any_cast<const Offloaded&>(a);
        return distribute_tensor(o.full, o.mesh, o.placements);
      });
  DTensor loss = program(l);
  hooks.reset();
  EXPECT_EQ(graph_memory(loss).saved_bytes, 0);
  EXPECT_GT(graph_memory(loss).nodes, 0);
  loss.backward();
  EXPECT_LE(max_abs_diff(l.w.grad()->full_tensor(), ref.w.grad()->full_tensor()), 1e-6);
  EXPECT_LE(max_abs_diff(l.x.grad()->full_tensor(), ref.x.grad()->full_tensor()), 1e-6);
}

// The innermost alive scope packs; a scope may end before an inner one.
TEST_F(SavedTensorHooksTest, InnermostScopeApplies) {
  DeviceMesh mesh(world, {4});
  if (!dtensor::testing::takes_part(mesh)) return;
  Leaves l = leaves(mesh);
  std::string order;
  auto hooks_named = [&](char name) {
    return std::make_unique<SavedTensorHooks>(
        [&order, name](const DTensor& t) -> std::any {
          order += name;
          return t;
        },
        [](const std::any& a) { return std::any_cast<DTensor>(a); });
  };
  auto outer = hooks_named('o');
  DTensor a = relu(l.x);  // o
  auto inner = hooks_named('i');
  DTensor b = relu(a);  // i
  outer.reset();        // out of order: inner stays innermost
  DTensor c = relu(b);  // i
  inner.reset();
  DTensor d = relu(c);  // none
  EXPECT_EQ(order, "oii");
  sum(d).backward();
  EXPECT_TRUE(l.x.grad().has_value());
}

TEST_F(SavedTensorHooksTest, UnpackMustGiveTheSavedShape) {
  DeviceMesh mesh(world, {4});
  if (!dtensor::testing::takes_part(mesh)) return;
  Leaves l = leaves(mesh);
  DTensor loss = [&] {
    SavedTensorHooks hooks([](const DTensor& t) -> std::any { return t; },
                           [&](const std::any&) { return l.w.detach(); });
    return sum(relu(l.x));
  }();
  const std::string e = error_of([&] { loss.backward(); });
  EXPECT_NE(e.find("the unpack hook gave"), std::string::npos) << e;
  EXPECT_NE(e.find("same shape, dtype and mesh expected"), std::string::npos) << e;
}
