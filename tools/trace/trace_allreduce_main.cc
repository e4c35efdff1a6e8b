// collie_trace_allreduce OUTDIR: one rank of `collie run -n N` that records the calls of
// single all-reduces (call_trace.h) and writes them to OUTDIR/rank<R>_<case>.txt. The
// cases: the communicator's first all-reduce of a size (it plans and tunes) and one in
// steady state (after warm-up calls of the same size), at a small and a large size.
// Ranks meet at a barrier before each traced call, which then runs with the peers
// inside the same call. Exit status 0 when every call succeeded and every file was
// written; the reading is scripts/trace_allreduce.py's.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "collie/communicator.h"
#include "tools/trace/call_trace.h"

namespace {

bool allReduceOnce(collie::Communicator& comm, std::vector<float>& data) {
  auto work = comm.allReduce(data.data(), data.data(), data.size(), collie::DataType::kFloat32,
                             collie::ReduceOp::kSum);
  if (!work.isOk()) {
    std::fprintf(stderr, "allReduce: %s\n", work.status().toString().c_str());
    return false;
  }
  collie::Status done = work.value().wait();
  if (!done.isOk()) std::fprintf(stderr, "wait: %s\n", done.toString().c_str());
  return done.isOk();
}

bool barrier(collie::Communicator& comm) {
  auto work = comm.barrier();
  return work.isOk() && work.value().wait().isOk();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: collie run -n N collie_trace_allreduce OUTDIR\n");
    return 2;
  }
  const std::string outDir = argv[1];
  auto created = collie::Communicator::createFromEnvironment();
  if (!created.isOk()) {
    std::fprintf(stderr, "create: %s\n", created.status().toString().c_str());
    return 1;
  }
  collie::Communicator& comm = *created.value();
  const int warmUpCalls = 50;
  struct Size {
    const char* name;
    size_t floats;
  };
  for (const Size& size : {Size{"8KiB", 2048}, Size{"4MiB", 1 << 20}}) {
    std::vector<float> data(size.floats, 1.0f + static_cast<float>(comm.rank()));
    for (const char* phase : {"first", "steady"}) {
      if (std::strcmp(phase, "steady") == 0) {
        for (int i = 0; i < warmUpCalls; ++i) {
          if (!allReduceOnce(comm, data)) return 1;
        }
      }
      if (!barrier(comm)) return 1;
      collie::trace::arm();
      const bool ok = allReduceOnce(comm, data);
      collie::trace::disarm();
      if (!ok) return 1;
      const std::string path =
          outDir + "/rank" + std::to_string(comm.rank()) + "_" + phase + "_" + size.name + ".txt";
      if (!collie::trace::writeEvents(path)) {
        std::fprintf(stderr, "%s: %s\n", path.c_str(), std::strerror(errno));
        return 1;
      }
    }
  }
  return barrier(comm) ? 0 : 1;
}
