// The files of a checkpoint as input: a FIFO or any other non-regular file
// where a checkpoint file should be is refused without blocking; what a
// reader allocates is bounded by the data present (declared sizes are
// checked against the real files first); save() replaces and removes only
// a dtensor checkpoint and only the files dtensor writes.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "checkpoint/metadata.h"
#include "dtensor/checkpoint.h"
#include "dtensor/dtensor.h"
#include "test_util.h"

using namespace dtensor;
using namespace dtensor::checkpoint;
namespace fs = std::filesystem;
namespace ckd = ::dtensor::checkpoint::detail;
using dtensor::testing::expect_error;

namespace files_test {

// The process's peak resident memory so far, in bytes: what a reader
// touched at most (scratch is zero-filled when allocated, so a 1 GiB
// scratch block shows here).
int64_t peak_rss() {
  struct rusage u;
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<int64_t>(u.ru_maxrss) * 1024;
}

constexpr int64_t kMiB = int64_t{1} << 20;

}  // namespace files_test

namespace files_test {

class CheckpointFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    base = (fs::path(::testing::TempDir()) / (std::string("dtensor_ckfiles_") + info->name()))
               .string();
    fs::remove_all(base);
    fs::create_directories(base);
  }
  void TearDown() override { fs::remove_all(base); }

  // A checkpoint of a [10, 3] float32 DTensor on 2 ranks, a plain tensor
  // and a value.
  std::string saved(const std::string& name, int64_t block_bytes = 64) {
    const std::string dir = base + "/" + name;
    save({{"w", distribute_tensor(full, mesh, {Shard(0)})},
          {"p", Tensor::arange(8)},
          {"step", Value(int64_t{7})}},
         dir, {.world = std::nullopt, .block_bytes = block_bytes});
    return dir;
  }
  StateDict target() {
    return {{"w", distribute_tensor(Tensor::zeros({10, 3}), mesh, {Replicate()})},
            {"p", Tensor()},
            {"step", Value(int64_t{0})}};
  }

  World world = World::simulated(2);
  DeviceMesh mesh{world, Shape{2}};
  Tensor full = Tensor::randn({10, 3}, 5);
  std::string base;
};

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace files_test

using files_test::CheckpointFiles;

// A FIFO named metadata.json or data-N.bin made inspect and load wait for a
// writer forever; any non-regular file is now refused by fstat, naming it.
TEST_F(CheckpointFiles, NonRegularFilesAreRefusedWithoutBlocking) {
  for (const char* name : {"metadata.json", "data-0.bin", "data-1.bin"}) {
    for (const char* kind : {"a FIFO", "a directory"}) {
      const std::string dir = saved(std::string("f_") + name + "_" + kind[2]);
      const std::string path = dir + "/" + name;
      fs::remove(path);
      if (std::string(kind) == "a FIFO")
        ASSERT_EQ(::mkfifo(path.c_str(), 0644), 0);
      else
        fs::create_directory(path);
      StateDict s = target();
      expect_error([&] { load(s, dir); }, {path, "is " + std::string(kind), "not a regular file"});
      expect_error([&] { verify(dir); }, {path, "not a regular file"});
    }
  }
}

// block_bytes of 2^30 for a tensor of a few hundred bytes made verify (and
// inspect) allocate 1 GiB of scratch: a reader allocates at most what the
// chunk holds.
TEST_F(CheckpointFiles, ScratchIsBoundedByTheDataPresent) {
  const std::string dir = saved("big_blocks", int64_t{1} << 30);
  EXPECT_EQ(read_metadata(dir).block_bytes, int64_t{1} << 30);
  const int64_t before = files_test::peak_rss();
  verify(dir);
  StateDict s = target();
  // A Shard target needs a block of scratch (its rows do not line up with
  // the chunks' blocks).
  s["w"] = distribute_tensor(Tensor::zeros({10, 3}), mesh, {Shard(1)});
  load(s, dir);
  EXPECT_TRUE(equal(std::get<DTensor>(s.at("w")).full_tensor(), full));
  EXPECT_LT(files_test::peak_rss() - before, 256 * files_test::kMiB);
}

// Sizes a metadata.json declares (re-sealed, as if written so) are checked
// against the real files before anything is allocated: a plain tensor of
// 2^40 elements in a 2^43-byte "file" is refused, not allocated.
TEST_F(CheckpointFiles, DeclaredSizesAreCheckedAgainstTheFiles) {
  const std::string dir = saved("absurd");
  const std::string path = dir + "/metadata.json";
  Metadata md = read_metadata(dir);
  const std::string file = md.tensors.at("p").chunks.at(0).file;
  const int64_t n = int64_t{1} << 40;
  md.files[file] = n * 8 + 4096;
  TensorInfo& p = md.tensors.at("p");
  p.shape = Shape{n};
  p.chunks.at(0).sizes = Shape{n};
  p.chunks.at(0).byte_size = n * 8;
  // (Blocks of 2^30 bytes keep the checksum lists short.)
  md.block_bytes = int64_t{1} << 30;
  for (auto& [name, t] : md.tensors)
    for (ChunkInfo& c : t.chunks)
      c.checksums.assign(static_cast<size_t>((c.byte_size + md.block_bytes - 1) / md.block_bytes),
                         0);
  std::ofstream(path, std::ios::trunc) << ckd::to_json(md);
  StateDict s = target();
  const int64_t before = files_test::peak_rss();
  expect_error([&] { load(s, dir); }, {dir + "/" + file, "is truncated", "metadata.json records"});
  expect_error([&] { verify(dir); }, {dir + "/" + file, "is truncated"});
  EXPECT_LT(files_test::peak_rss() - before, 256 * files_test::kMiB);
}

// A data file longer than recorded is not the file that was written.
TEST_F(CheckpointFiles, AFileOfAnotherSizeIsRefused) {
  const std::string dir = saved("longer");
  std::ofstream(dir + "/data-0.bin", std::ios::app) << "extra";
  StateDict s = target();
  expect_error([&] { load(s, dir); }, {dir + "/data-0.bin", "bytes, metadata.json records"});
}

// A directory holding a file named metadata.json (any content) beside the
// user's files was taken for a checkpoint and deleted by a save into it.
// Only a dtensor checkpoint (by its parsed format) of only dtensor's files
// is replaced; DIR.partial too is removed only when it holds nothing else.
TEST_F(CheckpointFiles, SaveReplacesOnlyCheckpointsAndRemovesOnlyItsFiles) {
  const auto save_into = [&](const std::string& dir) {
    save({{"w", distribute_tensor(full, mesh, {Shard(0)})}}, dir);
  };
  const std::string mine = base + "/mine";
  fs::create_directories(mine);
  std::ofstream(mine + "/metadata.json") << "{\"my\": \"settings\"}";
  std::ofstream(mine + "/notes.txt") << "keep me";
  expect_error([&] { save_into(mine); }, {mine, "is not a checkpoint"});
  EXPECT_EQ(files_test::read_text(mine + "/notes.txt"), "keep me");
  fs::remove(mine + "/notes.txt");
  expect_error([&] { save_into(mine); }, {mine, "is not a checkpoint", "format"});
  EXPECT_EQ(files_test::read_text(mine + "/metadata.json"), "{\"my\": \"settings\"}");

  // A real checkpoint with a user's file beside it: the save would delete it.
  const std::string ck = saved("ck");
  std::ofstream(ck + "/notes.txt") << "keep me";
  expect_error([&] { save_into(ck); }, {ck, "notes.txt", "not a file dtensor writes"});
  EXPECT_EQ(files_test::read_text(ck + "/notes.txt"), "keep me");
  fs::remove(ck + "/notes.txt");
  save_into(ck);  // a checkpoint alone is replaced
  StateDict s{{"w", distribute_tensor(Tensor::zeros({10, 3}), mesh, {Replicate()})}};
  load(s, ck);
  EXPECT_TRUE(equal(std::get<DTensor>(s.at("w")).full_tensor(), full));

  // A user's directory named like DIR.partial is not removed.
  const std::string other = base + "/other";
  fs::create_directories(other + ".partial");
  std::ofstream(other + ".partial/notes.txt") << "keep me";
  expect_error([&] { save_into(other); }, {other + ".partial", "notes.txt"});
  EXPECT_EQ(files_test::read_text(other + ".partial/notes.txt"), "keep me");

  // Not a directory: refused.
  std::ofstream(base + "/afile") << "x";
  expect_error([&] { save_into(base + "/afile"); }, {"afile", "not a directory"});
  EXPECT_EQ(files_test::read_text(base + "/afile"), "x");
}

// Writing opens without blocking too: a FIFO where export_safetensors
// makes its PATH.partial is refused rather than waited on for a reader.
TEST_F(CheckpointFiles, AFifoInTheWayOfAWriteIsRefused) {
  const std::string path = base + "/model.safetensors";
  ASSERT_EQ(::mkfifo((path + ".partial").c_str(), 0644), 0);
  expect_error(
      [&] { export_safetensors({{"w", distribute_tensor(full, mesh, {Shard(0)})}}, path); },
      {path + ".partial", "is a FIFO, not a regular file"});
  EXPECT_FALSE(fs::exists(path));
}
