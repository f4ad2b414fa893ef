// bfloat16 and float16 in checkpoints and safetensors files: saved as their
// 16-bit words and loaded back bit for bit on any layout, under
// safetensors' own names ("BF16", "F16") in files PyTorch reads; a tensor
// stored in another dtype than the state's is refused, naming it and both
// dtypes, unless the load asks for a conversion (LoadOptions::convert_dtype).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "dtensor/checkpoint.h"
#include "dtensor/dtensor.h"
#include "test_util.h"

using namespace dtensor;
using namespace dtensor::checkpoint;
namespace fs = std::filesystem;
using dtensor::testing::expect_error;

namespace half_ckpt_test {

// Every 16-bit pattern is a value of the dtype (NaNs with payloads,
// infinities, subnormals, -0): a round trip must keep each one.
Tensor random_bits(const Shape& shape, DType dtype, uint32_t seed) {
  Tensor t = Tensor::empty(shape, dtype);
  std::mt19937 rng(seed);
  auto* w = static_cast<uint16_t*>(t.raw_data());
  for (int64_t i = 0; i < t.numel(); ++i) w[i] = static_cast<uint16_t>(rng());
  return t;
}

std::string bytes_of(const Tensor& t) {
  const Tensor c = t.contiguous();
  return std::string(static_cast<const char*>(c.raw_data()), c.nbytes());
}

// Every rank's shard of `d` holds exactly the bytes of its box of `full`.
void expect_shards_hold(const DTensor& d, const Tensor& full, const std::string& what) {
  ASSERT_EQ(d.dtype(), full.dtype()) << what;
  for (int r : d.mesh().ranks()) {
    const ShardExtent e = *d.spec().extent_of_rank(r);
    Tensor want = full;
    for (size_t k = 0; k < e.local_shape.size(); ++k)
      want = want.narrow(static_cast<int64_t>(k), e.global_offset[k], e.local_shape[k]);
    EXPECT_EQ(bytes_of(d.to_local(r)), bytes_of(want)) << what << ", rank " << r;
  }
}

DTensor zeros_on(const DeviceMesh& mesh, const std::string& placements, const Shape& shape,
                 DType dtype) {
  return distribute_tensor(Tensor::zeros(shape, dtype), mesh, parse_placements(placements));
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// The header of a safetensors file (8-byte little-endian length, JSON).
nlohmann::json st_header(const std::string& path) {
  const std::string bytes = read_text(path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes.at(static_cast<size_t>(i)));
  return nlohmann::json::parse(bytes.substr(8, n));
}

// Runs `command`, returns its standard output and exit status.
std::pair<std::string, int> run(const std::string& command) {
  std::string out;
  FILE* p = ::popen(command.c_str(), "r");
  if (p == nullptr) return {"popen failed", -1};
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  return {out, ::pclose(p)};
}

class HalfCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    base = (fs::path(::testing::TempDir()) / (std::string("dtensor_ckhalf_") + info->name()))
               .string();
    fs::remove_all(base);
    fs::create_directories(base);
  }
  void TearDown() override { fs::remove_all(base); }

  World world = World::simulated(4);
  DeviceMesh mesh{world, Shape{2, 2}};
  std::string base;
};

}  // namespace half_ckpt_test

using half_ckpt_test::HalfCheckpoint;
using half_ckpt_test::bytes_of;
using half_ckpt_test::expect_shards_hold;
using half_ckpt_test::random_bits;
using half_ckpt_test::zeros_on;

// Saved from (S(0), S(1)) on a 2x2 mesh, loaded on a 1-d mesh of the same
// world, on another layout of the 2x2 mesh (shard order, Replicate) and on
// a world of 3 ranks (uneven shards): the same bits everywhere, the plain
// tensor too.
TEST_F(HalfCheckpoint, RoundTripsBitwiseOnAnotherLayout) {
  for (DType dtype : {DType::BFloat16, DType::Float16}) {
    const std::string what = dtype_name(dtype);
    const Tensor full = random_bits({7, 5}, dtype, 1);
    const Tensor plain = random_bits({3}, dtype, 2);
    const std::string dir = base + "/" + what;
    save({{"w", distribute_tensor(full, mesh, parse_placements("S(0),S(1)"))}, {"p", plain}}, dir);

    const Metadata md = read_metadata(dir);
    EXPECT_EQ(md.tensors.at("w").dtype, dtype) << what;
    int64_t bytes = 0;
    for (const ChunkInfo& c : md.tensors.at("w").chunks) bytes += c.byte_size;
    EXPECT_EQ(bytes, 2 * full.numel()) << what;  // 16-bit words, nothing widened
    const std::string json = half_ckpt_test::read_text(dir + "/metadata.json");
    EXPECT_NE(json.find("\"dtype\": \"" + what + "\""), std::string::npos) << json;
    verify(dir);  // every block against its checksum

    const DeviceMesh line(world, Shape{4});
    StateDict state{{"w", zeros_on(line, "S(1)", {7, 5}, dtype)}, {"p", Tensor()}};
    load(state, dir);
    expect_shards_hold(std::get<DTensor>(state["w"]), full, what + " on mesh [4] S(1)");
    EXPECT_EQ(std::get<Tensor>(state["p"]).dtype(), dtype);
    EXPECT_EQ(bytes_of(std::get<Tensor>(state["p"])), bytes_of(plain)) << what;

    StateDict other{{"w", zeros_on(mesh, "S(0)[1],S(0)[0]", {7, 5}, dtype)},
                    {"p", Tensor::zeros({3}, dtype)}};
    load(other, dir);
    expect_shards_hold(std::get<DTensor>(other["w"]), full, what + " shard order");
    EXPECT_EQ(bytes_of(std::get<Tensor>(other["p"])), bytes_of(plain)) << what;
    StateDict replicated{{"w", zeros_on(mesh, "R,S(1)", {7, 5}, dtype)}};
    load(replicated, dir);
    expect_shards_hold(std::get<DTensor>(replicated["w"]), full, what + " R,S(1)");

    World three = World::simulated(3);
    const DeviceMesh mesh3(three, Shape{3});
    StateDict uneven{{"w", zeros_on(mesh3, "S(0)", {7, 5}, dtype)}};
    load(uneven, dir);
    expect_shards_hold(std::get<DTensor>(uneven["w"]), full, what + " on 3 ranks");
  }
}

// Partial(sum) targets: the value on the first rank of the group, zeros
// elsewhere, so the sum (float32 fold, rounded once) is the value.
TEST_F(HalfCheckpoint, PartialTargetsSumToTheValue) {
  for (DType dtype : {DType::BFloat16, DType::Float16}) {
    const Tensor full = (Tensor::randn({4, 6}, 3) * 4.0).to(dtype);
    const std::string dir = base + "/" + dtype_name(dtype);
    save({{"w", distribute_tensor(full, mesh, parse_placements("R,S(1)"))}}, dir);
    StateDict state{{"w", zeros_on(mesh, "P(sum),S(0)", {4, 6}, dtype)}};
    load(state, dir);
    const DTensor& w = std::get<DTensor>(state["w"]);
    EXPECT_EQ(w.placements(), parse_placements("P(sum),S(0)"));
    EXPECT_EQ(bytes_of(w.full_tensor()), bytes_of(full)) << dtype_name(dtype);
  }
}

// safetensors: "BF16" and "F16" with 2 bytes an element, the data the raw
// words; imported onto another layout bit for bit.
TEST_F(HalfCheckpoint, SafetensorsHoldsBF16AndF16Bitwise) {
  const Tensor bf = random_bits({6, 3}, DType::BFloat16, 4);
  const Tensor hf = random_bits({5}, DType::Float16, 5);
  const Tensor f = Tensor::randn({2, 2}, 6);
  const std::string path = base + "/model.safetensors";
  export_safetensors({{"bf", distribute_tensor(bf, mesh, parse_placements("S(1),S(0)"))},
                      {"hf", distribute_tensor(hf, mesh, parse_placements("R,S(0)"))},
                      {"f", f}},
                     path);
  const nlohmann::json h = half_ckpt_test::st_header(path);
  const std::map<std::string, std::pair<std::string, Tensor>> want = {
      {"bf", {"BF16", bf}}, {"hf", {"F16", hf}}, {"f", {"F32", f}}};
  for (const auto& [name, st] : want) {
    const auto& t = h.at(name);
    EXPECT_EQ(t.at("dtype"), st.first) << name;
    EXPECT_EQ(t.at("shape").get<std::vector<int64_t>>(), st.second.shape().vec()) << name;
    const auto off = t.at("data_offsets").get<std::vector<int64_t>>();
    EXPECT_EQ(off.at(1) - off.at(0), static_cast<int64_t>(st.second.nbytes())) << name;
  }
  EXPECT_EQ(h.at("bf").at("data_offsets").get<std::vector<int64_t>>()[1] -
                h.at("bf").at("data_offsets").get<std::vector<int64_t>>()[0],
            2 * bf.numel());

  const DeviceMesh line(world, Shape{4});
  StateDict state{{"bf", zeros_on(line, "S(0)", {6, 3}, DType::BFloat16)},
                  {"hf", Tensor()},
                  {"f", zeros_on(mesh, "S(1),R", {2, 2}, DType::Float32)}};
  import_safetensors(state, path);
  expect_shards_hold(std::get<DTensor>(state["bf"]), bf, "bf");
  EXPECT_EQ(std::get<Tensor>(state["hf"]).dtype(), DType::Float16);
  EXPECT_EQ(bytes_of(std::get<Tensor>(state["hf"])), bytes_of(hf));
  expect_shards_hold(std::get<DTensor>(state["f"]), f, "f");
}

// The file dtensor writes is one PyTorch reads: the system Python's torch
// (1.13, scripts/install-deps) parses the header, takes each tensor's bytes
// as its torch dtype, and finds that the bf16 and f16 tensors are its own
// rounding of the float32 one (round to nearest even, overflow to inf),
// bit for bit.
TEST_F(HalfCheckpoint, SafetensorsFileReadsInTorch) {
  std::vector<float> v;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int i = 0; i < 200; ++i) v.push_back(normal(rng) * std::ldexp(1.0f, static_cast<int>(rng() % 40) - 20));
  // Ties (halfway between two bf16 / f16 values), -0, inf, f16 overflow,
  // values below float16's smallest subnormal.
  for (float x : {1.00390625f, 1.01171875f, 1.00048828125f, -0.0f, INFINITY, -INFINITY, 70000.0f,
                  65520.0f, 1e-8f, -3e-8f, 3.4e38f})
    v.push_back(x);
  const Tensor src = Tensor::from_vector(v, Shape{static_cast<int64_t>(v.size())});
  const std::string path = base + "/torch.safetensors";
  export_safetensors({{"src", distribute_tensor(src, mesh, parse_placements("S(0),R"))},
                      {"bf16", distribute_tensor(src.to(DType::BFloat16), mesh,
                                                 parse_placements("R,S(0)"))},
                      {"f16", distribute_tensor(src.to(DType::Float16), mesh,
                                                parse_placements("S(0),S(0)"))}},
                     path);
  const std::string script = base + "/read.py";
  std::ofstream(script) << R"(import json, struct, sys
import torch
raw = open(sys.argv[1], "rb").read()
(n,) = struct.unpack("<Q", raw[:8])
header = json.loads(raw[8:8 + n])
dtypes = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}
t = {}
for name, info in header.items():
    b, e = info["data_offsets"]
    data = bytearray(raw[8 + n + b:8 + n + e])
    t[name] = torch.frombuffer(data, dtype=dtypes[info["dtype"]]).reshape(info["shape"])
src = t["src"]
for name, dtype in (("bf16", torch.bfloat16), ("f16", torch.float16)):
    assert t[name].dtype == dtype and t[name].shape == src.shape, name
    want = src.to(dtype).view(torch.int16)
    got = t[name].view(torch.int16)
    assert torch.equal(got, want), (name, (got != want).nonzero()[:5].tolist())
print("torch", torch.__version__.split(".")[0] + "." + torch.__version__.split(".")[1],
      "read", len(t), "tensors")
)";
  const auto [out, status] = half_ckpt_test::run("/usr/bin/python3 " + script + " " + path + " 2>&1");
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("read 3 tensors"), std::string::npos) << out;
}

// A tensor stored in another dtype than the state's: an error naming the
// tensor, the stored dtype and the state's (nothing is read: the state
// keeps its values), unless convert_dtype asks for a conversion, which
// gives Tensor::to's bits (the plain tensor is converted in place). int64
// and bool are never converted.
TEST_F(HalfCheckpoint, ADtypeMismatchIsRefusedUnlessConversionIsAsked) {
  const Tensor full = Tensor::randn({6, 4}, 8) * 3.0;  // float32
  const Tensor wide = full.to(DType::Float64) / 7.0;    // needs rounding to narrower types
  const std::string dir = base + "/ckpt";
  save({{"w", distribute_tensor(wide, mesh, parse_placements("S(0),R"))},
        {"p", wide},
        {"ids", distribute_tensor(Tensor::arange(6), mesh, parse_placements("R,R"))}},
       dir);
  for (DType dtype : {DType::Float32, DType::BFloat16, DType::Float16}) {
    const std::string what = dtype_name(dtype);
    StateDict state{{"w", distribute_tensor(Tensor::full({6, 4}, 5.0).to(dtype), mesh,
                                            parse_placements("R,S(1)"))},
                    {"p", Tensor::zeros({6, 4}, dtype)}};
    expect_error([&] { load(state, dir); },
                 {"checkpoint::load: tensor '", "is float64 in " + dir, "but " + what +
                  " in the state", "convert_dtype = true"});
    expect_shards_hold(std::get<DTensor>(state["w"]), Tensor::full({6, 4}, 5.0).to(dtype),
                       what + " untouched");
    load(state, dir, {.convert_dtype = true});
    expect_shards_hold(std::get<DTensor>(state["w"]), wide.to(dtype), what + " converted");
    EXPECT_EQ(std::get<Tensor>(state["p"]).dtype(), dtype);
    EXPECT_EQ(bytes_of(std::get<Tensor>(state["p"])), bytes_of(wide.to(dtype))) << what;
  }
  // Widening is exact: bf16 saved, float32 loaded.
  const Tensor narrow = full.to(DType::BFloat16);
  const std::string dir2 = base + "/bf16";
  save({{"w", distribute_tensor(narrow, mesh, parse_placements("S(1),S(0)"))}}, dir2);
  StateDict f32{{"w", zeros_on(mesh, "S(0),R", {6, 4}, DType::Float32)}};
  expect_error([&] { load(f32, dir2); }, {"tensor 'w' is bfloat16", "but float32 in the state"});
  load(f32, dir2, {.convert_dtype = true});
  expect_shards_hold(std::get<DTensor>(f32["w"]), narrow.to(DType::Float32), "widened");
  // int64 is not a floating dtype: refused even with convert_dtype.
  StateDict ids{{"ids", zeros_on(mesh, "R,R", {6}, DType::Float32)}};
  expect_error([&] { load(ids, dir, {.convert_dtype = true}); },
               {"tensor 'ids' is int64", "but float32 in the state",
                "converts between floating dtypes only"});

  // The same rule for safetensors files.
  const std::string path = base + "/m.safetensors";
  export_safetensors({{"w", distribute_tensor(full, mesh, parse_placements("R,S(0)"))}}, path);
  StateDict bf{{"w", zeros_on(mesh, "S(1),S(0)", {6, 4}, DType::BFloat16)}};
  expect_error([&] { import_safetensors(bf, path); },
               {"checkpoint::import_safetensors: tensor 'w' is F32 (float32) in " + path,
                "but bfloat16 in the state", "import with convert_dtype = true"});
  import_safetensors(bf, path, {.convert_dtype = true});
  expect_shards_hold(std::get<DTensor>(bf["w"]), full.to(DType::BFloat16), "safetensors");
}
