// Long-running and hostile conditions, ranks as threads:
//  - soak: 10,000 random-size (mostly < 64 KiB, some up to 1 MiB), random-kind and
//    random-op collectives, every result verified; between the first and the last
//    thousand the live heap may grow < 512 KiB and private resident memory < 8 MiB;
//  - intruders: while a job over a real TCP store and the tcp transport runs
//    collectives, strangers connect to the store and to every rank's tcp port with a
//    wrong secret or random bytes; they are turned away and the job is undisturbed.
// COLLIE_TEST_QUICK=1 runs 2,000 soak collectives without the memory check (sanitizer
// builds);
// COLLIE_SOAK_COLLECTIVES=N runs N (for longer manual soaks).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <malloc.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <barrier>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/net/handshake.h"
#include "core/net/job_secret.h"
#include "support/quick_matrix.h"
#include "support/rank_threads.h"
#include "support/sanitizers.h"

namespace collie {
namespace {

using namespace std::chrono_literals;  // NOLINT(build/namespaces)
using testing::onEveryRank;

// Sanitizers keep freed memory in quarantine and shadow it: resident memory says
// nothing about leaks there (ASan's leak checker covers them instead).
#if COLLIE_TEST_ASAN || COLLIE_TEST_TSAN
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif

// What a leak would grow, sampled every thousand collectives:
//  - live heap: bytes malloc has handed out and not had back (mallinfo2: in-use chunks
//    of every arena plus malloc's own mmaps). Independent of how glibc spreads threads
//    over arenas and what it keeps cached, so it may grow < 5%.
//  - private resident memory (RssAnon): also catches memory mapped past malloc. It once
//    rose by 3.4 MiB between the first and the last thousand in a loaded CI run that
//    local runs never repeated (glibc opening another arena late is the likely cause;
//    the live heap was not sampled then), so it may grow by at most 8 MiB. Shared memory is left
//    out on purpose: the shm FIFOs are rings whose pages are touched one by one as
//    messages wrap around them, so their resident share climbs for thousands of
//    collectives up to the fixed size of the FIFOs (COLLIE_BUFFSIZE) without any leak.
struct MemorySample {
  long liveHeapKiB = 0;
  long residentKiB = 0;
};

MemorySample sampleMemory() {
  MemorySample sample;
  const struct mallinfo2 info = mallinfo2();
  sample.liveHeapKiB = static_cast<long>((info.uordblks + info.hblkhd) / 1024);
  // Hand freed heap pages back first, so the resident figure is live memory rather than
  // what the allocator keeps cached in its per-thread arenas.
  malloc_trim(0);
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("RssAnon:", 0) == 0) sample.residentKiB = std::atol(line.c_str() + 8);
  }
  return sample;
}

// Element i of rank r's input in step s: small integers, so sums stay exact.
int32_t inputValue(uint64_t step, int rank, size_t i) {
  return static_cast<int32_t>((step * 7 + static_cast<uint64_t>(rank) * 13 + i * 3) % 101) - 50;
}

struct Step {
  CollectiveKind kind;
  ReduceOp op;
  size_t count;
  int root;
};

// The same sequence on every rank (same seed).
Step makeStep(std::mt19937_64& rng, int nranks) {
  static const CollectiveKind kinds[] = {CollectiveKind::kAllReduce,     CollectiveKind::kAllReduce,
                                         CollectiveKind::kReduceScatter, CollectiveKind::kAllGather,
                                         CollectiveKind::kBroadcast,     CollectiveKind::kReduce};
  static const ReduceOp ops[] = {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin};
  Step step;
  step.kind = kinds[rng() % 6];
  step.op = ops[rng() % 3];
  const uint64_t bytes =
      rng() % 50 == 0 ? 64 * 1024 + rng() % ((1 << 20) - 64 * 1024 + 1) : rng() % (64 * 1024);
  step.count = std::max<size_t>(1, bytes / 4);
  if (step.kind == CollectiveKind::kReduceScatter || step.kind == CollectiveKind::kAllGather) {
    step.count = std::max<size_t>(1, step.count / nranks);
  }
  step.root = static_cast<int>(rng() % nranks);
  return step;
}

int32_t reduceValues(ReduceOp op, uint64_t s, int nranks, size_t i) {
  int32_t acc = inputValue(s, 0, i);
  for (int r = 1; r < nranks; ++r) {
    int32_t v = inputValue(s, r, i);
    acc = op == ReduceOp::kSum   ? acc + v
          : op == ReduceOp::kMax ? std::max(acc, v)
                                 : std::min(acc, v);
  }
  return acc;
}

TEST(Soak, TenThousandRandomCollectivesStayCorrectAndMemoryIsFlat) {
  constexpr int kRanks = 3;
  constexpr uint64_t kSeed = 12345;
  int total = testing::quickMatrix() ? 2000 : 10000;
  if (const char* n = std::getenv("COLLIE_SOAK_COLLECTIVES")) total = std::max(2000, std::atoi(n));
  // The random warm-up runs the same sequence of kinds, ops and sizes as the measured
  // collectives (only the values differ): buffers sized by the plan of one particular
  // size (a reduce's staging grows with the count up to where the tuner cuts chunks)
  // reach their high-water mark in the warm-up, whatever the tuning constants. A random
  // warm-up of 3,000 other collectives left 1.0-1.6 MiB of such growth to the measured
  // part with some probed constants (COLLIE_TUNE_ALPHA_US=90 COLLIE_TUNE_BW_GBPS=1.57
  // reproduces it), and a CI run failed the 5% check on it.
  const int randomWarmup = std::max(3000, total);
  Options options;
  options.transport = "shm";
  options.timeout = 30s;
  auto comms = testing::makeCommunicators(kRanks, options);
  ASSERT_EQ(comms.size(), static_cast<size_t>(kRanks));
  constexpr size_t kMaxElems = (1 << 20) / 4 + 1;
  std::vector<std::vector<int32_t>> in(kRanks, std::vector<int32_t>(kMaxElems * kRanks));
  std::vector<std::vector<int32_t>> out(kRanks, std::vector<int32_t>(kMaxElems * kRanks));
  std::atomic<int> wrong{0};
  std::atomic<int> failed{0};
  std::vector<MemorySample> memory(total / 1000 + 1);
  std::atomic<int> done{0};
  std::barrier quiet(kRanks);
  onEveryRank(kRanks, [&](int r) {
    std::mt19937_64 rng(kSeed);
    Communicator& comm = *comms[r];
    // Warm up with the largest size of every kind, so that buffers that grow to a
    // high-water mark (staging, scratch, the allocator's arenas) are at it before the
    // first measurement: what is left to see is a leak.
    for (int pass = 0; pass < 2; ++pass) {
      const size_t big = (1 << 20) / 4, per = big / kRanks;
      int32_t* o = out[r].data();
      const int32_t* x = in[r].data();
      const auto i32 = DataType::kInt32;
      for (const Result<Work>& work :
           {comm.allReduce(x, o, big, i32, ReduceOp::kSum),
            comm.reduceScatter(x, o, per, i32, ReduceOp::kSum), comm.allGather(x, o, per, i32),
            comm.broadcast(x, o, big, i32, 0), comm.reduce(x, o, big, i32, ReduceOp::kSum, 1)}) {
        ASSERT_TRUE(work.isOk() && work->wait(60s).isOk());
      }
    }
    // Then random collectives until the heap's per-thread arenas have settled (they
    // rise by a few MiB once over the first ~3,000 and then stay flat), so the measured
    // `total` collectives show what keeps growing: a leak.
    for (int s = -randomWarmup; s < total; ++s) {
      if (s == 0) rng.seed(kSeed);  // the measured collectives replay the warm-up's
      const Step step = makeStep(rng, kRanks);
      const size_t inElems =
          step.kind == CollectiveKind::kReduceScatter ? step.count * kRanks : step.count;
      for (size_t i = 0; i < inElems; ++i) in[r][i] = inputValue(s, r, i);
      Result<Work> work = invalidArgument("unset");
      int32_t* o = out[r].data();
      const int32_t* x = in[r].data();
      const auto i32 = DataType::kInt32;
      switch (step.kind) {
        case CollectiveKind::kAllReduce:
          work = comm.allReduce(x, o, step.count, i32, step.op);
          break;
        case CollectiveKind::kReduceScatter:
          work = comm.reduceScatter(x, o, step.count, i32, step.op);
          break;
        case CollectiveKind::kAllGather:
          work = comm.allGather(x, o, step.count, i32);
          break;
        case CollectiveKind::kBroadcast:
          work = comm.broadcast(x, o, step.count, i32, step.root);
          break;
        default:
          work = comm.reduce(x, o, step.count, i32, step.op, step.root);
          break;
      }
      if (!work.isOk() || !work->wait(60s).isOk()) {
        ++failed;
        ADD_FAILURE() << "rank " << r << " step " << s << ": "
                      << (work.isOk() ? work->status().toString() : work.status().toString());
        return;
      }
      // Verify.
      bool ok = true;
      switch (step.kind) {
        case CollectiveKind::kAllReduce:
          for (size_t i = 0; ok && i < step.count; ++i) {
            ok = o[i] == reduceValues(step.op, s, kRanks, i);
          }
          break;
        case CollectiveKind::kReduceScatter:
          for (size_t i = 0; ok && i < step.count; ++i) {
            ok = o[i] == reduceValues(step.op, s, kRanks, r * step.count + i);
          }
          break;
        case CollectiveKind::kAllGather:
          for (int p = 0; p < kRanks; ++p) {
            for (size_t i = 0; ok && i < step.count; ++i) {
              ok = o[p * step.count + i] == inputValue(s, p, i);
            }
          }
          break;
        case CollectiveKind::kBroadcast:
          for (size_t i = 0; ok && i < step.count; ++i) ok = o[i] == inputValue(s, step.root, i);
          break;
        default:
          if (r == step.root) {
            for (size_t i = 0; ok && i < step.count; ++i) {
              ok = o[i] == reduceValues(step.op, s, kRanks, i);
            }
          }
          break;
      }
      if (!ok) ++wrong;
      if (s >= 0 && s % 1000 == 999) {
        // Sampled while every rank is between collectives, so that no other rank's
        // collective in flight is counted.
        quiet.arrive_and_wait();
        if (r == 0) memory[s / 1000] = sampleMemory();
        quiet.arrive_and_wait();
      }
    }
    ++done;
  });
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(wrong.load(), 0) << "collectives with wrong results";
  const MemorySample first = memory[0];
  const MemorySample last = memory[total / 1000 - 1];
  std::printf(
      "soak: %d collectives; after the first thousand / the last: live heap %ld / %ld KiB, "
      "private resident %ld / %ld KiB\n",
      total, first.liveHeapKiB, last.liveHeapKiB, first.residentKiB, last.residentKiB);
  if (kSanitized || total < 10000) return;  // too short to be past the high-water marks
  // The measured collectives replay the warm-up's, so the live heap stays within a few
  // KiB; 512 KiB over 9,000 collectives catches a leak of ~60 bytes per collective.
  EXPECT_LT(last.liveHeapKiB, first.liveHeapKiB + 512)
      << "live heap grew from " << first.liveHeapKiB << " to " << last.liveHeapKiB << " KiB";
  EXPECT_LT(last.residentKiB, first.residentKiB + 8 * 1024)
      << "private resident memory grew from " << first.residentKiB << " to " << last.residentKiB
      << " KiB";
}

// A stranger's connection: reads the handshake Challenge, sends what `answer` makes of
// it, then reports whether the peer refused or closed it (without an answer) within
// two seconds.
bool strangerIsTurnedAway(uint16_t port,
                          const std::function<std::vector<uint8_t>(const uint8_t*)>& answer) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    const bool refused = errno == ECONNREFUSED;  // a tcp rank's listener closes after setup
    ::close(fd);
    return refused;
  }
  timeval tv{2, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  uint8_t challenge[net::kChallengeBytes];
  size_t got = 0;
  while (got < sizeof(challenge)) {
    ssize_t n = ::recv(fd, challenge + got, sizeof(challenge) - got, 0);
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  if (got < sizeof(challenge)) {
    ::close(fd);
    return false;  // every collie listener challenges at once
  }
  std::vector<uint8_t> bytes = answer(challenge);
  [[maybe_unused]] ssize_t sent = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  uint8_t reply[64];
  ssize_t n = ::recv(fd, reply, sizeof(reply), 0);
  ::close(fd);
  return n == 0 || (n < 0 && errno == ECONNRESET);
}

// fault: wrong secrets and random bytes at the store and every tcp port while a job runs | the
// job's collectives go on, all exact; every stranger is dropped | soak_test
TEST(Intruders, WrongSecretsAndRandomBytesAreRejectedWhileTheJobRuns) {
  constexpr int kRanks = 3;
  Result<UniqueId> id = UniqueId::generate("127.0.0.1", 0);
  ASSERT_TRUE(id.isOk());
  auto server = StoreServer::start("127.0.0.1", 0, id->secret);
  ASSERT_TRUE(server.isOk());
  id->port = (*server)->port();
  Options options;
  options.transport = "tcp";
  options.timeout = 20s;
  std::vector<std::unique_ptr<Communicator>> comms(kRanks);
  onEveryRank(kRanks, [&](int r) {
    auto created = Communicator::create(*id, r, kRanks, options);
    ASSERT_TRUE(created.isOk()) << created.status().toString();
    comms[r] = std::move(*created);
  });
  ASSERT_TRUE(comms[0] && comms[1] && comms[2]);
  // Every port the job listens on: the store and each rank's tcp listener.
  std::vector<uint16_t> ports = {(*server)->port()};
  {
    auto store = connectTcpStore("127.0.0.1", (*server)->port(), id->secret, Clock::now() + 5s);
    ASSERT_TRUE(store.isOk());
    for (int r = 0; r < kRanks; ++r) {
      auto addr =
          (*store)->get("collie/" + publicJobTag(id->secret) + "/0/tcp/addr/" + std::to_string(r),
                        Clock::now() + 2s);
      ASSERT_TRUE(addr.isOk()) << addr.status().toString();
      std::string text(addr->begin(), addr->end());
      ports.push_back(static_cast<uint16_t>(std::stoi(text.substr(text.rfind(':') + 1))));
    }
  }
  std::atomic<bool> stop{false};
  std::atomic<int> collectives{0};
  std::vector<Status> errors(kRanks);
  std::thread job([&] {
    onEveryRank(kRanks, [&](int r) {
      // Element 0 carries "stop" so that every rank leaves after the same collective.
      std::vector<int32_t> in(50000, r + 1), out(50000);
      while (true) {
        in[0] = stop ? 1 : 0;
        auto work =
            comms[r]->allReduce(in.data(), out.data(), in.size(), DataType::kInt32, ReduceOp::kSum);
        Status st = work.isOk() ? work->wait(30s) : work.status();
        if (!st.isOk() || out[49999] != 6) {
          errors[r] = st.isOk() ? internalError("wrong sum") : st;
          return;
        }
        if (r == 0) ++collectives;
        if (out[0] > 0) return;
      }
    });
  });
  std::mt19937_64 rng(7);
  JobSecret wrong = id->secret;
  wrong[0] ^= 1;
  int turnedAway = 0, attempts = 0;
  for (uint16_t port : ports) {
    for (int purpose = 1; purpose <= 2; ++purpose) {
      net::Hello hello;
      hello.purpose = static_cast<net::Purpose>(purpose);
      ++attempts;
      turnedAway += strangerIsTurnedAway(port, [&](const uint8_t* challenge) {
        auto serverNonce = net::decodeChallenge(challenge);
        auto bytes = net::encodeHello(
            hello, wrong, serverNonce.isOk() ? *serverNonce : net::Nonce{}, net::Nonce{});
        return std::vector<uint8_t>(bytes.begin(), bytes.end());
      });
    }
    for (int i = 0; i < 4; ++i) {
      std::vector<uint8_t> junk(net::kHelloBytes + rng() % 4000);
      for (auto& b : junk) b = static_cast<uint8_t>(rng());
      ++attempts;
      turnedAway += strangerIsTurnedAway(port, [&](const uint8_t*) { return junk; });
    }
  }
  std::this_thread::sleep_for(200ms);
  stop = true;
  job.join();
  EXPECT_EQ(turnedAway, attempts) << "a stranger's connection was not closed";
  for (int r = 0; r < kRanks; ++r) EXPECT_TRUE(errors[r].isOk()) << errors[r].toString();
  EXPECT_GT(collectives.load(), 0);
}

}  // namespace
}  // namespace collie
