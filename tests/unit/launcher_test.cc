// collie run's supervisor: exit statuses, failure reporting, teardown, tagged output.
#include "tools/launcher.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace collie::tools {
namespace {

LaunchSpec shell(const std::string& script, int nprocs) {
  LaunchSpec spec;
  spec.command = {"/bin/sh", "-c", script};
  spec.nprocs = nprocs;
  spec.grace = std::chrono::milliseconds(500);
  spec.env = [](int rank) { return EnvVars{{"TEST_RANK", std::to_string(rank)}}; };
  return spec;
}

TEST(Launcher, AllRanksSucceed) { EXPECT_EQ(superviseRanks(shell("exit 0", 3)), 0); }

TEST(Launcher, FailingRankEndsTheJobWithItsStatus) {
  testing::internal::CaptureStderr();
  auto start = std::chrono::steady_clock::now();
  // Rank 1 fails; the others would sleep for a minute unless torn down.
  int status = superviseRanks(shell("if [ $TEST_RANK = 1 ]; then exit 7; fi; sleep 60", 3));
  auto elapsed = std::chrono::steady_clock::now() - start;
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(status, 7);
  EXPECT_NE(err.find("rank 1 exited with status 7"), std::string::npos) << err;
  EXPECT_LT(elapsed, std::chrono::seconds(10));
}

TEST(Launcher, RankKilledBySignal) {
  testing::internal::CaptureStderr();
  int status = superviseRanks(shell("if [ $TEST_RANK = 0 ]; then kill -9 $$; fi; sleep 60", 2));
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(status, 128 + SIGKILL);
  EXPECT_NE(err.find("rank 0 killed by signal SIGKILL (9)"), std::string::npos) << err;
}

TEST(Launcher, RanksIgnoringSigtermAreKilledAfterTheGracePeriod) {
  testing::internal::CaptureStderr();
  auto start = std::chrono::steady_clock::now();
  // Rank 1 fails only once rank 0 ignores SIGTERM, or rank 0 could die of it first.
  char dir[] = "/tmp/collie-launcher-test-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string ready = std::string(dir) + "/ready";
  int status = superviseRanks(
      shell("if [ $TEST_RANK = 1 ]; then while [ ! -e " + ready +
                " ]; do sleep 0.01; done; exit 3; fi; trap '' TERM; touch " + ready + "; sleep 60",
            2));
  unlink(ready.c_str());
  rmdir(dir);
  auto elapsed = std::chrono::steady_clock::now() - start;
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(status, 3);
  EXPECT_NE(err.find("rank 0 still running"), std::string::npos) << err;
  EXPECT_LT(elapsed, std::chrono::seconds(10));
}

TEST(Launcher, TagsOutputLinesWithTheRank) {
  char path[] = "/tmp/collie_launcher_testXXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  LaunchSpec spec = shell(std::string("echo hello $TEST_RANK; printf partial"), 2);
  spec.tagOutput = true;
  // Tagged lines go to the launcher's stdout: redirect it to the file for the test.
  std::fflush(stdout);
  int saved = dup(1);
  int file = open(path, O_WRONLY | O_TRUNC);
  dup2(file, 1);
  int status = superviseRanks(spec);
  std::fflush(stdout);
  dup2(saved, 1);
  close(saved);
  close(file);
  EXPECT_EQ(status, 0);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  std::remove(path);
  EXPECT_NE(text.str().find("[0] hello 0\n"), std::string::npos) << text.str();
  EXPECT_NE(text.str().find("[1] hello 1\n"), std::string::npos) << text.str();
  EXPECT_NE(text.str().find("[1] partial\n"), std::string::npos) << text.str();
}

TEST(Launcher, FindsExecutablesLikeExecvp) {
  EXPECT_EQ(findExecutable("/bin/sh"), "/bin/sh");
  EXPECT_FALSE(findExecutable("sh").empty());
  EXPECT_TRUE(findExecutable("no-such-program-collie").empty());
  EXPECT_EQ(signalDescription(SIGTERM), "SIGTERM (15)");
}

}  // namespace
}  // namespace collie::tools
