// Fingerprints: which fields a tag carries (a root for broadcast and reduce, no peer for
// send/recv, whose two halves name each other) and how a tag and a disagreement read:
// a send's or recv's other rank is named as its peer, never as a root.
#include "core/plan/fingerprint.h"

#include <gtest/gtest.h>

#include <string>

namespace collie {
namespace {

CollectiveArgs pointToPoint(CollectiveKind kind, int peer, size_t count) {
  CollectiveArgs args;
  args.kind = kind;
  args.count = count;
  args.dtype = DataType::kInt32;
  args.peer = peer;
  return args;
}

CollectiveArgs broadcastFrom(int root) {
  CollectiveArgs args;
  args.kind = CollectiveKind::kBroadcast;
  args.root = root;
  return args;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(FingerprintTest, BothHalvesOfASendRecvCarryTheSameTag) {
  // Rank 0 sends to 1 (peer 1), rank 1 receives from 0 (peer 0): one operation.
  const uint64_t send = makeFingerprint(3, pointToPoint(CollectiveKind::kSend, 1, 100));
  const uint64_t recv = makeFingerprint(3, pointToPoint(CollectiveKind::kRecv, 0, 100));
  EXPECT_EQ(send, recv);
  EXPECT_EQ(decodeFingerprint(send).root, 0u);
  EXPECT_NE(send, makeFingerprint(3, pointToPoint(CollectiveKind::kRecv, 0, 99)));
}

TEST(FingerprintTest, OnlyRootedKindsCarryTheRoot) {
  const CollectiveArgs bcast = broadcastFrom(2);
  const CollectiveArgs other = broadcastFrom(3);
  EXPECT_NE(makeFingerprint(0, bcast), makeFingerprint(0, other));
  EXPECT_EQ(decodeFingerprint(makeFingerprint(0, other)).root, 3u);
  EXPECT_TRUE(contains(describeFingerprint(makeFingerprint(0, bcast)), " root=2 "));

  CollectiveArgs sum;  // all-reduce: a stray root changes nothing and is not shown
  sum.root = 5;
  EXPECT_EQ(makeFingerprint(0, sum), makeFingerprint(0, CollectiveArgs{}));
  EXPECT_FALSE(contains(describeFingerprint(makeFingerprint(0, sum)), "root"));
}

TEST(FingerprintTest, ASendRecvNamesItsPeer) {
  const CollectiveArgs send = pointToPoint(CollectiveKind::kSend, 1, 100);
  const CollectiveArgs recv = pointToPoint(CollectiveKind::kRecv, 0, 100);
  const uint64_t tag = makeFingerprint(4, send);
  EXPECT_EQ(describeOperation(tag, send).rfind("send #4 to peer 1 dtype=int32 count#", 0), 0u)
      << describeOperation(tag, send);
  EXPECT_EQ(describeOperation(tag, recv).rfind("recv #4 from peer 0 dtype=int32 count#", 0), 0u)
      << describeOperation(tag, recv);
  EXPECT_EQ(describeFingerprint(tag).rfind("send/recv #4 dtype=int32 count#", 0), 0u)
      << describeFingerprint(tag);
  for (const std::string& text :
       {describeOperation(tag, send), describeOperation(tag, recv), describeFingerprint(tag)}) {
    EXPECT_FALSE(contains(text, "root")) << text;
    EXPECT_FALSE(contains(text, "op=")) << text;
  }
  CollectiveArgs sum;
  EXPECT_EQ(describeOperation(makeFingerprint(4, sum), sum),
            describeFingerprint(makeFingerprint(4, sum)));
}

TEST(FingerprintTest, ASendRecvDisagreementNamesThePeerAsAPeer) {
  // Rank 1 receives 99 elements from rank 0, which sends 100.
  const uint64_t mine = makeFingerprint(0, pointToPoint(CollectiveKind::kRecv, 0, 99));
  const uint64_t theirs = makeFingerprint(0, pointToPoint(CollectiveKind::kSend, 1, 100));
  const std::string text = describeDisagreement(mine, theirs, 1, 0);
  EXPECT_EQ(text.rfind("rank 1 and its peer 0 disagree on a send/recv: count differs: this "
                       "rank count#",
                       0),
            0u)
      << text;
  EXPECT_TRUE(contains(text, ", peer 0 count#")) << text;
  EXPECT_FALSE(contains(text, "root")) << text;
  EXPECT_FALSE(contains(text, "collectives")) << text;

  const uint64_t later = makeFingerprint(1, pointToPoint(CollectiveKind::kSend, 1, 99));
  EXPECT_TRUE(contains(describeMismatch(mine, later, 0), "posted more sends")) << text;
  EXPECT_EQ(describeDisagreement(mine, mine, 1, 0), "");
}

TEST(FingerprintTest, TaggedSendRecvReadsAsTaggedAndRefusesTheUntagged) {
  // A tagged send/recv carries its own kind value; both halves still agree.
  const uint64_t tagged = makeTaggedFingerprint(2, DataType::kInt32, 100);
  EXPECT_TRUE(decodeFingerprint(tagged).tagged);
  EXPECT_EQ(decodeFingerprint(tagged).kind, CollectiveKind::kSend);
  EXPECT_EQ(decodeFingerprint(tagged).sequence, 2u);
  EXPECT_TRUE(decodeFingerprint(envelopeFingerprint()).envelope);
  const CollectiveArgs recv = pointToPoint(CollectiveKind::kRecv, 0, 100);
  PointToPointTag p2p;
  p2p.tagged = true;
  p2p.value = 22;
  EXPECT_EQ(describeOperation(tagged, recv, p2p).rfind("recv #2 with tag 22 from peer 0 ", 0), 0u)
      << describeOperation(tagged, recv, p2p);
  // An untagged receive meeting an envelope, and a tagged one meeting untagged bytes.
  const uint64_t untagged = makeFingerprint(0, recv);
  for (const auto& [mine, theirs] :
       {std::pair{untagged, envelopeFingerprint()}, std::pair{envelopeFingerprint(), untagged}}) {
    const std::string text = describeDisagreement(mine, theirs, 1, 0);
    EXPECT_EQ(text.rfind("rank 1 and its peer 0 disagree on a send/recv: kind differs: ", 0), 0u)
        << text;
    EXPECT_TRUE(contains(text, "cannot be mixed")) << text;
  }
}

TEST(FingerprintTest, ACollectiveDisagreementNamesTheRankAndTheRoot) {
  const CollectiveArgs a = broadcastFrom(0);
  const std::string text =
      describeDisagreement(makeFingerprint(0, a), makeFingerprint(0, broadcastFrom(2)), 1, 2);
  EXPECT_EQ(text,
            "rank 1 and rank 2 run different collectives: root differs: this rank 0, rank 2 2")
      << text;
  const uint64_t send = makeFingerprint(0, pointToPoint(CollectiveKind::kSend, 2, 0));
  EXPECT_TRUE(contains(describeDisagreement(makeFingerprint(0, a), send, 1, 2),
                       "kind differs: this rank broadcast, rank 2 send/recv"));
}

}  // namespace
}  // namespace collie
