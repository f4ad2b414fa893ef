// `dtensor rules`: the sharding-rule validator (include/dtensor/rules.h) and
// its table.
#include <iostream>

#include "cli.h"
#include "output.h"
#include "dtensor/rules.h"

namespace dtensor::cli {

namespace {

std::vector<Shape> parse_meshes(const std::string& text, const char* option) {
  std::vector<Shape> meshes;
  if (text.empty()) return meshes;  // --mesh '': none
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
  options.meshes = parse_meshes(args.meshes, "--mesh");
  options.sampled_meshes = args.no_sampled ? std::vector<Shape>{} : parse_meshes(args.sampled, "--sampled");
  options.max_layouts = args.max_layouts;
  options.samples = args.samples;
  options.search_missing = !args.no_search;
  options.seed = args.seed;
  std::vector<std::string> cases;
  for (const std::string& name : rule_check_cases())
    if (name.find(args.op) != std::string::npos) cases.push_back(name);
  DT_CHECK(!cases.empty(), "--op ", quote(args.op), ": no op case matches (",
           rule_check_cases().size(), " cases; `dtensor rules --list` names them)");
  // One op case at a time (each is seeded by its place in the list, so the
  // rows are those of one check of them all), its rows printed as soon as
  // they are known: the whole table takes minutes.
  const auto split = [](const std::string& table) {
    const size_t totals = table.find("\n\n");  // the rows end at the first blank line
    return std::pair{table.substr(0, totals + 1), table.substr(totals + 1)};
  };
  RuleCheckReport report;
  ProgressLine progress;
  options.exact_op = true;
  for (size_t i = 0; i < cases.size(); ++i) {
    progress.show("checking " + cases[i] + " (" + std::to_string(i + 1) + "/" +
                  std::to_string(cases.size()) + ")");
    options.op = cases[i];
    const RuleCheckReport one = check_rules(options);
    progress.clear();
    std::string rows = split(one.table()).first;
    // The header (two lines) once, before the first case's rows.
    if (i > 0) rows = rows.substr(rows.find('\n', rows.find('\n') + 1) + 1);
    std::cout << rows;
    flush_stdout();
    report.rows.insert(report.rows.end(), one.rows.begin(), one.rows.end());
  }
  std::cout << split(report.table()).second;
  return report.incorrect() == 0 ? 0 : 1;
}

}  // namespace dtensor::cli
