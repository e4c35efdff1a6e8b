// The shm transport between two real processes (fork): data crosses the shared
// segment both ways, and a peer killed with SIGKILL is reported, naming it, within
// about a second instead of hanging.
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include "threads/shm_test_util.h"

namespace collie::testing {
namespace {

using std::chrono::milliseconds;

// Both processes' FIFOs: 1 MiB.
const KnobOverrides kKnobs = {{"COLLIE_BUFFSIZE", "1M"}};

// A Store backed by a directory: enough for ranks that are processes of one test.
class DirectoryStore final : public Store {
 public:
  explicit DirectoryStore(std::string dir) : dir_(std::move(dir)) {}

  Status set(const std::string& key, const Bytes& value) override {
    std::string tmp = dir_ + "/.tmp-" + std::to_string(getpid()) + "-" + std::to_string(seq_++);
    {
      std::ofstream out(tmp, std::ios::binary);
      out.write(reinterpret_cast<const char*>(value.data()), value.size());
      if (!out) return systemError("test store: write " + tmp, errno);
    }
    if (rename(tmp.c_str(), path(key).c_str()) != 0) {
      return systemError("test store: rename to " + path(key), errno);
    }
    return Status();
  }

  Result<Bytes> get(const std::string& key, Deadline deadline) override {
    while (true) {
      std::ifstream in(path(key), std::ios::binary);
      if (in) {
        std::stringstream text;
        text << in.rdbuf();
        std::string s = text.str();
        return Bytes(s.begin(), s.end());
      }
      if (Clock::now() > deadline) return timeoutError("test store: key '" + key + "' not set");
      std::this_thread::sleep_for(milliseconds(1));
    }
  }

  Result<int64_t> add(const std::string& key, int64_t delta) override {
    return unsupported("test store: add");
  }

 private:
  std::string path(const std::string& key) const {
    std::string name = key;
    for (char& c : name) {
      if (c == '/') c = '_';
    }
    return dir_ + "/" + name;
  }
  std::string dir_;
  int seq_ = 0;
};

constexpr size_t kBytes = 3 * 1024 * 1024 + 5;  // > the 1 MiB FIFO this test uses

// Rank 1 in the child: echo one message back, then wait to be killed.
int childMain(const std::string& dir, const std::string& jobKey) {
  auto store = std::make_shared<DirectoryStore>(dir);
  ShmRank rank;
  if (!connectShmRank(shmContext(store, jobKey, 1, 2, 1, kKnobs), &rank).isOk()) return 2;
  std::vector<uint8_t> buffer(kBytes);
  Completion in, out;
  Connection* c = rank.conn(0, 0);
  if (!c->postRecv(buffer.data(), kBytes, 10, &in).isOk()) return 3;
  if (!driveShm(rank.transport.get(), {c}, {&in}, milliseconds(20000)).isOk()) return 4;
  if (!c->postSend(buffer.data(), kBytes, 11, &out).isOk()) return 5;
  if (!driveShm(rank.transport.get(), {c}, {&out}, milliseconds(20000)).isOk()) return 6;
  while (true) pause();
}

TEST(ShmForkTest, ProcessesExchangeDataAndAKilledPeerIsReported) {
  char dirTemplate[] = "/tmp/collie-shm-fork-XXXXXX";
  ASSERT_NE(mkdtemp(dirTemplate), nullptr);
  const std::string dir = dirTemplate;
  const std::string jobKey = "forktest-" + std::to_string(getpid());

  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    _exit(childMain(dir, jobKey));
  }

  auto store = std::make_shared<DirectoryStore>(dir);
  ShmRank rank;
  Status connected = connectShmRank(shmContext(store, jobKey, 0, 2, 1, kKnobs), &rank);
  if (connected.isOk()) {
    Connection* c = rank.conn(1, 0);
    std::vector<uint8_t> out(kBytes), back(kBytes, 0);
    for (size_t i = 0; i < kBytes; ++i) out[i] = patternByte(0, 1, 0, 0, i);
    Completion sent, echoed;
    ASSERT_TRUE(c->postSend(out.data(), kBytes, 10, &sent).isOk());
    ASSERT_TRUE(c->postRecv(back.data(), kBytes, 11, &echoed).isOk());
    Status s = driveShm(rank.transport.get(), {c}, {&sent, &echoed}, milliseconds(20000));
    ASSERT_TRUE(s.isOk()) << s.toString();
    EXPECT_EQ(out, back);

    // The child now sleeps; kill it while a receive from it is pending.
    uint64_t never = 0;
    Completion pending;
    ASSERT_TRUE(c->postRecv(&never, 8, 12, &pending).isOk());
    ASSERT_EQ(kill(child, SIGKILL), 0);
    auto start = std::chrono::steady_clock::now();
    s = driveShm(rank.transport.get(), {c}, {&pending}, milliseconds(5000));
    auto took = std::chrono::steady_clock::now() - start;
    EXPECT_EQ(s.code(), StatusCode::kRemoteError) << s.toString();
    EXPECT_EQ(s.peer(), 1);
    EXPECT_NE(s.message().find("rank 1"), std::string::npos) << s.message();
    EXPECT_TRUE(pending.done);
    EXPECT_LT(took, milliseconds(1500));
  } else {
    ADD_FAILURE() << "connect failed: " << connected.toString();
    kill(child, SIGKILL);
  }
  int wstatus = 0;
  ASSERT_EQ(waitpid(child, &wstatus, 0), child);
  EXPECT_TRUE(WIFSIGNALED(wstatus) && WTERMSIG(wstatus) == SIGKILL)
      << "child exited early with code " << (WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : -1);

  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] != '.' || e->d_name[1] == 't') unlink((dir + "/" + e->d_name).c_str());
    }
    closedir(d);
  }
  rmdir(dir.c_str());
}

}  // namespace
}  // namespace collie::testing
