// Team collectives as planned data (core/plan/team_step.h): the tuner's choice among board,
// direct, cma and the schedules for a shm-like team offer (2 and 4 ranks, with and
// without more ranks than cores), forced team algorithms and where they cannot run, the
// team step in a schedule and its JSON, and the simulator running the team step (the
// reference of the team algorithms) and declining it (the fallback), both against a
// float64 reference, bitwise alike on every rank.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/plan/team_step.h"
#include "core/sim/simulator.h"
#include "core/tune/tuner.h"
#include "support/rounding_values.h"

namespace collie {
namespace {

constexpr size_t kBoardBytes = 256 << 10;
constexpr size_t kCrossover = 64 << 10;
constexpr size_t kOversubscribedDirect = 16 << 10;

// What shm offers with its defaults; `oversubscribed`: more ranks than cores.
TeamOffer shmOffer(bool oversubscribed = false) {
  TeamOffer offer;
  offer.algorithms =
      teamBit(Algorithm::kBoard) | teamBit(Algorithm::kDirect) | teamBit(Algorithm::kCma);
  offer.boardBytes = kBoardBytes;
  offer.cmaCrossoverBytes = oversubscribed ? SIZE_MAX : kCrossover;
  offer.directCrossoverBytes = oversubscribed ? kOversubscribedDirect : kCrossover;
  offer.cmaMaxBytes = 64 << 20;
  return offer;
}

TuneLimits limitsWith(const TeamOffer& offer, Algorithm forced = Algorithm::kAuto) {
  TuneLimits limits;
  limits.team = offer;
  limits.forced = forced;
  return limits;
}

const TuneConstants kShm{12.0, 12.0, "shm"};
const TuneConstants kFast{0.2, 400.0, "fastest the clamp allows"};

TEST(TeamTuner, BoardUpToTheCrossoverThenSingleCopyThenTheSchedule) {
  for (int n : {2, 4}) {
    SCOPED_TRACE(n);
    for (size_t bytes = 8; bytes <= (size_t{1} << 30); bytes *= 2) {
      const TuneDecision d =
          decide(CollectiveKind::kAllReduce, bytes, n, limitsWith(shmOffer()), kShm);
      EXPECT_TRUE(d.teamStep);
      if (bytes <= kCrossover) {
        EXPECT_EQ(d.team, teamBit(Algorithm::kBoard)) << bytes;
        EXPECT_EQ(d.steps, Algorithm::kAuto) << bytes;  // the board needs no fallback
        EXPECT_EQ(d.algorithm, Algorithm::kBoard);
      } else if (bytes <= kBoardBytes) {
        EXPECT_EQ(d.team, shmOffer().algorithms) << bytes;  // direct, cma, then the board
        EXPECT_EQ(d.steps, Algorithm::kAuto) << bytes;
        EXPECT_EQ(d.algorithm, Algorithm::kDirect);
      } else {
        EXPECT_EQ(d.team, teamBit(Algorithm::kDirect) | teamBit(Algorithm::kCma)) << bytes;
        EXPECT_EQ(d.steps, decide(CollectiveKind::kAllReduce, bytes, n, TuneLimits{}, kShm).steps)
            << bytes;  // the fallback is what auto runs without a team
      }
    }
  }
}

// Where the engine times cma against the schedule (COLLIE_TUNE_ADAPT_MAX: an all-reduce
// above the board with a schedule behind its team step), cma is offered even where the
// probe's constants make the ring look cheaper; elsewhere the model alone decides.
TEST(TeamTuner, CmaIsOfferedWhereTheEngineMeasuresIt) {
  const TeamAlgorithms cma = teamBit(Algorithm::kCma);
  TuneLimits measured = limitsWith(shmOffer());
  measured.measuredCmaMaxBytes = 8 << 20;
  for (int n : {2, 4}) {
    SCOPED_TRACE(n);
    for (size_t bytes = 8; bytes <= (size_t{64} << 20); bytes *= 2) {
      SCOPED_TRACE(bytes);
      const TuneDecision model =
          decide(CollectiveKind::kAllReduce, bytes, n, limitsWith(shmOffer()), kFast);
      const TuneDecision d = decide(CollectiveKind::kAllReduce, bytes, n, measured, kFast);
      if (bytes > kBoardBytes && bytes <= measured.measuredCmaMaxBytes) {
        EXPECT_EQ(model.team & cma, 0u) << "the model alone prefers the ring here";
        EXPECT_EQ(d.team, model.team | cma);
        EXPECT_NE(d.steps, Algorithm::kAuto) << "a schedule behind it";
        EXPECT_EQ(d.steps, model.steps);
      } else {
        EXPECT_EQ(d.team, model.team);
        EXPECT_EQ(d.steps, model.steps);
      }
    }
    // Not for other collectives, and not for a forced schedule.
    for (CollectiveKind kind : {CollectiveKind::kReduceScatter, CollectiveKind::kAllGather}) {
      EXPECT_EQ(decide(kind, 4 << 20, n, measured, kFast).team,
                decide(kind, 4 << 20, n, limitsWith(shmOffer()), kFast).team);
    }
    measured.forced = Algorithm::kRing;
    EXPECT_FALSE(decide(CollectiveKind::kAllReduce, 4 << 20, n, measured, kFast).teamStep);
    measured.forced = Algorithm::kAuto;
  }
}

TEST(TeamTuner, OversubscribedCmaNeverBeforeTheBoardDirectFromItsCrossover) {
  for (size_t bytes = 8; bytes <= kBoardBytes; bytes *= 2) {
    const TuneDecision d =
        decide(CollectiveKind::kAllReduce, bytes, 4, limitsWith(shmOffer(true)), kShm);
    const TeamAlgorithms board = teamBit(Algorithm::kBoard);
    EXPECT_EQ(d.team, bytes <= kOversubscribedDirect ? board : board | teamBit(Algorithm::kDirect))
        << bytes;
  }
  const TuneDecision above =
      decide(CollectiveKind::kAllReduce, 2 * kBoardBytes, 4, limitsWith(shmOffer(true)), kShm);
  EXPECT_EQ(above.algorithm, Algorithm::kDirect);
}

TEST(TeamTuner, CostsFollowTheModelAndCrossAtTheCrossover) {
  const TeamOffer offer = shmOffer();
  const TeamCosts& c = offer.costs;
  EXPECT_DOUBLE_EQ(predictTeamMicros(Algorithm::kBoard, CollectiveKind::kAllReduce, 4096, 4, offer),
                   3 * c.boardAlphaUs + 6 * 4096 / c.boardBytesPerUs);
  for (int n : {2, 3, 4, 8}) {
    const double board =
        predictTeamMicros(Algorithm::kBoard, CollectiveKind::kAllReduce, kCrossover, n, offer);
    for (Algorithm single : {Algorithm::kDirect, Algorithm::kCma}) {
      EXPECT_NEAR(predictTeamMicros(single, CollectiveKind::kAllReduce, kCrossover, n, offer),
                  board, 1e-9 * board);
      EXPECT_GT(predictTeamMicros(single, CollectiveKind::kAllReduce, 8, n, offer), 0.0);
    }
  }
}

// Direct and cma each cross the board at their own size: with cma's crossover at the
// board's size (COLLIE_SHM_CMA_MIN's default) and direct's below it, direct joins the
// board from its crossover on, alone of the two, and costs what the board costs there.
TEST(TeamTuner, DirectCrossesTheBoardAtItsOwnCrossover) {
  TeamOffer offer = shmOffer();
  offer.cmaCrossoverBytes = kBoardBytes;
  offer.directCrossoverBytes = 32 << 10;
  for (int n : {2, 4}) {
    SCOPED_TRACE(n);
    for (size_t bytes = 8; bytes <= kBoardBytes; bytes *= 2) {
      const TuneDecision d = decide(CollectiveKind::kAllReduce, bytes, n, limitsWith(offer), kShm);
      const TeamAlgorithms board = teamBit(Algorithm::kBoard);
      EXPECT_EQ(d.team,
                bytes <= offer.directCrossoverBytes ? board : board | teamBit(Algorithm::kDirect))
          << bytes;
      EXPECT_EQ(d.steps, Algorithm::kAuto) << bytes;
    }
    const double board = predictTeamMicros(Algorithm::kBoard, CollectiveKind::kAllReduce,
                                           offer.directCrossoverBytes, n, offer);
    EXPECT_NEAR(predictTeamMicros(Algorithm::kDirect, CollectiveKind::kAllReduce,
                                  offer.directCrossoverBytes, n, offer),
                board, 1e-9 * board);
    const double boardAtCma =
        predictTeamMicros(Algorithm::kBoard, CollectiveKind::kAllReduce, kBoardBytes, n, offer);
    EXPECT_NEAR(
        predictTeamMicros(Algorithm::kCma, CollectiveKind::kAllReduce, kBoardBytes, n, offer),
        boardAtCma, 1e-9 * boardAtCma);
  }
}

TEST(TeamTuner, EveryCollectiveButPointToPointMeetsOnTheTeam) {
  const TuneLimits limits = limitsWith(shmOffer());
  for (CollectiveKind kind :
       {CollectiveKind::kReduceScatter, CollectiveKind::kAllGather, CollectiveKind::kBroadcast,
        CollectiveKind::kReduce, CollectiveKind::kBarrier}) {
    SCOPED_TRACE(static_cast<int>(kind));
    const TuneDecision small = decide(kind, 1024, 4, limits, kShm);
    EXPECT_TRUE(small.teamStep);
    EXPECT_EQ(small.team, teamBit(Algorithm::kBoard));
    // Too large for the board: only the fingerprint check, then the schedule.
    const TuneDecision large = decide(kind, 4 << 20, 4, limits, kShm);
    if (kind == CollectiveKind::kBarrier) continue;
    EXPECT_TRUE(large.teamStep);
    EXPECT_EQ(large.team, 0);
    EXPECT_NE(large.steps, Algorithm::kAuto);
  }
  // A reduce-scatter publishes its whole input: 4 ranks x 128 KiB does not fit.
  EXPECT_EQ(decide(CollectiveKind::kReduceScatter, 128 << 10, 4, limits, kShm).team, 0);
  for (CollectiveKind kind : {CollectiveKind::kSend, CollectiveKind::kRecv}) {
    EXPECT_FALSE(decide(kind, 64, 2, limits, kShm).teamStep);
  }
}

// The equal exchanges: the board while their blocks fit it (an all-to-all and a
// scatter's root publish n blocks), then cma ahead of the schedule as its fallback;
// alltoallv (counts differ per rank) only meets for the fingerprint check.
TEST(TeamTuner, ExchangesTakeTheBoardThenCma) {
  const TuneLimits limits = limitsWith(shmOffer());
  for (int n : {2, 4}) {
    SCOPED_TRACE(n);
    for (CollectiveKind kind :
         {CollectiveKind::kAllToAll, CollectiveKind::kGather, CollectiveKind::kScatter}) {
      SCOPED_TRACE(static_cast<int>(kind));
      // Wherever the board carries it, the board alone (cma lost there, measured).
      for (size_t block = 1024; block * n <= kBoardBytes; block *= 4) {
        const TuneDecision small = decide(kind, block, n, limits, kShm);
        EXPECT_EQ(small.team, teamBit(Algorithm::kBoard)) << block;
        EXPECT_EQ(small.steps, Algorithm::kAuto);
      }
      const TuneDecision large = decide(kind, 4 << 20, n, limits, kShm);
      EXPECT_EQ(large.team, teamBit(Algorithm::kCma));
      EXPECT_EQ(large.algorithm, Algorithm::kCma);
      EXPECT_EQ(large.steps, decide(kind, 4 << 20, n, TuneLimits{}, kShm).steps);
    }
    const TuneDecision v = decide(CollectiveKind::kAllToAllV, 0, n, limits, kShm);
    EXPECT_TRUE(v.teamStep);
    EXPECT_EQ(v.team, 0);
  }
  // 128 KiB blocks on 4 ranks: 512 KiB published, beyond the board.
  EXPECT_FALSE(teamHas(decide(CollectiveKind::kAllToAll, 128 << 10, 4, limits, kShm).team,
                       Algorithm::kBoard));
  EXPECT_FALSE(teamSupports(Algorithm::kDirect, CollectiveKind::kAllToAll));
  EXPECT_FALSE(teamSupports(Algorithm::kCma, CollectiveKind::kAllToAllV));
}

TEST(TeamTuner, AScheduleMustBeClearlyCheaperThanTheBoard) {
  // Even at the fastest constants the clamp allows the ring does not beat the board by
  // the margin at 8 B; at 256 KiB on 2 ranks it does, and then the board is not tried.
  EXPECT_EQ(decide(CollectiveKind::kAllReduce, 8, 2, limitsWith(shmOffer(true)), kFast).team,
            teamBit(Algorithm::kBoard));
  const TuneDecision big =
      decide(CollectiveKind::kAllReduce, kBoardBytes, 2, limitsWith(shmOffer(true)), kFast);
  EXPECT_FALSE(teamHas(big.team, Algorithm::kBoard));
  EXPECT_NE(big.steps, Algorithm::kAuto);
}

TEST(TeamTuner, ForcedTeamAlgorithmsRunAloneOrSayWhyNot) {
  const TuneLimits board = limitsWith(shmOffer(), Algorithm::kBoard);
  const TuneDecision d = decide(CollectiveKind::kAllReduce, 1 << 20, 2, board, kShm);
  EXPECT_EQ(d.team, teamBit(Algorithm::kBoard));
  EXPECT_EQ(d.steps, Algorithm::kAuto);  // no fallback
  EXPECT_NE(forcedTeamUnavailable(CollectiveKind::kAllReduce, 1 << 20, 2, board)
                .find("the board carries at most 262144 bytes per rank"),
            std::string::npos);
  EXPECT_EQ(forcedTeamUnavailable(CollectiveKind::kAllReduce, 1024, 2, board), "");
  // No team (tcp, or ranks on several hosts): every forced team algorithm says so.
  for (Algorithm algo : {Algorithm::kBoard, Algorithm::kDirect, Algorithm::kCma}) {
    const TuneLimits none = limitsWith(TeamOffer{}, algo);
    EXPECT_NE(forcedTeamUnavailable(CollectiveKind::kAllReduce, 1024, 2, none)
                  .find("runs no " + std::string(algorithmName(algo))),
              std::string::npos);
  }
  // cma turned off (COLLIE_SHM_CMA_MAX=0 somewhere): not offered.
  TeamOffer noCma = shmOffer();
  noCma.algorithms &= ~teamBit(Algorithm::kCma);
  EXPECT_FALSE(
      forcedTeamUnavailable(CollectiveKind::kAllReduce, 1024, 2, limitsWith(noCma, Algorithm::kCma))
          .empty());
  EXPECT_EQ(decide(CollectiveKind::kAllReduce, 1 << 20, 2, limitsWith(noCma), kShm).team,
            teamBit(Algorithm::kDirect));
  // A team algorithm that does not implement the collective is ignored (direct
  // broadcast plans as auto), like tree for all-gather; so is one for point-to-point.
  const TuneLimits direct = limitsWith(shmOffer(), Algorithm::kDirect);
  EXPECT_EQ(forcedTeamUnavailable(CollectiveKind::kBroadcast, 1024, 2, direct), "");
  EXPECT_EQ(decide(CollectiveKind::kBroadcast, 1024, 2, direct, kShm).team,
            teamBit(Algorithm::kBoard));
  EXPECT_FALSE(decide(CollectiveKind::kSend, 1024, 2, board, kShm).teamStep);
  // A forced schedule runs without a team step.
  const TuneDecision ring =
      decide(CollectiveKind::kAllReduce, 8, 2, limitsWith(shmOffer(), Algorithm::kRing), kShm);
  EXPECT_FALSE(ring.teamStep);
  EXPECT_EQ(ring.algorithm, Algorithm::kRing);
}

TEST(TeamTuner, DecisionText) {
  const TuneLimits limits = limitsWith(shmOffer());
  EXPECT_EQ(decisionText(decide(CollectiveKind::kAllReduce, 8, 2, limits, kShm)), "board");
  const std::string large =
      decisionText(decide(CollectiveKind::kAllReduce, 1 << 20, 2, limits, kShm));
  EXPECT_EQ(large.rfind("direct>cma>ring/", 0), 0u) << large;
  const std::string check =
      decisionText(decide(CollectiveKind::kBroadcast, 8 << 20, 2, limits, kShm));
  EXPECT_EQ(check.rfind("check>chain/", 0), 0u) << check;
  const std::string table = algorithmTable(limits, kShm, 4);
  for (const char* name : {"ring", "tree", "board", "direct", "cma", "plan", "barrier"}) {
    EXPECT_NE(table.find(name), std::string::npos) << name << "\n" << table;
  }
}

// Every rank's schedule for `args` with a team step trying `team` (`fallback`: ring /
// chain steps after it).
std::vector<Schedule> schedulesOf(const CollectiveArgs& args, int n, TeamAlgorithms team,
                                  bool fallback) {
  std::vector<Schedule> out;
  for (int r = 0; r < n; ++r) {
    PlanParams params;
    params.rank = r;
    params.nranks = n;
    params.nchannels = 2;
    params.chunkBytes = 256;
    params.teamStep = true;
    params.team = team;
    params.teamFallback = fallback;
    Result<Schedule> schedule = buildSchedule(args, params);
    EXPECT_TRUE(schedule.isOk()) << schedule.status().toString();
    out.push_back(std::move(schedule).value());
  }
  return out;
}

TEST(TeamSchedule, TeamStepFirstThenTheFallbackAndTheirJson) {
  CollectiveArgs args;
  args.count = 1000;
  std::vector<Schedule> plans =
      schedulesOf(args, 2, teamBit(Algorithm::kDirect) | teamBit(Algorithm::kCma), true);
  TeamAlgorithms team = 0;
  ASSERT_TRUE(hasTeamStep(plans[0], &team));
  EXPECT_EQ(team, teamBit(Algorithm::kDirect) | teamBit(Algorithm::kCma));
  EXPECT_EQ(plans[0].algorithm, Algorithm::kDirect);
  EXPECT_EQ(plans[0].fallback, Algorithm::kRing);
  EXPECT_GT(plans[0].stepCount(), 1u);
  const std::string json = scheduleToJson(plans[0]);
  EXPECT_NE(json.find("\"team\": \"direct>cma\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"fallback\": \"ring\""), std::string::npos) << json;
  std::vector<Schedule> board = schedulesOf(args, 2, teamBit(Algorithm::kBoard), false);
  EXPECT_EQ(board[0].stepCount(), 1u);  // the team step alone
  EXPECT_EQ(board[0].algorithm, Algorithm::kBoard);
  // What cannot be: a team step for point-to-point, direct for a broadcast, an empty
  // set with nothing after it, a team algorithm as steps.
  PlanParams params;
  params.nranks = 2;
  params.teamStep = true;
  args.kind = CollectiveKind::kSend;
  args.root = 1;
  EXPECT_FALSE(buildSchedule(args, params).isOk());
  args.kind = CollectiveKind::kBroadcast;
  args.root = 0;
  params.team = teamBit(Algorithm::kDirect);
  EXPECT_EQ(buildSchedule(args, params).status().code(), StatusCode::kUnsupported);
  params.team = 0;
  params.teamFallback = false;
  EXPECT_FALSE(buildSchedule(args, params).isOk());
  params = PlanParams();
  params.nranks = 2;
  params.algorithm = Algorithm::kBoard;
  EXPECT_EQ(buildSchedule(args, params).status().code(), StatusCode::kUnsupported);
}

// Exact float values (sums and averages by 2 and 4 stay exact).
float inputOf(int rank, size_t i) { return static_cast<float>((rank * 5 + i) % 11) - 4.5f; }

struct Case {
  CollectiveKind kind;
  ReduceOp op;
};

TEST(TeamSimulation, RunAndDeclineBothMatchTheReferenceOnEveryRank) {
  const Case cases[] = {{CollectiveKind::kAllReduce, ReduceOp::kSum},
                        {CollectiveKind::kAllReduce, ReduceOp::kAvg},
                        {CollectiveKind::kReduceScatter, ReduceOp::kSum},
                        {CollectiveKind::kAllGather, ReduceOp::kSum},
                        {CollectiveKind::kBroadcast, ReduceOp::kSum},
                        {CollectiveKind::kReduce, ReduceOp::kMax}};
  for (int n : {2, 3, 4}) {
    for (const Case& c : cases) {
      for (bool inPlace : {false, true}) {
        for (TeamSimulation mode : {TeamSimulation::kRun, TeamSimulation::kDecline}) {
          SCOPED_TRACE(std::to_string(n) + " ranks, kind " + std::to_string(int(c.kind)) +
                       (inPlace ? " in place" : "") +
                       (mode == TeamSimulation::kRun ? " run" : " declined"));
          CollectiveArgs args;
          args.kind = c.kind;
          args.op = c.op;
          args.count = 301;
          args.root = n - 1;
          const TeamAlgorithms team = c.kind == CollectiveKind::kAllReduce
                                          ? teamBit(Algorithm::kCma)
                                          : teamBit(Algorithm::kBoard);
          std::vector<Schedule> plans = schedulesOf(args, n, team, true);
          std::vector<SimulatedRank> ranks(n);
          const size_t inCount = inputBytes(args, n) / 4, outCount = outputBytes(args, n) / 4;
          std::vector<std::vector<float>> inputs(n, std::vector<float>(inCount));
          for (int r = 0; r < n; ++r) {
            for (size_t i = 0; i < inCount; ++i) inputs[r][i] = inputOf(r, i);
            ranks[r].input.resize(inCount * 4);
            ranks[r].output.assign(outCount * 4, 0xEE);
            std::memcpy(ranks[r].input.data(), inputs[r].data(), inCount * 4);
            if (inPlace) {
              // NCCL's in-place layout (simulator.h): the input is inside the output,
              // or the output inside the input for reduce-scatter.
              if (c.kind == CollectiveKind::kAllGather) {
                std::memcpy(ranks[r].output.data() + r * inCount * 4, inputs[r].data(),
                            inCount * 4);
              } else if (c.kind != CollectiveKind::kReduceScatter) {
                std::memcpy(ranks[r].output.data(), inputs[r].data(), inCount * 4);
              }
            }
          }
          ASSERT_TRUE(simulateSchedules(plans, &ranks, inPlace, nullptr, mode).isOk());
          for (int r = 0; r < n; ++r) {
            const bool rsInPlace = inPlace && c.kind == CollectiveKind::kReduceScatter;
            const float* got = reinterpret_cast<const float*>(
                rsInPlace ? ranks[r].input.data() + r * args.count * 4 : ranks[r].output.data());
            const size_t count = c.kind == CollectiveKind::kAllGather ? outCount : args.count;
            if (c.kind == CollectiveKind::kReduce && r != args.root) continue;
            for (size_t i = 0; i < count; ++i) {
              double want = 0;
              switch (c.kind) {
                case CollectiveKind::kAllGather:
                  want = inputs[i / args.count][i % args.count];
                  break;
                case CollectiveKind::kBroadcast:
                  want = inputs[args.root][i];
                  break;
                case CollectiveKind::kReduce:
                  want = inputs[0][i];
                  for (int q = 1; q < n; ++q) want = std::max<double>(want, inputs[q][i]);
                  break;
                default: {
                  const size_t at = c.kind == CollectiveKind::kReduceScatter ? r * count + i : i;
                  for (int q = 0; q < n; ++q) want += inputs[q][at];
                  if (c.op == ReduceOp::kAvg) want /= n;
                }
              }
              ASSERT_EQ(got[i], static_cast<float>(want)) << "rank " << r << " element " << i;
            }
          }
        }
      }
    }
  }
}

// The team's all-reduce behind a ring sums in the ring's order (core/plan/fold_order.h):
// run or declined (the ring's steps), every rank gets the same bits, with values whose
// rank-order sum differs (checked, so the test can tell the orders apart).
TEST(TeamSimulation, AnAllReduceRunOrDeclinedGivesTheSameBits) {
  for (int n : {3, 4, 5}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
      SCOPED_TRACE(std::to_string(n) + " ranks, " + std::string(reduceOpName(op)));
      CollectiveArgs args;
      args.op = op;
      args.count = 1001;
      std::vector<Schedule> plans = schedulesOf(args, n, teamBit(Algorithm::kCma), true);
      ASSERT_TRUE(plans[0].fold.isRing());
      std::vector<std::vector<uint8_t>> outputs;
      for (TeamSimulation mode : {TeamSimulation::kRun, TeamSimulation::kDecline}) {
        std::vector<SimulatedRank> ranks(n);
        for (int r = 0; r < n; ++r) {
          ranks[r].input.resize(args.count * 4);
          ranks[r].output.assign(args.count * 4, 0xEE);
          for (size_t i = 0; i < args.count; ++i) {
            const float v = testing::roundingValue(r, i);
            std::memcpy(ranks[r].input.data() + 4 * i, &v, 4);
          }
        }
        ASSERT_TRUE(simulateSchedules(plans, &ranks, false, nullptr, mode).isOk());
        for (int r = 1; r < n; ++r) ASSERT_EQ(ranks[r].output, ranks[0].output) << "rank " << r;
        outputs.push_back(ranks[0].output);
      }
      EXPECT_EQ(outputs[0], outputs[1]) << "the team's reference and the ring differ";
      if (op == ReduceOp::kSum) {
        size_t differ = 0;
        for (size_t i = 0; i < args.count; ++i) {
          float sum = testing::roundingValue(0, i);
          for (int r = 1; r < n; ++r) sum += testing::roundingValue(r, i);
          differ += std::memcmp(&sum, outputs[1].data() + 4 * i, 4) != 0 ? 1 : 0;
        }
        EXPECT_GT(differ, 0u) << "the values do not tell the ring's order from rank order";
      }
    }
  }
}

TEST(TeamSimulation, RanksMustAgreeOnTheTeamStepAndADeclineNeedsAFallback) {
  CollectiveArgs args;
  args.count = 16;
  std::vector<Schedule> plans = schedulesOf(args, 2, teamBit(Algorithm::kBoard), false);
  std::vector<Schedule> mixed = plans;
  mixed[1] = schedulesOf(args, 2, teamBit(Algorithm::kCma), true)[1];
  std::vector<SimulatedRank> ranks(2);
  for (SimulatedRank& rank : ranks) rank.input.resize(64), rank.output.resize(64);
  EXPECT_EQ(simulateSchedules(mixed, &ranks, false, nullptr).code(), StatusCode::kMismatch);
  EXPECT_EQ(simulateSchedules(plans, &ranks, false, nullptr, TeamSimulation::kDecline).code(),
            StatusCode::kUnsupported);
  SimulationStats stats;
  ASSERT_TRUE(simulateSchedules(plans, nullptr, false, &stats).isOk());
  EXPECT_EQ(stats.messages, 0u);  // the team moves no message
}

}  // namespace
}  // namespace collie
