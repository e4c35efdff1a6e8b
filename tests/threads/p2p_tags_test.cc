// Point-to-point matched by (peer, tag) (issue 51): the n-th send to a peer with tag t
// meets that peer's n-th receive from this rank with tag t, whatever order the receives
// of different tags were posted in (core/engine/tag_matcher.h). Two ranks (four for every
// pair) as threads over shm and tcp, on 4 channels so that a large message is cut in
// parts: receives posted in the other order than the sends (sizes differ per tag),
// blocking sends against receives posted late (the receiver holds what arrived early),
// several messages per tag, every pair of four ranks, a group,
// a tag that never arrives (Timeout naming the peer and the tag), a count that differs
// (Mismatch naming the peer, the tag and both counts), untagged point-to-point
// still matched by order, and tagged and untagged refused on one pair of ranks.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "core/transport/transport.h"
#include "support/rank_threads.h"

namespace collie {
namespace {

using namespace std::chrono_literals;  // NOLINT(build/namespaces)

// Sizes that differ per tag: a few elements (one part) and over a MiB (a part per channel).
constexpr size_t kSmall = 1000;
constexpr size_t kLarge = (1 << 18) + 3;

std::vector<int32_t> pattern(int64_t tag, int k, size_t count) {
  std::vector<int32_t> v(count);
  for (size_t i = 0; i < count; ++i) {
    v[i] = static_cast<int32_t>(tag * 1000003 + k * 7919 + static_cast<int64_t>(i));
  }
  return v;
}

class PointToPointTagsTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (TransportRegistry::instance().find(GetParam()) == nullptr) {
      GTEST_SKIP() << GetParam() << " is not built";
    }
  }
  Options options(std::chrono::milliseconds timeout = 10s) const {
    Options o;
    o.transport = GetParam();
    o.nchannels = 4;
    o.timeout = timeout;  // a deadlock fails in 10 s, not COLLIE_TIMEOUT's 300
    return o;
  }
  // Waits for every work; the errors joined ("" when all succeeded).
  static std::string waitAll(std::vector<Result<Work>>& works) {
    std::string errors;
    for (Result<Work>& work : works) {
      Status st = work.isOk() ? work->wait() : work.status();
      if (!st.isOk()) errors += st.toString() + "; ";
    }
    return errors;
  }
  // "" when got equals want, else where it first differs.
  static std::string compare(const std::string& what, const std::vector<int32_t>& got,
                             const std::vector<int32_t>& want) {
    if (got.size() != want.size()) return what + ": size differs";
    for (size_t i = 0; i < got.size(); ++i) {
      if (got[i] != want[i]) {
        return what + ": element " + std::to_string(i) + " is " + std::to_string(got[i]) +
               ", expected " + std::to_string(want[i]);
      }
    }
    return "";
  }
  // Rank 1's side of the reordered cases: posts recv(tag 22) before recv(tag 11) from
  // rank 0, waits for both and compares ("" when both hold what rank 0 sent).
  static std::string receive22Then11(Communicator& comm, const std::vector<int32_t>& want22,
                                     const std::vector<int32_t>& want11) {
    std::vector<int32_t> got22(want22.size(), -1), got11(want11.size(), -1);
    std::vector<Result<Work>> works;
    works.push_back(comm.recv(got22.data(), got22.size(), DataType::kInt32, 0, 22));
    works.push_back(comm.recv(got11.data(), got11.size(), DataType::kInt32, 0, 11));
    std::string errors = waitAll(works);
    if (errors.empty())
      errors = compare("tag 22", got22, want22) + compare("tag 11", got11, want11);
    return errors;
  }
};

// Rank 0 sends tag 11 (small) then tag 22 (large); rank 1 posts the receive of 22 first.
TEST_P(PointToPointTagsTest, ReceivesPostedInAnotherTagOrder) {
  auto comms = testing::makeCommunicators(2, options());
  ASSERT_EQ(comms.size(), 2u);
  std::vector<std::string> errors(2);
  const auto a = pattern(11, 0, kSmall);
  const auto b = pattern(22, 0, kLarge);
  testing::onEveryRank(2, [&](int r) {
    Communicator& comm = *comms[r];
    if (r == 0) {
      std::vector<Result<Work>> works;
      works.push_back(comm.send(a.data(), a.size(), DataType::kInt32, 1, 11));
      works.push_back(comm.send(b.data(), b.size(), DataType::kInt32, 1, 22));
      errors[r] = waitAll(works);
      return;
    }
    errors[r] = receive22Then11(comm, b, a);
  });
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
}

// torch's case: dist.send(tag=11) then dist.send(tag=22), each waited for, against
// irecv(22), irecv(11) and then the waits.
TEST_P(PointToPointTagsTest, BlockingSendsAgainstReceivesOfAnotherOrder) {
  auto comms = testing::makeCommunicators(2, options());
  ASSERT_EQ(comms.size(), 2u);
  std::vector<std::string> errors(2);
  const auto a = pattern(11, 0, kLarge);
  const auto b = pattern(22, 0, kSmall);
  testing::onEveryRank(2, [&](int r) {
    Communicator& comm = *comms[r];
    if (r == 0) {
      for (auto [tag, data] : {std::pair{11, &a}, std::pair{22, &b}}) {
        std::vector<Result<Work>> one;
        one.push_back(comm.send(data->data(), data->size(), DataType::kInt32, 1, tag));
        errors[r] += waitAll(one);
      }
      return;
    }
    errors[r] = receive22Then11(comm, b, a);
  });
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
}

// The receive of 11 is posted only after the receive of 22 finished: the large send of 11,
// which the sender waits for before it sends 22, must be held by the receiver meanwhile.
TEST_P(PointToPointTagsTest, EarlySendIsHeldUntilItsReceiveIsPosted) {
  auto comms = testing::makeCommunicators(2, options());
  ASSERT_EQ(comms.size(), 2u);
  std::vector<std::string> errors(2);
  const auto a = pattern(11, 0, kLarge);
  const auto b = pattern(22, 0, kLarge + 5);
  testing::onEveryRank(2, [&](int r) {
    Communicator& comm = *comms[r];
    if (r == 0) {
      for (auto [tag, data] : {std::pair{11, &a}, std::pair{22, &b}}) {
        std::vector<Result<Work>> one;
        one.push_back(comm.send(data->data(), data->size(), DataType::kInt32, 1, tag));
        errors[r] += waitAll(one);
      }
      return;
    }
    std::vector<int32_t> got22(b.size(), -1), got11(a.size(), -1);
    std::vector<Result<Work>> first;
    first.push_back(comm.recv(got22.data(), got22.size(), DataType::kInt32, 0, 22));
    errors[r] = waitAll(first);
    std::vector<Result<Work>> second;
    second.push_back(comm.recv(got11.data(), got11.size(), DataType::kInt32, 0, 11));
    errors[r] += waitAll(second);
    if (errors[r].empty()) errors[r] = compare("tag 22", got22, b) + compare("tag 11", got11, a);
  });
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
}

// Three messages per tag, interleaved by the sender (5, 7, 5, 7, 5, 7) with sizes that
// change from one to the next (one of each tag empty); the receiver posts every 7 before
// any 5. The k-th of each
// tag meets the k-th.
TEST_P(PointToPointTagsTest, MessagesOfOneTagKeepTheirOrder) {
  auto comms = testing::makeCommunicators(2, options());
  ASSERT_EQ(comms.size(), 2u);
  std::vector<std::string> errors(2);
  const std::vector<size_t> sizes = {kSmall, kLarge, 0};  // an empty message travels too
  testing::onEveryRank(2, [&](int r) {
    Communicator& comm = *comms[r];
    std::vector<std::vector<int32_t>> data;
    std::vector<Result<Work>> works;
    if (r == 0) {
      for (int k = 0; k < 3; ++k) {
        for (int64_t tag : {5, 7}) data.push_back(pattern(tag, k, sizes[(k + tag) % 3]));
      }
      for (int k = 0; k < 3; ++k) {
        for (int t = 0; t < 2; ++t) {
          const auto& d = data[k * 2 + t];
          works.push_back(comm.send(d.data(), d.size(), DataType::kInt32, 1, t == 0 ? 5 : 7));
        }
      }
      errors[r] = waitAll(works);
      return;
    }
    std::vector<std::pair<int64_t, int>> order;
    for (int64_t tag : {7, 5}) {
      for (int k = 0; k < 3; ++k) order.push_back({tag, k});
    }
    for (auto [tag, k] : order) {
      data.emplace_back(sizes[(k + tag) % 3], -1);
      works.push_back(comm.recv(data.back().data(), data.back().size(), DataType::kInt32, 0, tag));
    }
    errors[r] = waitAll(works);
    for (size_t i = 0; i < order.size() && errors[r].empty(); ++i) {
      auto [tag, k] = order[i];
      errors[r] = compare("tag " + std::to_string(tag) + " #" + std::to_string(k), data[i],
                          pattern(tag, k, sizes[(k + tag) % 3]));
    }
  });
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
}

// Four ranks, every pair: each rank posts its receives from every peer in the reverse
// tag order (3, 2, 1) before sending tags 1, 2, 3 to every peer; one matcher state per
// peer, sizes per tag.
TEST_P(PointToPointTagsTest, EveryPeerReceivesInReverseTagOrder) {
  constexpr int kRanks = 4;
  auto comms = testing::makeCommunicators(kRanks, options());
  ASSERT_EQ(comms.size(), static_cast<size_t>(kRanks));
  std::vector<std::string> errors(kRanks);
  auto count = [](int64_t tag) { return tag == 2 ? kLarge : kSmall + static_cast<size_t>(tag); };
  auto data = [&](int from, int to, int64_t tag) {
    return pattern(tag * 100 + from * 10 + to, 0, count(tag));
  };
  testing::onEveryRank(kRanks, [&](int r) {
    Communicator& comm = *comms[r];
    std::vector<std::vector<int32_t>> got, sent;
    std::vector<std::tuple<int, int64_t>> from;
    std::vector<Result<Work>> works;
    for (int p = 0; p < kRanks; ++p) {
      for (int64_t tag = 3; tag >= 1 && p != r; --tag) {
        got.emplace_back(count(tag), -1);
        from.emplace_back(p, tag);
        works.push_back(comm.recv(got.back().data(), got.back().size(), DataType::kInt32, p, tag));
      }
    }
    for (int p = 0; p < kRanks; ++p) {
      for (int64_t tag = 1; tag <= 3 && p != r; ++tag) sent.push_back(data(r, p, tag));
    }
    size_t k = 0;
    for (int p = 0; p < kRanks; ++p) {
      for (int64_t tag = 1; tag <= 3 && p != r; ++tag, ++k) {
        works.push_back(comm.send(sent[k].data(), sent[k].size(), DataType::kInt32, p, tag));
      }
    }
    errors[r] = waitAll(works);
    for (size_t i = 0; i < got.size() && errors[r].empty(); ++i) {
      auto [p, tag] = from[i];
      errors[r] = compare("from " + std::to_string(p) + " tag " + std::to_string(tag), got[i],
                          data(p, r, tag));
    }
  });
  for (int r = 0; r < kRanks; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

// A group (Communicator::sendRecv, torch's batch_isend_irecv) with tags: both ranks list
// their receives in the other tag order than the peer's sends.
TEST_P(PointToPointTagsTest, GroupMatchesByTag) {
  auto comms = testing::makeCommunicators(2, options());
  ASSERT_EQ(comms.size(), 2u);
  std::vector<std::string> errors(2);
  testing::onEveryRank(2, [&](int r) {
    Communicator& comm = *comms[r];
    const int peer = 1 - r;
    auto send11 = pattern(11 + r, 0, kSmall);
    auto send22 = pattern(22 + r, 0, kLarge);
    std::vector<int32_t> got11(kSmall, -1), got22(kLarge, -1);
    std::vector<PointToPoint> ops = {
        {false, got22.data(), got22.size(), DataType::kInt32, peer, 22},
        {false, got11.data(), got11.size(), DataType::kInt32, peer, 11},
        {true, send11.data(), send11.size(), DataType::kInt32, peer, 11},
        {true, send22.data(), send22.size(), DataType::kInt32, peer, 22},
    };
    std::vector<Result<Work>> works;
    works.push_back(comm.sendRecv(ops));
    errors[r] = waitAll(works);
    if (errors[r].empty()) {
      errors[r] = compare("tag 22", got22, pattern(22 + peer, 0, kLarge)) +
                  compare("tag 11", got11, pattern(11 + peer, 0, kSmall));
    }
  });
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
}

// fault: a tagged receive whose tag never arrives while the peer sends another tag |
// Timeout within the communicator's timeout naming the peer and the tag; the other tag
// is held | p2p_tags_test
TEST_P(PointToPointTagsTest, TagThatNeverArrivesTimesOut) {
  auto comms = testing::makeCommunicators(2, options(1500ms));
  ASSERT_EQ(comms.size(), 2u);
  Status received;
  Status sent;
  std::chrono::duration<double> took{};
  testing::onEveryRank(2, [&](int r) {
    Communicator& comm = *comms[r];
    std::vector<int32_t> data(kSmall, r);
    if (r == 0) {
      Result<Work> work = comm.send(data.data(), data.size(), DataType::kInt32, 1, 34);
      sent = work.isOk() ? work->wait() : work.status();
      return;
    }
    const auto start = std::chrono::steady_clock::now();
    Result<Work> work = comm.recv(data.data(), data.size(), DataType::kInt32, 0, 33);
    received = work.isOk() ? work->wait() : work.status();
    took = std::chrono::steady_clock::now() - start;
  });
  EXPECT_TRUE(sent.isOk()) << sent.toString();  // held by the receiver
  ASSERT_EQ(received.code(), StatusCode::kTimeout) << received.toString();
  EXPECT_EQ(received.peer(), 0);
  EXPECT_NE(received.message().find("with tag 33 from peer 0"), std::string::npos)
      << received.message();
  EXPECT_NE(received.message().find("waiting for rank 0 to send tag 33"), std::string::npos)
      << received.message();
  EXPECT_LT(took.count(), 10.0);
}

// A tagged send and its receive that disagree on the count: the receiver fails with
// Mismatch naming the peer, the tag and both counts, before writing a byte.
TEST_P(PointToPointTagsTest, CountThatDiffersIsAMismatch) {
  auto comms = testing::makeCommunicators(2, options());
  ASSERT_EQ(comms.size(), 2u);
  Status received;
  std::vector<int32_t> got(kSmall - 1, -1);
  testing::onEveryRank(2, [&](int r) {
    Communicator& comm = *comms[r];
    if (r == 0) {
      std::vector<int32_t> data(kSmall, 7);
      Result<Work> work = comm.send(data.data(), data.size(), DataType::kInt32, 1, 5);
      if (work.isOk()) work->wait();
      return;
    }
    Result<Work> work = comm.recv(got.data(), got.size(), DataType::kInt32, 0, 5);
    received = work.isOk() ? work->wait() : work.status();
  });
  ASSERT_EQ(received.code(), StatusCode::kMismatch) << received.toString();
  EXPECT_EQ(received.peer(), 0);
  EXPECT_NE(received.message().find("with tag 5 between rank 1 and its peer 0: peer 0 sends 1000 "
                                    "elements of int32, this rank receives 999"),
            std::string::npos)
      << received.message();
  EXPECT_EQ(got, std::vector<int32_t>(kSmall - 1, -1));
}

// Untagged point-to-point keeps NCCL's order semantics: the n-th send meets the n-th
// receive whatever their sizes say.
TEST_P(PointToPointTagsTest, UntaggedStillMatchesByOrder) {
  auto comms = testing::makeCommunicators(2, options());
  ASSERT_EQ(comms.size(), 2u);
  std::vector<std::string> errors(2);
  const auto a = pattern(1, 0, kLarge);
  const auto b = pattern(2, 0, kLarge);
  testing::onEveryRank(2, [&](int r) {
    Communicator& comm = *comms[r];
    std::vector<Result<Work>> works;
    if (r == 0) {
      works.push_back(comm.send(a.data(), a.size(), DataType::kInt32, 1));
      works.push_back(comm.send(b.data(), b.size(), DataType::kInt32, 1));
      errors[r] = waitAll(works);
      return;
    }
    std::vector<int32_t> first(kLarge, -1), second(kLarge, -1);
    works.push_back(comm.recv(first.data(), first.size(), DataType::kInt32, 0));
    works.push_back(comm.recv(second.data(), second.size(), DataType::kInt32, 0));
    errors[r] = waitAll(works);
    if (errors[r].empty()) errors[r] = compare("first", first, a) + compare("second", second, b);
  });
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
}

// fault: tagged and untagged point-to-point mixed on one pair of ranks | InvalidArgument on
// the rank that mixes them; Mismatch ("cannot be mixed") on a receiver whose peer used the
// other kind | p2p_tags_test
TEST_P(PointToPointTagsTest, MixingTaggedAndUntaggedIsRefused) {
  {
    auto comms = testing::makeCommunicators(2, options());
    ASSERT_EQ(comms.size(), 2u);
    std::vector<std::string> errors(2);
    std::vector<Status> refused(2);
    testing::onEveryRank(2, [&](int r) {
      Communicator& comm = *comms[r];
      std::vector<int32_t> data(kSmall, r);
      std::vector<Result<Work>> works;
      works.push_back(r == 0 ? comm.send(data.data(), data.size(), DataType::kInt32, 1)
                             : comm.recv(data.data(), data.size(), DataType::kInt32, 0));
      errors[r] = waitAll(works);
      Result<Work> mixed = r == 0 ? comm.send(data.data(), data.size(), DataType::kInt32, 1, 3)
                                  : comm.recv(data.data(), data.size(), DataType::kInt32, 0, 3);
      refused[r] = mixed.status();
    });
    for (int r = 0; r < 2; ++r) {
      EXPECT_EQ(errors[r], "") << "rank " << r;
      EXPECT_EQ(refused[r].code(), StatusCode::kInvalidArgument) << refused[r].toString();
      EXPECT_NE(refused[r].message().find("cannot be mixed"), std::string::npos)
          << refused[r].message();
    }
  }
  // Across ranks: rank 0 tags, rank 1 does not.
  auto comms = testing::makeCommunicators(2, options());
  ASSERT_EQ(comms.size(), 2u);
  Status received;
  testing::onEveryRank(2, [&](int r) {
    Communicator& comm = *comms[r];
    std::vector<int32_t> data(kSmall, r);
    Result<Work> work = r == 0 ? comm.send(data.data(), data.size(), DataType::kInt32, 1, 3)
                               : comm.recv(data.data(), data.size(), DataType::kInt32, 0);
    Status st = work.isOk() ? work->wait() : work.status();
    if (r == 1) received = st;
  });
  EXPECT_EQ(received.code(), StatusCode::kMismatch) << received.toString();
  EXPECT_NE(received.message().find("cannot be mixed"), std::string::npos) << received.message();
}

INSTANTIATE_TEST_SUITE_P(Transports, PointToPointTagsTest, ::testing::Values("shm", "tcp"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           return std::string(info.param);
                         });

}  // namespace
}  // namespace collie
