// The C API (collie.h) with ranks as threads: shared memory from collieAllocShared,
// registered on every rank, carries a single-copy all-reduce whose bytes equal a float64
// reference on every rank; the exchanges deliver every block; PREMUL_SUM ops sum each
// rank's input times its own factor; misuse returns collieInvalidArgument with a message.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "collie/collie.h"
#include "support/rank_threads.h"

namespace collie {
namespace {

constexpr int kRanks = 2;
// Past the board (2 MiB per rank): the registered, single-copy path.
constexpr size_t kCount = (1 << 20) + 13;

float inputOf(int rank, size_t i) { return static_cast<float>((i * 7 + rank * 3) % 97) * 0.25f; }

TEST(CApiTest, RegisteredSharedBuffersAllReduce) {
  collieUniqueId id;
  ASSERT_EQ(collieGetUniqueId(&id), collieSuccess) << collieGetLastError();
  std::vector<std::vector<float>> results(kRanks);
  std::vector<std::string> errors(kRanks);
  testing::onEveryRank(kRanks, [&](int rank) {
    auto check = [&](collieResult_t result, const char* what) {
      if (result != collieSuccess && errors[rank].empty()) {
        errors[rank] = std::string(what) + ": " + collieGetLastError();
      }
      return result == collieSuccess;
    };
    collieComm_t comm = nullptr;
    if (!check(collieCommInitRank(&comm, kRanks, id, rank), "init")) return;
    void* send = nullptr;
    void* recv = nullptr;
    const size_t bytes = kCount * sizeof(float);
    if (check(collieAllocShared(&send, bytes), "alloc send") &&
        check(collieAllocShared(&recv, bytes), "alloc recv") &&
        check(collieRegisterBuffer(comm, send, bytes), "register send") &&
        check(collieRegisterBuffer(comm, recv, bytes), "register recv")) {
      auto* in = static_cast<float*>(send);
      for (size_t i = 0; i < kCount; ++i) in[i] = inputOf(rank, i);
      if (check(collieAllReduce(send, recv, kCount, collieFloat32, collieSum, comm), "allreduce")) {
        const auto* out = static_cast<const float*>(recv);
        results[rank].assign(out, out + kCount);
      }
      check(collieDeregisterBuffer(comm, send), "deregister send");
      check(collieDeregisterBuffer(comm, recv), "deregister recv");
    }
    check(collieFreeShared(send), "free send");
    check(collieFreeShared(recv), "free recv");
    check(collieCommDestroy(comm), "destroy");
  });
  for (int rank = 0; rank < kRanks; ++rank) {
    ASSERT_TRUE(errors[rank].empty()) << "rank " << rank << ": " << errors[rank];
    ASSERT_EQ(results[rank].size(), kCount) << "rank " << rank;
    for (size_t i = 0; i < kCount; ++i) {
      double want = 0;
      for (int r = 0; r < kRanks; ++r) want += static_cast<double>(inputOf(r, i));
      ASSERT_EQ(results[rank][i], static_cast<float>(want)) << "rank " << rank << " element " << i;
    }
  }
}

// The exchanges through the C API, 3 ranks: all-to-all, all-to-all with a count per peer
// (packed, NULL offsets), gather and scatter at root 1; every element checked.
TEST(CApiTest, Exchanges) {
  constexpr int n = 3;
  collieUniqueId id;
  ASSERT_EQ(collieGetUniqueId(&id), collieSuccess) << collieGetLastError();
  std::vector<std::string> errors(n);
  testing::onEveryRank(n, [&](int rank) {
    auto fail = [&](const std::string& what) {
      if (errors[rank].empty()) errors[rank] = what;
    };
    collieComm_t comm = nullptr;
    if (collieCommInitRank(&comm, n, id, rank) != collieSuccess) {
      return fail(std::string("init: ") + collieGetLastError());
    }
    auto value = [](int from, int to, size_t i) {
      return from * 100 + to * 10 + static_cast<int>(i);
    };
    std::vector<int32_t> in(2 * n), out(2 * n, -1);
    for (int p = 0; p < n; ++p) {
      for (size_t i = 0; i < 2; ++i) in[p * 2 + i] = value(rank, p, i);
    }
    if (collieAllToAll(in.data(), out.data(), 2, collieInt32, comm) != collieSuccess) {
      fail(std::string("alltoall: ") + collieGetLastError());
    }
    for (int p = 0; p < n; ++p) {
      for (size_t i = 0; i < 2; ++i) {
        if (out[p * 2 + i] != value(p, rank, i)) fail("alltoall: wrong element");
      }
    }
    // Rank r sends p + 1 elements to rank p and receives r + 1 from each.
    std::vector<size_t> sendCounts(n), recvCounts(n, static_cast<size_t>(rank) + 1);
    std::vector<int32_t> vin, vout(static_cast<size_t>(n) * (rank + 1), -1);
    for (int p = 0; p < n; ++p) {
      sendCounts[p] = static_cast<size_t>(p) + 1;
      for (size_t i = 0; i < sendCounts[p]; ++i) vin.push_back(value(rank, p, i));
    }
    if (collieAllToAllV(vin.data(), sendCounts.data(), nullptr, vout.data(), recvCounts.data(),
                        nullptr, collieInt32, comm) != collieSuccess) {
      fail(std::string("alltoallv: ") + collieGetLastError());
    }
    for (int p = 0; p < n; ++p) {
      for (int i = 0; i <= rank; ++i) {
        if (vout[p * (rank + 1) + i] != value(p, rank, i)) fail("alltoallv: wrong element");
      }
    }
    std::vector<int32_t> all(2 * n, -1), mine(2, -1);
    if (collieGather(in.data(), all.data(), 2, collieInt32, 1, comm) != collieSuccess) {
      fail(std::string("gather: ") + collieGetLastError());
    }
    for (int p = 0; p < n && rank == 1; ++p) {
      if (all[p * 2] != value(p, 0, 0)) fail("gather: wrong element");
    }
    if (collieScatter(in.data(), mine.data(), 2, collieInt32, 1, comm) != collieSuccess) {
      fail(std::string("scatter: ") + collieGetLastError());
    }
    if (mine[0] != value(1, rank, 0) || mine[1] != value(1, rank, 1)) fail("scatter: wrong");
    if (collieAllToAllV(vin.data(), nullptr, nullptr, vout.data(), recvCounts.data(), nullptr,
                        collieInt32, comm) != collieInvalidArgument) {
      fail("alltoallv with NULL counts was not refused");
    }
    // Counts per rank: rank p has p + 1 elements (sendCounts above), packed in rank order.
    std::vector<int32_t> gathered(n * (n + 1) / 2, -1), block(rank + 1, -1), own(rank + 1);
    for (int i = 0; i <= rank; ++i) own[i] = value(rank, 0, i);
    if (collieAllGatherV(own.data(), gathered.data(), sendCounts.data(), collieInt32, comm) !=
        collieSuccess) {
      fail(std::string("allgatherv: ") + collieGetLastError());
    }
    for (int p = 0, at = 0; p < n; at += ++p) {
      for (int i = 0; i <= p; ++i) {
        if (gathered[at + i] != value(p, 0, i)) fail("allgatherv: wrong element");
      }
    }
    if (collieReduceScatterV(gathered.data(), block.data(), sendCounts.data(), collieInt32,
                             collieSum, comm) != collieSuccess) {
      fail(std::string("reducescatterv: ") + collieGetLastError());
    }
    for (int i = 0, at = rank * (rank + 1) / 2; i <= rank; ++i) {
      if (block[i] != n * gathered[at + i]) fail("reducescatterv: wrong element");
    }
    if (collieAllGatherV(own.data(), gathered.data(), nullptr, collieInt32, comm) !=
        collieInvalidArgument) {
      fail("allgatherv with NULL counts was not refused");
    }
    collieCommDestroy(comm);
  });
  for (int rank = 0; rank < n; ++rank) {
    EXPECT_TRUE(errors[rank].empty()) << "rank " << rank << ": " << errors[rank];
  }
}

// PREMUL_SUM through the C API: each rank's factor is rank + 1 (3 ranks: sum 6), on
// values whose products and sums are exact in float32; an op of another dtype, a
// destroyed op and a second destroy are refused with a message.
TEST(CApiTest, PreMulSum) {
  constexpr int n = 3;
  constexpr size_t kBlock = 5;
  constexpr size_t kCount = kBlock * n;
  collieUniqueId id;
  ASSERT_EQ(collieGetUniqueId(&id), collieSuccess) << collieGetLastError();
  std::vector<std::string> errors(n);
  testing::onEveryRank(n, [&](int rank) {
    auto fail = [&](const std::string& what) {
      if (errors[rank].empty()) errors[rank] = what + ": " + collieGetLastError();
    };
    collieComm_t comm = nullptr;
    if (collieCommInitRank(&comm, n, id, rank) != collieSuccess) return fail("init");
    const float factor = static_cast<float>(rank + 1);
    collieRedOp_t premul;
    if (collieRedOpCreatePreMulSum(&premul, &factor, collieFloat32, comm) != collieSuccess) {
      return fail("create");
    }
    auto x = [](size_t i) { return static_cast<float>(i) * 0.5f; };
    std::vector<float> in(kCount), out(kCount, -1.0f);
    for (size_t i = 0; i < kCount; ++i) in[i] = x(i);
    if (collieAllReduce(in.data(), out.data(), kCount, collieFloat32, premul, comm) !=
        collieSuccess) {
      fail("allreduce");
    }
    for (size_t i = 0; i < kCount; ++i) {
      if (out[i] != 6.0f * x(i)) fail("allreduce: element " + std::to_string(i));
    }
    std::vector<float> block(kBlock, -1.0f);
    if (collieReduceScatter(in.data(), block.data(), kBlock, collieFloat32, premul, comm) !=
        collieSuccess) {
      fail("reducescatter");
    }
    for (size_t i = 0; i < kBlock; ++i) {
      if (block[i] != 6.0f * x(rank * kBlock + i)) fail("reducescatter: element");
    }
    std::vector<float> reduced(kCount, -1.0f);
    if (collieReduce(in.data(), reduced.data(), kCount, collieFloat32, premul, 1, comm) !=
        collieSuccess) {
      fail("reduce");
    }
    for (size_t i = 0; rank == 1 && i < kCount; ++i) {
      if (reduced[i] != 6.0f * x(i)) fail("reduce: element");
    }
    std::vector<int32_t> ints(kCount, 1);
    if (collieAllReduce(ints.data(), ints.data(), kCount, collieInt32, premul, comm) !=
            collieInvalidArgument ||
        std::string(collieGetLastError()).find("was made for float, the call is int32") ==
            std::string::npos) {
      fail("an op of another dtype was not refused");
    }
    if (collieRedOpDestroy(premul, comm) != collieSuccess) fail("destroy");
    if (collieAllReduce(in.data(), out.data(), kCount, collieFloat32, premul, comm) !=
        collieInvalidArgument) {
      fail("a destroyed op was not refused");
    }
    if (collieRedOpDestroy(premul, comm) != collieInvalidArgument) fail("destroyed twice");
    collieCommDestroy(comm);
  });
  for (int rank = 0; rank < n; ++rank) {
    EXPECT_TRUE(errors[rank].empty()) << "rank " << rank << ": " << errors[rank];
  }
}

TEST(CApiTest, MisuseIsReportedNotFatal) {
  EXPECT_EQ(collieAllocShared(nullptr, 4096), collieInvalidArgument);
  EXPECT_NE(std::string(collieGetLastError()).find("ptr is null"), std::string::npos);
  int local = 0;
  EXPECT_EQ(collieFreeShared(&local), collieInvalidArgument);
  EXPECT_NE(std::string(collieGetLastError()), "");
  EXPECT_EQ(collieRegisterBuffer(nullptr, &local, sizeof(local)), collieInvalidArgument);
  EXPECT_EQ(collieDeregisterBuffer(nullptr, &local), collieInvalidArgument);
}

}  // namespace
}  // namespace collie
