// The validator's table (rules.h): markdown, one line per op case and mesh,
// the totals, then a few example layouts of every missing or incorrect row.
#include <set>
#include <sstream>

#include "dtensor/rules.h"

namespace dtensor {

namespace {
std::string mesh_name(const Shape& mesh) {
  std::string s;
  for (size_t i = 0; i < mesh.size(); ++i) {
    if (i) s += 'x';
    s += std::to_string(mesh[i]);
  }
  return s;
}
}  // namespace

int64_t RuleCheckReport::incorrect() const {
  int64_t n = 0;
  for (const RuleCheckRow& r : rows) n += r.incorrect;
  return n;
}

int64_t RuleCheckReport::missing() const {
  int64_t n = 0;
  for (const RuleCheckRow& r : rows) n += r.missing;
  return n;
}

int64_t RuleCheckReport::layouts() const {
  int64_t n = 0;
  for (const RuleCheckRow& r : rows) n += r.layouts;
  return n;
}

int64_t RuleCheckReport::ops() const {
  std::set<std::string> names;
  for (const RuleCheckRow& r : rows) names.insert(r.op);
  return static_cast<int64_t>(names.size());
}

std::string RuleCheckReport::table() const {
  std::ostringstream os;
  os << "| op | mesh | layouts | local | communicated | missing | incorrect |\n"
     << "|---|---|---:|---:|---:|---:|---:|\n";
  for (const RuleCheckRow& r : rows) {
    os << "| " << r.op << (r.searched ? "" : " (composite)") << " | " << mesh_name(r.mesh)
       << (r.sampled ? " sampled" : "") << " | " << r.layouts << " | " << r.local << " | "
       << r.communicated << " | " << r.missing << " | " << r.incorrect << " |\n";
  }
  int64_t local = 0, communicated = 0;
  for (const RuleCheckRow& r : rows) local += r.local, communicated += r.communicated;
  os << "\n" << ops() << " op cases, " << layouts() << " layouts: " << local << " local, "
     << communicated << " communicated, " << missing() << " missing, " << incorrect()
     << " incorrect.\n";
  bool header = false;
  for (const RuleCheckRow& r : rows) {
    if (r.missing_examples.empty() && r.incorrect_examples.empty()) continue;
    if (!header) os << "\n### Examples\n\n";
    header = true;
    for (const std::string& e : r.incorrect_examples)
      os << "- **incorrect** " << r.op << " on " << mesh_name(r.mesh) << ": " << e << "\n";
    for (const std::string& e : r.missing_examples)
      os << "- missing " << r.op << " on " << mesh_name(r.mesh) << ": " << e << "\n";
  }
  return os.str();
}

}  // namespace dtensor
