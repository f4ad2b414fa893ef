// A corruption fuzz of checkpoints: a small checkpoint (DTensors of three
// layouts, a plain tensor, the values a resume relies on) damaged at random
// - bits and bytes of data and metadata flipped or set, files truncated,
// lengthened, removed, added, made FIFOs, directories or links, metadata
// fields and chunks edited (not re-sealed), absurd declared sizes
// (re-sealed, to reach the checks behind the checksum), the metadata only
// re-laid-out - then loaded into random layouts and verified. Every case
// ends in the saved data and values bit for bit, or a dtensor::Error:
// never different data, another exception, or a hang.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>

#include <nlohmann/json.hpp>

#include "checkpoint/metadata.h"
#include "dtensor/checkpoint.h"
#include "dtensor/dtensor.h"
#include "test_util.h"

using namespace dtensor;
using namespace dtensor::checkpoint;
namespace fs = std::filesystem;
namespace ckd = ::dtensor::checkpoint::detail;

namespace fuzz_test {

using nlohmann::ordered_json;

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void write_all(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  const Tensor x = a.contiguous(), y = b.contiguous();
  return x.nbytes() == y.nbytes() && std::memcmp(x.raw_data(), y.raw_data(), x.nbytes()) == 0;
}

// Every number in the JSON, as a pointer to it.
void numbers(ordered_json& j, std::vector<ordered_json*>& out) {
  if (j.is_number()) out.push_back(&j);
  if (j.is_structured())
    for (auto& e : j) numbers(e, out);
}

class Fuzz {
 public:
  Fuzz() : world_(World::simulated(4)), mesh_(world_, Shape{2, 2}) {}

  // Saves the checkpoint every case starts from.
  void save_base(const std::string& dir) {
    // w's four chunks have one size, so swapped offsets look valid; e's
    // are uneven.
    fulls_ = {{"w", Tensor::randn({8, 6}, 1)},
              {"e", Tensor::randn({7, 4}, 2).to(DType::Float64)},
              {"v", Tensor::arange(7)}};
    plain_ = Tensor::randn({3, 3}, 3);
    values_ = {{"train.step", Value(int64_t{12})},
               {"lr_scheduler.last_epoch", Value(int64_t{12})},
               {"optim.w.step", Value(int64_t{12})},
               {"optim.lr", Value(3e-4)},
               {"name", Value(std::string("gpt"))}};
    StateDict state{{"w", distribute_tensor(fulls_["w"], mesh_, {Shard(0), Shard(1)})},
                    {"e", distribute_tensor(fulls_["e"], mesh_, {Shard(0), Replicate()})},
                    {"v", distribute_tensor(fulls_["v"], mesh_, {Replicate(), Shard(0)})},
                    {"p", plain_}};
    for (const auto& [name, v] : values_) state[name] = v;
    save(state, dir, {.world = std::nullopt, .block_bytes = 16});
  }

  // Loads dir into random layouts: "" when the saved state came back bit
  // for bit, "error" on a dtensor::Error, else what differs.
  std::string load_outcome(const std::string& dir, std::mt19937& rng) {
    const std::vector<Placements> layouts = {{Replicate(), Replicate()},
                                             {Shard(0), Replicate()},
                                             {Shard(0), Shard(0)},
                                             {Replicate(), Shard(0)}};
    StateDict state;
    for (const auto& [name, full] : fulls_)
      state[name] = distribute_tensor(Tensor::zeros(full.shape(), full.dtype()), mesh_,
                                      layouts[rng() % layouts.size()]);
    state["p"] = rng() % 2 ? Tensor() : Tensor::zeros({3, 3});
    for (const auto& [name, v] : values_)
      state[name] = std::holds_alternative<std::string>(v) ? Value(std::string()) : Value(int64_t{0});
    state["optim.lr"] = Value(0.0);
    try {
      load(state, dir);
    } catch (const Error&) {
      return "error";
    } catch (const std::exception& e) {
      return std::string("an exception other than dtensor::Error: ") + e.what();
    }
    for (const auto& [name, full] : fulls_)
      if (!same_bytes(std::get<DTensor>(state.at(name)).full_tensor(), full))
        return "tensor '" + name + "' loaded different data";
    if (!same_bytes(std::get<Tensor>(state.at("p")), plain_)) return "plain tensor 'p' differs";
    for (const auto& [name, v] : values_)
      if (!(std::get<Value>(state.at(name)) == v)) return "value '" + name + "' differs";
    return "";
  }

  static std::string verify_outcome(const std::string& dir) {
    try {
      verify(dir);
    } catch (const Error&) {
      return "error";
    } catch (const std::exception& e) {
      return std::string("an exception other than dtensor::Error: ") + e.what();
    }
    return "";
  }

 private:
  World world_;
  DeviceMesh mesh_;
  std::map<std::string, Tensor> fulls_;
  Tensor plain_;
  std::map<std::string, Value> values_;
};

// One random damage of the checkpoint in dir; returns what it did.
std::string damage(const std::string& dir, std::mt19937& rng) {
  // The regular files (an earlier damage may have made a FIFO, which a
  // read here would wait on).
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(dir))
    if (fs::is_regular_file(e.symlink_status())) files.push_back(e.path().filename().string());
  if (files.empty()) return "nothing (no regular file)";
  std::sort(files.begin(), files.end());
  const std::string name = files[rng() % files.size()];
  const std::string path = dir + "/" + name;
  const std::string meta = dir + "/metadata.json";
  std::string bytes = read_all(path);
  const auto at = [&] { return bytes.empty() ? size_t{0} : rng() % bytes.size(); };
  const auto json_edit = [&](const std::function<std::string(ordered_json&)>& edit, bool reseal) {
    if (!fs::is_regular_file(fs::symlink_status(meta))) return std::string("nothing (no metadata)");
    ordered_json j = ordered_json::parse(read_all(meta), nullptr, false);
    if (j.is_discarded()) return std::string("nothing (metadata.json is not JSON)");
    std::string what;
    try {
      what = edit(j);
    } catch (const nlohmann::json::exception& e) {
      return std::string("nothing (") + e.what() + ")";
    }
    const std::string text = j.dump(1) + "\n";
    write_all(meta, reseal ? ckd::reseal_metadata(text) : text);
    return what + (reseal ? " (re-sealed)" : "");
  };
  switch (rng() % 11) {
    case 0: {
      if (bytes.empty()) return "nothing (empty file)";
      const size_t i = at();
      const int bit = static_cast<int>(rng() % 8);
      bytes[i] = static_cast<char>(bytes[i] ^ (1 << bit));
      write_all(path, bytes);
      return "bit " + std::to_string(bit) + " of byte " + std::to_string(i) + " of " + name;
    }
    case 1: {
      if (bytes.empty()) return "nothing (empty file)";
      const size_t i = at();
      bytes[i] = static_cast<char>(rng());
      write_all(path, bytes);
      return "byte " + std::to_string(i) + " of " + name + " set";
    }
    case 2: {
      const size_t n = at();
      fs::resize_file(path, n);
      return name + " truncated to " + std::to_string(n);
    }
    case 3: {
      const size_t n = 1 + rng() % 16;
      for (size_t k = 0; k < n; ++k) bytes.push_back(static_cast<char>(rng()));
      write_all(path, bytes);
      return std::to_string(n) + " bytes appended to " + name;
    }
    case 4:
      fs::remove(path);
      return name + " removed";
    case 5: {
      const char* extra[] = {"data-3.bin", "data-9.bin", "notes.txt", "metadata.json.bak"};
      const std::string e = extra[rng() % 4];
      if (fs::exists(dir + "/" + e)) return "nothing (" + e + " exists)";
      write_all(dir + "/" + e, std::string(1 + rng() % 64, 'x'));
      return e + " added";
    }
    case 6: {
      fs::remove(path);
      switch (rng() % 3) {
        case 0:
          ::mkfifo(path.c_str(), 0644);
          return name + " made a FIFO";
        case 1:
          fs::create_directory(path);
          return name + " made a directory";
        default: {
          const std::string other = files[rng() % files.size()];
          fs::create_symlink(other, path);
          return name + " made a link to " + other;
        }
      }
    }
    case 7:
      return json_edit(
          [&](ordered_json& j) {
            std::vector<ordered_json*> nums;
            numbers(j, nums);
            if (nums.empty()) return std::string("nothing");
            ordered_json& n = *nums[rng() % nums.size()];
            const int64_t old = n.is_number_float() ? 0 : n.get<int64_t>();
            const int64_t choices[] = {old + 1, old - 1, 0, -1, int64_t{1} << 30,
                                       int64_t{1} << 62};
            n = choices[rng() % 6];
            return "a number " + std::to_string(old) + " of metadata.json set to " + n.dump();
          },
          false);
    case 8:
      return json_edit(
          [&](ordered_json& j) {
            ordered_json& chunks = j.at("tensors").at("w").at("chunks");
            if (!chunks.is_array() || chunks.empty()) return std::string("nothing");
            const size_t a = rng() % chunks.size(), b = rng() % chunks.size();
            switch (rng() % 4) {
              case 0:
                std::swap(chunks[a]["byte_offset"], chunks[b]["byte_offset"]);
                return "byte_offsets of chunks " + std::to_string(a) + ", " +
                       std::to_string(b) + " swapped";
              case 1:
                std::swap(chunks[a]["offsets"], chunks[b]["offsets"]);
                return "offsets of chunks " + std::to_string(a) + ", " + std::to_string(b) +
                       " swapped";
              case 2:
                chunks.erase(a);
                return "chunk " + std::to_string(a) + " removed";
              default:
                chunks.push_back(chunks[a]);
                return "chunk " + std::to_string(a) + " duplicated";
            }
          },
          false);
    case 9:
      // Absurd declared sizes, re-sealed: the checks behind the checksum
      // must refuse them before allocating anything by them.
      return json_edit(
          [&](ordered_json& j) {
            const int64_t huge[] = {int64_t{1} << 30, int64_t{1} << 40, int64_t{1} << 62};
            const int64_t h = huge[rng() % 3];
            ordered_json& chunk = j.at("tensors").at("p").at("chunks").at(0);
            switch (rng() % 5) {
              case 0:
                j["block_bytes"] = h;
                return "block_bytes " + std::to_string(h);
              case 1:
                j["files"][chunk["file"].get<std::string>()] = h;
                return "a file's size " + std::to_string(h);
              case 2:
                chunk["byte_size"] = h;
                return "a chunk's byte_size " + std::to_string(h);
              case 3:
                chunk["byte_offset"] = h;
                return "a chunk's byte_offset " + std::to_string(h);
              default:
                j.at("tensors").at("p")["shape"] = ordered_json::array({h, 3});
                chunk["sizes"] = ordered_json::array({h, 3});
                return "a shape [" + std::to_string(h) + ", 3]";
            }
          },
          true);
    default: {
      // The same content laid out otherwise: still the checkpoint.
      if (!fs::is_regular_file(fs::symlink_status(meta))) return "nothing (no metadata)";
      const ordered_json j = ordered_json::parse(read_all(meta), nullptr, false);
      if (j.is_discarded()) return "nothing (metadata.json is not JSON)";
      const int indent = static_cast<int>(rng() % 5) - 1;
      write_all(meta, j.dump(indent));
      return "metadata.json re-laid-out with indent " + std::to_string(indent);
    }
  }
}

}  // namespace fuzz_test

TEST(CheckpointFuzz, DamageEndsInTheSameDataOrAnError) {
  const std::string root = (fs::path(::testing::TempDir()) / "dtensor_ckpt_fuzz").string();
  fs::remove_all(root);
  fs::create_directories(root);
  fuzz_test::Fuzz fuzz;
  const std::string base = root + "/base";
  fuzz.save_base(base);
  std::mt19937 rng(3838);
  ASSERT_EQ(fuzz.load_outcome(base, rng), "");
  const int cases = dtensor::testing::property_cases(2000);
  std::map<std::string, int> outcomes;
  for (int i = 0; i < cases; ++i) {
    const std::string dir = root + "/case";
    fs::remove_all(dir);
    fs::copy(base, dir);
    std::string what = fuzz_test::damage(dir, rng);
    // A second damage now and then.
    if (rng() % 4 == 0) what += "; " + fuzz_test::damage(dir, rng);
    const std::string loaded = fuzz.load_outcome(dir, rng);
    const std::string verified = fuzz_test::Fuzz::verify_outcome(dir);
    EXPECT_TRUE(loaded.empty() || loaded == "error") << "case " << i << ", " << what << ": "
                                                     << loaded;
    EXPECT_TRUE(verified.empty() || verified == "error")
        << "case " << i << ", " << what << ": verify: " << verified;
    // What verify (inspect) passes, load loads.
    if (verified.empty()) {
      EXPECT_EQ(loaded, "") << "case " << i << ", " << what;
    }
    ++outcomes[loaded.empty() ? "same data" : loaded];
  }
  fs::remove_all(root);
  for (const auto& [outcome, n] : outcomes) std::cout << "  " << outcome << ": " << n << "\n";
  EXPECT_GT(outcomes["error"], cases / 2);
  EXPECT_GT(outcomes["same data"], cases / 20);
}
