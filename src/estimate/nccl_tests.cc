// parse_nccl_tests (estimate.h): the table an nccl-tests program prints,
// as measured collectives. The format, as nccl-tests writes it
// (src/common.cu): a header of '#' lines ("# nccl-tests version ...",
// "# Collective test starting: all_gather_perf", "# nThread 1 nGpus 8 ...",
// "# Using devices" and one "#  Rank  0 Group  0 Pid 1234 on host device
// 0 [...] NVIDIA H100 80GB HBM3" line per rank), the column names
// ("#  size  count  type  redop  root  time  algbw  busbw  #wrong  time
// ..."; out-of-place first, then in-place), a units line, one row per size
// (bytes, elements, type, redop, root, then per placement time in µs,
// bandwidths in GB/s and the wrong elements, "N/A" when not checked), and
// a footer ("# Avg bus bandwidth : ..."). Older versions print no
// "Collective test starting" line and name "#wrong" "error".
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "dtensor/error.h"
#include "dtensor/estimate.h"

namespace dtensor::estimate {

namespace {

struct Program {
  const char* name;  // the binary, as "Collective test starting" names it
  CollectiveKind kind;
};
// The programs whose collective dtensor runs. Others (sendrecv, scatter,
// gather, reduce, hypercube) measure what no dtensor collective is.
constexpr Program kPrograms[] = {{"all_reduce_perf", CollectiveKind::AllReduce},
                                 {"all_gather_perf", CollectiveKind::AllGather},
                                 {"reduce_scatter_perf", CollectiveKind::ReduceScatter},
                                 {"alltoall_perf", CollectiveKind::AllToAll},
                                 {"broadcast_perf", CollectiveKind::Broadcast}};
constexpr const char* kProgramList =
    "all_reduce_perf, all_gather_perf, reduce_scatter_perf, alltoall_perf or broadcast_perf";

std::vector<std::string> tokens_of(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> out;
  for (std::string t; in >> t;) out.push_back(t);
  return out;
}

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

// A whole token as a non-negative integer / a finite number, or nothing.
std::optional<int64_t> integer_of(const std::string& t) {
  if (t.empty() || t.size() > 18 ||
      !std::all_of(t.begin(), t.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return {};
  return std::stoll(t);
}
std::optional<double> number_of(const std::string& t) {
  char* end = nullptr;
  const double v = std::strtod(t.c_str(), &end);
  if (t.empty() || end != t.c_str() + t.size() || !std::isfinite(v)) return {};
  return v;
}

// The program a name mentions (a "Collective test starting" value, or a
// file name), or null.
const Program* program_in(const std::string& text) {
  for (const Program& p : kPrograms)
    if (text.find(p.name) != std::string::npos) return &p;
  return nullptr;
}

}  // namespace

std::vector<MeasuredCollective> parse_nccl_tests(const std::string& text, const std::string& file) {
  const auto where = [&](size_t line) { return file + ":" + std::to_string(line); };
  bool header = false;  // "# nccl-tests version" or "# nThread" seen
  const Program* program = nullptr;
  struct Rank {
    int group;
    std::string host;
  };
  std::map<int, Rank> ranks;
  std::vector<std::string> columns;  // the table's names, once seen
  size_t time_column = 0, wrong_column = 0;
  struct Row {
    int64_t size;
    double seconds;
    size_t line;
  };
  std::vector<Row> rows;

  std::istringstream in(text);
  std::string line;
  for (size_t n = 1; std::getline(in, line); ++n) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const std::vector<std::string> t = tokens_of(line);
    if (t.empty()) continue;
    if (t[0] == "#" || t[0][0] == '#') {
      // A comment: the header's lines and the table's names.
      const std::string body = line.substr(line.find('#') + 1);
      const std::vector<std::string> b = tokens_of(body);
      if (b.empty()) continue;
      if (starts_with(body, " nccl-tests version") || b[0] == "nThread") {
        header = true;
      } else if (b.size() >= 4 && b[0] == "Collective" && b[1] == "test" && b[2] == "starting:") {
        program = program_in(b[3]);
        DT_CHECK(program != nullptr, where(n), ": nccl-tests program ", b[3],
                 " measures no collective dtensor runs; expected ", kProgramList);
      } else if (b[0] == "Rank" && b.size() >= 2 && integer_of(b[1])) {
        // "#  Rank  0 Group  0 Pid  1234 on host device  0 [...] name", or
        // before groups "#  Rank  0 Pid  1234 on host device  0 [...] name".
        const bool grouped =
            b.size() >= 8 && b[2] == "Group" && integer_of(b[3]) && b[4] == "Pid" && b[6] == "on";
        const bool plain = b.size() >= 6 && b[2] == "Pid" && b[4] == "on";
        DT_CHECK(grouped || plain, where(n),
                 ": expected a device line '#  Rank N Group G Pid P on HOST device D ...', got '",
                 line, "'");
        const int rank = static_cast<int>(*integer_of(b[1]));
        DT_CHECK(ranks.count(rank) == 0, where(n), ": rank ", rank, " listed twice");
        ranks[rank] = grouped ? Rank{static_cast<int>(*integer_of(b[3])), b[7]} : Rank{0, b[5]};
      } else if (b.size() >= 3 && b[0] == "size" && b[1] == "count" && b[2] == "type") {
        DT_CHECK(header, where(n),
                 ": a table before nccl-tests' header ('# nccl-tests version ...' or "
                 "'# nThread ...'); is this nccl-tests output?");
        DT_CHECK(columns.empty(), where(n), ": a second table; expected one test per file (run ",
                 "one -d type and -o op)");
        columns = b;
        const auto time = std::find(columns.begin(), columns.end(), "time");
        DT_CHECK(time != columns.end(), where(n), ": expected a 'time' column (the device's time; ",
                 std::find(columns.begin(), columns.end(), "cputime") != columns.end()
                     ? "this table has the host's, 'cputime' (-C 1): run without -C"
                     : "none in this table",
                 ")");
        time_column = static_cast<size_t>(time - columns.begin());
        DT_CHECK(time_column + 3 < columns.size() &&
                     (columns[time_column + 3] == "#wrong" || columns[time_column + 3] == "error"),
                 where(n), ": expected the columns time, algbw, busbw, #wrong after '",
                 columns[time_column - 1], "'");
        wrong_column = time_column + 3;
      }
      continue;
    }
    if (line.find("NCCL INFO") != std::string::npos || line.find("NCCL WARN") != std::string::npos)
      continue;  // NCCL's own log (NCCL_DEBUG), which may interleave the table
    if (columns.empty()) {
      // Before the header anything goes (a launcher's noise); after it, a
      // row needs the column names first.
      DT_CHECK(!header || !integer_of(t[0]), where(n),
               ": a table row before the table's column names ('#  size  count  type ...')");
      continue;
    }
    const std::optional<int64_t> size = integer_of(t[0]);
    DT_CHECK(size.has_value(), where(n), ": expected a row starting with its size in bytes, got '",
             t[0], "'");
    DT_CHECK(t.size() > wrong_column, where(n), ": expected ", columns.size(), " columns (",
             columns[0], " ... ", columns[wrong_column], "), got ", t.size());
    const std::optional<double> us = number_of(t[time_column]);
    DT_CHECK(us.has_value() && *us > 0, where(n), ": the out-of-place time '", t[time_column],
             "' is not a positive number of microseconds");
    const std::string& wrong = t[wrong_column];
    DT_CHECK(wrong == "N/A" || (number_of(wrong) && *number_of(wrong) == 0), where(n),
             ": the row of size ", *size, " has ", wrong,
             " wrong elements: the run's results were wrong, its times are no measurement");
    for (const Row& r : rows)
      DT_CHECK(r.size != *size, where(n), ": size ", *size, " measured twice (lines ", r.line,
               " and ", n, "); expected one test per file (run one -d type and -o op)");
    rows.push_back({*size, *us * 1e-6, n});
  }

  DT_CHECK(header, file,
           ": not nccl-tests output: expected its header '# nccl-tests version ...' "
           "(or '# nThread ...' before version 2.10)");
  DT_CHECK(!columns.empty(), file,
           ": no table: expected its column names '#  size  count  type  redop  root  time ...'");
  DT_CHECK(!rows.empty(), file, ": the table has no rows");
  if (program == nullptr) {
    // Versions before "Collective test starting": the file's name says.
    const std::string name = file.substr(file.find_last_of('/') + 1);
    program = program_in(name);
    DT_CHECK(program != nullptr, file,
             ": which collective does it measure? Its header has no '# Collective test "
             "starting:' line (older nccl-tests); name the file after the program (",
             kProgramList, ")");
  }
  DT_CHECK(!ranks.empty(), file,
           ": no '#  Rank N Group G ...' lines (expected the devices nccl-tests lists under "
           "'# Using devices')");
  DT_CHECK(ranks.rbegin()->first == static_cast<int>(ranks.size()) - 1, file, ": ranks ",
           ranks.begin()->first, " to ", ranks.rbegin()->first, " listed but ", ranks.size(),
           " lines: expected one line for each rank from 0 (a list nccl-tests cut short?)");
  // The collective runs within each group (nccl-tests' split communicators):
  // its size and span are one group's, and the groups must agree.
  std::map<int, std::pair<int, std::set<std::string>>> groups;  // group -> ranks, hosts
  for (const auto& [rank, r] : ranks) {
    ++groups[r.group].first;
    groups[r.group].second.insert(r.host);
  }
  const auto& [first_group, shape] = *groups.begin();
  for (const auto& [g, s] : groups)
    DT_CHECK(s.first == shape.first && s.second.size() == shape.second.size(), file, ": groups ",
             first_group, " and ", g, " differ (", shape.first, " ranks on ", shape.second.size(),
             " hosts, ", s.first, " on ", s.second.size(), "); expected groups alike");
  const int n = shape.first, nodes = static_cast<int>(shape.second.size());

  std::vector<MeasuredCollective> out;
  for (const Row& r : rows) {
    int64_t bytes = r.size;
    if (program->kind == CollectiveKind::AllGather) {
      // The size is the gathered output; dtensor's bytes are the input shard.
      DT_CHECK(r.size % n == 0, where(r.line), ": an all_gather of ", r.size, " bytes over ", n,
               " ranks: expected a multiple of the ranks");
      bytes = r.size / n;
    }
    out.push_back({program->kind, n, bytes, r.seconds, nodes});
  }
  return out;
}

}  // namespace dtensor::estimate
