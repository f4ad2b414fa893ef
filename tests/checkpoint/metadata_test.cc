// metadata.json as input: the chunks of a tensor must hold every element
// exactly once at any number of chunks (no size below which alone it is
// checked), and the file's own checksum catches any edit of its content.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "checkpoint/box.h"
#include "checkpoint/metadata.h"
#include "dtensor/checkpoint.h"
#include "dtensor/error.h"
#include "test_util.h"

using namespace dtensor;
using namespace dtensor::checkpoint;
namespace ckd = ::dtensor::checkpoint::detail;
using dtensor::testing::expect_error;

namespace metadata_test {

// A 1-d float32 tensor of n elements saved as n one-element chunks (as from
// n ranks), all in one data file: metadata whose checksum is right.
Metadata one_per_rank(int64_t n) {
  Metadata md;
  md.world_size = static_cast<int>(n);
  md.block_bytes = 64;
  md.files["data-0.bin"] = n * 64;
  TensorInfo t;
  t.shape = Shape{n};
  for (int64_t i = 0; i < n; ++i) {
    ChunkInfo c;
    c.offsets = Shape{i};
    c.sizes = Shape{1};
    c.file = "data-0.bin";
    c.byte_offset = i * 64;
    c.byte_size = 4;
    c.checksums = {0};
    t.chunks.push_back(c);
  }
  md.tensors["w"] = t;
  return md;
}

// How many of `boxes` hold element p.
int count_at(const std::vector<ckd::Box>& boxes, const Shape& p) {
  int n = 0;
  for (const ckd::Box& b : boxes) {
    bool in = b.numel() > 0;
    for (size_t d = 0; d < p.size(); ++d)
      in = in && p[d] >= b.offsets[d] && p[d] < b.offsets[d] + b.sizes[d];
    n += in ? 1 : 0;
  }
  return n;
}

}  // namespace metadata_test

using metadata_test::one_per_rank;

// The case: a [4097] tensor from 4,097 ranks with one chunk moved
// onto its neighbour passed (the pairwise check ran below 4,097 chunks
// only). The checksum is right here: the check behind it is tested.
TEST(CheckpointMetadata, OverlapIsFoundAtAnyChunkCount) {
  for (int64_t n : {int64_t{2}, int64_t{4096}, int64_t{4097}, int64_t{20000}}) {
    Metadata md = one_per_rank(n);
    EXPECT_NO_THROW(ckd::parse_metadata(ckd::to_json(md), "ck/metadata.json")) << n;
    md.tensors["w"].chunks.back().offsets = Shape{n - 2};
    expect_error([&] { ckd::parse_metadata(ckd::to_json(md), "ck/metadata.json"); },
                 {"ck/metadata.json", "tensor 'w'", "element [" + std::to_string(n - 2) + "]",
                  "chunks " + std::to_string(n - 2) + " and " + std::to_string(n - 1),
                  "exactly once"});
  }
}

// The sweep against counting every element, on random near-tilings of
// 1-4 dims: grids of boxes, some moved, grown or shrunk by one.
TEST(CheckpointMetadata, CoverageAgreesWithCountingEveryElement) {
  std::mt19937 rng(38);
  int wrong = 0;
  for (int iter = 0; iter < 400; ++iter) {
    const size_t nd = 1 + rng() % 4;
    Shape shape;
    std::vector<std::vector<int64_t>> cuts(nd);
    for (size_t d = 0; d < nd; ++d) {
      shape.push_back(1 + static_cast<int64_t>(rng() % 6));
      cuts[d] = {0};
      for (int64_t x = 1; x < shape[d]; ++x)
        if (rng() % 2) cuts[d].push_back(x);
      cuts[d].push_back(shape[d]);
    }
    std::vector<ckd::Box> boxes;
    std::vector<size_t> idx(nd, 0);
    for (;;) {
      ckd::Box b{Shape(nd, 0), Shape(nd, 0)};
      for (size_t d = 0; d < nd; ++d) {
        b.offsets[d] = cuts[d][idx[d]];
        b.sizes[d] = cuts[d][idx[d] + 1] - cuts[d][idx[d]];
      }
      boxes.push_back(b);
      size_t d = nd;
      while (d > 0 && ++idx[d - 1] + 1 == cuts[d - 1].size()) idx[--d] = 0;
      if (d == 0) break;
    }
    // Damage some: move a box by one, grow or shrink it (kept inside).
    const int damage = static_cast<int>(rng() % 3);
    for (int k = 0; k < damage; ++k) {
      ckd::Box& b = boxes[rng() % boxes.size()];
      const size_t d = rng() % nd;
      switch (rng() % 3) {
        case 0:
          if (b.offsets[d] > 0) --b.offsets[d];
          break;
        case 1:
          if (b.offsets[d] + b.sizes[d] < shape[d]) ++b.sizes[d];
          break;
        default:
          if (b.sizes[d] > 0) --b.sizes[d];
      }
    }
    const ckd::Box whole{Shape(nd, 0), shape};
    // Every element, counted.
    bool tiles = true;
    std::vector<int64_t> p(nd, 0);
    for (int64_t e = 0; e < whole.numel(); ++e) {
      int64_t rest = e;
      for (size_t d = nd; d-- > 0;) {
        p[d] = rest % shape[d];
        rest /= shape[d];
      }
      tiles = tiles && metadata_test::count_at(boxes, Shape(p)) == 1;
    }
    const std::optional<Shape> bad = ckd::miscovered_element(boxes, whole);
    EXPECT_EQ(!bad.has_value(), tiles) << "iteration " << iter;
    if (bad) {
      EXPECT_NE(metadata_test::count_at(boxes, *bad), 1) << "iteration " << iter;
    }
    wrong += tiles ? 0 : 1;
  }
  EXPECT_GT(wrong, 100);  // the damage made many non-tilings
}

// Any edit of metadata.json's content is refused, naming the file, before
// anything in it is used; a layout-only change (whitespace) is not one.
TEST(CheckpointMetadata, AnEditedMetadataIsRefused) {
  Metadata md = one_per_rank(4);
  md.values["train.step"] = Value(int64_t{100});
  md.values["lr_scheduler.last_epoch"] = Value(int64_t{100});
  const std::string text = ckd::to_json(md);
  EXPECT_NE(text.find("\"checksum\": \"xxh3-64:"), std::string::npos) << text;
  EXPECT_NO_THROW(ckd::parse_metadata(text, "ck/metadata.json"));
  const auto edited = [&](const std::string& from, const std::string& to) {
    std::string t = text;
    const size_t at = t.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) t.replace(at, from.size(), to);
    return t;
  };
  for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
           {"\"value\": 100", "\"value\": 101"},         // a step count
           {"\"value\": 100", "\"value\": 99"},          // the schedule's epoch
           {"\"offsets\": [\n      0", "\"offsets\": [\n      1"},
           {"\"byte_offset\": 64", "\"byte_offset\": 128"},
           {"\"version\": 2", "\"version\": 1"},         // the checksum is checked whenever present
           {"\"world_size\": 4", "\"world_size\": 5"}}) {
    expect_error([&] { ckd::parse_metadata(edited(from, to), "ck/metadata.json"); },
                 {"ck/metadata.json is corrupted", "checksum", "changed after dtensor wrote it"});
  }
  // Swapped offsets of two equal chunks (each chunk's data checksums still match).
  Metadata swapped = md;
  std::swap(swapped.tensors["w"].chunks[0].byte_offset, swapped.tensors["w"].chunks[1].byte_offset);
  std::string t = ckd::to_json(swapped);
  const std::string sum_key = "\"checksum\": \"";
  const size_t at = t.rfind(sum_key) + sum_key.size();
  t.replace(at, 24, text.substr(text.rfind(sum_key) + sum_key.size(), 24));
  expect_error([&] { ckd::parse_metadata(t, "ck/metadata.json"); },
               {"ck/metadata.json is corrupted"});
  // Whitespace is layout, not content.
  std::string spaced = text;
  for (size_t p = 0; (p = spaced.find(",\n", p)) != std::string::npos; p += 3)
    spaced.replace(p, 2, " ,\n");
  EXPECT_NO_THROW(ckd::parse_metadata(spaced, "ck/metadata.json"));
}

// Version 2 must record its checksum; version 1 (before checksums) loads as
// it did.
TEST(CheckpointMetadata, OldVersionsLoadAndNewOnesNeedTheirChecksum) {
  const std::string text = ckd::to_json(one_per_rank(2));
  std::string bare = text;
  const size_t at = bare.find(",\n \"checksum\"");
  ASSERT_NE(at, std::string::npos) << text;
  bare.erase(at, bare.find('\n', at + 2) - at);
  expect_error([&] { ckd::parse_metadata(bare, "ck/metadata.json"); },
               {"ck/metadata.json", "checksum: missing", "format version 2"});
  const size_t v = bare.find("\"version\": 2");
  ASSERT_NE(v, std::string::npos);
  bare.replace(v, 12, "\"version\": 1");
  EXPECT_EQ(ckd::parse_metadata(bare, "ck/metadata.json").version, 1);
}

// save() removes and replaces only what it writes.
TEST(CheckpointMetadata, CheckpointFileNames) {
  for (const char* name : {"metadata.json", "data-0.bin", "data-17.bin", "data-4096.bin"})
    EXPECT_TRUE(ckd::is_checkpoint_file_name(name)) << name;
  for (const char* name : {"notes.txt", "data-.bin", "data-01.bin", "data-1.bin.bak",
                           "data--1.bin", "metadata.json~", "data-99999999999.bin"})
    EXPECT_FALSE(ckd::is_checkpoint_file_name(name)) << name;
  EXPECT_TRUE(ckd::has_checkpoint_format(ckd::to_json(one_per_rank(1))));
  for (const char* text : {"", "{}", "[]", "{\"format\": \"other\"}", "not json"})
    EXPECT_FALSE(ckd::has_checkpoint_format(text)) << text;
}
