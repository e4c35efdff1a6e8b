// The pure parts of the DDP layer: bucket assignment, the distributed sampler,
// checkpoints and the timeline encoding.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <set>

#include "ddp/bucket_assignment.h"
#include "ddp/demo/model/checkpoint.h"
#include "ddp/demo/model/dataset.h"
#include "ddp/demo/model/mlp.h"
#include "ddp/timeline.h"

namespace collie::ddp {
namespace {

constexpr size_t kMiB = 1024 * 1024;

// (d) Reverse model order; a bucket closes once it reaches its limit; the first
// limit is the small one.
TEST(BucketAssignment, ReverseOrderSmallFirstBucketThenCap) {
  // Model order: 0.5, 0.5, 3, 0.25, 2, 0.75 MiB.
  std::vector<size_t> bytes = {kMiB / 2, kMiB / 2, 3 * kMiB, kMiB / 4, 2 * kMiB, 3 * kMiB / 4};
  auto buckets = assignBuckets(bytes, /*first=*/kMiB, /*cap=*/4 * kMiB);
  // Visit 5 (0.75) + 4 (2) = 2.75 >= 1 -> close. Then 3 (0.25) + 2 (3) + 1 (0.5) =
  // 3.75, + 0 (0.5) = 4.25 >= 4 -> close.
  ASSERT_EQ(buckets.size(), 2u);
  EXPECT_EQ(buckets[0], (std::vector<size_t>{5, 4}));
  EXPECT_EQ(buckets[1], (std::vector<size_t>{3, 2, 1, 0}));
}

TEST(BucketAssignment, DefaultsMatchPyTorch) {
  EXPECT_EQ(kDefaultFirstBucketBytes, kMiB);
  EXPECT_EQ(megabytesToBytes(kDefaultBucketCapMb), 25 * kMiB);
  // 40 parameters of 1 MiB: first bucket holds one, then 25 each, remainder last.
  std::vector<size_t> bytes(40, kMiB);
  auto buckets = assignBuckets(bytes, kDefaultFirstBucketBytes, megabytesToBytes(25));
  ASSERT_EQ(buckets.size(), 3u);
  EXPECT_EQ(buckets[0], (std::vector<size_t>{39}));
  EXPECT_EQ(buckets[1].size(), 25u);
  EXPECT_EQ(buckets[1].front(), 38u);
  EXPECT_EQ(buckets[2].size(), 14u);
  EXPECT_EQ(buckets[2].back(), 0u);
}

TEST(BucketAssignment, EveryParameterOnceAndLimitsRespected) {
  std::vector<size_t> bytes;
  for (int i = 0; i < 100; ++i) bytes.push_back(1000 + 37 * (i % 11));
  const size_t first = 3000, cap = 10000;
  auto buckets = assignBuckets(bytes, first, cap);
  std::vector<size_t> seen;
  for (size_t b = 0; b < buckets.size(); ++b) {
    size_t sum = 0;
    for (size_t k = 0; k < buckets[b].size(); ++k) {
      sum += bytes[buckets[b][k]];
      // Closed exactly when the limit was reached: no prefix reaches it earlier.
      if (k + 1 < buckets[b].size()) {
        EXPECT_LT(sum, b == 0 ? first : cap);
      }
    }
    if (b + 1 < buckets.size()) {
      EXPECT_GE(sum, b == 0 ? first : cap);
    }
    seen.insert(seen.end(), buckets[b].begin(), buckets[b].end());
  }
  ASSERT_EQ(seen.size(), bytes.size());
  for (size_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i], bytes.size() - 1 - i);
}

TEST(BucketAssignment, ZeroCapMeansOneParameterPerBucket) {
  auto buckets = assignBuckets({4, 4, 4}, 0, 0);
  ASSERT_EQ(buckets.size(), 3u);
  EXPECT_EQ(buckets[0], (std::vector<size_t>{2}));
}

TEST(DistributedSampler, PadsToEqualLengthAndCoversTheDataSet) {
  const size_t size = 10;
  std::multiset<size_t> all;
  for (int r = 0; r < 3; ++r) {
    DistributedSampler s(size, 3, r, 7);
    auto idx = s.indices();
    EXPECT_EQ(idx.size(), 4u);  // ceil(10 / 3)
    all.insert(idx.begin(), idx.end());
  }
  EXPECT_EQ(all.size(), 12u);
  for (size_t i = 0; i < size; ++i) EXPECT_GE(all.count(i), 1u) << i;
}

TEST(DistributedSampler, SameSeedSameOrderAndSetEpochReshuffles) {
  DistributedSampler a(64, 2, 0, 5), b(64, 2, 0, 5), other(64, 2, 1, 5);
  EXPECT_EQ(a.indices(), b.indices());
  auto e0 = a.indices();
  a.setEpoch(1);
  EXPECT_NE(a.indices(), e0);
  b.setEpoch(1);
  EXPECT_EQ(a.indices(), b.indices());
  // Ranks of one epoch are disjoint when the size divides evenly.
  other.setEpoch(1);
  std::vector<size_t> ours = a.indices();
  std::set<size_t> mine(ours.begin(), ours.end());
  for (size_t i : other.indices()) EXPECT_EQ(mine.count(i), 0u);
}

TEST(DistributedSampler, UnionOfRanksStepBatchesIsTheSingleRankBatch) {
  // What makes N ranks with batch B/N equal to one rank with batch B.
  const size_t size = 48, b = 3, n = 4;
  DistributedSampler one(size, 1, 0, 9);
  auto whole = one.indices();
  for (size_t step = 0; step < size / (b * n); ++step) {
    std::multiset<size_t> fromRanks;
    for (size_t r = 0; r < n; ++r) {
      auto idx = DistributedSampler(size, n, r, 9).indices();
      fromRanks.insert(idx.begin() + step * b, idx.begin() + (step + 1) * b);
    }
    std::multiset<size_t> single(whole.begin() + step * b * n, whole.begin() + (step + 1) * b * n);
    EXPECT_EQ(fromRanks, single);
  }
}

TEST(Checkpoint, RoundTripAndAtomicReplace) {
  std::string dir = "/tmp/collie_ddp_ck_" + std::to_string(getpid());
  ASSERT_EQ(system(("mkdir -p " + dir).c_str()), 0);
  Checkpoint c;
  c.step = 12;
  c.epoch = 3;
  c.optimizer = "adam";
  c.optimizerSteps = 12;
  c.params = {{1.5f, -2.0f}, {3.25f}};
  c.optimizerState = {{0.1f, 0.2f}, {0.3f}, {0.4f, 0.5f}, {0.6f}};
  std::string path = checkpointPath(dir);
  ASSERT_TRUE(saveCheckpoint(path, c).isOk());
  Result<Checkpoint> back = loadCheckpoint(path);
  ASSERT_TRUE(back.isOk()) << back.status().toString();
  EXPECT_EQ(back->step, 12u);
  EXPECT_EQ(back->epoch, 3u);
  EXPECT_EQ(back->optimizer, "adam");
  EXPECT_EQ(back->params, c.params);
  EXPECT_EQ(back->optimizerState, c.optimizerState);

  // Truncated or corrupted files are rejected with a message, never read past the end.
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (size_t cut : {size_t{4}, size_t{20}, bytes.size() - 3}) {
    ASSERT_TRUE(writeFileAtomically(path, bytes.substr(0, cut)).isOk());
    Result<Checkpoint> bad = loadCheckpoint(path);
    EXPECT_FALSE(bad.isOk()) << cut;
    EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  }
  std::string huge = bytes;
  huge[8 + 4 + 8 + 8 + 8 + 4 + 4] = '\x7f';  // first tensor count: absurd
  ASSERT_TRUE(writeFileAtomically(path, huge).isOk());
  EXPECT_FALSE(loadCheckpoint(path).isOk());
  EXPECT_EQ(loadCheckpoint(dir + "/missing").status().code(), StatusCode::kNotFound);
  std::remove(path.c_str());
  rmdir(dir.c_str());
}

TEST(Timeline, EventsSurviveTheFixedSizeEncoding) {
  Timeline t;
  t.setContext(3, 7, 1);
  t.record(EventKind::kBackward, 2, 10.5, 20.25);
  t.record(EventKind::kAllReduce, 1, 15, 30, 12);
  auto encoded = toDoubles(t.events(), 5);
  ASSERT_EQ(encoded.size(), 5 * kDoublesPerEvent);
  auto back = fromDoubles(encoded.data(), 5);
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[1].kind, EventKind::kAllReduce);
  EXPECT_EQ(back[1].rank, 3);
  EXPECT_EQ(back[1].step, 7);
  EXPECT_EQ(back[1].phase, 1);
  EXPECT_DOUBLE_EQ(back[1].issueUs, 12);
  std::string json = chromeTraceJson(back);
  EXPECT_NE(json.find("\"allreduce bucket 1\""), std::string::npos);
  t.record(EventKind::kStep, 0, 0, 40);
  std::string svg = timelineSvg(t.events(), 7, 4, "t");
  EXPECT_NE(svg.find("<svg"), std::string::npos);
  EXPECT_NE(svg.find("rank 3 all-reduce"), std::string::npos);
}

TEST(Mlp, DimForParamsAndDeterministicInit) {
  EXPECT_EQ(Mlp::dimForParams(1056), 32);  // 32*32 + 32
  EXPECT_EQ(Mlp::dimForParams(1055), 31);
  Mlp a(2, 8, 1), b(2, 8, 1), c(2, 8, 2);
  EXPECT_TRUE(
      std::equal(a.parameters()[0].begin(), a.parameters()[0].end(), b.parameters()[0].begin()));
  EXPECT_FALSE(
      std::equal(a.parameters()[0].begin(), a.parameters()[0].end(), c.parameters()[0].begin()));
}

}  // namespace
}  // namespace collie::ddp
