// A rank of the huge-page test (run through `collie run` with COLLIE_SHM_CMA_MAX=4M, so
// that an out-of-place all-reduce of 16 MiB on plain small-page buffers takes the FIFO
// ring, and cross-memory attach only once its buffers are in huge pages).
//
// Every rank runs 6 rounds of float sum out of place and int32 max in place on the same
// malloc'd buffers (16 MiB and 20 bytes, so not 2 MiB-aligned), each round with other
// values, and checks every element against the exact result. Then:
//   - the kernel put the buffers' interiors in huge pages (/proc/self/smaps), from the
//     second round on (the first sighting collapses nothing);
//   - the out-of-place all-reduces of the later rounds went cross-memory (shares
//     counted), although they are above COLLIE_SHM_CMA_MAX;
//   - buffers freed and allocated anew (the advisor must not take them for the old
//     ones) give exact results too.
// Exit 77 (skipped) where the kernel does not collapse anonymous memory, after the
// exactness checks.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "collie/communicator.h"
#include "core/team/cross_memory.h"
#include "tests/support/huge_page_usage.h"
#include "transports/shm/shm_huge_pages.h"

namespace {

constexpr size_t kCount = (size_t{16} << 20) / 4 + 5;
constexpr int kRounds = 6;

int value(size_t i, int rank, int round) {
  return static_cast<int>((i * 7 + rank * 13 + round) % 251);
}

// Float sum out of place and int32 max in place on these buffers; 0 when every
// element is exact.
int roundOnce(collie::Communicator& comm, float* send, float* recv, int32_t* both, int round) {
  const int n = comm.size(), rank = comm.rank();
  for (size_t i = 0; i < kCount; ++i) {
    send[i] = static_cast<float>(value(i, rank, round));
    recv[i] = -1.0f;
    both[i] = value(i, rank, round) - 100 * rank;
  }
  auto sum = comm.allReduce(send, recv, kCount, collie::DataType::kFloat32, collie::ReduceOp::kSum);
  collie::Status status = sum.isOk() ? sum->wait() : sum.status();
  if (status.isOk()) {
    auto max = comm.allReduce(both, both, kCount, collie::DataType::kInt32, collie::ReduceOp::kMax);
    status = max.isOk() ? max->wait() : max.status();
  }
  if (!status.isOk()) {
    std::fprintf(stderr, "huge_pages_rank %d, round %d: %s\n", rank, round,
                 status.toString().c_str());
    return 1;
  }
  for (size_t i = 0; i < kCount; ++i) {
    int expectedSum = 0, expectedMax = INT32_MIN;
    for (int r = 0; r < n; ++r) {
      expectedSum += value(i, r, round);
      expectedMax = std::max(expectedMax, value(i, r, round) - 100 * r);
    }
    if (recv[i] != static_cast<float>(expectedSum) || both[i] != expectedMax) {
      std::fprintf(stderr,
                   "huge_pages_rank %d, round %d: element %zu is %g / %d, expected %d / %d\n", rank,
                   round, i, static_cast<double>(recv[i]), both[i], expectedSum, expectedMax);
      return 1;
    }
  }
  return 0;
}

bool kernelCollapses() {
  std::vector<uint8_t> probe(8 << 20, 1);
  collie::shm::HugePageAdvisor advisor(1, 8 << 20);
  advisor.advise(probe.data(), probe.size());
  return advisor.advise(probe.data(), probe.size());
}

}  // namespace

int main() {
  auto comm = collie::Communicator::createFromEnvironment();
  if (!comm.isOk()) {
    std::fprintf(stderr, "huge_pages_rank: %s\n", comm.status().toString().c_str());
    return 2;
  }
  const int rank = (*comm)->rank();
  const size_t bytes = kCount * 4;
  int failed = 0;
  auto* send = static_cast<float*>(std::malloc(bytes));
  auto* recv = static_cast<float*>(std::malloc(bytes));
  auto* both = static_cast<int32_t*>(std::malloc(bytes));
  const std::vector<std::pair<const void*, size_t>> buffers = {
      {send, bytes}, {recv, bytes}, {both, bytes}};
  const size_t hugeBefore = collie::testing::hugePageKiB(buffers);
  uint64_t lateShares = 0;
  for (int round = 0; round < kRounds && failed == 0; ++round) {
    const uint64_t before = collie::crossMemoryShareCount();
    failed += roundOnce(**comm, send, recv, both, round);
    // Round 2 on: both all-reduces cross-memory (the out-of-place one only in huge pages).
    if (round >= 2) lateShares += collie::crossMemoryShareCount() - before;
  }
  const size_t hugeKiB = collie::testing::hugePageKiB(buffers) - hugeBefore;
  const bool collapses = kernelCollapses();
  if (collapses && hugeKiB < 3 * 12 * 1024) {
    std::fprintf(stderr,
                 "huge_pages_rank %d: %zu KiB more in huge pages, expected at least "
                 "3 x 12 MiB (the buffers' interiors)\n",
                 rank, hugeKiB);
    ++failed;
  }
  const uint64_t expectedShares = 2 * (kRounds - 2);
  if (collapses && lateShares != expectedShares) {
    std::fprintf(stderr,
                 "huge_pages_rank %d: %llu cross-memory shares in rounds 2-%d, expected "
                 "%llu (out of place above COLLIE_SHM_CMA_MAX goes cma once in huge pages)\n",
                 rank, static_cast<unsigned long long>(lateShares), kRounds - 1,
                 static_cast<unsigned long long>(expectedShares));
    ++failed;
  }
  // New buffers, possibly at the old addresses: exact again.
  std::free(send);
  std::free(recv);
  std::free(both);
  send = static_cast<float*>(std::malloc(bytes));
  recv = static_cast<float*>(std::malloc(bytes));
  both = static_cast<int32_t*>(std::malloc(bytes));
  for (int round = kRounds; round < kRounds + 3 && failed == 0; ++round) {
    failed += roundOnce(**comm, send, recv, both, round);
  }
  std::free(send);
  std::free(recv);
  std::free(both);
  if (failed != 0) return 1;
  if (!collapses) {
    std::printf(
        "huge_pages_rank %d: results exact; skipped the huge-page checks: this kernel "
        "does not collapse anonymous memory (MADV_COLLAPSE, Linux 6.1+)\n",
        rank);
    return 77;
  }
  std::printf("huge_pages_rank %d: ok (%zu KiB more in huge pages)\n", rank, hugeKiB);
  return 0;
}
