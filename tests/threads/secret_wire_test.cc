// The job secret never crosses the wire: a whole 2-rank tcp job (ranks as threads, a
// real TCP store) runs with every connection, store and data, routed through
// recording proxies on 127.0.0.1, and no byte captured holds any 8-byte piece of the
// secret. The data connections go through proxies because each rank's store is
// wrapped so that the address it publishes for its tcp listener is its proxy's.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "collie/communicator.h"
#include "collie/store.h"
#include "core/net/handshake.h"
#include "support/recording_proxy.h"

namespace collie {
namespace {

using namespace std::chrono_literals;
using testing::RecordingProxy;

// Forwards to `inner`; a rank's tcp address ("127.0.0.1:port" under <job>/tcp/addr/<r>)
// is published as that of a new recording proxy to it instead.
class ProxyingStore final : public Store {
 public:
  ProxyingStore(std::shared_ptr<Store> inner, std::mutex* mutex,
                std::vector<std::unique_ptr<RecordingProxy>>* proxies)
      : inner_(std::move(inner)), mutex_(mutex), proxies_(proxies) {}

  Status set(const std::string& key, const Bytes& value) override {
    if (key.find("/tcp/addr/") == std::string::npos) return inner_->set(key, value);
    std::string address(value.begin(), value.end());
    if (address.rfind("127.0.0.1:", 0) != 0) {
      return internalError("a rank published a non-loopback address: " + address);
    }
    auto proxy = std::make_unique<RecordingProxy>(
        static_cast<uint16_t>(std::stoi(address.substr(address.rfind(':') + 1))));
    if (proxy->port() == 0) return internalError("the recording proxy could not listen");
    std::string proxied = "127.0.0.1:" + std::to_string(proxy->port());
    {
      std::lock_guard<std::mutex> lock(*mutex_);
      proxies_->push_back(std::move(proxy));
    }
    return inner_->set(key, Bytes(proxied.begin(), proxied.end()));
  }
  Result<Bytes> get(const std::string& key, Deadline deadline) override {
    return inner_->get(key, deadline);
  }
  Result<int64_t> add(const std::string& key, int64_t delta) override {
    return inner_->add(key, delta);
  }

 private:
  std::shared_ptr<Store> inner_;
  std::mutex* mutex_;
  std::vector<std::unique_ptr<RecordingProxy>>* proxies_;
};

// The offset of the first 8-byte piece of `secret` in `bytes`, or -1.
long findSecretPiece(const std::vector<uint8_t>& bytes, const JobSecret& secret) {
  for (size_t at = 0; at + 8 <= secret.size(); ++at) {
    auto piece = secret.begin() + static_cast<std::ptrdiff_t>(at);
    auto hit = std::search(bytes.begin(), bytes.end(), piece, piece + 8);
    if (hit != bytes.end()) return static_cast<long>(hit - bytes.begin());
  }
  return -1;
}

size_t count(const std::vector<uint8_t>& bytes, uint32_t magic) {
  const uint8_t le[4] = {static_cast<uint8_t>(magic), static_cast<uint8_t>(magic >> 8),
                         static_cast<uint8_t>(magic >> 16), static_cast<uint8_t>(magic >> 24)};
  size_t n = 0;
  for (auto it = bytes.begin(); (it = std::search(it, bytes.end(), le, le + 4)) != bytes.end();
       ++it) {
    ++n;
  }
  return n;
}

// fault: a listener records every byte of a 2-rank tcp job (store and data connections,
// handshakes and all-reduces) | no 8-byte piece of the job secret in any byte captured;
// every handshake proves the secret by HMAC | secret_wire_test
TEST(SecretOnTheWire, NoPieceOfTheSecretInAWholeTcpJob) {
  constexpr int kRanks = 2;
  Result<UniqueId> id = UniqueId::generate("127.0.0.1", 0);
  ASSERT_TRUE(id.isOk());
  auto server = StoreServer::start("127.0.0.1", 0, id->secret);
  ASSERT_TRUE(server.isOk()) << server.status().toString();
  std::mutex mutex;
  std::vector<std::unique_ptr<RecordingProxy>> dataProxies;
  {
    RecordingProxy storeProxy((*server)->port());
    ASSERT_NE(storeProxy.port(), 0);
    id->port = storeProxy.port();
    std::vector<std::unique_ptr<Communicator>> comms(kRanks);
    std::vector<Status> errors(kRanks);
    std::vector<std::thread> ranks;
    for (int r = 0; r < kRanks; ++r) {
      ranks.emplace_back([&, r] {
        auto store =
            connectTcpStore("127.0.0.1", storeProxy.port(), id->secret, Clock::now() + 10s);
        if (!store.isOk()) {
          errors[r] = store.status();
          return;
        }
        Options options;
        options.transport = "tcp";
        options.timeout = 30s;
        options.config["COLLIE_SOCKET_IFNAME"] = "lo";
        options.store = std::make_shared<ProxyingStore>(*store, &mutex, &dataProxies);
        auto comm = Communicator::create(*id, r, kRanks, options);
        if (!comm.isOk()) {
          errors[r] = comm.status();
          return;
        }
        comms[r] = std::move(*comm);
        // A few all-reduces, small and large; the inputs hold no secret bytes.
        for (size_t count : {size_t{1}, size_t{1000}, size_t{1} << 18}) {
          std::vector<float> in(count, static_cast<float>(r + 1)), out(count);
          auto work =
              comms[r]->allReduce(in.data(), out.data(), count, DataType::kFloat32, ReduceOp::kSum);
          Status st = work.isOk() ? work->wait(30s) : work.status();
          if (st.isOk() && out[count - 1] != 3.0f) st = internalError("wrong sum");
          if (!st.isOk()) {
            errors[r] = st;
            return;
          }
        }
      });
    }
    for (auto& t : ranks) t.join();
    for (int r = 0; r < kRanks; ++r)
      ASSERT_TRUE(errors[r].isOk()) << r << ": " << errors[r].toString();
    comms.clear();

    std::vector<uint8_t> storeBytes = storeProxy.allBytes();
    EXPECT_GE(count(storeBytes, net::kHelloMagic), size_t{kRanks});
    EXPECT_EQ(findSecretPiece(storeBytes, id->secret), -1)
        << "store traffic holds a piece of the job secret";
  }
  std::lock_guard<std::mutex> lock(mutex);
  ASSERT_EQ(dataProxies.size(), size_t{kRanks}) << "every rank publishes one tcp address";
  size_t dataBytes = 0;
  size_t dataHellos = 0;
  for (const auto& proxy : dataProxies) {
    for (const RecordingProxy::Flow& flow : proxy->flows()) {
      dataBytes += flow.toTarget.size() + flow.toClient.size();
      dataHellos += count(flow.toTarget, net::kHelloMagic) > 0 ? 1 : 0;
      EXPECT_EQ(findSecretPiece(flow.toTarget, id->secret), -1)
          << "a data connection's client side sent a piece of the job secret";
      EXPECT_EQ(findSecretPiece(flow.toClient, id->secret), -1)
          << "a data connection's accepting side sent a piece of the job secret";
    }
  }
  // The data went through the proxies: at least the large all-reduce's 1 MiB each way.
  EXPECT_GT(dataBytes, size_t{2} << 20);
  EXPECT_GE(dataHellos, size_t{1});
}

}  // namespace
}  // namespace collie
