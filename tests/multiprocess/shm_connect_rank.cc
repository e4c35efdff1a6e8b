// A rank that stops inside the shm transport's connect, for shm_leak_test.sh (run by
// `collie run -n 2`). Usage: shm_connect_rank MODE PID_FILE
//   rank 0 connects the shm transport to rank 1, first writing its pid to PID_FILE;
//   rank 1, by MODE:
//     absent   never connects: rank 0 holds its segment and waits for rank 1's;
//     noboard  connects without a board (COLLIE_SHM_ONESHOT_MAX=0 here):
//              rank 0 holds its board and waits for rank 1's.
// Then both sleep until killed, within COLLIE_TIMEOUT. This goes below Communicator on
// purpose: creation's join agreement (core/comm/join_agreement.h) stops ranks that
// disagree before any transport connects, so a communicator cannot be made to stop
// here deterministically, and the test must SIGKILL a rank exactly there.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "collie/store.h"
#include "collie/unique_id.h"
#include "core/net/job_secret.h"
#include "transports/shm/shm_transport.h"

int main(int argc, char** argv) {
  using namespace collie;
  if (argc != 3 || (std::strcmp(argv[1], "absent") != 0 && std::strcmp(argv[1], "noboard") != 0)) {
    std::fprintf(stderr, "usage: shm_connect_rank absent|noboard PID_FILE\n");
    return 2;
  }
  const std::string mode = argv[1];
  const char* rankText = std::getenv("COLLIE_RANK");
  const char* idText = std::getenv("COLLIE_UNIQUE_ID");
  if (rankText == nullptr || idText == nullptr) {
    std::fprintf(stderr, "shm_connect_rank: run me with collie run -n 2\n");
    return 2;
  }
  const int rank = std::atoi(rankText);
  Result<UniqueId> id = UniqueId::parse(idText);
  if (!id.isOk()) return 2;
  if (rank == 1 && mode == "absent") {
    std::this_thread::sleep_for(std::chrono::seconds(60));
    return 0;
  }
  if (rank == 0) {
    std::FILE* f = std::fopen(argv[2], "w");
    if (f == nullptr) return 2;
    std::fprintf(f, "%d\n", static_cast<int>(getpid()));
    std::fclose(f);
  }
  Result<std::shared_ptr<Store>> store = connectTcpStore(
      id->host, id->port, id->secret, std::chrono::steady_clock::now() + std::chrono::seconds(10));
  if (!store.isOk()) {
    std::fprintf(stderr, "shm_connect_rank: %s\n", store.status().toString().c_str());
    return 2;
  }
  TransportContext ctx;
  ctx.rank = rank;
  ctx.nranks = 2;
  ctx.hostId = "shm-leak-test";
  ctx.jobKey = "shm-leak-test/" + publicJobTag(id->secret);
  ctx.secret = id->secret;
  ctx.store = *store;
  ctx.timeout = std::chrono::seconds(60);
  // Rank 1 runs without the board (a configuration of its own).
  Result<Config> config = Config::fromEnvironment().withOverrides(
      rank == 1 ? KnobOverrides{{"COLLIE_SHM_ONESHOT_MAX", "0"}} : KnobOverrides{});
  if (!config.isOk()) return 2;
  ctx.config = *config;
  Result<std::unique_ptr<Transport>> transport = createShmTransport(ctx);
  if (!transport.isOk()) return 2;
  auto connected = (*transport)->connect({1 - rank});
  std::fprintf(stderr, "shm_connect_rank %d: connect returned %s\n", rank,
               connected.isOk() ? "OK" : connected.status().toString().c_str());
  std::this_thread::sleep_for(std::chrono::seconds(60));
  return 0;
}
