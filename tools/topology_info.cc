// `collie info` under a launcher: joins the job and prints its topology (hosts, local
// ranks, the transport per peer) instead of this process's build and configuration.
#include <cstdio>
#include <cstdlib>

#include "collie/communicator.h"
#include "tools/commands.h"

namespace collie::tools {

bool startedByLauncher() {
  auto set = [](const char* name) {
    const char* value = std::getenv(name);
    return value != nullptr && value[0] != '\0';
  };
  return set("COLLIE_UNIQUE_ID") || (set("RANK") && set("WORLD_SIZE") && set("MASTER_ADDR")) ||
         set("OMPI_COMM_WORLD_SIZE");
}

int printJobTopology() {
  Result<std::unique_ptr<Communicator>> comm = Communicator::createFromEnvironment();
  if (!comm.isOk()) {
    std::fprintf(stderr, "collie info: joining the job failed: %s\n",
                 comm.status().toString().c_str());
    return 1;
  }
  // Rank 0 lists the hosts; every rank then adds its own line, in rank order.
  for (int turn = 0; turn < (*comm)->size(); ++turn) {
    if (turn == (*comm)->rank()) {
      std::printf("%s", (*comm)->describeTopology(turn == 0).c_str());
      std::fflush(stdout);
    }
    Result<Work> barrier = (*comm)->barrier();
    if (!barrier.isOk() || !barrier->wait().isOk()) {
      std::fprintf(stderr, "collie info: the job's barrier failed\n");
      return 1;
    }
  }
  return 0;
}

}  // namespace collie::tools
