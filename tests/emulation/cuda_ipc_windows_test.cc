// The cuda_ipc transport's device windows on the emulated device runtime, ranks as
// threads: windows are mapped in every rank and alias the owner's memory; what a peer
// publishes is validated (malformed entries, another layout, size or runtime fail
// naming that peer); the transport never carries host messages; ranks on several
// hosts get no windows. Nothing here runs on a GPU.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/device/device_runtime.h"
#include "core/transport/device_windows.h"
#include "support/emulated_device.h"
#include "support/rank_threads.h"
#include "transports/cuda_ipc/cuda_ipc_transport.h"

namespace collie {
namespace {

constexpr size_t kBytes = 4096;
constexpr uint32_t kLayout = 7;

TransportContext context(std::shared_ptr<Store> store, const std::string& job, int rank, int nranks,
                         const std::string& host = "host-a") {
  TransportContext ctx;
  ctx.rank = rank;
  ctx.nranks = nranks;
  ctx.hostId = host;
  ctx.jobKey = job;
  ctx.store = std::move(store);
  ctx.timeout = std::chrono::milliseconds(2000);
  ctx.deviceRuntime = &testing::emulatedDevice();
  return ctx;
}

Bytes toBytes(const std::string& text) { return Bytes(text.begin(), text.end()); }

std::string hex(const std::string& text) {
  std::string out;
  for (unsigned char c : text) {
    static const char kDigits[] = "0123456789abcdef";
    out += kDigits[c >> 4];
    out += kDigits[c & 15];
  }
  return out;
}

std::chrono::steady_clock::time_point soon() {
  return std::chrono::steady_clock::now() + std::chrono::seconds(2);
}

TEST(CudaIpcWindows, EveryRankMapsEveryWindow) {
  constexpr int kRanks = 3;
  auto store = makeInMemoryStore();
  std::vector<std::unique_ptr<Transport>> transports(kRanks);
  std::vector<std::unique_ptr<DeviceWindows>> windows(kRanks);
  std::vector<Status> errors(kRanks);
  testing::onEveryRank(kRanks, [&](int r) {
    Result<std::unique_ptr<Transport>> t = createCudaIpcTransport(context(store, "ok", r, kRanks));
    if (!t.isOk()) {
      errors[r] = t.status();
      return;
    }
    transports[r] = std::move(*t);
    DeviceWindowProvider* provider = transports[r]->deviceWindows();
    if (provider == nullptr || !provider->available()) {
      errors[r] = internalError("no device windows");
      return;
    }
    Result<std::unique_ptr<DeviceWindows>> w = provider->open(kBytes, kLayout, soon());
    if (w.isOk()) {
      windows[r] = std::move(*w);
    } else {
      errors[r] = w.status();
    }
  });
  for (int r = 0; r < kRanks; ++r) ASSERT_TRUE(errors[r].isOk()) << r << errors[r].toString();
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_NE(windows[r], nullptr);
    EXPECT_EQ(windows[r]->bytes(), kBytes);
    EXPECT_TRUE(testing::emulatedDevice().isDevicePointer(windows[r]->window(r)));
    EXPECT_EQ(windows[r]->window(r)[kBytes - 1], 0) << "windows are zero-filled";
    windows[r]->window(r)[r] = static_cast<uint8_t>(0xA0 + r);
  }
  // Ranks of one process see each owner's bytes through their mapping.
  for (int r = 0; r < kRanks; ++r) {
    for (int owner = 0; owner < kRanks; ++owner) {
      EXPECT_EQ(windows[r]->window(owner)[owner], 0xA0 + owner) << r << " -> " << owner;
    }
  }
  // Host messages are not this transport's business.
  EXPECT_FALSE(transports[0]->canConnect(1, "host-a"));
  Result<std::vector<std::unique_ptr<Connection>>> connections = transports[0]->connect({1});
  ASSERT_FALSE(connections.isOk());
  EXPECT_EQ(connections.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(connections.status().message().find("deviceWindows()"), std::string::npos)
      << connections.status().toString();
}

TEST(CudaIpcWindows, RanksOnSeveralHostsGetNone) {
  auto store = makeInMemoryStore();
  std::vector<char> available(2, 1);  // not vector<bool>: ranks write their own entry at once
  testing::onEveryRank(2, [&](int r) {
    auto t = createCudaIpcTransport(context(store, "hosts", r, 2, "host-" + std::to_string(r)));
    ASSERT_TRUE(t.isOk()) << t.status().toString();
    available[r] = (*t)->deviceWindows()->available();
  });
  EXPECT_FALSE(available[0]);
  EXPECT_FALSE(available[1]);
}

// Rank 1 is played by the test, which publishes a bad window entry: rank 0 fails
// naming rank 1, with what was wrong.
TEST(CudaIpcWindows, PeerEntriesAreValidated) {
  struct Bad {
    std::string entry;
    StatusCode code;
    const char* says;
  };
  const std::string handle = hex("emu:0:0:0:0:0:0:0");
  const Bad cases[] = {
      {"garbage", StatusCode::kRemoteError, "malformed"},
      {std::string(8000, 'x'), StatusCode::kRemoteError, "malformed"},
      {"collie-cuda-ipc-window-v2 emulated 7 4096 zz", StatusCode::kRemoteError, "malformed"},
      {"collie-cuda-ipc-window-v1 emulated 7 4096 " + handle, StatusCode::kRemoteError,
       "malformed"},
      {"collie-cuda-ipc-window-v2 emulated 8 4096 " + handle, StatusCode::kInvalidArgument,
       "window layout 8"},
      {"collie-cuda-ipc-window-v2 emulated 7 999999 " + handle, StatusCode::kInvalidArgument,
       "window size 999999"},
      {"collie-cuda-ipc-window-v2 cuda 7 4096 " + handle, StatusCode::kInvalidArgument,
       "device runtime cuda"},
  };
  int i = 0;
  for (const Bad& bad : cases) {
    SCOPED_TRACE(bad.says);
    auto store = makeInMemoryStore();
    const std::string job = "bad" + std::to_string(i++);
    ASSERT_TRUE(
        store
            ->set(job + "/cuda_ipc/peer/1", toBytes("collie-cuda-ipc-v2 emulated " + hex("host-a")))
            .isOk());
    ASSERT_TRUE(store->set(job + "/cuda_ipc/window/1", toBytes(bad.entry)).isOk());
    auto t = createCudaIpcTransport(context(store, job, 0, 2));
    ASSERT_TRUE(t.isOk()) << t.status().toString();
    ASSERT_TRUE((*t)->deviceWindows()->available());
    Result<std::unique_ptr<DeviceWindows>> w = (*t)->deviceWindows()->open(kBytes, kLayout, soon());
    ASSERT_FALSE(w.isOk());
    EXPECT_EQ(w.status().code(), bad.code) << w.status().toString();
    EXPECT_NE(w.status().message().find("rank 1"), std::string::npos) << w.status().toString();
    EXPECT_NE(w.status().message().find(bad.says), std::string::npos) << w.status().toString();
  }
}

TEST(CudaIpcWindows, MalformedPeerEntryFailsCreation) {
  auto store = makeInMemoryStore();
  ASSERT_TRUE(store->set("peer/cuda_ipc/peer/1", toBytes("collie-cuda-ipc-v2 emulated")).isOk());
  auto t = createCudaIpcTransport(context(store, "peer", 0, 2));
  ASSERT_FALSE(t.isOk());
  EXPECT_EQ(t.status().code(), StatusCode::kRemoteError) << t.status().toString();
  EXPECT_EQ(t.status().peer(), 1) << t.status().toString();
}

}  // namespace
}  // namespace collie
