// A rank of the allocShared reuse test (run under `collie run -n N`): allocShared
// buffers take the direct path without registerBuffer, and a freed buffer whose address
// is reused is never served from a stale mapping.
//
// Round 0: send and receive buffers from allocShared, not registered: the all-reduce
// must go direct (this process's direct share count grows) and be exact.
// Round 1: both freed and allocated again; the same addresses come back (else exit 77:
// the case cannot be made here, the test is skipped). New values: a peer that wrote
// into the old receive buffer through a stale mapping would leave this rank's output
// wrong. Every peer must also have unmapped the old regions: this process maps its own
// 2 regions and 2 per peer (counted in /proc/self/maps).
// Round 2: the receive buffer freed and plain anonymous memory mapped at its address:
// the all-reduce must not go direct (it is not shared memory any more) and be exact.
// Exit 0 when all hold; every failure names the rank and the round.
#include <sys/mman.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "collie/communicator.h"
#include "collie/shared_memory.h"
#include "core/team/direct_share.h"

namespace {

constexpr size_t kCount = (1 << 20) + 4099;  // floats: past the 2 MiB board, ends mid-line
constexpr size_t kBytes = kCount * sizeof(float);

int fail(int rank, int round, const std::string& what) {
  std::fprintf(stderr, "shared_reuse_rank %d, round %d: %s\n", rank, round, what.c_str());
  return 1;
}

// Mappings of allocShared memfds in this process (its own and the peers' it mapped).
int sharedMappings() {
  std::ifstream maps("/proc/self/maps");
  int count = 0;
  for (std::string line; std::getline(maps, line);) {
    if (line.find("memfd:collie-shared") != std::string::npos) ++count;
  }
  return count;
}

// Fills send with rank- and round-dependent integers (exact in float), runs the
// all-reduce and checks every element; `went` says whether it went direct.
int allReduceAndCheck(collie::Communicator& comm, int round, float* send, float* recv, bool* went) {
  const int n = comm.size(), rank = comm.rank();
  for (size_t i = 0; i < kCount; ++i) send[i] = float((i * 7 + rank * 13 + round * 101) % 1009);
  std::memset(recv, 0xEE, kBytes);
  const uint64_t before = collie::directShareCount();
  auto work =
      comm.allReduce(send, recv, kCount, collie::DataType::kFloat32, collie::ReduceOp::kSum);
  collie::Status status = work.isOk() ? work->wait() : work.status();
  if (!status.isOk()) return fail(rank, round, status.toString());
  *went = collie::directShareCount() != before;
  for (size_t i = 0; i < kCount; ++i) {
    float expected = 0;
    for (int r = 0; r < n; ++r) expected += float((i * 7 + r * 13 + round * 101) % 1009);
    if (recv[i] != expected) {
      return fail(rank, round,
                  "element " + std::to_string(i) + " is " + std::to_string(recv[i]) +
                      ", expected " + std::to_string(expected));
    }
  }
  return 0;
}

float* shared(int rank) {
  collie::Result<void*> p = collie::allocShared(kBytes);
  if (!p.isOk())
    std::fprintf(stderr, "shared_reuse_rank %d: %s\n", rank, p.status().toString().c_str());
  return p.isOk() ? static_cast<float*>(*p) : nullptr;
}

}  // namespace

int main() {
  auto comm = collie::Communicator::createFromEnvironment();
  if (!comm.isOk()) {
    std::fprintf(stderr, "shared_reuse_rank: %s\n", comm.status().toString().c_str());
    return 1;
  }
  collie::Communicator& c = **comm;
  const int rank = c.rank();
  bool went = false;

  float* send = shared(rank);
  float* recv = shared(rank);
  if (send == nullptr || recv == nullptr) return 1;
  if (allReduceAndCheck(c, 0, send, recv, &went) != 0) return 1;
  if (!went) return fail(rank, 0, "unregistered allocShared buffers did not go direct");

  float* const oldSend = send;
  float* const oldRecv = recv;
  if (!collie::freeShared(send).isOk() || !collie::freeShared(recv).isOk()) return 1;
  send = shared(rank);
  recv = shared(rank);
  if (send == nullptr || recv == nullptr) return 1;
  // Every rank must agree on skipping, or the others wait for it.
  int same = send == oldSend && recv == oldRecv ? 1 : 0;
  auto agreed = c.allReduce(&same, &same, 1, collie::DataType::kInt32, collie::ReduceOp::kMin);
  if (!agreed.isOk() || !agreed->wait().isOk()) return fail(rank, 1, "agreeing on the addresses");
  if (same == 0) {
    std::fprintf(stderr, "shared_reuse_rank %d: allocShared did not reuse the addresses; skipped\n",
                 rank);
    return 77;
  }
  if (allReduceAndCheck(c, 1, send, recv, &went) != 0) return 1;
  if (!went) return fail(rank, 1, "reallocated allocShared buffers did not go direct");
  const int mappings = sharedMappings();
  if (mappings != 2 * c.size()) {
    return fail(rank, 1,
                std::to_string(mappings) + " allocShared mappings, expected " +
                    std::to_string(2 * c.size()) + " (own 2, 2 per peer): a freed one is kept");
  }

  if (!collie::freeShared(recv).isOk()) return 1;
  void* plain = mmap(recv, kBytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  if (plain != recv) return fail(rank, 2, "cannot map plain memory at the freed address");
  if (allReduceAndCheck(c, 2, send, recv, &went) != 0) return 1;
  if (went) return fail(rank, 2, "plain memory at a freed allocShared address went direct");
  munmap(plain, kBytes);
  return collie::freeShared(send).isOk() ? 0 : 1;
}
