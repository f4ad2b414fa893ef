// The estimate's time model (estimate.h): the collectives' alpha-beta
// formulas and the links a group spans, the ops' roofline, and the two
// streams of estimate_time on hand-made event streams (what overlaps and
// what waits). The figures are the model's own, computed here by hand.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "dtensor/estimate.h"

using namespace dtensor;
using namespace dtensor::estimate;

namespace {

// 4 ranks per node; a latency of 1 s and 1 byte/s within a node, 10 s and
// 0.5 byte/s across: every term of a formula shows in the result.
Cluster toy() {
  Cluster c;
  c.ranks_per_node = 4;
  c.within_node = {1, 1};
  c.across_nodes = {10, 0.5};
  c.device.name = "toy";
  c.device.peak_flops[static_cast<int>(DType::Float32)] = 100;
  c.device.vector_flops = 10;
  c.device.memory_bandwidth = 1000;
  c.device.matmul_efficiency = 0.5;
  c.device.memory_efficiency = 0.5;
  c.device.op_overhead = 0.25;
  return c;
}

StepEvent op(const char* name, double flops, int64_t bytes) {
  StepEvent e;
  e.type = StepEvent::Type::Op;
  e.op = name;
  e.flops = flops;
  e.bytes = bytes;
  return e;
}

StepEvent collective(CollectiveKind kind, int64_t bytes, int group, bool started = false) {
  StepEvent e;
  e.type = StepEvent::Type::Collective;
  e.kind = kind;
  e.bytes = bytes;
  e.group = group;
  e.started = started;
  return e;
}

StepEvent wait_for(int64_t event) {
  StepEvent e;
  e.type = StepEvent::Type::Wait;
  e.waits = event;
  return e;
}

}  // namespace

TEST(EstimateTimeTest, CollectivesFollowNcclsAlgorithmsOverTheSlowestLink) {
  const Cluster c = toy();
  const std::vector<int> node{0, 1, 2, 3}, spread{0, 4}, one{5};
  // all_gather: n - 1 steps of a shard each.
  EXPECT_DOUBLE_EQ(collective_seconds(c, CollectiveKind::AllGather, 8, node), 3 * 1 + 3 * 8);
  // reduce_scatter and all_to_all: n - 1 steps of 1/n of the input each.
  EXPECT_DOUBLE_EQ(collective_seconds(c, CollectiveKind::ReduceScatter, 8, node), 3 + 6);
  EXPECT_DOUBLE_EQ(collective_seconds(c, CollectiveKind::AllToAll, 8, node), 3 + 6);
  // all_reduce: ring 2(n-1) alpha + 2 (n-1)/n b beta = 6 + 12; tree
  // 2 log2(n) alpha + 2 b beta = 4 + 16: the ring is faster.
  EXPECT_DOUBLE_EQ(collective_seconds(c, CollectiveKind::AllReduce, 8, node), 18);
  // No bytes: the tree's fewer steps win (ring 6, tree 4).
  EXPECT_DOUBLE_EQ(collective_seconds(c, CollectiveKind::AllReduce, 0, node), 4);
  // Across nodes: the slower link, whichever pair of the group spans it.
  EXPECT_DOUBLE_EQ(collective_seconds(c, CollectiveKind::AllGather, 8, spread), 10 + 16);
  // A group of one moves nothing.
  EXPECT_DOUBLE_EQ(collective_seconds(c, CollectiveKind::AllReduce, 1 << 20, one), 0);
}

TEST(EstimateTimeTest, OpsTakeTheLongerOfTheirFlopsAndBytes) {
  const Device d = toy().device;
  // A product at the matrix peak (100 * 0.5): 1000 FLOPs take 20 s; its
  // 100 bytes at 1000 * 0.5 take 0.2 s.
  EXPECT_DOUBLE_EQ(op_seconds(d, op("mm", 1000, 100)), 20 + 0.25);
  // Any other op at the vector rate: 10 FLOPs take 1 s; 5000 bytes 10 s.
  EXPECT_DOUBLE_EQ(op_seconds(d, op("add", 10, 5000)), 10 + 0.25);
}

TEST(EstimateTimeTest, BlockingCollectivesHoldComputeStartedOnesOverlapUntilWaited) {
  const Cluster c = toy();
  Profile p;
  p.groups = {{0, 1}};  // one step within a node: alpha 1 + the bytes
  // op 1 s | all_gather 1 + 4 = 5 s, blocking | op 1 s
  const StepEvent one_second = op("add", 0, 375);  // 375 / 500 + 0.25
  p.events = {one_second, collective(CollectiveKind::AllGather, 4, 0), one_second};
  TimeEstimate t = estimate_time(p, c);
  EXPECT_DOUBLE_EQ(t.compute, 2);
  EXPECT_DOUBLE_EQ(t.communication, 5);
  EXPECT_DOUBLE_EQ(t.step, 7);
  EXPECT_DOUBLE_EQ(t.exposed_communication, 5);
  // Started early, it runs beside the second op; the third waits for it
  // at the Wait: 1 (op) then max(1 + 1, 1 + 5) = 6, then 1 more.
  p.events = {one_second, collective(CollectiveKind::AllGather, 4, 0, true), one_second,
              wait_for(1), one_second};
  t = estimate_time(p, c);
  EXPECT_DOUBLE_EQ(t.compute, 3);
  EXPECT_DOUBLE_EQ(t.step, 7);
  EXPECT_DOUBLE_EQ(t.exposed_communication, 4);
  ASSERT_EQ(t.timeline.size(), 4u);
  EXPECT_EQ(t.timeline[1].lane, 1);
  EXPECT_DOUBLE_EQ(t.timeline[1].start, 1);
  EXPECT_DOUBLE_EQ(t.timeline[2].start, 1);  // the second op did not wait
  EXPECT_DOUBLE_EQ(t.timeline[3].start, 6);  // the third did
  // A second collective queues behind the first on the one
  // communication stream, even when the compute stream is free.
  p.events = {collective(CollectiveKind::AllGather, 4, 0, true),
              collective(CollectiveKind::AllGather, 4, 0)};
  t = estimate_time(p, c);
  EXPECT_DOUBLE_EQ(t.step, 10);
}

TEST(EstimateTimeTest, PhasesStartWhereTheComputeStreamIsAndEarlierOnesAreLeftOut) {
  const Cluster c = toy();
  Profile p;
  const StepEvent one_second = op("add", 0, 375);
  p.events = {one_second, one_second, one_second, one_second};
  p.phases = {"forward", "backward", "forward", "backward"};
  p.phase_events = {0, 1, 2, 3};
  TimeEstimate t = estimate_time(p, c);
  EXPECT_EQ(t.phase_starts, (std::vector<double>{0, 1, 2, 3}));
  t = estimate_time(p, c, 2);  // the second step alone
  EXPECT_EQ(t.phase_starts, (std::vector<double>{0, 0, 0, 1}));
  EXPECT_DOUBLE_EQ(t.step, 2);
}

TEST(EstimateTimeTest, PresetsAreNamedAndOthersRefused) {
  for (const std::string& name : cluster_presets()) {
    const Cluster c = cluster_preset(name);
    EXPECT_EQ(c.device.name, name);
    EXPECT_GT(c.device.memory_bandwidth, 0);
    EXPECT_GT(c.within_node.bandwidth, 0);
  }
  try {
    cluster_preset("tpu");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("h100, a100, cpu"), std::string::npos) << e.what();
  }
}

TEST(EstimateTimeTest, MeasuredCollectivesAreInterpolatedWithinTheirSizes) {
  Cluster c = toy();
  c.measured = {{CollectiveKind::AllReduce, 4, 100, 1.0},
                {CollectiveKind::AllReduce, 4, 300, 2.0},
                {CollectiveKind::AllReduce, 2, 100, 7.0}};
  const std::vector<int> four{0, 1, 2, 3}, two{0, 1}, across{0, 4, 8, 12};
  EXPECT_DOUBLE_EQ(collective_seconds(c, CollectiveKind::AllReduce, 100, four), 1.0);
  EXPECT_DOUBLE_EQ(collective_seconds(c, CollectiveKind::AllReduce, 200, four), 1.5);
  EXPECT_DOUBLE_EQ(collective_seconds(c, CollectiveKind::AllReduce, 100, two), 7.0);
  // Beyond the sizes measured, another kind, or across nodes: the model.
  EXPECT_DOUBLE_EQ(collective_seconds(c, CollectiveKind::AllReduce, 400, four),
                   std::min(2 * 3 * 1 + 2 * 0.75 * 400, 2 * 2 * 1 + 2 * 400.0));
  EXPECT_DOUBLE_EQ(collective_seconds(c, CollectiveKind::AllGather, 100, four), 3 + 300);
  EXPECT_NE(collective_seconds(c, CollectiveKind::AllReduce, 200, across), 1.5);
}

TEST(EstimateTimeTest, ClusterJsonRoundTripsAndNamesWhatIsWrong) {
  Cluster c = toy();
  c.device.share = 0.5;
  c.measured = {{CollectiveKind::ReduceScatter, 4, 4096, 3e-5}};
  const Cluster back = cluster_from_json(cluster_json(c));
  EXPECT_EQ(back.device.name, "toy");
  EXPECT_EQ(back.device.peak_flops[static_cast<int>(DType::Float32)], 100);
  EXPECT_EQ(back.device.share, 0.5);
  EXPECT_EQ(back.ranks_per_node, 4);
  EXPECT_EQ(back.across_nodes.bandwidth, 0.5);
  ASSERT_EQ(back.measured.size(), 1u);
  EXPECT_EQ(back.measured[0].kind, CollectiveKind::ReduceScatter);
  EXPECT_EQ(back.measured[0].bytes, 4096);
  const auto error_of = [](const std::string& text) {
    try {
      cluster_from_json(text);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error_of("{").find("not JSON"), std::string::npos);
  EXPECT_NE(error_of("{}").find("no \"device\""), std::string::npos);
  std::string text = cluster_json(c);
  text.replace(text.find("\"memory_bandwidth\""), 18, "\"memory_bandwidt\"");
  EXPECT_NE(error_of(text).find("device.memory_bandwidth"), std::string::npos) << error_of(text);
}
