// The `dtensor` command-line program.
//
// Subcommands so far: `demo` (a tour of the dense tensor layer with a
// correctness check and a timing) and `visualize` (which rank holds which part
// of a tensor for a given mesh, shape and placements). The other DTensor
// subcommands (plan, the tensor-parallel model demo) arrive with the planner
// and demo issues.
#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "dtensor/debug.h"
#include "dtensor/spec.h"
#include "dtensor/tensor.h"

namespace {

using namespace dtensor;

// A two-layer MLP forward pass and loss on the dense tensor layer, checked
// against an independent formulation of the same math.
int run_demo(int64_t batch, int64_t hidden, int64_t classes) {
  const int64_t in = hidden;
  Tensor x = Tensor::randn({batch, in}, /*seed=*/1);
  Tensor w1 = Tensor::randn({4 * hidden, in}, 2) * (1.0 / std::sqrt(static_cast<double>(in)));
  Tensor b1 = Tensor::zeros({4 * hidden});
  Tensor w2 = Tensor::randn({classes, 4 * hidden}, 3) * (1.0 / std::sqrt(4.0 * hidden));
  Tensor target = Tensor::randint(0, classes, {batch}, 4);

  auto t0 = std::chrono::steady_clock::now();
  Tensor h = gelu(linear(layer_norm(x, {in}), w1, b1));
  Tensor logits = linear(h, w2);
  Tensor loss = cross_entropy(logits, target);
  auto t1 = std::chrono::steady_clock::now();

  // The same loss spelled out: -mean(log_softmax(logits)[i, target[i]]).
  Tensor logp = log_softmax(matmul(h, w2.t()), 1);
  Tensor picked = index_select(logp.reshape({-1}), 0,
                               Tensor::arange(batch) * classes + target);
  Tensor ref = neg(mean(picked));
  const double diff = max_abs_diff(loss, ref);

  std::cout << "dtensor demo: dense tensor layer (the DTensor demo arrives with later issues)\n"
            << "  x " << x.shape() << " -> layer_norm -> linear " << w1.shape() << " -> gelu -> "
            << "linear " << w2.shape() << " -> cross_entropy\n"
            << "  logits[0, :4] = " << logits.select(0, 0).narrow(0, 0, 4) << "\n"
            << "  loss = " << loss.item() << " (reference " << ref.item() << ", |diff| = " << diff
            << ")\n";
  std::printf("  forward time: %.3f ms\n",
              std::chrono::duration<double, std::milli>(t1 - t0).count());
  if (!(diff <= 1e-5)) {
    std::cout << "  MISMATCH: the loss differs from the reference by " << diff << "\n";
    return 1;
  }
  std::cout << "  verified\n";
  return 0;
}

// The arguments of `dtensor visualize`, as typed.
struct VisualizeArgs {
  std::string mesh;
  std::string names;
  std::string shape;
  std::string placements;
  std::string dtype = "f32";
  bool json = false;
};

// Splits "a,b,c" at commas, trimming spaces around each item.
std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> items;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const size_t b = item.find_first_not_of(" \t");
    const size_t e = item.find_last_not_of(" \t");
    items.push_back(b == std::string::npos ? "" : item.substr(b, e - b + 1));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return items;
}

// "18,2" (brackets allowed: "[18, 2]"; "" or "[]" is a 0-d tensor) -> [18, 2].
Shape parse_shape_list(const std::string& text) {
  std::string body = text;
  const size_t b = body.find_first_not_of(" \t");
  const size_t e = body.find_last_not_of(" \t");
  body = b == std::string::npos ? "" : body.substr(b, e - b + 1);
  if (body.size() >= 2 && body.front() == '[' && body.back() == ']') body = body.substr(1, body.size() - 2);
  Shape shape;
  if (body.find_first_not_of(" \t") == std::string::npos) return shape;
  for (const std::string& item : split_list(body)) {
    int64_t v = -1;
    auto [next, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    DT_CHECK(ec == std::errc() && next == item.data() + item.size() && !item.empty() && v >= 0,
             "expected a tensor shape like 18,2 (sizes >= 0 separated by commas), got '", text, "'");
    DT_CHECK(shape.size() < static_cast<size_t>(kMaxDims), "shape '", text, "' has more than ",
             kMaxDims, " dims");
    shape.push_back(v);
  }
  return shape;
}

// Builds the spec the arguments describe over a simulated world of exactly
// the mesh's ranks; throws dtensor::Error naming the bad argument.
DTensorSpec visualize_spec(const VisualizeArgs& args) {
  const Shape mesh_shape = parse_mesh_shape(args.mesh);
  // A table of a million rows helps no one, and the simulated world holds one
  // entry per rank; refuse before building it.
  constexpr int64_t kMaxRanks = 1 << 16;
  int64_t ranks = 1;
  for (int64_t s : mesh_shape) {
    DT_CHECK(s <= kMaxRanks && ranks * s <= kMaxRanks, "mesh ", args.mesh, " has more than ",
             kMaxRanks, " ranks; visualize shows at most that many");
    ranks *= s;
  }
  std::vector<std::string> names;
  if (!args.names.empty()) {
    names = split_list(args.names);
    DT_CHECK(names.size() == mesh_shape.size(), "--names gives ", names.size(), " name(s) ('",
             args.names, "') for a ", mesh_shape.size(), "-d mesh ", args.mesh);
  }
  const Shape shape = parse_shape_list(args.shape);
  const Placements placements = parse_placements(args.placements);
  const DType dtype = parse_dtype(args.dtype);
  DeviceMesh mesh(World::simulated(static_cast<int>(ranks)), mesh_shape, names);
  return DTensorSpec(mesh, placements, shape, dtype);
}

nlohmann::ordered_json dims_json(const DimVector& v) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (int64_t x : v) out.push_back(x);
  return out;
}

int run_visualize(const VisualizeArgs& args) {
  const DTensorSpec spec = visualize_spec(args);
  if (!args.json) {
    std::cout << visualize_sharding(spec);
    return 0;
  }
  const DeviceMesh& mesh = spec.mesh();
  nlohmann::ordered_json out;
  out["mesh"] = dims_json(mesh.shape());
  if (!args.names.empty()) out["names"] = mesh.names();
  out["shape"] = dims_json(spec.shape());
  out["dtype"] = dtype_short_name(spec.dtype());
  out["placements"] = to_string(spec.placements());
  nlohmann::ordered_json shards = nlohmann::ordered_json::array();
  std::vector<int> ranks = mesh.ranks();
  std::sort(ranks.begin(), ranks.end());
  for (int rank : ranks) {
    const DimVector coord = *mesh.coordinate(rank);
    const ShardExtent e = spec.extent(coord);
    nlohmann::ordered_json shard;
    shard["rank"] = rank;
    shard["coordinate"] = dims_json(coord);
    shard["local_shape"] = dims_json(e.local_shape);
    shard["global_offset"] = dims_json(e.global_offset);
    shards.push_back(std::move(shard));
  }
  out["shards"] = std::move(shards);
  std::cout << out.dump(2) << "\n";
  return 0;
}

// Error messages go on one line so scripts can rely on a single stderr line.
std::string one_line(std::string text) {
  std::replace(text.begin(), text.end(), '\n', ' ');
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"dtensor: distributed tensors over a device mesh (Shard / Replicate / Partial)."};
  app.require_subcommand(1);
  int64_t batch = 64, hidden = 256, classes = 1000;
  auto* demo = app.add_subcommand("demo", "Run the demo: a small MLP forward pass, verified");
  demo->add_option("--batch", batch, "rows of the input")->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  demo->add_option("--hidden", hidden, "hidden size")->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  demo->add_option("--classes", classes, "number of classes")->check(CLI::Range(int64_t{1}, int64_t{1} << 20));

  VisualizeArgs vis;
  auto* visualize = app.add_subcommand(
      "visualize",
      "Show which rank holds which part of a tensor (like PyTorch's visualize_sharding)");
  visualize->footer(
      "Prints one row per rank of the mesh: its mesh coordinate, the global index range\n"
      "[a, b) it holds of every tensor dim, and its local shape. Partial mesh dims get a\n"
      "note under the table. The ranks are simulated in this process; nothing is launched.\n"
      "\n"
      "Examples:\n"
      "  dtensor visualize --mesh 4 --shape 8,16 --placements 'S(0)'\n"
      "  dtensor visualize --mesh 4x2 --names dp,tp --shape 18,2 --placements 'S(0),S(0)'\n"
      "  dtensor visualize --mesh 2x2 --shape 4,6 --placements 'S(1),P(sum)' --json\n"
      "\n"
      "Exit status: 0 on success, 2 on a bad argument (one line on stderr says which).");
  visualize->add_option("--mesh", vis.mesh,
                        "mesh shape: sizes joined by 'x', e.g. 8 or 4x2 (ranks 0..n-1, row-major)")
      ->required();
  visualize->add_option("--names", vis.names,
                        "mesh dim names, comma-separated, one per mesh dim, e.g. dp,tp");
  visualize->add_option("--shape", vis.shape,
                        "global tensor shape, comma-separated, e.g. 18,2")
      ->required();
  visualize->add_option(
               "--placements", vis.placements,
               "one placement per mesh dim, comma-separated (quote it for the shell):\n"
               "S(d)     Shard(d): tensor dim d is split over the mesh dim in chunks of\n"
               "         ceil(L/n); trailing chunks may be short or empty. S(-1) = last dim\n"
               "R        Replicate(): every rank of the mesh dim holds the whole\n"
               "P(op)    Partial(op): every rank holds a piece and the value is the\n"
               "         reduction over the mesh dim; op is sum (default, 'P'), avg, max, min\n"
               "e.g. 'S(0),R' or 'S(0),P(sum)'")
      ->required();
  visualize->add_option("--dtype", vis.dtype, "element type: f32, f64, i64 or bool")
      ->capture_default_str();
  visualize->add_flag("--json", vis.json,
                      "print JSON instead of the table: mesh, names, shape, dtype, placements\n"
                      "and shards, one {rank, coordinate, local_shape, global_offset} per rank");

  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    if (visualize->parsed()) {
      std::cerr << "dtensor visualize: " << one_line(e.what())
                << " (see dtensor visualize --help)\n";
    } else {
      std::cerr << "dtensor: " << one_line(e.what()) << " (see dtensor --help)\n";
    }
    return 2;
  }
  try {
    if (*demo) return run_demo(batch, hidden, classes);
  } catch (const dtensor::Error& e) {
    std::cerr << "dtensor: " << e.what() << "\n";
    return 2;
  }
  try {
    if (*visualize) return run_visualize(vis);
  } catch (const dtensor::Error& e) {
    std::cerr << "dtensor visualize: " << one_line(e.what()) << "\n";
    return 2;
  }
  return 0;
}
