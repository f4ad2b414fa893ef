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

// Parses --mesh ("4x2"); throws dtensor::Error naming the option.
Shape parse_mesh_arg(const std::string& mesh_text);
// Throws dtensor::Error naming --shape when the element or byte count of a
// tensor of `shape` and `dtype` overflows int64.
void check_shape_fits(const Shape& shape, DType dtype, const std::string& shape_text);
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
// Error messages go on one line so scripts can rely on a single stderr line:
// newlines become spaces, other control bytes and bytes that are not UTF-8
// are escaped (\xff), and any run of more than 120 non-space characters (a
// huge argument echoed back) is cut to its start and its length.
std::string one_line(std::string text);
// User text for a message: 'text' quoted, escaped like one_line and cut to
// 60 characters plus "... (N bytes)" when longer.
std::string quote(const std::string& text);
// Whether text is well-formed UTF-8 without control characters.
bool is_clean_utf8(const std::string& text);
// The number of ranks of a --mesh shape; throws dtensor::Error naming
// mesh_text when it exceeds kMaxRanks (the simulated world holds every rank
// in this process) or overflows.
inline constexpr int64_t kMaxRanks = int64_t{1} << 16;
int64_t mesh_rank_count(const Shape& mesh_shape, const std::string& mesh_text);
// "4294967296 bytes (4.0 GiB)" for an estimate in bytes.
std::string bytes_text(double bytes);
// Throws dtensor::Error naming `option` and `what_for` when an operation is
// estimated to need more memory than is available now.
void check_memory_estimate(double bytes, const std::string& what_for, const std::string& advice);

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
  bool no_box_exchange = false;
  int64_t devices_per_host = 8;
  bool json = false;
  bool verify = false;
};
int run_plan(const PlanArgs& args);

struct CheckpointInspectArgs {
  std::string dir;
  bool chunks = false;     // list every chunk
  bool no_verify = false;  // skip reading the data files
  bool json = false;
};
// Exit 1 (and one line on stderr) when the checkpoint cannot be read or a
// checksum does not match.
int run_checkpoint_inspect(const CheckpointInspectArgs& args);

struct RulesArgs {
  std::string op;
  std::string meshes = "3,4,2x3";
  std::string sampled = "2x2x2";
  bool no_sampled = false;
  int64_t max_layouts = 2048;
  int64_t samples = 48;
  bool no_search = false;
  uint64_t seed = 1;
  bool list = false;
};
// Exit 1 when a layout is incorrect.
int run_rules(const RulesArgs& args);

}  // namespace dtensor::cli
