// `dtensor rules`: the sharding-rule validator (include/dtensor/rules.h) and
// its table.
#include <iostream>

#include "cli.h"
#include "dtensor/rules.h"

namespace dtensor::cli {

namespace {

std::vector<Shape> parse_meshes(const std::string& text, const char* option) {
  std::vector<Shape> meshes;
  for (const std::string& item : split_list(text)) {
    Shape mesh = parse_mesh_arg(item);
    DT_CHECK(mesh.product() <= 64, option, ": mesh ", quote(item), " has ", mesh.product(),
             " ranks; the validator runs at most 64");
    meshes.push_back(std::move(mesh));
  }
  return meshes;
}

}  // namespace

int run_rules(const RulesArgs& args) {
  if (args.list) {
    for (const std::string& name : rule_check_cases()) std::cout << name << "\n";
    return 0;
  }
  RuleCheckOptions options;
  options.op = args.op;
  options.meshes = parse_meshes(args.meshes, "--mesh");
  options.sampled_meshes = args.no_sampled ? std::vector<Shape>{} : parse_meshes(args.sampled, "--sampled");
  options.max_layouts = args.max_layouts;
  options.samples = args.samples;
  options.search_missing = !args.no_search;
  options.seed = args.seed;
  const RuleCheckReport report = check_rules(options);
  std::cout << report.table();
  return report.incorrect() == 0 ? 0 : 1;
}

}  // namespace dtensor::cli
