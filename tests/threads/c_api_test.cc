// The C API (collie.h) with ranks as threads: shared memory from collieAllocShared,
// registered on every rank, carries a single-copy all-reduce whose bytes equal a float64
// reference on every rank; misuse returns collieInvalidArgument with a message.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "collie/collie.h"
#include "support/rank_threads.h"

namespace collie {
namespace {

constexpr int kRanks = 2;
// Above the one-shot slots (256 KiB): the registered, single-copy path.
constexpr size_t kCount = (1 << 18) + 13;

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
