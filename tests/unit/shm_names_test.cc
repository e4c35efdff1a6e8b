// Names of collie's /dev/shm objects (transports/shm/shm_names.h): their form, the rule
// peers' names are checked by, the job tag they carry and their removal by job.
#include "transports/shm/shm_names.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/comm/comm_knobs.h"
#include "core/net/job_secret.h"

namespace collie::shm {
namespace {

JobSecret secretOf(uint8_t fill) {
  JobSecret secret;
  secret.fill(fill);
  return secret;
}

// The launcher scope a communicator's transports get when the process environment holds
// `variables` (core/comm/comm_knobs.h).
std::optional<LauncherScope> launcherOf(const std::map<std::string, std::string>& variables) {
  Result<LaunchKnobs> launch = LaunchKnobs::parse(Config::fromVariables(variables));
  EXPECT_TRUE(launch.isOk()) << launch.status().toString();
  return launch.isOk() ? launch->launcherScope() : std::nullopt;
}

bool exists(const std::string& name) { return access(("/dev/shm" + name).c_str(), F_OK) == 0; }

std::string create(const std::string& tag, std::string_view kind) {
  Result<std::string> name = newShmName(tag, kind);
  EXPECT_TRUE(name.isOk()) << name.status().toString();
  int fd = shm_open(name->c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  EXPECT_GE(fd, 0) << *name;
  close(fd);
  return *name;
}

TEST(ShmNamesTest, NamesCarryTheJobTagAndPassThePeerCheck) {
  const std::string tag = publicJobTag(secretOf(7));
  Result<std::string> segment = newShmName(tag, "");
  Result<std::string> board = newShmName(tag, kBoardKind);
  ASSERT_TRUE(segment.isOk() && board.isOk());
  EXPECT_EQ(segment->rfind("/collie-" + tag + "-", 0), 0u) << *segment;
  EXPECT_EQ(board->rfind("/collie-" + tag + "-board-", 0), 0u) << *board;
  EXPECT_LE(board->size(), kMaxShmNameLength);
  EXPECT_TRUE(isShmName(*segment));
  EXPECT_TRUE(isShmName(*board));
  EXPECT_TRUE(isShmName(*board, kBoardKind));
  EXPECT_FALSE(isShmName(*segment, kBoardKind));
  EXPECT_NE(*newShmName(tag, ""), *segment);  // random part
  EXPECT_FALSE(newShmName("not-a-tag", "").isOk());
}

TEST(ShmNamesTest, MalformedPeerNamesAreRejected) {
  const std::string tag = publicJobTag(secretOf(7));
  const std::string good = *newShmName(tag, "");
  const std::vector<std::string> bads = {std::string("/other-") + tag + "-00",
                                         "collie-" + tag + "-00",
                                         "/collie-" + tag + "-",
                                         "/collie-" + tag + "-a/b",
                                         "/collie-" + tag + "-ABC",
                                         "/collie-0123-00",
                                         "/collie-" + tag + "x00",
                                         good + std::string(kMaxShmNameLength, 'a'),
                                         std::string()};
  for (const std::string& bad : bads) {
    EXPECT_FALSE(isShmName(bad)) << bad;
  }
}

TEST(ShmNamesTest, TheJobTagIsTheLaunchersWhenCollieRunStartedUs) {
  EXPECT_EQ(jobScopeTag(secretOf(1), launcherOf({})), publicJobTag(secretOf(1)));
  Result<UniqueId> launched = UniqueId::generate("127.0.0.1", 1234);
  ASSERT_TRUE(launched.isOk());
  // As `collie run` starts a rank: COLLIE_UNIQUE_ID in its environment. A split or shrink
  // child has another secret but keeps the launcher's tag.
  const std::optional<LauncherScope> underCollieRun =
      launcherOf({{"COLLIE_UNIQUE_ID", launched->toString()}});
  EXPECT_EQ(jobScopeTag(secretOf(1), underCollieRun), publicJobTag(launched->secret));
}

// fault: two namespace hosts of one job share /dev/shm and one launcher finishes first |
// it removes only its own ranks' names; the other host's ranks still connect (before: it
// removed every name of the job) | shm_names_test
TEST(ShmNamesTest, EachLaunchersRanksNameWithTheirNodesTagAndItRemovesOnlyThose) {
  Result<UniqueId> launched = UniqueId::generate("127.0.0.1", 1234);
  ASSERT_TRUE(launched.isOk());
  auto rankOf = [&](int node) {
    return launcherOf(
        {{"COLLIE_UNIQUE_ID", launched->toString()}, {"COLLIE_NODE_RANK", std::to_string(node)}});
  };
  const std::string node0 = jobScopeTag(secretOf(1), rankOf(0));
  const std::string node1 = jobScopeTag(secretOf(1), rankOf(1));
  EXPECT_EQ(node0, publicJobTag(launched->secret));  // one host: the names as before
  EXPECT_EQ(node0, launcherShmTag(launched->secret, 0));
  EXPECT_EQ(node1, launcherShmTag(launched->secret, 1));
  EXPECT_NE(node0, node1);
  EXPECT_NE(node1, launcherShmTag(launched->secret, 2));
  const std::string host0 = create(node0, "");
  const std::string host1 = create(node1, kBoardKind);
  EXPECT_TRUE(isShmName(host1, kBoardKind));
  std::vector<std::string> removed = removeJobShm(launcherShmTag(launched->secret, 0));
  EXPECT_EQ(removed, std::vector<std::string>{host0.substr(1)});
  EXPECT_TRUE(exists(host1));
  EXPECT_EQ(removeJobShm(launcherShmTag(launched->secret, 1)).size(), 1u);
  EXPECT_FALSE(exists(host1));
}

TEST(ShmNamesTest, RemoveJobShmRemovesOnlyThatJobsNames) {
  const std::string mine = publicJobTag(secretOf(3));
  const std::string other = publicJobTag(secretOf(4));
  const std::string segment = create(mine, "");
  const std::string board = create(mine, kBoardKind);
  const std::string foreign = create(other, "");
  std::vector<std::string> removed = removeJobShm(mine);
  std::sort(removed.begin(), removed.end());
  std::vector<std::string> expected = {segment.substr(1), board.substr(1)};
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(removed, expected);
  EXPECT_FALSE(exists(segment));
  EXPECT_FALSE(exists(board));
  EXPECT_TRUE(exists(foreign));
  EXPECT_TRUE(removeJobShm("../../etc").empty());
  EXPECT_EQ(removeJobShm(other).size(), 1u);
  EXPECT_FALSE(exists(foreign));
}

}  // namespace
}  // namespace collie::shm
