// collie perf --device 1: the memory bound of each size (tools/perf_device_bound.h), and
// the device copy it is measured from, on the emulated device runtime.
#include "tools/perf_device_bound.h"

#include <gtest/gtest.h>

namespace collie::tools {
namespace {

constexpr double kGBps = 1e9;

PerfRow row(size_t bytes, double outUs, double inUs, bool inPlace = true) {
  PerfRow r;
  r.sizeBytes = bytes;
  r.outOfPlace.timing.avgUs = outUs;
  r.inPlace.timing.avgUs = inUs;
  r.inPlace.skipped = !inPlace;
  return r;
}

TEST(PerfDeviceBound, RanksWithOneKeyShareADeviceAtItsFastestRate) {
  DeviceBound bound = groupDevices({{"h gpu 0", 3000 * kGBps},
                                    {"h gpu 0", 4000 * kGBps},
                                    {"h gpu 1", 2000 * kGBps},
                                    {"h gpu 0", 0}},
                                   size_t{256} << 20);
  ASSERT_EQ(bound.devices.size(), 2u);
  EXPECT_EQ(bound.devices[0].key, "h gpu 0");
  EXPECT_EQ(bound.devices[0].ranks, 3);
  EXPECT_DOUBLE_EQ(bound.devices[0].trafficBytesPerSec, 4000 * kGBps);
  EXPECT_EQ(bound.devices[1].ranks, 1);
  EXPECT_DOUBLE_EQ(bound.devices[1].trafficBytesPerSec, 2000 * kGBps);
}

TEST(PerfDeviceBound, AllReduceOnOneDeviceIsTwoNTimesTheBytesAtTheCopyRate) {
  const size_t bytes = size_t{64} << 20;
  for (int n : {2, 4}) {
    std::vector<std::pair<std::string, double>> ranks(n, {"one gpu", 4000 * kGBps});
    DeviceBound bound = groupDevices(ranks, bytes);
    PerfShape shape = perfShape(CollectiveKind::kAllReduce, bytes, DataType::kFloat32, n, 0);
    // 4S for 2 ranks, 8S for 4: every rank reads its S and writes its S.
    EXPECT_DOUBLE_EQ(deviceBoundUs(bound, shape, 4), 2.0 * n * bytes / (4000 * kGBps) * 1e6);
  }
}

TEST(PerfDeviceBound, EachOfItsOwnDeviceCarriesOneRankAndTheSlowestDeviceBounds) {
  const size_t bytes = size_t{16} << 20;
  DeviceBound bound = groupDevices({{"gpu 0", 4000 * kGBps}, {"gpu 1", 2000 * kGBps}}, bytes);
  PerfShape gather = perfShape(CollectiveKind::kAllGather, bytes, DataType::kFloat32, 2, 0);
  // All-gather: a rank reads its S/2 and writes S, on the slower device.
  EXPECT_DOUBLE_EQ(deviceBoundUs(bound, gather, 4), 1.5 * bytes / (2000 * kGBps) * 1e6);
  PerfShape scatter = perfShape(CollectiveKind::kReduceScatter, bytes, DataType::kFloat32, 2, 0);
  EXPECT_DOUBLE_EQ(deviceBoundUs(bound, scatter, 4), 1.5 * bytes / (2000 * kGBps) * 1e6);
}

TEST(PerfDeviceBound, RootedCollectivesGetNoBound) {
  EXPECT_TRUE(hasDeviceBound(CollectiveKind::kAllToAll));
  EXPECT_FALSE(hasDeviceBound(CollectiveKind::kBroadcast));
  EXPECT_FALSE(hasDeviceBound(CollectiveKind::kReduce));
  PerfArgs args;
  args.collective = CollectiveKind::kBroadcast;
  DeviceBound bound = groupDevices({{"gpu 0", 100 * kGBps}}, 1 << 26);
  const std::string text = formatDeviceBound(args, bound, {row(1024, 10, 10)}, {0});
  EXPECT_NE(text.find("no bound for broadcast"), std::string::npos) << text;
}

TEST(PerfDeviceBound, TablePrintsTheFractionOfEachPlacement) {
  PerfArgs args;
  args.collective = CollectiveKind::kAllReduce;
  DeviceBound bound = groupDevices({{"gpu 0", 100 * kGBps}, {"gpu 0", 100 * kGBps}}, 1 << 26);
  const std::vector<PerfRow> rows = {row(1 << 20, 200, 100), row(1 << 22, 400, 0, false)};
  const std::vector<double> boundUs = {50, 100};
  const std::string text = formatDeviceBound(args, bound, rows, boundUs);
  for (const char* expected : {"gpu 0", "100.0 GB/s", "2 rank(s)", "0.250", "0.500", "     -"}) {
    EXPECT_NE(text.find(expected), std::string::npos) << expected << " missing from\n" << text;
  }
  for (size_t start = 0; start < text.size();) {  // every line a '#' comment
    EXPECT_EQ(text[start], '#') << text.substr(start);
    start = text.find('\n', start) + 1;
    if (start == 0) break;
  }
  nlohmann::json j = deviceBoundJson(bound, rows, boundUs);
  EXPECT_DOUBLE_EQ(j["sizes"][0]["out_of_place"].get<double>(), 0.25);
  EXPECT_DOUBLE_EQ(j["sizes"][0]["in_place"].get<double>(), 0.5);
  EXPECT_TRUE(j["sizes"][1]["in_place"].is_null());
  EXPECT_EQ(j["devices"][0]["ranks"].get<int>(), 2);
}

TEST(PerfDeviceBound, ADeviceWhoseCopyFailedGivesNoFractions) {
  PerfArgs args;
  args.collective = CollectiveKind::kAllGather;
  DeviceBound bound = groupDevices({{"gpu 0", 0}, {"gpu 0", 0}}, 1 << 26);
  PerfShape shape = perfShape(CollectiveKind::kAllGather, 1 << 20, DataType::kFloat32, 2, 0);
  const double us = deviceBoundUs(bound, shape, 4);
  EXPECT_EQ(us, 0);
  const std::vector<PerfRow> rows = {row(1 << 20, 200, 100)};
  const std::string text = formatDeviceBound(args, bound, rows, {us});
  EXPECT_NE(text.find("copy not measured"), std::string::npos) << text;
  EXPECT_EQ(text.find("0.000"), std::string::npos) << text;
  nlohmann::json j = deviceBoundJson(bound, rows, {us});
  EXPECT_TRUE(j["sizes"][0]["out_of_place"].is_null());
  EXPECT_TRUE(j["sizes"][0]["in_place"].is_null());
}

TEST(PerfDeviceBound, CopyIsTimedOnTheEmulatedDevice) {
  Result<DeviceRuntime*> runtime = emulatedDeviceRuntime();
  if (!runtime.isOk())
    GTEST_SKIP() << "no emulated device runtime: " << runtime.status().toString();
  Result<double> rate = measureDeviceCopy(**runtime, size_t{8} << 20, 3);
  ASSERT_TRUE(rate.isOk()) << rate.status().toString();
  // Host memory copies at a few GB/s at least and far below a TB/s.
  EXPECT_GT(*rate, 0.1 * kGBps);
  EXPECT_LT(*rate, 10000 * kGBps);
}

}  // namespace
}  // namespace collie::tools
