// Helpers shared by the subcommands of the `dtensor` program: parsing the
// list arguments, building a mesh from --mesh/--names, JSON of dim lists.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dtensor/mesh.h"
#include "dtensor/tensor.h"
#include "demo_model.h"

namespace dtensor::cli {

// Splits "a,b,c" at commas, trimming spaces around each item.
std::vector<std::string> split_list(const std::string& text);
// "18,2" (brackets allowed: "[18, 2]"; "" or "[]" is a 0-d tensor) -> [18, 2].
Shape parse_shape_list(const std::string& text);
// A mesh of the --mesh shape ("4x2") over a simulated world of exactly its
// ranks, with the --names (comma-separated, may be empty); `what` names the
// subcommand's limit in the message.
// With `world` given, the mesh is over that world instead (its size must
// match; the caller checks with a message of its own).
DeviceMesh make_mesh(const std::string& mesh_text, const std::string& names_text,
                     const World* world = nullptr);
nlohmann::ordered_json dims_json(const DimVector& v);
// The mesh's dim names for JSON, one per dim; an unnamed dim i is "d<i>".
nlohmann::ordered_json mesh_names_json(const DeviceMesh& mesh);
// Error messages go on one line so scripts can rely on a single stderr line.
std::string one_line(std::string text);

// The subcommands.
struct DemoArgs {
  std::string mesh = "2x4";
  std::string names;  // empty: dp,tp (tp for a 1-d mesh)
  ModelConfig model;
  int steps = 3;
  std::string world = "auto";  // auto | sim | mpi
  double tolerance = 1e-4;
  bool json = false;
};
int run_demo(const DemoArgs& args);

struct VisualizeArgs {
  std::string mesh;
  std::string names;
  std::string shape;
  std::string placements;
  std::string dtype = "f32";
  bool json = false;
};
int run_visualize(const VisualizeArgs& args);

struct PlanArgs {
  std::string mesh;
  std::string names;
  std::string shape;
  std::string dtype = "f32";
  std::string from;
  std::string to;
  std::vector<std::string> flatten;
  bool no_auto_flatten = false;
  int64_t devices_per_host = 8;
  bool json = false;
  bool verify = false;
};
int run_plan(const PlanArgs& args);

}  // namespace dtensor::cli
