// parse_nccl_tests (estimate.h): nccl-tests tables read as measured
// collectives, and the estimate timing collectives by them. The samples in
// tests/estimate/nccl_tests/ are in nccl-tests' exact layout (its
// src/common.cu formats: 8 ranks of one host, sizes 8 B to 128 MiB by
// factors of 2); their times have an H100 node's shape, not a measurement.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "dtensor/error.h"
#include "dtensor/estimate.h"

using namespace dtensor;
using namespace dtensor::estimate;

namespace {

std::string sample_path(const std::string& name) {
  return std::string(DTENSOR_NCCL_TESTS_SAMPLES) + "/" + name;
}

std::string read_sample(const std::string& name) {
  std::ifstream in(sample_path(name));
  EXPECT_TRUE(in) << sample_path(name);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// `text` with its first `from` replaced by `to`.
std::string replaced(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

std::string error_of(const std::string& text, const std::string& file = "t/all_reduce_perf.txt") {
  try {
    parse_nccl_tests(text, file);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

const MeasuredCollective* of_bytes(const std::vector<MeasuredCollective>& m, int64_t bytes) {
  for (const MeasuredCollective& c : m)
    if (c.bytes == bytes) return &c;
  return nullptr;
}

std::vector<int> ranks(int first, int n, int stride = 1) {
  std::vector<int> g;
  for (int i = 0; i < n; ++i) g.push_back(first + i * stride);
  return g;
}

}  // namespace

TEST(NcclTestsTest, AllReduceRowsAreTheirSizesAndOutOfPlaceTimes) {
  const std::vector<MeasuredCollective> m =
      parse_nccl_tests(read_sample("all_reduce_perf_8.txt"), "all_reduce_perf_8.txt");
  ASSERT_EQ(m.size(), 25u);  // 8 B to 128 MiB
  for (const MeasuredCollective& c : m) {
    EXPECT_EQ(c.kind, CollectiveKind::AllReduce);
    EXPECT_EQ(c.ranks, 8);
    EXPECT_EQ(c.nodes, 1);
  }
  // "1048576  262144  float  sum  -1  23.54 ... 23.17 ...": the first time.
  const MeasuredCollective* mib = of_bytes(m, 1048576);
  ASSERT_NE(mib, nullptr);
  EXPECT_DOUBLE_EQ(mib->seconds, 23.54e-6);
  EXPECT_DOUBLE_EQ(of_bytes(m, 8)->seconds, 18.41e-6);
  EXPECT_DOUBLE_EQ(of_bytes(m, 134217728)->seconds, 670.86e-6);
}

TEST(NcclTestsTest, AllGathersSizeIsTheOutputSoItsBytesAreTheShard) {
  const std::vector<MeasuredCollective> m =
      parse_nccl_tests(read_sample("all_gather_perf_8.txt"), "all_gather_perf_8.txt");
  ASSERT_EQ(m.size(), 23u);  // 32 B (4 per rank) to 128 MiB gathered
  EXPECT_EQ(m[0].kind, CollectiveKind::AllGather);
  // "1048576  32768  float ... 13.81": 1 MiB gathered is 128 KiB from each of 8.
  const MeasuredCollective* shard = of_bytes(m, 1048576 / 8);
  ASSERT_NE(shard, nullptr);
  EXPECT_DOUBLE_EQ(shard->seconds, 13.81e-6);
  EXPECT_EQ(m.back().bytes, 134217728 / 8);
}

// What the estimate does with them: a collective of a size in the table
// takes the table's time, one between two rows the interpolation, and
// one the table does not cover (another group size, beyond its sizes,
// another span) the alpha-beta model's.
TEST(NcclTestsTest, TheEstimateTimesCollectivesByTheTable) {
  Cluster c = cluster_preset("h100");
  c.measured = parse_nccl_tests(read_sample("all_reduce_perf_8.txt"), "all_reduce_perf_8.txt");
  const std::vector<MeasuredCollective> gathers =
      parse_nccl_tests(read_sample("all_gather_perf_8.txt"), "all_gather_perf_8.txt");
  c.measured.insert(c.measured.end(), gathers.begin(), gathers.end());
  const std::vector<int> node = ranks(0, 8);
  EXPECT_DOUBLE_EQ(collective_seconds(c, CollectiveKind::AllReduce, 1048576, node), 23.54e-6);
  // Half way from 1 MiB (23.54 us) to 2 MiB (28.60 us).
  EXPECT_DOUBLE_EQ(collective_seconds(c, CollectiveKind::AllReduce, 1572864, node),
                   (23.54e-6 + 28.60e-6) / 2);
  EXPECT_DOUBLE_EQ(collective_seconds(c, CollectiveKind::AllGather, 1048576 / 8, node), 13.81e-6);
  // Not covered: the model, not the table.
  const Cluster model = cluster_preset("h100");
  for (const auto& [kind, bytes, group] :
       {std::tuple{CollectiveKind::AllReduce, int64_t{1048576}, ranks(0, 4)},
        std::tuple{CollectiveKind::AllReduce, int64_t{1} << 28, node},
        std::tuple{CollectiveKind::AllReduce, int64_t{1048576}, ranks(0, 8, 8)},
        std::tuple{CollectiveKind::ReduceScatter, int64_t{1048576}, node}}) {
    EXPECT_FALSE(measured_seconds(c, kind, bytes, group).has_value());
    EXPECT_DOUBLE_EQ(collective_seconds(c, kind, bytes, group),
                     collective_seconds(model, kind, bytes, group));
  }

  // estimate_time's figure for a step of one all_reduce of a size in the table.
  Profile p;
  p.groups = {node};
  StepEvent e;
  e.type = StepEvent::Type::Collective;
  e.kind = CollectiveKind::AllReduce;
  e.bytes = 2097152;
  e.group = 0;
  p.events = {e};
  const TimeEstimate t = estimate_time(p, c);
  EXPECT_DOUBLE_EQ(t.communication, 28.60e-6);
  EXPECT_DOUBLE_EQ(t.step, 28.60e-6);
}

// 16 ranks on two hosts: the table is of a group spanning two nodes, and
// applies to such groups only.
TEST(NcclTestsTest, RanksOnSeveralHostsAreAGroupSpanningAsManyNodes) {
  std::string text = read_sample("all_reduce_perf_8.txt");
  std::string more;
  for (int r = 8; r < 16; ++r) {
    char line[160];
    std::snprintf(
        line, sizeof line,
        "#  Rank %2d Group  0 Pid %6d on gpu-node-018 device %2d [0000:18:00] NVIDIA H100 "
        "80GB HBM3\n",
        r, 50000 + r, r - 8);
    more += line;
  }
  const size_t after = text.find("\n", text.find("#  Rank  7")) + 1;
  text.insert(after, more);
  const std::vector<MeasuredCollective> m = parse_nccl_tests(text, "two_nodes.txt");
  EXPECT_EQ(m[0].ranks, 16);
  EXPECT_EQ(m[0].nodes, 2);
  Cluster c = cluster_preset("h100");  // 8 ranks per node
  c.measured = m;
  EXPECT_DOUBLE_EQ(collective_seconds(c, CollectiveKind::AllReduce, 1048576, ranks(0, 16)),
                   23.54e-6);
  EXPECT_FALSE(
      measured_seconds(c, CollectiveKind::AllReduce, 1048576, ranks(0, 16, 8)).has_value());
}

TEST(NcclTestsTest, OlderOutputsAreNamedByTheirFile) {
  // Before "# Collective test starting", and with "error" for "#wrong".
  std::string text = read_sample("all_gather_perf_8.txt");
  text = replaced(text, "# Collective test starting: all_gather_perf\n", "");
  text = replaced(text, "busbw  #wrong     time   algbw   busbw  #wrong",
                  "busbw   error     time   algbw   busbw   error");
  EXPECT_EQ(parse_nccl_tests(text, "logs/all_gather_perf.log").size(), 23u);
  EXPECT_NE(error_of(text, "logs/run3.log").find("logs/run3.log: which collective"),
            std::string::npos)
      << error_of(text, "logs/run3.log");
}

TEST(NcclTestsTest, BadInputNamesTheFileTheLineAndWhatWasExpected) {
  const std::string good = read_sample("all_reduce_perf_8.txt");
  const auto expect_error = [](const std::string& text, const std::string& want) {
    const std::string e = error_of(text);
    EXPECT_NE(e.find(want), std::string::npos) << "want '" << want << "', got: " << e;
  };
  expect_error("size count type\n1 2 3\n",
               "t/all_reduce_perf.txt: not nccl-tests output: expected its header");
  expect_error(replaced(replaced(good, "# nccl-tests version", "# some-tool version"), "# nThread",
                        "# Threads"),
               "t/all_reduce_perf.txt:16: a table before nccl-tests' header");
  // The column names without a time column.
  expect_error(replaced(good, "time   algbw   busbw  #wrong     time",
                        "tijd   algbw   busbw  #wrong     tijd"),
               "t/all_reduce_perf.txt:16: expected a 'time' column");
  expect_error(replaced(good, "   time   algbw   busbw  #wrong     time",
                        "cputime   algbw   busbw  #wrong  cputime"),
               "'cputime' (-C 1): run without -C");
  expect_error(replaced(good, "   busbw  #wrong     time", "   busbw     time"),
               ":16: expected the columns time, algbw, busbw, #wrong after 'root'");
  // A size that does not parse, a time that does not, too few columns.
  expect_error(replaced(good, "     1048576        262144", "     1O48576        262144"),
               "t/all_reduce_perf.txt:35: expected a row starting with its size in bytes, got "
               "'1O48576'");
  expect_error(replaced(good, "   23.54   44.54", "    nan?   44.54"),
               ":35: the out-of-place time 'nan?' is not a positive number of microseconds");
  expect_error(good + "     268435456\n", ":48: expected 13 columns (size ... #wrong), got 1");
  expect_error(
      replaced(good, "   23.54   44.54   77.95       0", "   23.54   44.54   77.95       3"),
      ":35: the row of size 1048576 has 3 wrong elements");
  expect_error(good +
                   "     1048576        262144     float     sum      -1    23.54   44.54   "
                   "77.95       0    23.17   45.26   79.20       0\n",
               ":48: size 1048576 measured twice (lines 35 and 48)");
  expect_error(replaced(good, "starting: all_reduce_perf", "starting: sendrecv_perf"),
               ":2: nccl-tests program sendrecv_perf measures no collective dtensor runs");
  std::string no_ranks = good;
  while (no_ranks.find("#  Rank") != std::string::npos)
    no_ranks = replaced(no_ranks, "#  Rank", "#  Node");
  expect_error(no_ranks, "no '#  Rank N Group G ...' lines");
  expect_error(replaced(good, "#  Rank  3 Group", "#  Rank  9 Group"),
               "ranks 0 to 9 listed but 8 lines");
  expect_error(replaced(good, "#  Rank  3 Group  0 Pid  41526 on", "#  Rank  3 Group  0 Pid  on"),
               ":9: expected a device line");
  std::string no_table = good.substr(0, good.find("#                   "));
  expect_error(no_table, "no table: expected its column names");
}
