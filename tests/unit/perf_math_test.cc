// collie perf: argument parsing, sizes, buffer shapes, bandwidth math, table and JSON.
#include <gtest/gtest.h>

#include <CLI/CLI.hpp>

#include "tools/perf_args.h"
#include "tools/perf_report.h"

namespace collie::tools {
namespace {

Result<PerfArgs> parse(std::vector<std::string> argv) {
  CLI::App app;
  PerfCliOptions raw;
  addPerfCommand(app, &raw);
  argv.insert(argv.begin(), "perf");
  std::reverse(argv.begin(), argv.end());
  app.parse(argv);
  return resolvePerfArgs(raw);
}

TEST(PerfArgs, DefaultsMatchNcclTests) {
  Result<PerfArgs> args = parse({"allreduce"});
  ASSERT_TRUE(args.isOk()) << args.status().toString();
  EXPECT_EQ(args->collective, CollectiveKind::kAllReduce);
  EXPECT_EQ(args->minBytes, 32 << 20);
  EXPECT_EQ(args->maxBytes, 32 << 20);
  EXPECT_EQ(args->iters, 20);
  EXPECT_EQ(args->warmup, 5);
  EXPECT_TRUE(args->check);
  EXPECT_EQ(args->dtype, DataType::kFloat32);
  EXPECT_EQ(args->op, ReduceOp::kSum);
  EXPECT_EQ(args->algorithm, Algorithm::kAuto);
}

TEST(PerfArgs, ParsesEveryFlag) {
  Result<PerfArgs> args = parse({"reducescatter",
                                 "-b",
                                 "8",
                                 "-e",
                                 "1M",
                                 "-f",
                                 "8",
                                 "-n",
                                 "2",
                                 "-w",
                                 "1",
                                 "-c",
                                 "0",
                                 "-d",
                                 "bfloat16",
                                 "-o",
                                 "max",
                                 "-r",
                                 "1",
                                 "-R",
                                 "0",
                                 "--algo",
                                 "tree",
                                 "--transport",
                                 "tcp",
                                 "--json",
                                 "out.json",
                                 "-u",
                                 "3",
                                 "--unalign_bytes",
                                 "1"});
  ASSERT_TRUE(args.isOk()) << args.status().toString();
  EXPECT_EQ(args->collective, CollectiveKind::kReduceScatter);
  EXPECT_EQ(args->minBytes, 8);
  EXPECT_EQ(args->maxBytes, 1 << 20);
  EXPECT_EQ(args->stepFactor, 8);
  EXPECT_EQ(args->iters, 2);
  EXPECT_EQ(args->warmup, 1);
  EXPECT_FALSE(args->check);
  EXPECT_EQ(args->dtype, DataType::kBFloat16);
  EXPECT_EQ(args->op, ReduceOp::kMax);
  EXPECT_EQ(args->root, 1);
  EXPECT_EQ(args->algorithm, Algorithm::kTree);
  EXPECT_EQ(args->transport, "tcp");
  EXPECT_EQ(args->jsonPath, "out.json");
  EXPECT_EQ(args->unalign, 3);
  EXPECT_EQ(args->unalignBytes, 1);
  EXPECT_EQ(bufferOffsetBytes(*args), 3u * 2 + 1);  // bfloat16: 2 bytes per element
}

TEST(PerfArgs, RejectsBadValuesWithTheFlagName) {
  Result<PerfArgs> bad = parse({"alltoallw"});
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("alltoallw"), std::string::npos);
  bad = parse({"allreduce", "-b", "2M", "-e", "1M"});
  EXPECT_NE(bad.status().message().find("-b"), std::string::npos);
  bad = parse({"allreduce", "-d", "complex"});
  EXPECT_NE(bad.status().message().find("-d"), std::string::npos);
  bad = parse({"allreduce", "-c", "2"});
  EXPECT_FALSE(bad.isOk());
  bad = parse({"allreduce", "-n", "0"});
  EXPECT_FALSE(bad.isOk());
  bad = parse({"allreduce", "--algo", "butterfly"});
  EXPECT_FALSE(bad.isOk());
  EXPECT_NE(bad.status().message().find("oneshot"), std::string::npos) << bad.status().toString();
  // Sizes below one element ran nothing and exited 0.
  bad = parse({"allreduce", "-b", "3", "-e", "3", "-d", "float"});
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("-e/--maxbytes"), std::string::npos);
  EXPECT_TRUE(parse({"allreduce", "-b", "4", "-e", "4", "-d", "float"}).isOk());
  bad = parse({"allreduce", "-R", "2"});
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  bad = parse({"allreduce", "-u", "-1"});
  EXPECT_NE(bad.status().message().find("-u/--unalign"), std::string::npos);
  bad = parse({"allreduce", "--unalign_bytes", "4097"});
  EXPECT_NE(bad.status().message().find("--unalign_bytes"), std::string::npos);
  Result<PerfArgs> registered = parse({"allreduce", "-R", "1"});
  ASSERT_TRUE(registered.isOk());
  EXPECT_TRUE(registered->registered);
  Result<PerfArgs> device = parse({"allreduce", "--device", "1"});
  ASSERT_TRUE(device.isOk());
  EXPECT_TRUE(device->device);
  // Both: the device buffers registered as device windows.
  Result<PerfArgs> windows = parse({"allreduce", "--device", "1", "-R", "1"});
  ASSERT_TRUE(windows.isOk());
  EXPECT_TRUE(windows->device && windows->registered);
}

TEST(PerfSizes, FactorAndStep) {
  PerfArgs args;
  args.minBytes = 8;
  args.maxBytes = 1 << 20;
  args.stepFactor = 8;
  EXPECT_EQ(perfSizes(args), (std::vector<int64_t>{8, 64, 512, 4096, 32768, 262144}));
  args.stepFactor = 1;
  args.minBytes = 100;
  args.maxBytes = 350;
  args.stepBytes = 100;
  EXPECT_EQ(perfSizes(args), (std::vector<int64_t>{100, 200, 300}));
  args.stepBytes = 0;  // one size, never an endless loop
  EXPECT_EQ(perfSizes(args), (std::vector<int64_t>{100}));
}

TEST(PerfShape, AllReduceUsesTheWholeBuffer) {
  PerfShape s = perfShape(CollectiveKind::kAllReduce, 1024, DataType::kFloat32, 4, 2);
  EXPECT_EQ(s.callCount, 256u);
  EXPECT_EQ(s.sendElems, 256u);
  EXPECT_EQ(s.recvElems, 256u);
  EXPECT_EQ(s.sizeBytes, 1024u);
  EXPECT_EQ(s.inPlaceSendOffset, 0u);
  EXPECT_EQ(s.inPlaceRecvOffset, 0u);
}

TEST(PerfShape, GatherAndScatterSplitTheLargeBuffer) {
  // 1000 bytes of float on 3 ranks: 250 elements -> 83 per rank, size 996.
  PerfShape ag = perfShape(CollectiveKind::kAllGather, 1000, DataType::kFloat32, 3, 1);
  EXPECT_EQ(ag.callCount, 83u);
  EXPECT_EQ(ag.sendElems, 83u);
  EXPECT_EQ(ag.recvElems, 249u);
  EXPECT_EQ(ag.sizeBytes, 996u);
  EXPECT_EQ(ag.countColumn, 249u);
  EXPECT_EQ(ag.inPlaceSendOffset, 83u);
  PerfShape rs = perfShape(CollectiveKind::kReduceScatter, 1000, DataType::kFloat32, 3, 2);
  EXPECT_EQ(rs.callCount, 83u);
  EXPECT_EQ(rs.sendElems, 249u);
  EXPECT_EQ(rs.recvElems, 83u);
  EXPECT_EQ(rs.inPlaceRecvOffset, 166u);
  // Fewer elements than ranks: nothing to move.
  EXPECT_EQ(perfShape(CollectiveKind::kAllGather, 8, DataType::kFloat32, 3, 0).callCount, 0u);
}

TEST(PerfShape, ExchangesAsNcclTests) {
  // 1000 bytes of float on 3 ranks: 83 elements per block, size 996.
  PerfShape a2a = perfShape(CollectiveKind::kAllToAll, 1000, DataType::kFloat32, 3, 1);
  EXPECT_EQ(a2a.callCount, 83u);
  EXPECT_EQ(a2a.sendElems, 249u);
  EXPECT_EQ(a2a.recvElems, 249u);
  EXPECT_EQ(a2a.sizeBytes, 996u);
  EXPECT_TRUE(a2a.inPlace);  // send == recv: the whole buffer both ways
  EXPECT_EQ(a2a.inPlaceSendOffset, 0u);
  EXPECT_EQ(a2a.inPlaceRecvOffset, 0u);
  PerfShape g = perfShape(CollectiveKind::kGather, 1000, DataType::kFloat32, 3, 2);
  EXPECT_EQ(g.callCount, 83u);
  EXPECT_EQ(g.sendElems, 83u);
  EXPECT_EQ(g.recvElems, 249u);
  EXPECT_EQ(g.inPlaceSendOffset, 166u);
  EXPECT_TRUE(g.inPlace);
  PerfShape sc = perfShape(CollectiveKind::kScatter, 1000, DataType::kFloat32, 3, 2);
  EXPECT_EQ(sc.sendElems, 249u);
  EXPECT_EQ(sc.recvElems, 83u);
  EXPECT_EQ(sc.inPlaceRecvOffset, 166u);
  EXPECT_EQ(sc.sizeBytes, 996u);
}

TEST(PerfMath, BusBandwidthFactorsAsNcclTests) {
  EXPECT_DOUBLE_EQ(busBwFactor(CollectiveKind::kAllToAll, 4), 0.75);
  EXPECT_DOUBLE_EQ(busBwFactor(CollectiveKind::kGather, 4), 0.75);
  EXPECT_DOUBLE_EQ(busBwFactor(CollectiveKind::kScatter, 2), 0.5);
  EXPECT_DOUBLE_EQ(busBwFactor(CollectiveKind::kAllReduce, 4), 1.5);
  EXPECT_DOUBLE_EQ(busBwFactor(CollectiveKind::kAllReduce, 1), 0.0);
  EXPECT_DOUBLE_EQ(busBwFactor(CollectiveKind::kReduceScatter, 4), 0.75);
  EXPECT_DOUBLE_EQ(busBwFactor(CollectiveKind::kAllGather, 2), 0.5);
  EXPECT_DOUBLE_EQ(busBwFactor(CollectiveKind::kBroadcast, 8), 1.0);
  EXPECT_DOUBLE_EQ(busBwFactor(CollectiveKind::kReduce, 8), 1.0);
  EXPECT_DOUBLE_EQ(algBwGBs(2e9, 2.0), 1.0);
  EXPECT_DOUBLE_EQ(algBwGBs(100, 0.0), 0.0);
}

TEST(PerfReport, TimingStatistics) {
  PerfTiming t = summarizeTimes({5, 1, 3, 100});
  EXPECT_DOUBLE_EQ(t.minUs, 1);
  EXPECT_DOUBLE_EQ(t.medianUs, 4);
  EXPECT_DOUBLE_EQ(t.avgUs, 27.25);
  EXPECT_DOUBLE_EQ(summarizeTimes({7, 2, 9}).medianUs, 7);
  PerfArgs args;
  PerfMeasurement m;
  m.timing.avgUs = 1000;  // 1 MB in 1 ms = 1 GB/s
  computeBandwidth(args, 4, 1000000, &m);
  EXPECT_DOUBLE_EQ(m.algBw, 1.0);
  EXPECT_DOUBLE_EQ(m.busBw, 1.5);
}

TEST(PerfReport, TableLooksLikeNcclTests) {
  PerfArgs args;
  args.minBytes = 8;
  args.maxBytes = 1024;
  args.stepFactor = 2;
  PerfRow row;
  row.sizeBytes = 1048576;
  row.count = 262144;
  row.outOfPlace.timing.avgUs = 123.456;
  row.outOfPlace.algBw = 8.49;
  row.outOfPlace.busBw = 12.74;
  row.inPlace.timing.avgUs = 12345.6;
  row.inPlace.wrong = 3;
  std::string line = formatRow(args, row);
  EXPECT_EQ(line,
            "     1048576        262144     float     sum      -1    123.5    8.49   12.74       0"
            "    12346    0.00    0.00       3\n");
  EXPECT_EQ(formatTime(5.123), "   5.12");
  std::string header = formatHeader(args, 2, {"Rank  0 Pid 1 on h device host"});
  EXPECT_NE(header.find("# Using devices\n#  Rank  0 Pid 1 on h device host\n"), std::string::npos);
  EXPECT_NE(header.find("out-of-place"), std::string::npos);
  EXPECT_NE(header.find("#wrong"), std::string::npos);
  EXPECT_NE(header.find("validation: 1 unalign: 0\n"), std::string::npos) << header;
  args.unalign = 2;
  args.unalignBytes = 1;
  EXPECT_NE(formatHeader(args, 2, {}).find("unalign: 2 unalign_bytes: 1\n"), std::string::npos);
  args.unalign = 0;
  args.unalignBytes = 0;
  // The column titles line up with the row's columns.
  size_t sizeTitle = header.find("size");
  size_t lineStart = header.rfind('\n', sizeTitle) + 1;
  EXPECT_EQ(sizeTitle - lineStart + 4, 12u);  // right-aligned in the 12-wide size column
  std::string footer = formatFooter(args, {row});
  EXPECT_NE(footer.find("# Out of bounds values : 3 FAILED"), std::string::npos);
  EXPECT_NE(footer.find("# Avg bus bandwidth    : 6.37"), std::string::npos);
  args.collective = CollectiveKind::kBroadcast;
  args.root = 1;
  args.check = false;
  line = formatRow(args, row);
  EXPECT_NE(line.find("  none       1"), std::string::npos) << line;
  EXPECT_NE(line.find("N/A"), std::string::npos);
}

TEST(PerfReport, JsonHasMedianAndMin) {
  PerfArgs args;
  PerfRow row;
  row.sizeBytes = 64;
  row.count = 16;
  row.outOfPlace.timing = {10, 8, 9};
  row.outOfPlace.busBw = 1.0;
  row.inPlace.busBw = 3.0;
  nlohmann::json j = toJson(args, 2, "shm", {row});
  EXPECT_EQ(j["collective"], "allreduce");
  EXPECT_EQ(j["nranks"], 2);
  EXPECT_EQ(j["transport"], "shm");
  EXPECT_EQ(j["results"][0]["size"], 64);
  EXPECT_DOUBLE_EQ(j["results"][0]["out_of_place"]["median_us"].get<double>(), 9);
  EXPECT_DOUBLE_EQ(j["results"][0]["out_of_place"]["min_us"].get<double>(), 8);
  EXPECT_DOUBLE_EQ(j["results"][0]["out_of_place"]["time_us"].get<double>(), 10);
  EXPECT_DOUBLE_EQ(j["avg_busbw_gbs"].get<double>(), 2.0);
  EXPECT_EQ(j["wrong_total"], 0);
  EXPECT_EQ(j["unalign"], 0);
  args.unalignBytes = 5;
  EXPECT_EQ(toJson(args, 2, "shm", {row})["unalign_bytes"], 5);
}

}  // namespace
}  // namespace collie::tools
