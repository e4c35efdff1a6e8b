// The exchanges (all-to-all, all-to-all with a count per peer, gather, scatter) and the
// kinds with a count per rank (all-gather v, reduce-scatter v), and premulsum (all-reduce
// and reduce-scatter, each rank its own factor) on device buffers of the emulated device
// runtime (COLLIE_DEVICE_EMULATION=1), ranks as threads, on one host and across hosts
// (tcp). On one host the exchanges (all-to-all, all-to-all v, gather, scatter) and
// point-to-point move between the ranks' device windows; the v kinds of all-gather and
// reduce-scatter have no device kernels: the communicator stages them through host
// memory, and everything across hosts.
// Premulsum runs on the device path on one host (its multiply is a kernel) and is
// staged across hosts. Checks exact bytes on every rank,
// that nothing outside a rank's own extent is written (a guard byte after every buffer),
// and that the copies to and from the device happened.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "core/device/device_runtime.h"
#include "kernels/cuda/emulation/emulated_runtime.h"
#include "kernels/cuda/emulation/emulated_stream.h"
#include "support/emulated_device.h"
#include "support/rank_threads.h"

namespace collie {
namespace {

using testing::Failures;

DeviceRuntime& runtime() { return testing::emulatedDevice(); }

constexpr uint8_t kGuard = 0xA5;

// A device buffer of `count` int32 elements and a guard byte after them.
class DeviceInts {
 public:
  explicit DeviceInts(size_t count) : count_(count) {
    Result<void*> p = runtime().allocate(count * sizeof(int32_t) + 1);
    EXPECT_TRUE(p.isOk()) << p.status().toString();
    ptr_ = static_cast<int32_t*>(p.isOk() ? *p : nullptr);
    std::memset(ptr_, 0xEE, count * sizeof(int32_t));
    reinterpret_cast<uint8_t*>(ptr_)[count * sizeof(int32_t)] = kGuard;
  }
  ~DeviceInts() { runtime().free(ptr_); }
  DeviceInts(const DeviceInts&) = delete;
  DeviceInts& operator=(const DeviceInts&) = delete;
  int32_t* get() const { return ptr_; }
  // Emulated device memory is host memory: readable once the work completed.
  std::vector<int32_t> read() const { return std::vector<int32_t>(ptr_, ptr_ + count_); }
  bool guardIntact() const {
    return reinterpret_cast<const uint8_t*>(ptr_)[count_ * sizeof(int32_t)] == kGuard;
  }

 private:
  size_t count_;
  int32_t* ptr_ = nullptr;
};

// The value rank `from` puts at element i of what it sends.
int32_t valueOf(int from, size_t i) { return from * 100000 + static_cast<int32_t>(i); }

std::vector<std::unique_ptr<Communicator>> comms(int nranks, bool hostPerRank) {
  Options options;
  options.config["COLLIE_DEVICE_EMULATION"] = "1";
  options.timeout = std::chrono::seconds(30);
  if (!hostPerRank) return testing::makeCommunicators(nranks, options);
  options.transport = "tcp";
  return testing::makeCommunicators(nranks, options, [](int r, Options* mine) {
    mine->hostId = "emulated-host-" + std::to_string(r);
  });
}

void expectEqual(Failures* failures, const std::string& what, const std::vector<int32_t>& got,
                 const std::vector<int32_t>& want) {
  if (got.size() != want.size()) return failures->add(what + ": wrong size");
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i]) {
      return failures->add(what + ": element " + std::to_string(i) + " is " +
                           std::to_string(got[i]) + ", expected " + std::to_string(want[i]));
    }
  }
}

void finish(Failures* failures, const std::string& what, Result<Work> work) {
  if (!work.isOk()) return failures->add(what + ": " + work.status().toString());
  Status status = work->wait(std::chrono::seconds(60));
  if (!status.isOk()) failures->add(what + ": " + status.toString());
}

// Every exchange and v kind once on `count` elements per block, on every rank.
void runExchanges(Communicator& comm, size_t count, Failures* failures) {
  const int n = comm.size();
  const int r = comm.rank();
  const int root = n - 1;
  const std::string at = " (count " + std::to_string(count) + ", rank " + std::to_string(r) + ")";

  {  // all-to-all: block p of my send goes to rank p
    DeviceInts send(count * n), recv(count * n);
    for (size_t i = 0; i < count * n; ++i) send.get()[i] = valueOf(r, i);
    finish(failures, "alltoall" + at,
           comm.allToAll(send.get(), recv.get(), count, DataType::kInt32));
    std::vector<int32_t> want(count * n);
    for (int p = 0; p < n; ++p) {
      for (size_t i = 0; i < count; ++i) want[p * count + i] = valueOf(p, r * count + i);
    }
    expectEqual(failures, "alltoall" + at, recv.read(), want);
    if (!recv.guardIntact()) failures->add("alltoall" + at + ": wrote past recv");
  }
  {  // gather to the last rank; the others pass no recv buffer
    DeviceInts send(count), recv(count * n);
    for (size_t i = 0; i < count; ++i) send.get()[i] = valueOf(r, i);
    finish(
        failures, "gather" + at,
        comm.gather(send.get(), r == root ? recv.get() : nullptr, count, DataType::kInt32, root));
    if (r == root) {
      std::vector<int32_t> want(count * n);
      for (int p = 0; p < n; ++p) {
        for (size_t i = 0; i < count; ++i) want[p * count + i] = valueOf(p, i);
      }
      expectEqual(failures, "gather" + at, recv.read(), want);
    }
    if (!recv.guardIntact()) failures->add("gather" + at + ": wrote past recv");
  }
  {  // scatter from the last rank; the others pass no send buffer
    DeviceInts send(count * n), recv(count);
    for (size_t i = 0; i < count * n; ++i) send.get()[i] = valueOf(r, i);
    finish(
        failures, "scatter" + at,
        comm.scatter(r == root ? send.get() : nullptr, recv.get(), count, DataType::kInt32, root));
    std::vector<int32_t> want(count);
    for (size_t i = 0; i < count; ++i) want[i] = valueOf(root, r * count + i);
    expectEqual(failures, "scatter" + at, recv.read(), want);
    if (!recv.guardIntact()) failures->add("scatter" + at + ": wrote past recv");
  }
  // Counts per rank: rank p's block holds (p * count + 1) / 2 elements: rank 0's block
  // is empty, the others differ.
  std::vector<size_t> counts(n);
  for (int p = 0; p < n; ++p) counts[p] = (p * count + 1) / 2;
  std::vector<size_t> offsets(n, 0);
  for (int p = 1; p < n; ++p) offsets[p] = offsets[p - 1] + counts[p - 1];
  const size_t total = offsets[n - 1] + counts[n - 1];
  {  // all-gather v: my block is exactly counts[r] long (the guard checks the read side)
    DeviceInts send(counts[r]), recv(total);
    for (size_t i = 0; i < counts[r]; ++i) send.get()[i] = valueOf(r, i);
    finish(failures, "allgatherv" + at,
           comm.allGatherV(send.get(), recv.get(), counts, DataType::kInt32));
    std::vector<int32_t> want(total);
    for (int p = 0; p < n; ++p) {
      for (size_t i = 0; i < counts[p]; ++i) want[offsets[p] + i] = valueOf(p, i);
    }
    expectEqual(failures, "allgatherv" + at, recv.read(), want);
    if (!recv.guardIntact()) failures->add("allgatherv" + at + ": wrote past recv");
  }
  {  // reduce-scatter v, int32 sum: exact in any order
    DeviceInts send(total), recv(counts[r]);
    for (size_t i = 0; i < total; ++i) send.get()[i] = valueOf(r, i);
    finish(failures, "reducescatterv" + at,
           comm.reduceScatterV(send.get(), recv.get(), counts, DataType::kInt32, ReduceOp::kSum));
    std::vector<int32_t> want(counts[r], 0);
    for (size_t i = 0; i < counts[r]; ++i) {
      for (int p = 0; p < n; ++p) want[i] += valueOf(p, offsets[r] + i);
    }
    expectEqual(failures, "reducescatterv" + at, recv.read(), want);
    if (!recv.guardIntact()) failures->add("reducescatterv" + at + ": wrote past recv");
  }
  {  // premulsum: all-reduce and reduce-scatter, rank p's factor p + 2 (int32: exact)
    const ReduceScalar factor = scalarOf(r + 2, DataType::kInt32);
    DeviceInts send(count * n), all(count * n), block(count);
    for (size_t i = 0; i < count * n; ++i) send.get()[i] = valueOf(r, i);
    finish(failures, "allreduce premulsum" + at,
           comm.allReduce(send.get(), all.get(), count * n, DataType::kInt32, ReduceOp::kPreMulSum,
                          factor));
    finish(failures, "reducescatter premulsum" + at,
           comm.reduceScatter(send.get(), block.get(), count, DataType::kInt32,
                              ReduceOp::kPreMulSum, factor));
    std::vector<int32_t> wantAll(count * n, 0), wantBlock(count, 0);
    for (size_t i = 0; i < count * n; ++i) {
      for (int p = 0; p < n; ++p) wantAll[i] += (p + 2) * valueOf(p, i);
    }
    for (size_t i = 0; i < count; ++i) wantBlock[i] = wantAll[r * count + i];
    expectEqual(failures, "allreduce premulsum" + at, all.read(), wantAll);
    expectEqual(failures, "reducescatter premulsum" + at, block.read(), wantBlock);
    if (!all.guardIntact() || !block.guardIntact()) {
      failures->add("premulsum" + at + ": wrote past recv");
    }
  }
  {  // all-to-all v: I send (r + p) % 3 * count elements to rank p
    std::vector<size_t> sendCounts(n), recvCounts(n);
    for (int p = 0; p < n; ++p) {
      sendCounts[p] = static_cast<size_t>((r + p) % 3) * count;
      recvCounts[p] = static_cast<size_t>((p + r) % 3) * count;
    }
    const size_t sendTotal = std::accumulate(sendCounts.begin(), sendCounts.end(), size_t{0});
    const size_t recvTotal = std::accumulate(recvCounts.begin(), recvCounts.end(), size_t{0});
    DeviceInts send(sendTotal), recv(recvTotal);
    for (size_t i = 0; i < sendTotal; ++i) send.get()[i] = valueOf(r, i);
    finish(
        failures, "alltoallv" + at,
        comm.allToAllV(send.get(), sendCounts, {}, recv.get(), recvCounts, {}, DataType::kInt32));
    std::vector<int32_t> want;
    for (int p = 0; p < n; ++p) {
      // Rank p's packed send puts my block after its blocks for ranks 0..r-1.
      size_t from = 0;
      for (int q = 0; q < r; ++q) from += static_cast<size_t>((p + q) % 3) * count;
      for (size_t i = 0; i < recvCounts[p]; ++i) want.push_back(valueOf(p, from + i));
    }
    expectEqual(failures, "alltoallv" + at, recv.read(), want);
    if (!recv.guardIntact()) failures->add("alltoallv" + at + ": wrote past recv");
  }
}

void runMatrix(int nranks, bool hostPerRank) {
  auto comm = comms(nranks, hostPerRank);
  ASSERT_EQ(comm.size(), static_cast<size_t>(nranks));
  const uint64_t copiesBefore = emulatedCopies();
  Failures failures;
  const std::vector<size_t> counts = {1, 1021, 20'000};
  testing::onEveryRank(nranks, [&](int r) {
    for (size_t count : counts) runExchanges(*comm[r], count, &failures);
  });
  for (const std::string& m : failures.messages) ADD_FAILURE() << m;
  // Staged: at least a copy in or out per call and rank (8 calls per count); on one host
  // only the v kinds of all-gather and reduce-scatter are (a copy in and one out each).
  EXPECT_GE(emulatedCopies() - copiesBefore, counts.size() * (hostPerRank ? 8 : 4) * nranks);
}

TEST(DeviceExchangesTest, OneHostTwoRanks) { runMatrix(2, false); }
TEST(DeviceExchangesTest, OneHostThreeRanks) { runMatrix(3, false); }
TEST(DeviceExchangesTest, HostPerRankThreeRanks) { runMatrix(3, true); }

// Point-to-point on device buffers, one host: messages move between the ranks' device
// windows. Slots of 4 KiB, so that every message of these sizes is many chunks.
std::vector<std::unique_ptr<Communicator>> smallSlotComms(int nranks) {
  Options options;
  options.config["COLLIE_DEVICE_EMULATION"] = "1";
  options.config["COLLIE_DEVICE_SLOT_BYTES"] = "4096";
  options.timeout = std::chrono::seconds(30);
  return testing::makeCommunicators(nranks, options);
}

// Each rank of three, in one group: 20,000 elements to the next rank, 7,001 to the one
// after it (the previous), 3 to itself, and the matching receives, listed receives
// first on odd ranks; then every rank checks what it got.
TEST(DeviceExchangesTest, PointToPointGroupsOnOneHost) {
  constexpr int kRanks = 3;
  auto comm = smallSlotComms(kRanks);
  ASSERT_EQ(comm.size(), static_cast<size_t>(kRanks));
  Failures failures;
  testing::onEveryRank(kRanks, [&](int r) {
    const int next = (r + 1) % kRanks, prev = (r + kRanks - 1) % kRanks;
    const size_t big = 20'000, small = 7'001, self = 3;
    DeviceInts toNext(big), toPrev(small), toSelf(self), fromPrev(big), fromNext(small),
        fromSelf(self);
    for (size_t i = 0; i < big; ++i) toNext.get()[i] = valueOf(r, i);
    for (size_t i = 0; i < small; ++i) toPrev.get()[i] = valueOf(r, 50'000 + i);
    for (size_t i = 0; i < self; ++i) toSelf.get()[i] = valueOf(r, 90'000 + i);
    std::vector<PointToPoint> sends = {
        {true, toNext.get(), big, DataType::kInt32, next, std::nullopt},
        {true, toPrev.get(), small, DataType::kInt32, prev, std::nullopt},
        {true, toSelf.get(), self, DataType::kInt32, r, std::nullopt}};
    std::vector<PointToPoint> recvs = {
        {false, fromPrev.get(), big, DataType::kInt32, prev, std::nullopt},
        {false, fromNext.get(), small, DataType::kInt32, next, std::nullopt},
        {false, fromSelf.get(), self, DataType::kInt32, r, std::nullopt}};
    std::vector<PointToPoint> group = r % 2 == 0 ? sends : recvs;
    group.insert(group.end(), (r % 2 == 0 ? recvs : sends).begin(),
                 (r % 2 == 0 ? recvs : sends).end());
    const std::string at = " (rank " + std::to_string(r) + ")";
    finish(&failures, "sendRecv" + at, comm[r]->sendRecv(group));
    std::vector<int32_t> want(big);
    for (size_t i = 0; i < big; ++i) want[i] = valueOf(prev, i);
    expectEqual(&failures, "from prev" + at, fromPrev.read(), want);
    want.assign(small, 0);
    for (size_t i = 0; i < small; ++i) want[i] = valueOf(next, 50'000 + i);
    expectEqual(&failures, "from next" + at, fromNext.read(), want);
    want.assign(self, 0);
    for (size_t i = 0; i < self; ++i) want[i] = valueOf(r, 90'000 + i);
    expectEqual(&failures, "from self" + at, fromSelf.read(), want);
    if (!fromPrev.guardIntact() || !fromNext.guardIntact() || !fromSelf.guardIntact()) {
      failures.add("sendRecv" + at + ": wrote past a receive buffer");
    }
    // Then single sends and receives (the communicator's own stream), rank 0 <-> 1.
    if (r < 2) {
      DeviceInts one(5'000), got(5'000);
      for (size_t i = 0; i < 5'000; ++i) one.get()[i] = valueOf(r, 7 * i);
      Result<Work> first = r == 0 ? comm[r]->send(one.get(), 5'000, DataType::kInt32, 1)
                                  : comm[r]->recv(got.get(), 5'000, DataType::kInt32, 0);
      finish(&failures, "single" + at, std::move(first));
      Result<Work> second = r == 0 ? comm[r]->recv(got.get(), 5'000, DataType::kInt32, 1)
                                   : comm[r]->send(one.get(), 5'000, DataType::kInt32, 0);
      finish(&failures, "single" + at, std::move(second));
      want.assign(5'000, 0);
      for (size_t i = 0; i < 5'000; ++i) want[i] = valueOf(1 - r, 7 * i);
      expectEqual(&failures, "single" + at, got.read(), want);
    }
  });
  for (const std::string& m : failures.messages) ADD_FAILURE() << m;
}

// Gather and scatter in place, as NCCL defines it (the root's send block is its own
// block of the receive buffer, and the reverse), between the device windows of three
// ranks of one host; then a gather whose root one rank names differently fails with
// Mismatch on every rank before anything moves.
TEST(DeviceExchangesTest, InPlaceGatherScatterAndRootMismatchOnOneHost) {
  constexpr int kRanks = 3;
  constexpr size_t kCount = 1'021;
  auto comm = smallSlotComms(kRanks);
  ASSERT_EQ(comm.size(), static_cast<size_t>(kRanks));
  const int root = 1;
  Failures failures;
  testing::onEveryRank(kRanks, [&](int r) {
    const std::string at = " (rank " + std::to_string(r) + ")";
    DeviceInts gathered(kCount * kRanks), own(kCount);
    int32_t* send = r == root ? gathered.get() + root * kCount : own.get();
    for (size_t i = 0; i < kCount; ++i) send[i] = valueOf(r, i);
    finish(&failures, "gather" + at,
           comm[r]->gather(send, r == root ? gathered.get() : nullptr, kCount, DataType::kInt32,
                           root));
    if (r == root) {
      std::vector<int32_t> want(kCount * kRanks);
      for (int p = 0; p < kRanks; ++p) {
        for (size_t i = 0; i < kCount; ++i) want[p * kCount + i] = valueOf(p, i);
      }
      expectEqual(&failures, "gather" + at, gathered.read(), want);
    }
    DeviceInts scattered(kCount * kRanks), mine(kCount);
    if (r == root) {
      for (size_t i = 0; i < kCount * kRanks; ++i) scattered.get()[i] = valueOf(r, 5 * i);
    }
    int32_t* recv = r == root ? scattered.get() + root * kCount : mine.get();
    finish(&failures, "scatter" + at,
           comm[r]->scatter(r == root ? scattered.get() : nullptr, recv, kCount, DataType::kInt32,
                            root));
    std::vector<int32_t> want(kCount);
    for (size_t i = 0; i < kCount; ++i) want[i] = valueOf(root, 5 * (r * kCount + i));
    expectEqual(&failures, "scatter" + at, std::vector<int32_t>(recv, recv + kCount), want);
    // Rank 2 names another root: every rank fails with Mismatch.
    DeviceInts out(kCount * kRanks), in(kCount);
    const int named = r == 2 ? 0 : root;
    Result<Work> work = comm[r]->gather(in.get(), r == named ? out.get() : nullptr, kCount,
                                        DataType::kInt32, named);
    Status status = work.isOk() ? work->wait(std::chrono::seconds(60)) : work.status();
    if (status.code() != StatusCode::kMismatch) {
      failures.add("root mismatch" + at + ": " + status.toString());
    }
  });
  for (const std::string& m : failures.messages) ADD_FAILURE() << m;
}

// An all-to-all in place on device buffers: refused on one host, where the device path
// moves blocks between the ranks' buffers directly (nothing is submitted, so the next
// collective runs); across hosts, staged through separate host buffers, it runs.
TEST(DeviceExchangesTest, InPlaceAllToAllRefusedOnOneHostStagedAcrossHosts) {
  constexpr size_t kCount = 300;
  for (bool hostPerRank : {false, true}) {
    SCOPED_TRACE(hostPerRank ? "host per rank" : "one host");
    auto comm = hostPerRank ? comms(2, true) : smallSlotComms(2);
    ASSERT_EQ(comm.size(), 2u);
    Failures failures;
    testing::onEveryRank(2, [&](int r) {
      const std::string at = " (rank " + std::to_string(r) + ")";
      DeviceInts buf(kCount * 2);
      for (size_t i = 0; i < kCount * 2; ++i) buf.get()[i] = valueOf(r, i);
      Result<Work> work = comm[r]->allToAll(buf.get(), buf.get(), kCount, DataType::kInt32);
      if (!hostPerRank) {
        if (work.isOk() || work.status().code() != StatusCode::kInvalidArgument ||
            work.status().message().find("device buffers") == std::string::npos) {
          failures.add("in place on one host" + at + ": " +
                       (work.isOk() ? std::string("accepted") : work.status().toString()));
        }
        DeviceInts send(kCount * 2), recv(kCount * 2);
        for (size_t i = 0; i < kCount * 2; ++i) send.get()[i] = valueOf(r, i);
        work = comm[r]->allToAll(send.get(), recv.get(), kCount, DataType::kInt32);
        finish(&failures, "out of place after the refusal" + at, std::move(work));
        std::vector<int32_t> want(kCount * 2);
        for (int p = 0; p < 2; ++p) {
          for (size_t i = 0; i < kCount; ++i) want[p * kCount + i] = valueOf(p, r * kCount + i);
        }
        expectEqual(&failures, "out of place after the refusal" + at, recv.read(), want);
        return;
      }
      finish(&failures, "in place across hosts" + at, std::move(work));
      std::vector<int32_t> want(kCount * 2);
      for (int p = 0; p < 2; ++p) {
        for (size_t i = 0; i < kCount; ++i) want[p * kCount + i] = valueOf(p, r * kCount + i);
      }
      expectEqual(&failures, "in place across hosts" + at, buf.read(), want);
    });
    for (const std::string& m : failures.messages) ADD_FAILURE() << m;
  }
}

// Both ranks send each other 400 KiB before receiving, in one group each: a hundred
// chunks each way through two slots per pair, which only completes because the sends
// and receives interleave (issued one after the other, both ranks would wait forever).
TEST(DeviceExchangesTest, CrossedLargeSendsDoNotDeadlock) {
  auto comm = smallSlotComms(2);
  ASSERT_EQ(comm.size(), 2u);
  Failures failures;
  testing::onEveryRank(2, [&](int r) {
    constexpr size_t kCount = 100'000;
    DeviceInts out(kCount), in(kCount);
    for (size_t i = 0; i < kCount; ++i) out.get()[i] = valueOf(r, i);
    finish(&failures, "crossed",
           comm[r]->sendRecv({{true, out.get(), kCount, DataType::kInt32, 1 - r, std::nullopt},
                              {false, in.get(), kCount, DataType::kInt32, 1 - r, std::nullopt}}));
    std::vector<int32_t> want(kCount);
    for (size_t i = 0; i < kCount; ++i) want[i] = valueOf(1 - r, i);
    expectEqual(&failures, "crossed (rank " + std::to_string(r) + ")", in.read(), want);
  });
  for (const std::string& m : failures.messages) ADD_FAILURE() << m;
}

TEST(DeviceExchangesTest, BadDevicePointToPointIsRefusedBeforeAnythingMoves) {
  auto comm = smallSlotComms(2);
  ASSERT_EQ(comm.size(), 2u);
  DeviceInts buffer(4), other(5);
  std::vector<int32_t> host(4);
  // Host and device buffers in one group.
  Result<Work> mixed =
      comm[0]->sendRecv({{true, buffer.get(), 4, DataType::kInt32, 1, std::nullopt},
                         {false, host.data(), 4, DataType::kInt32, 1, std::nullopt}});
  ASSERT_FALSE(mixed.isOk());
  EXPECT_EQ(mixed.status().code(), StatusCode::kInvalidArgument);
  // A send to itself without its receive, and one whose receive has another size.
  Result<Work> unpaired =
      comm[0]->sendRecv({{true, buffer.get(), 4, DataType::kInt32, 0, std::nullopt}});
  ASSERT_FALSE(unpaired.isOk());
  EXPECT_EQ(unpaired.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(unpaired.status().message().find("rank 0"), std::string::npos)
      << unpaired.status().toString();
  Result<Work> sizes =
      comm[0]->sendRecv({{true, buffer.get(), 4, DataType::kInt32, 0, std::nullopt},
                         {false, other.get(), 5, DataType::kInt32, 0, std::nullopt}});
  ASSERT_FALSE(sizes.isOk());
  EXPECT_EQ(sizes.status().code(), StatusCode::kInvalidArgument);
  // Tags have no device matching.
  Result<Work> tagged = comm[0]->send(buffer.get(), 4, DataType::kInt32, 1, int64_t{7});
  ASSERT_FALSE(tagged.isOk());
  EXPECT_EQ(tagged.status().code(), StatusCode::kUnsupported);
  // Nothing moved: a plain exchange still works on both ranks afterwards.
  Failures failures;
  testing::onEveryRank(2, [&](int r) {
    DeviceInts out(4), in(4);
    for (size_t i = 0; i < 4; ++i) out.get()[i] = valueOf(r, i);
    finish(&failures, "after",
           comm[r]->sendRecv({{true, out.get(), 4, DataType::kInt32, 1 - r, std::nullopt},
                              {false, in.get(), 4, DataType::kInt32, 1 - r, std::nullopt}}));
    std::vector<int32_t> want(4);
    for (size_t i = 0; i < 4; ++i) want[i] = valueOf(1 - r, i);
    expectEqual(&failures, "after", in.read(), want);
  });
  for (const std::string& m : failures.messages) ADD_FAILURE() << m;
}

TEST(DeviceExchangesTest, PointToPointOnDeviceBuffersAcrossHostsIsRefusedNamingTheRank) {
  auto comm = comms(2, true);
  ASSERT_EQ(comm.size(), 2u);
  DeviceInts buffer(4);
  Result<Work> sent = comm[0]->send(buffer.get(), 4, DataType::kInt32, 1);
  ASSERT_FALSE(sent.isOk());
  EXPECT_EQ(sent.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(sent.status().message().find("rank 0"), std::string::npos) << sent.status().toString();
}

// Across hosts a device collective is staged: its host part runs at the call, so a
// capture could not record it. Refused, naming the capture; nothing enqueued.
TEST(DeviceExchangesTest, StagedCollectiveUnderGraphCaptureIsRefused) {
  auto comm = comms(2, true);
  ASSERT_EQ(comm.size(), 2u);
  DeviceInts in(16), out(16);
  Result<DeviceStream> stream = runtime().createStream();
  ASSERT_TRUE(stream.isOk());
  auto* emulated = static_cast<emulation::EmulatedStream*>(*stream);
  emulated->beginCapture();
  Result<Work> work =
      comm[0]->allReduce(in.get(), out.get(), 16, DataType::kInt32, ReduceOp::kSum, *stream);
  emulation::EmulatedStream::Graph graph = emulated->endCapture();
  ASSERT_FALSE(work.isOk());
  EXPECT_EQ(work.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(work.status().message().find("captured"), std::string::npos)
      << work.status().toString();
  EXPECT_TRUE(graph.empty());
  runtime().destroyStream(*stream);
}

}  // namespace
}  // namespace collie
