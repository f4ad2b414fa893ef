// A small checkpoint for the tests of `dtensor checkpoint inspect`, and the
// damage the tests do to one:
//   make_checkpoint DIR [BLOCK_BYTES]      save the example state into DIR
//   make_checkpoint --flip-byte FILE OFFSET   invert the byte at OFFSET
//   make_checkpoint --truncate FILE SIZE      cut FILE to SIZE bytes
// The state, on a simulated world of 4 ranks (mesh 2x2, dp x tp): DTensors
// laid out S(0),R, with a shard order S(0)[1],S(0)[0] (uneven: 10 rows over
// 4 ranks) and S(1),P(sum) (reduced before it is written), a plain int64
// tensor, and one plain value of each kind.
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>

#include "dtensor/checkpoint.h"
#include "dtensor/dtensor.h"

using namespace dtensor;

namespace {

int64_t parse_int(const char* text, const char* what) {
  char* end = nullptr;
  const long long v = std::strtoll(text, &end, 10);
  if (*text == '\0' || *end != '\0' || v < 0) {
    std::cerr << "make_checkpoint: " << what << " must be an integer >= 0, got '" << text << "'\n";
    std::exit(2);
  }
  return v;
}

int flip_byte(const std::string& path, int64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  char c = 0;
  if (!f.seekg(offset) || !f.get(c)) {
    std::cerr << "make_checkpoint: cannot read byte " << offset << " of " << path << "\n";
    return 1;
  }
  c = static_cast<char>(~static_cast<unsigned char>(c));
  if (!f.seekp(offset) || !f.put(c)) {
    std::cerr << "make_checkpoint: cannot write byte " << offset << " of " << path << "\n";
    return 1;
  }
  return 0;
}

int truncate_file(const std::string& path, int64_t size) {
  std::error_code ec;
  std::filesystem::resize_file(path, static_cast<uintmax_t>(size), ec);
  if (ec) {
    std::cerr << "make_checkpoint: cannot truncate " << path << ": " << ec.message() << "\n";
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string first = argc > 1 ? argv[1] : "";
  if ((first == "--flip-byte" || first == "--truncate") && argc == 4) {
    const int64_t n = parse_int(argv[3], first == "--flip-byte" ? "OFFSET" : "SIZE");
    return first == "--flip-byte" ? flip_byte(argv[2], n) : truncate_file(argv[2], n);
  }
  if (argc < 2 || argc > 3 || first.empty() || first[0] == '-') {
    std::cerr << "usage: make_checkpoint DIR [BLOCK_BYTES] | --flip-byte FILE OFFSET | "
                 "--truncate FILE SIZE\n";
    return 2;
  }
  checkpoint::SaveOptions options;
  options.block_bytes = argc == 3 ? parse_int(argv[2], "BLOCK_BYTES") : 64;
  try {
    World world = World::simulated(4);
    DeviceMesh mesh(world, {2, 2}, {"dp", "tp"});
    checkpoint::StateDict state;
    state["model.weight"] =
        distribute_tensor(Tensor::randn({8, 6}, /*seed=*/1), mesh, {Shard(0), Replicate()});
    state["model.embed"] = distribute_tensor(Tensor::randn({10, 4}, /*seed=*/2), mesh,
                                             {Shard(0, 1), Shard(0, 0)});
    state["optim.grad_sum"] =
        distribute_tensor(Tensor::randn({4, 6}, /*seed=*/3), mesh, {Shard(1), Partial()});
    state["rng.state"] = Tensor::arange(16);
    state["step"] = checkpoint::Value(int64_t{100});
    state["lr"] = checkpoint::Value(0.001);
    state["run"] = checkpoint::Value(std::string("example"));
    state["betas"] = checkpoint::Value(std::vector<double>{0.9, 0.999});
    state["mesh"] = checkpoint::Value(std::vector<int64_t>{2, 2});
    state["resumed"] = checkpoint::Value(false);
    checkpoint::save(state, argv[1], options);
  } catch (const std::exception& e) {
    std::cerr << "make_checkpoint: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
