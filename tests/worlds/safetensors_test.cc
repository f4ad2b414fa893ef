// checkpoint::export_safetensors / import_safetensors on every world (see
// world_util.h): random round trips between layouts (Partial sources and
// targets, shard orders, uneven and empty shards, meshes on random ranks),
// the file checked byte by byte as safetensors, a hand-built file read
// back, and every kind of bad file or state failing on every rank alike.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <numeric>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "checkpoint/common.h"
#include "dtensor/checkpoint.h"
#include "dtensor/dtensor.h"
#include "layout_util.h"
#include "test_util.h"
#include "worlds/shared_files.h"
#include "worlds/world_util.h"

using namespace dtensor;
using dtensor::checkpoint::Entry;
using dtensor::checkpoint::StateDict;
using dtensor::checkpoint::Value;
using dtensor::testing::expect_error;
using dtensor::testing::same_bits;

namespace {

namespace ckd = dtensor::checkpoint::detail;

using dtensor::testing::barrier;

std::string shared_path(const World& world, const std::string& stem) {
  return dtensor::testing::shared_temp_path(world, "dtensor_safetensors_" + stem, ".safetensors");
}

// A test's file (and its PATH.partial): removed by the process holding
// rank 0 when the test ends, also when it fails midway; finish() first
// waits until every rank is done with it.
class SharedFile {
 public:
  SharedFile(const World& world, const std::string& stem)
      : world_(world), path_(shared_path(world, stem)) {}
  SharedFile(const SharedFile&) = delete;
  SharedFile& operator=(const SharedFile&) = delete;
  ~SharedFile() {
    if (!world_.holds(0)) return;
    std::error_code ec;
    std::filesystem::remove(path_, ec);
    std::filesystem::remove(path_ + ".partial", ec);
  }
  const std::string& path() const { return path_; }
  void finish() { barrier(world_); }

 private:
  World world_;
  std::string path_;
};

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The process holding rank 0 writes `bytes` to path; then every rank sees it.
void write_shared(const World& world, const std::string& path, const std::string& bytes) {
  barrier(world);
  if (world.holds(0)) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  barrier(world);
}

std::string le64(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[static_cast<size_t>(i)] = static_cast<char>(n >> (8 * i));
  return s;
}

// A safetensors file of the given header text (no padding) and data.
std::string st_file(const std::string& header, const std::string& data) {
  return le64(header.size()) + header + data;
}

// A tensor's row-major bytes.
std::string bytes_of(const Tensor& t) {
  const Tensor c = t.contiguous();
  if (c.numel() == 0) return {};
  return std::string(static_cast<const char*>(c.raw_data()), c.nbytes());
}


// The part of `full` a box covers.
Tensor slice_box(const Tensor& full, const ckd::Box& box) {
  Tensor t = full;
  for (size_t d = 0; d < box.sizes.size(); ++d)
    t = t.narrow(static_cast<int64_t>(d), box.offsets[d], box.sizes[d]);
  return t.contiguous();
}

// Whether a Partial(sum) target holds zeros on `rank` (not coordinate 0 of
// some sum-partial mesh dim).
bool sum_zero_rank(const DTensor& d, int rank) {
  const DimVector c = *d.mesh().coordinate(rank);
  for (size_t i = 0; i < d.placements().size(); ++i)
    if (d.placements()[i].is_partial() && d.placements()[i].reduce_op() == ReduceOp::Sum &&
        c[i] != 0)
      return true;
  return false;
}

// A mesh of 1-3 dims over randomly chosen ranks of the world.
DeviceMesh random_mesh_on(const World& world, std::mt19937& rng) {
  Shape ms;
  do {
    ms = dtensor::testing::random_mesh(rng, world.size());
  } while (ms.size() > 3);
  std::vector<int> ranks(static_cast<size_t>(world.size()));
  std::iota(ranks.begin(), ranks.end(), 0);
  std::shuffle(ranks.begin(), ranks.end(), rng);
  ranks.resize(static_cast<size_t>(ms.product()));
  return DeviceMesh(world, ms, ranks);
}

// Integer-valued data of the dtype (exact under every reduction the
// layouts do: Partial sums, averages of equal copies).
Tensor exact_values(const Shape& shape, DType dtype, uint64_t seed) {
  if (dtype == DType::Int64) return Tensor::randint(-1000, 1000, shape, seed);
  return dtensor::testing::small_valued(shape, seed).to(dtype);
}

// make_dtensor builds Partial pieces with float arithmetic: an int64
// source gets Replicate instead.
Placements fit_partials(Placements p, DType dtype) {
  for (Placement& q : p)
    if (q.is_partial() && dtype == DType::Int64) q = Replicate();
  return p;
}

// A DTensor laid out as (mesh, placements) whose every shard holds its box
// of `junk` (whatever the Partial kinds): a target to import into. An
// int64 tensor cannot be Partial(avg): it gets Partial(sum).
DTensor target_like(const Tensor& junk, const DeviceMesh& mesh, Placements pl) {
  for (Placement& q : pl)
    if (q.is_partial() && q.reduce_op() == ReduceOp::Avg && junk.dtype() == DType::Int64)
      q = Partial(ReduceOp::Sum);
  Placements base = pl;
  for (Placement& q : base)
    if (q.is_partial()) q = Replicate();
  const DTensor d = distribute_tensor(junk, mesh, base);
  return DTensor(DTensorSpec(mesh, pl, junk.shape(), junk.dtype()), d.local());
}

// Every held shard of `d` is `full`'s part for it (zeros on the non-first
// ranks of a Partial(sum)), bit for bit; and full_tensor() is `full`.
void expect_holds(const DTensor& d, const Tensor& full, const std::string& where) {
  if (!dtensor::testing::takes_part(d.mesh())) return;
  for (const auto& [rank, shard] : d.local().shards()) {
    const ckd::Box box = ckd::box_of(d.spec(), rank);
    const Tensor want = sum_zero_rank(d, rank) ? Tensor::zeros(box.sizes, full.dtype())
                                               : slice_box(full, box);
    EXPECT_TRUE(same_bits(shard, want)) << where << " rank " << rank;
  }
  EXPECT_TRUE(same_bits(d.full_tensor(), full)) << where;
}

class SafetensorsTest : public ::testing::Test {
 protected:
  World world = dtensor::testing::test_world();
};

}  // namespace

// Random states (1-3 DTensors on random meshes of 1-3 dims over random
// ranks, Partial sources of every kind, shard orders, uneven and empty
// shards, float32/float64/int64; a plain tensor, sometimes empty; an int
// and a float value) exported to one file, replacing the previous case's,
// then imported into other random layouts (Partial targets of every kind
// too): every shard gets exactly its part.
TEST_F(SafetensorsTest, RandomRoundTripsReshard) {
  std::mt19937 rng(4711);
  SharedFile file(world, "roundtrip");
  const std::string& path = file.path();
  const int cases = dtensor::testing::property_cases(60);
  const DType dtypes[] = {DType::Float32, DType::Float64, DType::Int64};
  for (int iter = 0; iter < cases; ++iter) {
    StateDict out, in;
    std::vector<std::pair<std::string, Tensor>> fulls;
    const int n = 1 + static_cast<int>(rng() % 3);
    std::string where = "case " + std::to_string(iter) + ":";
    for (int k = 0; k < n; ++k) {
      const DeviceMesh from_mesh = random_mesh_on(world, rng);
      const Shape shape = dtensor::testing::random_shape_for(rng, from_mesh.size());
      const auto nd = static_cast<int64_t>(shape.size());
      const DType dtype = dtypes[rng() % 3];
      Placements from = dtensor::testing::random_placement_pair(rng, from_mesh.ndim(), nd).first;
      from = fit_partials(dtensor::testing::with_random_orders(rng, from), dtype);
      const DeviceMesh to_mesh = random_mesh_on(world, rng);
      Placements to = dtensor::testing::random_placement_pair(rng, to_mesh.ndim(), nd).first;
      to = dtensor::testing::with_random_orders(rng, to);
      const std::string name = "layers." + std::to_string(k) + ".w";
      where += " " + name + " " + to_string(shape) + " " + dtype_name(dtype) + " " +
               from_mesh.to_string() + " " + to_string(from) + " -> " + to_mesh.to_string() +
               " " + to_string(to) + ";";
      const Tensor full = exact_values(shape, dtype, 1000 * iter + k);
      const Tensor other = exact_values(shape, dtype, 1000 * iter + k + 500);
      out[name] = dtensor::testing::make_dtensor(full, from_mesh, from, iter);
      in[name] = target_like(other, to_mesh, to);
      fulls.emplace_back(name, full);
    }
    const Tensor plain = exact_values({static_cast<int64_t>(rng() % 5), 3}, DType::Float64, iter);
    out["plain"] = plain;
    in["plain"] = Tensor();  // undefined: replaced
    out["step"] = Value(int64_t{iter});
    in["step"] = Value(int64_t{-1});
    out["lr"] = Value(0.1 * iter);
    in["lr"] = Value(0.0);

    checkpoint::export_safetensors(out, path);
    checkpoint::import_safetensors(in, path);

    for (const auto& [name, full] : fulls)
      expect_holds(std::get<DTensor>(in.at(name)), full, where + " (" + name + ")");
    EXPECT_TRUE(same_bits(std::get<Tensor>(in.at("plain")), plain)) << where;
    EXPECT_EQ(std::get<int64_t>(std::get<Value>(in.at("step"))), iter);
    EXPECT_EQ(std::get<double>(std::get<Value>(in.at("lr"))), 0.1 * iter);
  }
  file.finish();
}

// Raw bits survive: NaNs with payloads, -0, infinities, subnormals, int64
// extremes, bools; values of every type through "__metadata__".
TEST_F(SafetensorsTest, BitsAndValuesSurvive) {
  if (world.size() < 4) GTEST_SKIP();
  SharedFile file(world, "bits");
  const std::string& path = file.path();
  const DeviceMesh mesh(world, Shape{2, 2});
  const DeviceMesh mesh2(world, Shape{4});
  uint64_t payload_nan = 0x7ff0000000000123ULL;
  double nan_bits;
  std::memcpy(&nan_bits, &payload_nan, sizeof nan_bits);
  const std::vector<double> f64 = {nan_bits,
                                   -0.0,
                                   std::numeric_limits<double>::infinity(),
                                   -std::numeric_limits<double>::infinity(),
                                   std::numeric_limits<double>::denorm_min(),
                                   std::numeric_limits<double>::max(),
                                   0.1,
                                   -1e-300,
                                   3.0,
                                   -std::numeric_limits<double>::quiet_NaN()};
  const Tensor a = Tensor::from_vector(f64, Shape{2, 5});
  const Tensor b = Tensor::from_vector(
      std::vector<int64_t>{std::numeric_limits<int64_t>::min(), -1, 0, 1,
                           std::numeric_limits<int64_t>::max(), 42, 7},
      Shape{7});
  const Tensor c = Tensor::from_vector(std::vector<bool>{true, false, false, true, true, false},
                                       Shape{3, 2});
  const Tensor d = Tensor::from_vector(std::vector<float>{-0.0f, 1.5f, 1e-45f, -3e38f}, Shape{4});
  StateDict out;
  out["a"] = distribute_tensor(a, mesh, parse_placements("S(1),S(0)"));
  out["b"] = distribute_tensor(b, mesh2, parse_placements("S(0)"));
  out["c"] = distribute_tensor(c, mesh, parse_placements("R,S(0)"));
  out["d"] = d;
  const std::vector<double> dv = {0.1, -0.0, std::numeric_limits<double>::infinity(),
                                  std::numeric_limits<double>::quiet_NaN(), 1e-310};
  out["v.bool"] = Value(true);
  out["v.int"] = Value(std::numeric_limits<int64_t>::min());
  out["v.double"] = Value(-0.0);
  out["v.double_max"] = Value(std::numeric_limits<double>::max());
  out["v.string"] = Value(std::string("pt \"quoted\" \xc3\xa9"));
  out["v.ints"] = Value(std::vector<int64_t>{1, -2, std::numeric_limits<int64_t>::max()});
  out["v.doubles"] = Value(dv);
  checkpoint::export_safetensors(out, path);

  StateDict in;
  in["a"] = distribute_tensor(Tensor::zeros({2, 5}, DType::Float64), mesh2,
                              parse_placements("S(1)"));
  in["b"] = distribute_tensor(Tensor::zeros({7}, DType::Int64), mesh, parse_placements("S(0),S(0)"));
  in["c"] = distribute_tensor(Tensor::zeros({3, 2}, DType::Bool), mesh2, parse_placements("S(1)"));
  in["d"] = Tensor::zeros({4});  // defined: filled in place
  const Tensor d_alias = std::get<Tensor>(in["d"]);
  in["v.bool"] = Value(false);
  in["v.int"] = Value(int64_t{0});
  in["v.double"] = Value(1.0);
  in["v.double_max"] = Value(1.0);
  in["v.string"] = Value(std::string());
  in["v.ints"] = Value(std::vector<int64_t>{});
  in["v.doubles"] = Value(std::vector<double>{});
  checkpoint::import_safetensors(in, path);

  expect_holds(std::get<DTensor>(in["a"]), a, "a");
  expect_holds(std::get<DTensor>(in["b"]), b, "b");
  expect_holds(std::get<DTensor>(in["c"]), c, "c");
  EXPECT_TRUE(same_bits(d_alias, d));
  EXPECT_TRUE(same_bits(std::get<Tensor>(in["d"]), d));
  const auto value = [&](const char* name) { return std::get<Value>(in.at(name)); };
  EXPECT_EQ(std::get<bool>(value("v.bool")), true);
  EXPECT_EQ(std::get<int64_t>(value("v.int")), std::numeric_limits<int64_t>::min());
  const double z = std::get<double>(value("v.double"));
  EXPECT_TRUE(z == 0.0 && std::signbit(z));
  EXPECT_EQ(std::get<double>(value("v.double_max")), std::numeric_limits<double>::max());
  EXPECT_EQ(std::get<std::string>(value("v.string")), "pt \"quoted\" \xc3\xa9");
  EXPECT_EQ(std::get<std::vector<int64_t>>(value("v.ints")),
            (std::vector<int64_t>{1, -2, std::numeric_limits<int64_t>::max()}));
  const auto got = std::get<std::vector<double>>(value("v.doubles"));
  ASSERT_EQ(got.size(), dv.size());
  for (size_t i = 0; i < dv.size(); ++i) {
    if (std::isnan(dv[i])) {
      EXPECT_TRUE(std::isnan(got[i]));
    } else {
      EXPECT_EQ(std::memcmp(&got[i], &dv[i], sizeof(double)), 0) << i;
    }
  }
  file.finish();
}

// The exported file is safetensors, read by hand: the little-endian length,
// a JSON header padded to 8 bytes, "__metadata__" of strings, the tensors
// in name order with contiguous data_offsets up to the end of the file,
// each tensor's bytes its row-major full tensor. A second export replaces
// the file and leaves no PATH.partial.
TEST_F(SafetensorsTest, FileIsSafetensors) {
  if (world.size() < 4) GTEST_SKIP();
  SharedFile file(world, "format");
  const std::string& path = file.path();
  const DeviceMesh mesh(world, Shape{2, 2});
  const Tensor w = exact_values({5, 3}, DType::Float32, 1);
  const Tensor e = exact_values({0, 4}, DType::Float32, 2);
  const Tensor s = exact_values({6}, DType::Int64, 3);
  const Tensor p = exact_values({2, 2}, DType::Float64, 4);
  const Tensor sc = Tensor::scalar(2.5, DType::Float64);
  StateDict state;
  state["z.weight"] = dtensor::testing::make_dtensor(w, mesh, parse_placements("S(1),P(sum)"), 5);
  state["empty"] = distribute_tensor(e, mesh, parse_placements("S(0),S(1)"));
  state["b.steps"] = distribute_tensor(s, mesh, parse_placements("S(0)[1],S(0)[0]"));
  state["a.plain"] = p;
  state["scalar"] = distribute_tensor(sc, mesh, parse_placements("R,R"));
  state["format"] = Value(std::string("pt"));
  state["step"] = Value(int64_t{12});
  state["flags"] = Value(std::vector<int64_t>{1, 2});
  checkpoint::export_safetensors(state, path);
  state["step"] = Value(int64_t{13});
  checkpoint::export_safetensors(state, path);  // replaces it
  barrier(world);
  EXPECT_FALSE(std::filesystem::exists(path + ".partial"));

  const std::string bytes = read_bytes(path);
  ASSERT_GE(bytes.size(), 8u);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[static_cast<size_t>(i)]);
  ASSERT_LE(8 + n, bytes.size());
  EXPECT_EQ((8 + n) % 8, 0u);
  const std::string header = bytes.substr(8, n);
  EXPECT_EQ(header.front(), '{');
  const auto j = nlohmann::ordered_json::parse(header);
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j["__metadata__"],
            nlohmann::ordered_json({{"flags", "[1,2]"}, {"format", "pt"}, {"step", "13"}}));
  const std::vector<std::pair<std::string, Tensor>> want = {
      {"a.plain", p}, {"b.steps", s}, {"empty", e}, {"scalar", sc}, {"z.weight", w}};
  const std::map<DType, std::string> st = {{DType::Float32, "F32"},
                                           {DType::Float64, "F64"},
                                           {DType::Int64, "I64"}};
  std::vector<std::string> keys;
  for (const auto& [k, v] : j.items())
    if (k != "__metadata__") keys.push_back(k);
  ASSERT_EQ(keys.size(), want.size());
  uint64_t at = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const auto& [name, full] = want[i];
    EXPECT_EQ(keys[i], name);
    const auto& t = j[name];
    EXPECT_EQ(t["dtype"], st.at(full.dtype())) << name;
    EXPECT_EQ(t["shape"].get<std::vector<int64_t>>(), full.shape().vec()) << name;
    const auto off = t["data_offsets"].get<std::vector<uint64_t>>();
    ASSERT_EQ(off.size(), 2u);
    EXPECT_EQ(off[0], at) << name;
    EXPECT_EQ(off[1] - off[0], full.nbytes()) << name;
    EXPECT_EQ(bytes.substr(8 + n + off[0], off[1] - off[0]), bytes_of(full)) << name;
    at = off[1];
  }
  EXPECT_EQ(8 + n + at, bytes.size());
  file.finish();
}

// The bytes the reference writer (huggingface/safetensors) gives for the
// same tensors and metadata: compact JSON, "dtype", "shape",
// "data_offsets" in that order, spaces up to 8-byte alignment, an empty
// state as "{}" and six spaces.
TEST_F(SafetensorsTest, ExportMatchesTheReferenceWritersBytes) {
  if (world.size() < 4) GTEST_SKIP();
  SharedFile file(world, "reference");
  const std::string& path = file.path();
  const DeviceMesh mesh(world, Shape{2, 2});
  StateDict state;
  state["attn.0"] = distribute_tensor(Tensor::arange(6).reshape({1, 2, 3}).to(DType::Float32),
                                      mesh, parse_placements("S(2),S(1)"));
  checkpoint::export_safetensors(state, path);
  barrier(world);
  std::string data;
  for (const char* f : {"\0\0\0\0", "\0\0\x80\x3f", "\0\0\0\x40", "\0\0\x40\x40",
                        "\0\0\x80\x40", "\0\0\xa0\x40"})
    data += std::string(f, 4);
  EXPECT_EQ(read_bytes(path),
            st_file(R"({"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}})", data));

  checkpoint::SaveOptions opts;
  opts.world = world;
  StateDict meta;
  meta["framework"] = Value(std::string("pt"));
  checkpoint::export_safetensors(meta, path, opts);
  barrier(world);
  EXPECT_EQ(read_bytes(path), st_file(R"({"__metadata__":{"framework":"pt"}}     )", ""));
  checkpoint::export_safetensors(StateDict{}, path, opts);
  barrier(world);
  EXPECT_EQ(read_bytes(path), st_file("{}      ", ""));
  file.finish();
}

// A file built by hand (tensors not in name order in the data, a dtype
// dtensor lacks on a tensor the state does not ask for, a Hugging Face
// "format" entry) reads to the values it spells.
TEST_F(SafetensorsTest, HandBuiltFileReads) {
  if (world.size() < 4) GTEST_SKIP();
  SharedFile file(world, "known");
  const std::string& path = file.path();
  const std::string header =
      R"({"__metadata__":{"format":"pt","step":"7","lr":"0.25","ids":"[3,-4]"},)"
      R"("b":{"dtype":"I64","shape":[3],"data_offsets":[0,24]},)"
      R"("a":{"dtype":"F32","shape":[2,2],"data_offsets":[24,40]},)"
      R"("h":{"dtype":"F16","shape":[2],"data_offsets":[40,44]},)"
      R"("c":{"dtype":"BOOL","shape":[],"data_offsets":[44,45]},)"
      R"("d":{"dtype":"F64","shape":[1],"data_offsets":[45,53]}}   )";
  std::string data;
  // b: 1, -2, 258
  data += std::string("\x01\0\0\0\0\0\0\0", 8);
  data += std::string("\xfe\xff\xff\xff\xff\xff\xff\xff", 8);
  data += std::string("\x02\x01\0\0\0\0\0\0", 8);
  // a: 1.0, 2.0, -0.5, 3.0
  data += std::string("\0\0\x80\x3f", 4);
  data += std::string("\0\0\0\x40", 4);
  data += std::string("\0\0\0\xbf", 4);
  data += std::string("\0\0\x40\x40", 4);
  data += std::string("\x00\x3c\x00\x40", 4);  // h: F16 1.0, 2.0
  data += std::string("\x01", 1);              // c: true
  data += std::string("\0\0\0\0\0\0\xf8\x3f", 8);  // d: 1.5
  write_shared(world, path, st_file(header, data));

  const DeviceMesh mesh(world, Shape{2, 2});
  StateDict state;
  state["a"] = distribute_tensor(Tensor::zeros({2, 2}), mesh, parse_placements("S(0),S(1)"));
  state["b"] = distribute_tensor(Tensor::zeros({3}, DType::Int64), mesh,
                                 parse_placements("P(sum),S(0)"));
  state["c"] = Tensor();
  state["d"] = distribute_tensor(Tensor::zeros({1}, DType::Float64), mesh,
                                 parse_placements("P(max),R"));
  state["format"] = Value(std::string());
  state["step"] = Value(int64_t{0});
  state["lr"] = Value(0.0);
  state["ids"] = Value(std::vector<int64_t>{});
  checkpoint::import_safetensors(state, path);
  expect_holds(std::get<DTensor>(state["a"]),
               Tensor::from_vector(std::vector<float>{1.0f, 2.0f, -0.5f, 3.0f}, Shape{2, 2}), "a");
  expect_holds(std::get<DTensor>(state["b"]),
               Tensor::from_vector(std::vector<int64_t>{1, -2, 258}), "b");
  const Tensor c = std::get<Tensor>(state["c"]);
  EXPECT_EQ(c.dtype(), DType::Bool);
  EXPECT_EQ(c.shape(), Shape{});
  EXPECT_TRUE(c.item<bool>());
  expect_holds(std::get<DTensor>(state["d"]), Tensor::from_vector(std::vector<double>{1.5}), "d");
  EXPECT_EQ(std::get<std::string>(std::get<Value>(state["format"])), "pt");
  EXPECT_EQ(std::get<int64_t>(std::get<Value>(state["step"])), 7);
  EXPECT_EQ(std::get<double>(std::get<Value>(state["lr"])), 0.25);
  EXPECT_EQ(std::get<std::vector<int64_t>>(std::get<Value>(state["ids"])),
            (std::vector<int64_t>{3, -4}));
  file.finish();
}

// Bad files and mismatched states throw dtensor::Error on every rank,
// naming the file and the tensor; a missing name is an error only when
// strict.
TEST_F(SafetensorsTest, BadFilesAndStatesThrowEverywhere) {
  if (world.size() < 4) GTEST_SKIP();
  SharedFile file(world, "errors");
  const std::string& path = file.path();
  const DeviceMesh mesh(world, Shape{2, 2});
  const Tensor full = exact_values({3, 4}, DType::Float32, 9);
  StateDict good;
  good["w"] = distribute_tensor(full, mesh, parse_placements("S(0),S(1)"));
  good["step"] = Value(int64_t{5});
  checkpoint::export_safetensors(good, path);
  const std::string bytes = read_bytes(path);
  barrier(world);

  const auto target = [&](const Shape& shape, DType dtype) {
    StateDict s;
    s["w"] = distribute_tensor(Tensor::zeros(shape, dtype), mesh, parse_placements("R,S(0)"));
    return s;
  };
  // Writes `contents` to the file, imports it into `state` and expects every
  // rank to throw an error with `pieces`.
  const auto expect_import_error = [&](const std::string& contents, StateDict state,
                                       std::vector<std::string> pieces) {
    write_shared(world, path, contents);
    expect_error([&] { checkpoint::import_safetensors(state, path); }, pieces);
  };

  // The good file reads (the baseline of the cases below).
  {
    StateDict s = target({3, 4}, DType::Float32);
    checkpoint::import_safetensors(s, path);
    expect_holds(std::get<DTensor>(s["w"]), full, "baseline");
  }
  // Missing file.
  {
    StateDict s = target({3, 4}, DType::Float32);
    expect_error([&] { checkpoint::import_safetensors(s, path + ".missing"); },
                 {path + ".missing", "does not exist"});
  }
  // Truncated: in the data, in the header, before the length ends.
  expect_import_error(bytes.substr(0, bytes.size() - 3), target({3, 4}, DType::Float32),
                      {path, "truncated", "48 bytes of data", "45"});
  expect_import_error(bytes.substr(0, 20), target({3, 4}, DType::Float32),
                      {path, "header length", "exceeds the 12 bytes"});
  expect_import_error(bytes.substr(0, 5), target({3, 4}, DType::Float32),
                      {path, "5 bytes, fewer than the 8"});
  // Garbage header length.
  expect_import_error(std::string(8, '\xff') + bytes.substr(8), target({3, 4}, DType::Float32),
                      {path, "header length 18446744073709551615"});
  // Bad JSON, a header that is not an object.
  expect_import_error(st_file(R"({"w": {"dtype": "F32",)", ""), target({3, 4}, DType::Float32),
                      {path, "not valid JSON"});
  expect_import_error(st_file("[1, 2]  ", ""), target({3, 4}, DType::Float32),
                      {path, "does not start with '{'"});
  // A name given twice.
  expect_import_error(
      st_file(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
              R"("w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
              std::string(4, '\0')),
      target({1}, DType::Float32), {path, "names 'w' twice"});
  // Unknown dtype; a dtype dtensor lacks on a tensor the state asks for.
  expect_import_error(
      st_file(R"({"w":{"dtype":"F17","shape":[1],"data_offsets":[0,4]}})", std::string(4, '\0')),
      target({1}, DType::Float32), {path, "tensor 'w'", "unknown dtype \"F17\""});
  expect_import_error(
      st_file(R"({"w":{"dtype":"I32","shape":[2],"data_offsets":[0,8]}})", std::string(8, '\0')),
      target({2}, DType::Float32), {path, "tensor 'w' is I32", "dtensor does not have"});
  // Sizes: a negative one, bytes that do not match the shape, holes,
  // overlaps, bytes after the last tensor, offsets past the file.
  expect_import_error(
      st_file(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", std::string(4, '\0')),
      target({1}, DType::Float32), {path, "tensor 'w'", "non-negative"});
  expect_import_error(
      st_file(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", std::string(4, '\0')),
      target({2}, DType::Float32), {path, "tensor 'w'", "hold 4 bytes", "needs 8"});
  expect_import_error(
      st_file(R"({"v":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
              R"("w":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
              std::string(12, '\0')),
      target({1}, DType::Float32), {path, "tensor 'w' starts at byte 8", "'v'", "ends at 4"});
  expect_import_error(
      st_file(R"({"v":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
              R"("w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
              std::string(8, '\0')),
      target({1}, DType::Float32), {path, "starts at byte 4", "no holes, no overlaps"});
  expect_import_error(
      st_file(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", std::string(6, '\0')),
      target({1}, DType::Float32), {path, "2 bytes after the end of its last tensor"});
  expect_import_error(
      st_file(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}})", std::string(4, '\0')),
      target({1}, DType::Float32), {path, "data_offsets [0,4,8]"});
  expect_import_error(
      st_file(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}})",
              std::string(4, '\0')),
      target({1}, DType::Float32), {path, "too large"});
  expect_import_error(
      st_file(R"({"__metadata__":{"step":5},"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
              std::string(4, '\0')),
      target({1}, DType::Float32), {path, "'step'", "strings"});
  // A BOOL byte other than 0 and 1: the ranks of the mesh that read it
  // fail, and every rank (those outside the mesh too) throws their message.
  {
    StateDict s;
    s["w"] = distribute_tensor(Tensor::zeros({2}, DType::Bool), mesh, parse_placements("S(0),R"));
    expect_import_error(
        st_file(R"({"w":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]}})", "\x01\x07"), s,
        {path, "tensor 'w'", "byte value 7", "expected 0 or 1", "(on rank 2; rank 3 failed too)",
         "partly loaded"});
  }

  // The good file against mismatched states.
  expect_import_error(bytes, target({3, 4}, DType::Float64),
                      {path, "tensor 'w' is F32 (float32)", "float64 in the state"});
  expect_import_error(bytes, target({4, 3}, DType::Float32),
                      {path, "tensor 'w' has shape [3, 4]", "[4, 3] in the state"});
  {
    StateDict s = target({3, 4}, DType::Float32);
    s["w2"] = distribute_tensor(Tensor::zeros({2}), mesh, parse_placements("R,R"));
    expect_import_error(bytes, s, {path, "has no tensor 'w2'", "strict = false"});
  }
  {
    StateDict s = target({3, 4}, DType::Float32);
    s["step"] = Value(std::string("x"));
    s["w2"] = Value(int64_t{3});
    const Tensor before = Tensor::full({2}, 4.0);
    s["w3"] = distribute_tensor(before, mesh, parse_placements("S(0),R"));
    checkpoint::LoadOptions lenient;
    lenient.strict = false;
    checkpoint::import_safetensors(s, path, lenient);
    expect_holds(std::get<DTensor>(s["w"]), full, "non-strict");
    EXPECT_EQ(std::get<std::string>(std::get<Value>(s["step"])), "5");
    EXPECT_EQ(std::get<int64_t>(std::get<Value>(s["w2"])), 3);
    expect_holds(std::get<DTensor>(s["w3"]), before, "left as it was");
  }
  {
    StateDict s = target({3, 4}, DType::Float32);
    s["step"] = Value(true);
    expect_import_error(bytes, s, {path, "'step'", "\"5\"", "not bool"});
  }
  {
    StateDict s = target({3, 4}, DType::Float32);
    s["step"] = distribute_tensor(Tensor::zeros({1}), mesh, parse_placements("R,R"));
    expect_import_error(bytes, s, {path, "'step' is a DTensor in the state but a \"__metadata__\""});
  }
  {
    write_shared(world, path, bytes);
    StateDict s;
    s["w"] = Value(int64_t{1});
    checkpoint::LoadOptions opts;
    opts.world = world;
    expect_error([&] { checkpoint::import_safetensors(s, path, opts); },
                 {path, "'w' is a value in the state but a tensor"});
  }
  file.finish();
}

// Export failures reach every rank, and an existing file stays as it was.
TEST_F(SafetensorsTest, ExportFailuresThrowEverywhere) {
  if (world.size() < 4) GTEST_SKIP();
  SharedFile file(world, "export_errors");
  const std::string& path = file.path();
  const DeviceMesh mesh(world, Shape{2, 2});
  StateDict state;
  state["w"] = distribute_tensor(exact_values({4, 2}, DType::Float64, 3), mesh,
                                 parse_placements("S(0),R"));
  // A directory that does not exist: rank 0 cannot create the file.
  const std::string nowhere = path + ".no-such-dir/model.safetensors";
  expect_error([&] { checkpoint::export_safetensors(state, nowhere); },
               {"cannot create " + nowhere + ".partial", "(on rank 0); " + nowhere +
                                                             " is unchanged"});
  // A tensor may not take the metadata's name; nothing is written.
  checkpoint::export_safetensors(state, path);
  const std::string before = read_bytes(path);
  barrier(world);
  StateDict bad = state;
  bad["__metadata__"] = Tensor::zeros({1});
  expect_error([&] { checkpoint::export_safetensors(bad, path); },
               {"'__metadata__'", "keeps that key"});
  barrier(world);
  EXPECT_EQ(read_bytes(path), before);
  EXPECT_FALSE(std::filesystem::exists(path + ".partial"));
  // A state without DTensors needs the world.
  StateDict values;
  values["step"] = Value(int64_t{1});
  expect_error([&] { checkpoint::export_safetensors(values, path); }, {"give one in the options"});
  checkpoint::SaveOptions opts;
  opts.world = world;
  checkpoint::export_safetensors(values, path, opts);
  StateDict back;
  back["step"] = Value(int64_t{0});
  checkpoint::LoadOptions lopts;
  lopts.world = world;
  checkpoint::import_safetensors(back, path, lopts);
  EXPECT_EQ(std::get<int64_t>(std::get<Value>(back["step"])), 1);
  file.finish();
}
