// A rank of the cross-memory fallback test (run by cma_fallback_test.sh through
// `collie run`). Usage: cma_rank DENIED_RANK (-1: none)
// The denied rank makes process_vm_readv/writev fail with EPERM for itself (a seccomp
// filter, as a container runtime's would). Every rank then runs unregistered
// all-reduces above the board (float sum and int32 max, in and out of place)
// and checks every element. With no denied rank they must take the cross-memory path;
// with one, every rank must fall back to the FIFO ring. Exit 0 when both hold.
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "collie/communicator.h"
#include "core/team/cross_memory.h"

namespace {

bool denyCrossMemoryAttach() {
  sock_filter filter[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_process_vm_readv, 2, 0),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_process_vm_writev, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
  };
  sock_fprog program{static_cast<unsigned short>(sizeof(filter) / sizeof(filter[0])), filter};
  // TSYNC: the communicator's progress thread runs the collectives; filter it too.
  return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 &&
         syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &program) == 0;
}

template <typename T>
int check(collie::Communicator& comm, collie::DataType dtype, collie::ReduceOp op, bool inPlace,
          size_t count) {
  const int n = comm.size(), rank = comm.rank();
  std::vector<T> send(count), recv(count, T(-1));
  for (size_t i = 0; i < count; ++i) send[i] = T((i + 7 * rank) % 97);
  if (inPlace) recv = send;
  auto work = comm.allReduce(inPlace ? recv.data() : send.data(), recv.data(), count, dtype, op);
  collie::Status status = work.isOk() ? work->wait() : work.status();
  if (!status.isOk()) {
    std::fprintf(stderr, "cma_rank %d: %s\n", rank, status.toString().c_str());
    return 1;
  }
  for (size_t i = 0; i < count; ++i) {
    T expected = op == collie::ReduceOp::kSum ? T(0) : T((i) % 97);
    for (int r = 0; r < n; ++r) {
      const T v = T((i + 7 * r) % 97);
      expected = op == collie::ReduceOp::kSum ? T(expected + v) : std::max(expected, v);
    }
    if (recv[i] != expected) {
      std::fprintf(stderr, "cma_rank %d: element %zu is %g, expected %g\n", rank, i,
                   double(recv[i]), double(expected));
      return 1;
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 && argc != 3) {
    std::fprintf(stderr, "usage: cma_rank DENIED_RANK [COUNT]\n");
    return 2;
  }
  const int denied = std::atoi(argv[1]);
  // Elements per all-reduce; the default, 4 MiB and a bit, is above the board.
  const size_t count = argc == 3 ? std::strtoull(argv[2], nullptr, 10) : (1 << 20) + 3;
  auto comm = collie::Communicator::createFromEnvironment();
  if (!comm.isOk()) {
    std::fprintf(stderr, "cma_rank: %s\n", comm.status().toString().c_str());
    return 2;
  }
  const int rank = (*comm)->rank();
  if (rank == denied && !denyCrossMemoryAttach()) {
    std::perror("cma_rank: installing the seccomp filter");
    return 2;
  }
  int failed = 0;
  for (bool inPlace : {false, true}) {
    failed +=
        check<float>(**comm, collie::DataType::kFloat32, collie::ReduceOp::kSum, inPlace, count);
    failed +=
        check<int32_t>(**comm, collie::DataType::kInt32, collie::ReduceOp::kMax, inPlace, count);
  }
  const uint64_t shares = collie::crossMemoryShareCount();
  if (denied < 0 && shares != 4) {
    std::fprintf(stderr, "cma_rank %d: %llu cross-memory shares, expected 4\n", rank,
                 static_cast<unsigned long long>(shares));
    ++failed;
  }
  if (denied >= 0 && shares != 0) {
    std::fprintf(stderr, "cma_rank %d: went cross-memory although rank %d is denied\n", rank,
                 denied);
    ++failed;
  }
  if (failed == 0) std::printf("cma_rank %d: ok\n", rank);
  return failed == 0 ? 0 : 1;
}
