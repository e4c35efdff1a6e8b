// A rank of the kill -9 fault test (run by kill_rank_test.sh through `collie run`).
// Usage: fault_rank VICTIM DELAY_MS OUT_DIR
// Every rank runs 4 MiB all-reduces in a loop. The victim SIGKILLs itself DELAY_MS
// after the first one started (so mid-collective), first writing the time to
// OUT_DIR/killed. Survivors ignore the launcher's SIGTERM long enough to report: the
// first failing collective's time and message go to OUT_DIR/rank<R>, then exit 3.
// A survivor that sees no error within 60 s writes "no error" and exits 4.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "collie/communicator.h"

namespace {
long long nowUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void writeFile(const std::string& path, const std::string& text) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) return;
  std::fputs(text.c_str(), f);
  std::fclose(f);
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: fault_rank VICTIM DELAY_MS OUT_DIR\n");
    return 2;
  }
  const int victim = std::atoi(argv[1]);
  const int delayMs = std::atoi(argv[2]);
  const std::string dir = argv[3];
  auto comm = collie::Communicator::createFromEnvironment();
  if (!comm.isOk()) {
    std::fprintf(stderr, "fault_rank: %s\n", comm.status().toString().c_str());
    return 2;
  }
  const int rank = (*comm)->rank();
  if (rank != victim) signal(SIGTERM, SIG_IGN);
  constexpr size_t kCount = 1 << 20;  // 4 MiB of floats
  std::vector<float> in(kCount, 1.0f), out(kCount);
  std::thread killer;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0;; ++i) {
    auto work = (*comm)->allReduce(in.data(), out.data(), kCount, collie::DataType::kFloat32,
                                   collie::ReduceOp::kSum);
    if (i == 0 && rank == victim) {
      killer = std::thread([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(delayMs));
        writeFile(dir + "/killed", std::to_string(nowUs()) + "\n");
        raise(SIGKILL);
      });
    }
    collie::Status st = work.isOk() ? work->wait() : work.status();
    if (!st.isOk()) {
      writeFile(dir + "/rank" + std::to_string(rank),
                std::to_string(nowUs()) + "\n" + st.toString() + "\n");
      std::_Exit(3);
    }
    if (std::chrono::steady_clock::now() - start > std::chrono::seconds(60)) {
      writeFile(dir + "/rank" + std::to_string(rank), "0\nno error\n");
      std::_Exit(4);
    }
  }
}
