// A tcp rank at its descriptor limit (issue 22, item 12): the accepting rank fails at
// once with an error that names EMFILE and RLIMIT_NOFILE instead of spinning on a
// listener it cannot accept from until COLLIE_TIMEOUT, and its peer fails too.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <thread>
#include <vector>

#include "core/net/socket.h"
#include "core/transport/transport.h"
#include "support/transport_job.h"

namespace collie {
void registerTcpTransport(TransportRegistry& registry);
namespace {

using namespace std::chrono_literals;

size_t openDescriptors() {
  size_t n = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    ++n;
  }
  return n;
}

// fault: a tcp rank at its descriptor limit (ulimit -n 10) | it fails at once naming EMFILE and
// RLIMIT_NOFILE, and its peer fails too (before: spin until COLLIE_TIMEOUT) | fd_limit_test
TEST(TcpFdLimit, AcceptingRankFailsFastNamingEmfileAndItsPeerFailsToo) {
  // Two channels of one socket: rank 0 connects two sockets, rank 1 must accept two.
  testing::TransportJob job("tcp", registerTcpTransport);
  job.knobs = {{"COLLIE_NSOCKS_PERPEER", "1"}, {"COLLIE_SOCKET_IFNAME", "lo"}};
  job.nchannels = 2;
  job.create(2, 200);
  ASSERT_EQ(job.transports.size(), 2u);

  // Fill the descriptor table but for two: rank 0's two sockets take them, and rank 1
  // can get at most the one rank 0 frees when it closes its own listener.
  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &saved), 0);
  rlimit low = saved;
  low.rlim_cur = static_cast<rlim_t>(openDescriptors() + 64);
  ASSERT_LE(low.rlim_cur, saved.rlim_cur);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
  std::vector<net::Socket> filler;
  for (;;) {
    net::Socket fd(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    if (!fd.valid()) break;
    filler.push_back(std::move(fd));
  }
  filler.pop_back();
  filler.pop_back();

  Status results[2];
  double seconds[2] = {0, 0};
  const auto start = Clock::now();
  std::thread connecting([&] {
    auto conns = job.transports[0]->connect({1});
    results[0] = conns.status();
    seconds[0] = std::chrono::duration<double>(Clock::now() - start).count();
  });
  // Rank 0 connects both sockets (the kernel completes them into rank 1's backlog) and
  // waits for rank 1's Accept; only then does rank 1 start accepting.
  std::this_thread::sleep_for(200ms);
  std::thread accepting([&] {
    const auto begin = Clock::now();
    auto conns = job.transports[1]->connect({0});
    results[1] = conns.status();
    seconds[1] = std::chrono::duration<double>(Clock::now() - begin).count();
    job.transports[1].reset();  // as a failed communicator does: closes the listener
  });
  accepting.join();
  connecting.join();
  filler.clear();
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &saved), 0);

  std::printf("rank 1 failed after %.3f s: %s\nrank 0 failed after %.3f s: %s\n", seconds[1],
              results[1].toString().c_str(), seconds[0], results[0].toString().c_str());
  ASSERT_FALSE(results[1].isOk());
  const std::string& why = results[1].message();
  EXPECT_NE(why.find("EMFILE"), std::string::npos) << why;
  EXPECT_NE(why.find("RLIMIT_NOFILE soft limit " + std::to_string(low.rlim_cur)), std::string::npos)
      << why;
  EXPECT_LT(seconds[1], 2.0) << "the accepting rank did not fail fast (timeout is 10 s)";
  ASSERT_FALSE(results[0].isOk());
  EXPECT_LT(seconds[0], 3.0) << "the connecting rank waited instead of failing";
}

}  // namespace
}  // namespace collie
