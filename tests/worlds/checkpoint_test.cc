// Distributed checkpoints (checkpoint.h) on every world (see world_util.h):
// random (save layout, load layout) pairs on meshes of 1-3 dims with uneven
// and empty shards, shard order and every Partial kind load back bitwise;
// values keep their bits; a save that fails at any point leaves the
// previous checkpoint loadable; corrupted, truncated, missing and edited
// files and a state that does not match give their errors on every rank.
#include <gtest/gtest.h>

#include <array>
#include <bit>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <random>

#include "checkpoint/common.h"
#include "checkpoint/metadata.h"
#include "dtensor/checkpoint.h"
#include "dtensor/dtensor.h"
#include "dtensor/fsdp.h"
#include "dtensor/nn.h"
#include "dtensor/optim.h"
#include "layout_util.h"
#include "test_util.h"
#include "worlds/shared_files.h"
#include "worlds/world_util.h"

using namespace dtensor;
using namespace dtensor::checkpoint;
namespace fs = std::filesystem;
using dtensor::testing::expect_error;
using dtensor::testing::make_dtensor;
using dtensor::testing::takes_part;
namespace ckd = ::dtensor::checkpoint::detail;

namespace {

using dtensor::testing::barrier;
using dtensor::testing::on_rank0;

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    base = dtensor::testing::shared_temp_path(world, std::string("dtensor_ckpt_") + info->name());
    on_rank0(world, [&] { fs::create_directories(base); });
  }
  void TearDown() override {
    barrier(world);
    if (world.holds(0)) fs::remove_all(base);
    ckd::set_save_fault_hook(nullptr);
  }

  World world = dtensor::testing::test_world();
  std::string base;
};

// A mesh of 1-3 dims of at most the world's ranks.
Shape random_mesh_upto3(std::mt19937& rng, int64_t max_ranks) {
  for (;;) {
    Shape s = dtensor::testing::random_mesh(rng, max_ranks);
    if (s.size() <= 3) return s;
  }
}

// Random placements of a mesh_nd-dim mesh for an nd-dim tensor: Shard,
// Replicate and (partial) one Partial kind, with random shard orders.
Placements random_layout(std::mt19937& rng, int mesh_nd, int64_t nd, bool partial) {
  Placements p = dtensor::testing::random_placement_pair(rng, mesh_nd, nd).first;
  if (!partial)
    for (Placement& q : p)
      if (q.is_partial()) q = Replicate();
  return dtensor::testing::with_random_orders(rng, p);
}

bool has_partial(const Placements& p) {
  for (const Placement& q : p)
    if (q.is_partial()) return true;
  return false;
}

DTensor zeros_in(const DeviceMesh& mesh, const Placements& p, const Shape& shape, DType dtype) {
  return distribute_tensor(Tensor::zeros(shape, dtype), mesh, p);
}

}  // namespace

// Saved from one random layout, loaded into another on another mesh: the
// loaded tensor equals the saved one bit for bit, for several tensors per
// checkpoint, plain tensors and values alongside.
TEST_F(CheckpointTest, RandomLayoutsRoundTripBitwise) {
  std::mt19937 rng(1701);
  const int cases = dtensor::testing::property_cases(40);
  for (int iter = 0; iter < cases; ++iter) {
    const DeviceMesh save_mesh(world, random_mesh_upto3(rng, world.size()));
    const DeviceMesh load_mesh(world, random_mesh_upto3(rng, world.size()));
    const int n = 1 + static_cast<int>(rng() % 3);
    StateDict saved, target;
    std::vector<Tensor> fulls;
    for (int k = 0; k < n; ++k) {
      const Shape shape = dtensor::testing::random_shape_for(
          rng, std::max(save_mesh.size(), load_mesh.size()));
      const int64_t nd = static_cast<int64_t>(shape.size());
      const Placements from = random_layout(rng, save_mesh.ndim(), nd, true);
      const Placements to = random_layout(rng, load_mesh.ndim(), nd, true);
      // Partial pieces must sum exactly: integer values; else any floats.
      const DType dtype = has_partial(from) || has_partial(to)
                              ? (rng() % 2 ? DType::Float32 : DType::Float64)
                              : std::array{DType::Float32, DType::Float64, DType::Int64}[rng() % 3];
      const uint64_t seed = rng();
      // (A Partial(avg) target holds the value on every rank: its mean is
      // the value exactly only where n * value is exact.)
      const Tensor full = dtype == DType::Int64 || has_partial(from) || has_partial(to)
                              ? dtensor::testing::int_valued(shape, seed).to(dtype)
                              : Tensor::randn(shape, seed).to(dtype);
      const std::string name = "layer." + std::to_string(k) + ".weight";
      saved[name] = make_dtensor(full, save_mesh, from, seed);
      target[name] = zeros_in(load_mesh, to, shape, dtype);
      fulls.push_back(full);
    }
    const Tensor plain = Tensor::randn({3, 2}, 9);
    saved["plain"] = plain;
    target["plain"] = Tensor();
    saved["step"] = Value(int64_t{iter});
    target["step"] = Value(int64_t{-1});
    const std::string dir = base + "/c" + std::to_string(iter);
    // Checksum blocks from a few bytes (runs straddle many blocks, read
    // partly through scratch) to whole chunks.
    const int64_t blocks[] = {4, 8, 24, 64, 1000, int64_t{4} << 20};
    const SaveOptions options{.world = std::nullopt, .block_bytes = blocks[rng() % 6]};
    save(saved, dir, options);
    load(target, dir);
    for (int k = 0; k < n; ++k) {
      const std::string name = "layer." + std::to_string(k) + ".weight";
      const DTensor& got = std::get<DTensor>(target.at(name));
      if (!takes_part(load_mesh)) continue;
      EXPECT_TRUE(equal(got.full_tensor(), fulls[static_cast<size_t>(k)]))
          << "case " << iter << " block_bytes " << options.block_bytes << " " << name
          << " saved " << to_string(save_mesh.shape()) << " "
          << to_string(std::get<DTensor>(saved.at(name)).placements()) << " loaded "
          << to_string(load_mesh.shape()) << " " << to_string(got.placements()) << " shape "
          << to_string(got.shape());
    }
    EXPECT_TRUE(equal(std::get<Tensor>(target.at("plain")), plain));
    EXPECT_EQ(std::get<int64_t>(std::get<Value>(target.at("step"))), iter);
  }
}

// Each distinct chunk is written once: a replicated tensor is one chunk,
// and the data files hold each element once (plus alignment).
TEST_F(CheckpointTest, ReplicasAreWrittenOnce) {
  const DeviceMesh mesh(world, Shape{std::min<int64_t>(world.size(), 4)});
  const Tensor full = Tensor::randn({64, 8}, 3);
  StateDict state{{"r", distribute_tensor(full, mesh, {Replicate()})},
                  {"s", distribute_tensor(full, mesh, {Shard(0)})},
                  {"plain", full}};
  save(state, base + "/c");
  const Metadata md = read_metadata(base + "/c");
  EXPECT_EQ(md.tensors.at("r").chunks.size(), 1u);
  EXPECT_EQ(md.tensors.at("plain").chunks.size(), 1u);
  EXPECT_EQ(static_cast<int64_t>(md.tensors.at("s").chunks.size()), mesh.size());
  int64_t file_bytes = 0;
  for (const auto& [f, bytes] : md.files) file_bytes += bytes;
  EXPECT_LE(file_bytes, 3 * 64 * 8 * 4 + 64 * 6);
  EXPECT_GE(file_bytes, 3 * 64 * 8 * 4);
  // The chunks of the replicated tensors go to different writers.
  EXPECT_NE(md.tensors.at("r").chunks[0].file, md.tensors.at("plain").chunks[0].file);
}

// The simulated world writes its ranks' files on the thread pool; the
// files hold the same bytes whatever the thread count, metadata.json
// included (and so the bytes MPI's processes write: the test
// mpi.checkpoint.same_files_as_simulated compares the two worlds).
TEST_F(CheckpointTest, TheFilesDoNotDependOnTheThreadCount) {
  struct RestoreThreads {
    int n = num_threads();
    ~RestoreThreads() { set_num_threads(n); }
  } restore;
  const DeviceMesh mesh(world, Shape{world.size()});
  StateDict state;
  for (int k = 0; k < 5; ++k)
    state["w" + std::to_string(k)] = distribute_tensor(
        Tensor::randn({37, 11 + k}, static_cast<uint64_t>(k)), mesh, {Shard(k % 2)});
  state["r"] = distribute_tensor(Tensor::randn({5, 7}, 9), mesh, {Replicate()});
  // Blocks of 100 bytes: every chunk has several checksums.
  const SaveOptions options{.world = std::nullopt, .block_bytes = 100};
  const int counts[] = {1, 3, 8};
  for (int threads : counts) {
    set_num_threads(threads);
    save(state, base + "/t" + std::to_string(threads), options);
  }
  const auto bytes_of = [](const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  on_rank0(world, [&] {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(base + "/t1"))
      names.push_back(e.path().filename().string());
    EXPECT_GE(names.size(), 3u) << "metadata.json and the data files of several ranks";
    for (int threads : counts) {
      const fs::path dir = base + "/t" + std::to_string(threads);
      EXPECT_EQ(static_cast<size_t>(std::distance(fs::directory_iterator(dir), {})), names.size());
      for (const std::string& name : names)
        EXPECT_EQ(bytes_of(dir / name), bytes_of(fs::path(base + "/t1") / name))
            << name << " saved on " << threads << " threads";
    }
  });
}

// Values keep their bits: NaN, infinities, -0.0, the smallest denormal,
// strings with quotes and non-ASCII text, lists.
TEST_F(CheckpointTest, ValuesKeepTheirBits) {
  const DeviceMesh mesh(world, Shape{std::min<int64_t>(world.size(), 2)});
  const std::vector<double> doubles = {std::numeric_limits<double>::quiet_NaN(),
                                       std::numeric_limits<double>::infinity(),
                                       -std::numeric_limits<double>::infinity(),
                                       -0.0,
                                       std::numeric_limits<double>::denorm_min(),
                                       0.1,
                                       1.0 / 3.0};
  StateDict state{{"w", distribute_tensor(Tensor::ones({2}), mesh, {Replicate()})},
                  {"flag", Value(true)},
                  {"step", Value(int64_t{-9007199254740993})},
                  {"lr", Value(3e-4)},
                  {"name", Value(std::string("quote \" back\\slash \xc3\xa9t\xc3\xa9"))},
                  {"shape", Value(std::vector<int64_t>{2, 0, 7})},
                  {"doubles", Value(doubles)}};
  save(state, base + "/c");
  StateDict loaded{{"w", distribute_tensor(Tensor::zeros({2}), mesh, {Shard(0)})},
                   {"flag", Value(false)},
                   {"step", Value(int64_t{0})},
                   {"lr", Value(0.0)},
                   {"name", Value(std::string())},
                   {"shape", Value(std::vector<int64_t>{})},
                   {"doubles", Value(std::vector<double>{})}};
  load(loaded, base + "/c");
  for (const char* key : {"flag", "step", "name", "shape"})
    EXPECT_EQ(std::get<Value>(loaded.at(key)), std::get<Value>(state.at(key))) << key;
  EXPECT_EQ(std::get<double>(std::get<Value>(loaded.at("lr"))), 3e-4);
  const auto& got = std::get<std::vector<double>>(std::get<Value>(loaded.at("doubles")));
  ASSERT_EQ(got.size(), doubles.size());
  for (size_t i = 0; i < doubles.size(); ++i)
    EXPECT_EQ(std::bit_cast<uint64_t>(got[i]), std::bit_cast<uint64_t>(doubles[i])) << i;
}

// A save that fails at any point (on any rank) throws on every rank and
// leaves the previous checkpoint as it was; the next save succeeds.
TEST_F(CheckpointTest, AFailedSaveLeavesThePreviousCheckpoint) {
  const DeviceMesh mesh(world, Shape{std::min<int64_t>(world.size(), 4)});
  const std::string dir = base + "/ckpt";
  const Tensor old_full = Tensor::randn({10, 3}, 1);
  const Tensor new_full = Tensor::randn({10, 3}, 2);
  save({{"w", distribute_tensor(old_full, mesh, {Shard(0)})}, {"step", Value(int64_t{1})}}, dir);
  std::mt19937 rng(5);
  for (const char* point : {"prepare", "write", "written", "metadata", "publish"}) {
    const bool rank0_only = std::string(point) != "write" && std::string(point) != "written";
    const int victim = rank0_only ? 0 : static_cast<int>(rng() % mesh.size());
    ckd::set_save_fault_hook([&](const char* at, int rank) {
      if (std::string(at) == point && rank == victim)
        DT_THROW("injected fault at ", point, " on rank ", rank);
    });
    const std::string msg = dtensor::testing::error_of([&] {
      save({{"w", distribute_tensor(new_full, mesh, {Shard(0)})}, {"step", Value(int64_t{2})}},
           dir);
    });
    ckd::set_save_fault_hook(nullptr);
    // Every rank throws the victim's message.
    EXPECT_NE(msg.find("injected fault at " + std::string(point) + " on rank " +
                       std::to_string(victim) + " (on rank " + std::to_string(victim) + ")"),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("is unchanged"), std::string::npos) << msg;
    StateDict loaded{{"w", zeros_in(mesh, {Replicate()}, {10, 3}, DType::Float32)},
                     {"step", Value(int64_t{0})}};
    load(loaded, dir);
    if (takes_part(mesh)) {
      EXPECT_TRUE(equal(std::get<DTensor>(loaded.at("w")).full_tensor(), old_full)) << point;
    }
    EXPECT_EQ(std::get<int64_t>(std::get<Value>(loaded.at("step"))), 1) << point;
    verify(dir);
  }
  save({{"w", distribute_tensor(new_full, mesh, {Shard(0)})}, {"step", Value(int64_t{2})}}, dir);
  StateDict loaded{{"w", zeros_in(mesh, {Shard(0)}, {10, 3}, DType::Float32)}};
  load(loaded, dir);
  if (takes_part(mesh)) {
    EXPECT_TRUE(equal(std::get<DTensor>(loaded.at("w")).full_tensor(), new_full));
  }
  EXPECT_FALSE(fs::exists(dir + ".partial"));
}

// A first save that never finished is not taken for a checkpoint.
TEST_F(CheckpointTest, AnUnfinishedFirstSaveIsNoCheckpoint) {
  const DeviceMesh mesh(world, Shape{std::min<int64_t>(world.size(), 2)});
  const std::string dir = base + "/never";
  ckd::set_save_fault_hook([](const char* at, int) {
    if (std::string(at) == "publish") DT_THROW("injected");
  });
  EXPECT_THROW(save({{"w", distribute_tensor(Tensor::ones({4}), mesh, {Shard(0)})}}, dir), Error);
  ckd::set_save_fault_hook(nullptr);
  StateDict state{{"w", zeros_in(mesh, {Shard(0)}, {4}, DType::Float32)}};
  expect_error([&] { load(state, dir); }, {dir, "a save into it never finished"});
  expect_error([&] { load(state, base + "/nothing"); }, {base + "/nothing", "does not exist"});
}

// Saving over a directory that is not a checkpoint is refused (it would be
// replaced whole).
TEST_F(CheckpointTest, SaveRefusesToReplaceAnotherDirectory) {
  const DeviceMesh mesh(world, Shape{std::min<int64_t>(world.size(), 2)});
  const std::string dir = base + "/mine";
  on_rank0(world, [&] {
    fs::create_directories(dir);
    std::ofstream(dir + "/notes.txt") << "keep me";
  });
  expect_error([&] { save({{"w", distribute_tensor(Tensor::ones({4}), mesh, {Shard(0)})}}, dir); },
               {dir, "is not a checkpoint"});
  EXPECT_TRUE(fs::exists(dir + "/notes.txt"));
  // A file named metadata.json (of another program) does not make it one.
  on_rank0(world, [&] { std::ofstream(dir + "/metadata.json") << "{\"theme\": \"dark\"}"; });
  expect_error([&] { save({{"w", distribute_tensor(Tensor::ones({4}), mesh, {Shard(0)})}}, dir); },
               {dir, "is not a checkpoint"});
  EXPECT_TRUE(fs::exists(dir + "/notes.txt"));
  EXPECT_TRUE(fs::exists(dir + "/metadata.json"));
}

// Every kind of damage gives its own error, on every rank.
TEST_F(CheckpointTest, DamagedCheckpointsGiveClearErrors) {
  const DeviceMesh mesh(world, Shape{std::min<int64_t>(world.size(), 4)});
  const Tensor full = Tensor::randn({16, 5}, 4);
  // Small blocks, so a flipped byte is found by the rank that reads it.
  const SaveOptions small{.world = std::nullopt, .block_bytes = 64};
  const auto fresh = [&] {
    return StateDict{{"w", zeros_in(mesh, {Replicate()}, {16, 5}, DType::Float32)}};
  };
  // Every rank throws the message of the (lowest) rank that met the damage.
  const auto expect_damage = [&](const std::string& dir, std::vector<std::string> pieces) {
    const std::string msg = dtensor::testing::error_of([&] {
      StateDict s = fresh();
      load(s, dir);
    });
    for (const std::string& p : pieces)
      EXPECT_NE(msg.find(p), std::string::npos) << "'" << msg << "' lacks '" << p << "'";
    EXPECT_THROW(verify(dir), Error) << dir;
  };
  int k = 0;
  const auto saved = [&] {
    const std::string dir = base + "/d" + std::to_string(k++);
    save({{"w", distribute_tensor(full, mesh, {Shard(0)})}}, dir, small);
    return dir;
  };
  // An edit of metadata.json; re-sealed (its checksum recomputed) to reach
  // the checks behind the checksum.
  const auto edit_metadata = [&](const std::string& dir, const std::string& from,
                                 const std::string& to, bool reseal = false) {
    on_rank0(world, [&] {
      std::ifstream in(dir + "/metadata.json");
      std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      const size_t at = text.find(from);
      ASSERT_NE(at, std::string::npos) << from;
      text.replace(at, from.size(), to);
      std::ofstream(dir + "/metadata.json", std::ios::trunc)
          << (reseal ? ckd::reseal_metadata(text) : text);
    });
  };

  std::string dir = saved();
  on_rank0(world, [&] {
    std::fstream f(dir + "/data-0.bin", std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(70);
    const char c = static_cast<char>(f.get());
    f.seekp(70);
    f.put(static_cast<char>(c ^ 0x20));
  });
  expect_damage(dir, {dir + "/data-0.bin", "is corrupted", "tensor 'w'", "checksum"});

  dir = saved();
  on_rank0(world, [&] { fs::resize_file(dir + "/data-0.bin", 10); });
  expect_damage(dir, {dir + "/data-0.bin", "is truncated"});

  dir = saved();
  on_rank0(world, [&] { fs::remove(dir + "/data-0.bin"); });
  expect_damage(dir, {dir + "/data-0.bin", "cannot open"});

  dir = saved();
  edit_metadata(dir, "\"version\": 2", "\"version\": 99");
  expect_damage(dir, {"metadata.json", "format version 99", "newer dtensor"});

  dir = saved();
  edit_metadata(dir, "\"tensors\"", "\"tensors\" ]");
  expect_damage(dir, {"metadata.json", "not valid JSON"});

  dir = saved();
  edit_metadata(dir, "\"byte_size\": ", "\"byte_size\": 1");
  expect_damage(dir, {dir + "/metadata.json is corrupted", "checksum"});

  dir = saved();
  edit_metadata(dir, "\"byte_size\": ", "\"byte_size\": 1", true);
  expect_damage(dir, {"metadata.json", "tensor 'w'", "byte_size"});

  dir = saved();
  edit_metadata(dir, "\"shape\": [\n    16,", "\"shape\": [\n    17,", true);
  expect_damage(dir, {"metadata.json", "tensor 'w'"});

  // Two chunks' places swapped (each chunk's own checksums still hold).
  dir = saved();
  edit_metadata(dir, "\"offsets\": [\n      0,", "\"offsets\": [\n      4,");
  expect_damage(dir, {dir + "/metadata.json is corrupted"});
}

// The state must match the checkpoint: shapes, dtypes, kinds, names
// (strict), before anything is read.
TEST_F(CheckpointTest, AMismatchedStateIsRefused) {
  const DeviceMesh mesh(world, Shape{std::min<int64_t>(world.size(), 2)});
  const std::string dir = base + "/c";
  save({{"w", distribute_tensor(Tensor::randn({6, 2}, 1), mesh, {Shard(0)})},
        {"b", distribute_tensor(Tensor::randn({2}, 2), mesh, {Replicate()})},
        {"step", Value(int64_t{3})}},
       dir);
  StateDict shape{{"w", zeros_in(mesh, {Shard(0)}, {6, 3}, DType::Float32)}};
  expect_error([&] { load(shape, dir); }, {"tensor 'w'", "[6, 2]", "[6, 3]"});
  StateDict dtype{{"w", zeros_in(mesh, {Shard(0)}, {6, 2}, DType::Float64)}};
  expect_error([&] { load(dtype, dir); }, {"tensor 'w'", "float32", "float64"});
  StateDict kind{{"step", zeros_in(mesh, {Shard(0)}, {6, 2}, DType::Float32)}};
  expect_error([&] { load(kind, dir); }, {"'step'", "a value"});
  StateDict missing{{"w", zeros_in(mesh, {Shard(0)}, {6, 2}, DType::Float32)},
                    {"extra", zeros_in(mesh, {Shard(0)}, {6, 2}, DType::Float32)}};
  expect_error([&] { load(missing, dir); }, {"no entry 'extra'", "strict = false"});
  load(missing, dir, {.world = std::nullopt, .strict = false});
  if (takes_part(mesh)) {
    EXPECT_FALSE(equal(std::get<DTensor>(missing.at("w")).full_tensor(), Tensor::zeros({6, 2})));
    EXPECT_TRUE(equal(std::get<DTensor>(missing.at("extra")).full_tensor(), Tensor::zeros({6, 2})));
  }
}

// Loading writes into the live shards: copies of the DTensor (an
// optimizer's, a module's) see the values, and the version counter moves.
TEST_F(CheckpointTest, LoadWritesIntoTheLiveShards) {
  const DeviceMesh mesh(world, Shape{std::min<int64_t>(world.size(), 4)});
  const Tensor full = Tensor::randn({9, 4}, 8);
  save({{"w", distribute_tensor(full, mesh, {Shard(1)})}}, base + "/c");
  DTensor w = zeros_in(mesh, {Shard(0)}, {9, 4}, DType::Float32);
  const DTensor alias = w;
  StateDict state{{"w", w}};
  load(state, base + "/c");
  if (takes_part(mesh)) {
    EXPECT_TRUE(equal(alias.full_tensor(), full));
  }
}

namespace {

// A Linear layer trained by SGD with momentum and dampening (whose first
// momentum step differs from a step with a zero buffer) and a warm-up, in
// two param groups: the bias with its own lr and no weight decay (saved
// as "optim.group1.lr").
struct Training {
  std::unique_ptr<nn::Linear> model;
  std::unique_ptr<optim::SGD> opt;
  std::unique_ptr<optim::LinearLR> sched;

  Training(const DeviceMesh& mesh, bool sharded) {
    model = std::make_unique<nn::Linear>(mesh, 6, 10, true, 42);
    if (sharded) fully_shard(*model, {.mesh_dims = {0}});
    std::vector<std::pair<std::string, DTensor>> params;
    for (auto& [name, p] : model->named_parameters()) params.emplace_back(name, *p);
    std::vector<optim::ParamGroup> groups = optim::weight_decay_groups(params);
    groups.at(1).options["lr"] = 0.05;
    opt = std::make_unique<optim::SGD>(
        groups,
        optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .dampening = 0.3, .weight_decay = 0.01});
    sched = std::make_unique<optim::LinearLR>(*opt, 0.5, 1.0, 4);
  }
  double step(int k) {
    const DeviceMesh& mesh = model->mesh();
    const Placements replicated(static_cast<size_t>(mesh.ndim()), Replicate());
    const DTensor x =
        distribute_tensor(Tensor::randn({8, 6}, 100 + static_cast<uint64_t>(k)), mesh, replicated);
    opt->zero_grad();
    const DTensor y = (*model)(x);
    const DTensor loss = mean(y * y);
    loss.backward();
    opt->step();
    sched->step();
    return loss.full_tensor().item();
  }
  checkpoint::StateDict state() { return get_state_dict(*model, opt.get(), sched.get()); }
};

}  // namespace

// A model, its optimizer and schedule saved replicated mid-training and
// resumed fully sharded on another mesh (and the reverse) continue as the
// uninterrupted training does; a checkpoint taken before the first step
// resumes as a fresh optimizer (no momentum buffer yet).
TEST_F(CheckpointTest, StateDictsResumeTrainingOnAnotherLayout) {
  // Meshes over the whole world: every process trains (a process outside
  // a mesh would have no shard to step).
  const int64_t n = world.size();
  if (n % 2 != 0) GTEST_SKIP() << "needs an even world size";
  const DeviceMesh mesh_a(world, Shape{n});
  const DeviceMesh mesh_b(world, Shape{2, n / 2});
  for (int at : {0, 2}) {
    for (bool a_sharded : {false, true}) {
      Training whole(mesh_a, a_sharded);
      std::vector<double> want;
      for (int k = 0; k < 4; ++k) {
        if (k == at) save(whole.state(), base + "/at" + std::to_string(at));
        want.push_back(whole.step(k));
      }
      Training resumed(mesh_b, !a_sharded);
      checkpoint::StateDict state = resumed.state();
      EXPECT_EQ(state.count("optim.group1.lr"), 1u);
      load(state, base + "/at" + std::to_string(at));
      set_state_dict(state, *resumed.model, resumed.opt.get(), resumed.sched.get());
      EXPECT_EQ(resumed.opt->state(0).has("momentum_buffer"), at > 0) << at;
      EXPECT_EQ(resumed.sched->last_epoch(), at);
      for (int k = at; k < 4; ++k)
        EXPECT_NEAR(resumed.step(k), want[static_cast<size_t>(k)], 1e-6)
            << "resumed at " << at << (a_sharded ? " from sharded" : " from replicated");
      if (takes_part(mesh_b) && takes_part(mesh_a)) {
        EXPECT_LT(max_abs_diff(resumed.model->weight().full_tensor(),
                               whole.model->weight().full_tensor()), 1e-6);
      }
    }
  }
}

// set_state_dict sets the lr from the scheduler's epoch, so a state whose
// epoch and saved lr disagree (an edited epoch) would resume with another
// lr than the saved one: it is refused before anything is applied.
TEST_F(CheckpointTest, SetStateDictRefusesAnEpochThatDisagreesWithTheLr) {
  const DeviceMesh mesh(world, Shape{world.size()});
  Training saved(mesh, false);
  saved.step(0);
  saved.step(1);
  checkpoint::StateDict state = saved.state();
  state["lr_scheduler.last_epoch"] = Value(int64_t{3});
  Training fresh(mesh, false);
  expect_error(
      [&] { set_state_dict(state, *fresh.model, fresh.opt.get(), fresh.sched.get()); },
      {"'optim.lr'", "'lr_scheduler.last_epoch' 3", "disagree"});
  EXPECT_EQ(fresh.sched->last_epoch(), 0);
  EXPECT_EQ(fresh.opt->state(0).step, 0);
  state["lr_scheduler.last_epoch"] = Value(int64_t{2});
  set_state_dict(state, *fresh.model, fresh.opt.get(), fresh.sched.get());
  EXPECT_EQ(fresh.sched->last_epoch(), 2);
  EXPECT_EQ(fresh.opt->lr(0), saved.opt->lr(0));
  EXPECT_EQ(fresh.opt->lr(1), saved.opt->lr(1));
}
