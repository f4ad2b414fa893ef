// The `dtensor` command-line program. For now: `dtensor demo` shows the
// dense tensor layer; the DTensor commands (visualize, plan, demo of a
// tensor-parallel model) arrive with the next issues.
#include <iostream>

#include <CLI/CLI.hpp>

#include "dtensor/tensor.h"

int main(int argc, char** argv) {
  CLI::App app{"dtensor: distributed tensors over a device mesh (Shard / Replicate / Partial)"};
  app.require_subcommand(1);
  auto* demo = app.add_subcommand("demo", "Run a small demo of the dense tensor layer");
  CLI11_PARSE(app, argc, argv);
  (void)demo;
  using namespace dtensor;
  Tensor x = Tensor::randn({2, 3}, /*seed=*/0);
  std::cout << x << "\n";
  return 0;
}
