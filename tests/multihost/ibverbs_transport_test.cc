// ibverbs transport: two ranks as threads over the first InfiniBand/RoCE port. Skipped
// (reported as SKIPPED by ctest) when the verbs library finds no device.
#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <thread>
#include <vector>

#include "core/transport/transport.h"

namespace collie {
void registerIbverbsTransport(TransportRegistry& registry);
namespace {

using namespace std::chrono_literals;

bool haveDevice() {
  int count = 0;
  ibv_device** list = ibv_get_device_list(&count);
  if (list != nullptr) ibv_free_device_list(list);
  return count > 0;
}

TEST(IbverbsTransport, AbsentWithoutADevice) {
  TransportRegistry registry;
  registerIbverbsTransport(registry);
  const TransportFactory* factory = registry.find("ibverbs");
  ASSERT_NE(factory, nullptr);
  EXPECT_EQ(factory->priority, 120);
  if (haveDevice()) GTEST_SKIP() << "an InfiniBand device is present";
  TransportContext ctx;
  ctx.store = makeInMemoryStore();
  auto t = factory->create(ctx);
  ASSERT_FALSE(t.isOk());
  EXPECT_EQ(t.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(t.status().message().find("no InfiniBand device found"), std::string::npos);
}

TEST(IbverbsTransport, TwoRanksExchangeSizesAndCatchMismatch) {
  if (!haveDevice()) GTEST_SKIP() << "skipped: no InfiniBand device";
  TransportRegistry registry;
  registerIbverbsTransport(registry);
  auto store = makeInMemoryStore();
  std::vector<std::unique_ptr<Transport>> transports;
  for (int r = 0; r < 2; ++r) {
    TransportContext ctx;
    ctx.rank = r;
    ctx.nranks = 2;
    ctx.hostId = "h" + std::to_string(r);
    ctx.jobKey = "ibjob";
    ctx.store = store;
    ctx.timeout = 10s;
    auto t = registry.find("ibverbs")->create(ctx);
    ASSERT_TRUE(t.isOk()) << t.status().toString();
    transports.push_back(std::move(*t));
  }
  std::vector<std::vector<std::unique_ptr<Connection>>> conns(2);
  std::vector<Status> results(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      auto c = transports[r]->connect({1 - r});
      if (c.isOk())
        conns[r] = std::move(*c);
      else
        results[r] = c.status();
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_TRUE(results[0].isOk() && results[1].isOk()) << results[0].toString();
  for (size_t size : {size_t{0}, size_t{1}, size_t{1} << 20}) {
    std::vector<uint8_t> out(size, 5), in(size, 0);
    Completion sent, got;
    ASSERT_TRUE(conns[0][0]->postSend(out.data(), size, 9, &sent).isOk());
    ASSERT_TRUE(conns[1][0]->postRecv(in.data(), size, 9, &got).isOk());
    auto deadline = Clock::now() + 5s;
    while (!(sent.done && got.done) && Clock::now() < deadline) {
      bool progressed = false;
      ASSERT_TRUE(conns[0][0]->progress(&progressed).isOk());
      ASSERT_TRUE(conns[1][0]->progress(&progressed).isOk());
    }
    ASSERT_TRUE(sent.done && got.done && got.status.isOk());
    EXPECT_EQ(in, out);
  }
  std::vector<uint8_t> out(100, 1), in(50, 0xAB);
  Completion sent, got;
  ASSERT_TRUE(conns[0][0]->postSend(out.data(), out.size(), 9, &sent).isOk());
  ASSERT_TRUE(conns[1][0]->postRecv(in.data(), in.size(), 9, &got).isOk());
  auto deadline = Clock::now() + 5s;
  while (!got.done && Clock::now() < deadline) {
    bool progressed = false;
    (void)conns[0][0]->progress(&progressed);
    (void)conns[1][0]->progress(&progressed);
  }
  EXPECT_EQ(got.status.code(), StatusCode::kMismatch) << got.status.toString();
  for (uint8_t b : in) ASSERT_EQ(b, 0xAB);
}

}  // namespace
}  // namespace collie
