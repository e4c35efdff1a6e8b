// AlgorithmSpec: everything collie knows about one schedule algorithm, in one place.
//
// An algorithm (ring, tree, chain, oneshot, hier, pairwise, linear) is one subclass in
// a file of its own (core/plan/<name>_spec.cc), registered in the AlgorithmRegistry. It
// says which collectives it implements and on which communicators it runs, predicts its
// time from the cost model, and plans one rank's steps. The tuner
// (core/tune/tuner.h: its candidates, their order and margins, their predictions), the
// planner (core/plan/schedule.h: buildSchedule, streamSchedule), the simulator, `collie
// sim`, `collie info --tuning` and the checks of a forced algorithm read the registry;
// none of them names a schedule algorithm. Adding one is a spec file and its tests: a
// test registers a toy algorithm that the tuner then chooses, the planner plans and the
// simulator checks (tests/unit/algorithm_spec_test.cc).
//
// The team algorithms (board, direct, cma; core/plan/<name>_spec.cc too) are specs
// whose isTeam() is true: a transport that connects every rank runs them in a team step
// (core/plan/team_step.h), so they plan no steps, and their cost comes from the team's
// offer (CostQuery::team). The tuner weighs them against the schedule it chose, by the
// team's rules (core/tune/tuner.h), not as schedule candidates.
//
// What stays with the planner, whatever the algorithm: the team step, the copy of a
// one-rank all-reduce, reduce-scatter or all-gather, the root check and the root
// agreement of broadcast and reduce, point-to-point and the barrier (no algorithm
// choice), and planning in ring positions over several hosts.
//
// Thread safety: a spec is immutable and its methods are pure. The registry's add() and
// its readers may be called from any thread; readers take no lock. Specs are never
// removed, so pointers stay valid for the life of the process.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "collie/status.h"
#include "collie/types.h"
#include "core/plan/cost_model.h"
#include "core/plan/generator.h"
#include "core/plan/schedule.h"

namespace collie {

// The communicator an algorithm would run on.
struct CommShape {
  int nranks = 1;
  int nhosts = 1;
  int localSize = 0;  // ranks on each host when all have as many, else 0
  bool twoLevel() const { return nhosts > 1 && localSize > 1; }
};

// The collectives an algorithm implements: bit 1 << CollectiveKind.
using CollectiveKinds = uint32_t;
inline constexpr unsigned kCollectiveKindSlots = 16;  // every CollectiveKind value is below
// Every kind for which `test(kind)` holds, e.g. kindsWhere(isExchange).
template <typename Test>
constexpr CollectiveKinds kindsWhere(Test test) {
  CollectiveKinds kinds = 0;
  for (unsigned k = 0; k < kCollectiveKindSlots; ++k) {
    if (test(static_cast<CollectiveKind>(k))) kinds |= CollectiveKinds{1} << k;
  }
  return kinds;
}

// The kinds listed, e.g. kindsOf({CollectiveKind::kBroadcast, CollectiveKind::kReduce}).
constexpr CollectiveKinds kindsOf(std::initializer_list<CollectiveKind> list) {
  CollectiveKinds kinds = 0;
  for (CollectiveKind kind : list) kinds |= CollectiveKinds{1} << static_cast<unsigned>(kind);
  return kinds;
}

// What an algorithm is, fixed when its spec is made: read as data (no virtual call) by
// the tuner, the planner and the team's checks for every collective they decide.
struct AlgorithmIdentity {
  Algorithm id = Algorithm::kAuto;
  const char* name = "";      // as COLLIE_ALGO and --algo name it for the built-in ones
  CollectiveKinds kinds = 0;  // the collectives it implements at all
  bool team = false;          // a team algorithm (see above): its id is isTeamAlgorithm's
};

class AlgorithmSpec {
 public:
  explicit AlgorithmSpec(const AlgorithmIdentity& identity) : identity_(identity) {}
  virtual ~AlgorithmSpec() = default;

  Algorithm id() const { return identity_.id; }
  const char* name() const { return identity_.name; }
  // Whether it implements `kind` at all. A forced algorithm that does not is ignored
  // for that collective (the tuner's choice runs).
  bool implements(CollectiveKind kind) const {
    return static_cast<unsigned>(kind) < kCollectiveKindSlots &&
           (identity_.kinds >> static_cast<unsigned>(kind) & 1) != 0;
  }
  bool isTeam() const { return identity_.team; }

  // Whether it runs `kind` on `shape` when forced (oneshot: 2 ranks; hier: two levels);
  // else the tuner's choice runs. Only asked when implements(kind).
  virtual bool runsOn(CollectiveKind kind, const CommShape& shape) const {
    (void)kind, (void)shape;
    return true;
  }
  // Whether the tuner weighs it for `kind` of `bytes` on `shape` when nothing is
  // forced. Only asked when implements(kind).
  virtual bool offeredFor(CollectiveKind kind, size_t bytes, const CommShape& shape) const {
    (void)bytes;
    return runsOn(kind, shape);
  }
  // Whether it is the robust default for `kind`: the tuner's first candidate, which
  // another replaces only when predicted margin() faster (core/tune/tuner.h). One spec
  // per kind; the barrier and point-to-point count as ring's.
  virtual bool robustDefaultFor(CollectiveKind kind) const {
    (void)kind;
    return false;
  }
  // How much faster than the best candidate so far the tuner must predict it.
  virtual double margin() const { return kRobustMargin; }
  // The bytes a channel must carry for one more channel to be weighed, with chunks of
  // `chunkBytes`; 0: one channel always (one message each way).
  virtual size_t bytesPerChannel(CollectiveKind kind, size_t chunkBytes) const {
    (void)kind;
    return chunkBytes;
  }

  // Predicted microseconds of `query` (query.kind implemented, query.nranks > 1; a team
  // algorithm's with query.team set). An algorithm with an inter-host stage sets
  // *hostTree when that stage is a tree.
  virtual double predict(const CostQuery& query, bool* hostTree) const = 0;

  // Plans this rank's steps of `args` into `schedule`, whose channels exist and whose
  // algorithm is id() (it may set another it delegates to). Arguments the algorithm
  // cannot take fail Unsupported or InvalidArgument. Called with params.nranks > 1 for
  // the all-reduce, reduce-scatter and all-gather kinds (one rank is the planner's copy).
  virtual Status plan(const CollectiveArgs& args, const PlanParams& params, size_t chunkElems,
                      Schedule* schedule) const = 0;

  // Whether its steps for `args` are generated while they run (no step list is built):
  // then stream() gives channel `channel`'s steps and *scratchBytes the scratch each
  // channel needs. Asked with params.nranks > 1, no team step, valid block counts.
  virtual bool streams(const CollectiveArgs& args, const PlanParams& params) const {
    (void)args, (void)params;
    return false;
  }
  virtual Generator<Step> stream(const CollectiveArgs& args, const PlanParams& params,
                                 size_t chunkElems, int channel) const;
  virtual size_t streamScratchBytes(const CollectiveArgs& args, size_t chunkElems) const {
    (void)args, (void)chunkElems;
    return 0;
  }

 private:
  const AlgorithmIdentity identity_;
};

class AlgorithmRegistry {
 public:
  // At most this many specs (the built-in ones and a few of tests').
  static constexpr size_t kMaxSpecs = 32;

  // The process's registry, with the built-in specs (registered on first use).
  static AlgorithmRegistry& instance() {
    static AlgorithmRegistry* const registry = makeWithBuiltins();
    return *registry;
  }

  // Adds `spec`. InvalidArgument (nothing added) when its id or name is taken, its id is
  // kAuto, or its id and isTeam() disagree (isTeamAlgorithm).
  Status add(std::unique_ptr<const AlgorithmSpec> spec);
  // Every spec in registration order (which breaks the tuner's ties). Lock-free: the
  // tuner reads it for every collective it decides.
  std::span<const AlgorithmSpec* const> all() const {
    return {specs_.data(), count_.load(std::memory_order_acquire)};
  }
  // The spec of `id`, or null (kAuto, an unknown id).
  const AlgorithmSpec* find(Algorithm id) const {
    return byId_[static_cast<uint8_t>(id)].load(std::memory_order_acquire);
  }
  const AlgorithmSpec* find(std::string_view name) const;
  // The robust default for `kind`: its spec's robustDefaultFor, else ring's.
  const AlgorithmSpec& robustDefault(CollectiveKind kind) const;
  // `id`'s spec when it is a schedule algorithm implementing `kind`, else
  // robustDefault(kind): what "the schedule for this kind" means for a caller that may
  // pass kAuto, a team algorithm or one that does not apply.
  const AlgorithmSpec& resolve(Algorithm id, CollectiveKind kind) const;
  // The spec of forced algorithm `id` when it is a schedule algorithm that implements
  // `kind` and runs on `shape`; null otherwise, and then the tuner's choice (or, without
  // a tuner, the robust default) runs: COLLIE_ALGO's rule for collectives that lack it.
  const AlgorithmSpec* forcedSchedule(Algorithm id, CollectiveKind kind,
                                      const CommShape& shape) const;
  // "ring, hier" (every schedule spec implementing `kind`, registration order).
  std::string namesImplementing(CollectiveKind kind) const;

 private:
  AlgorithmRegistry() = default;
  static AlgorithmRegistry* makeWithBuiltins();
  std::mutex mutex_;                                     // serialises add()
  std::array<const AlgorithmSpec*, kMaxSpecs> specs_{};  // [0, count_) published
  std::atomic<size_t> count_{0};
  // find() and robustDefault() in one load: the tuner asks them several times for every
  // collective it decides. Rewritten by add(). robustDefault_ has a slot per
  // CollectiveKind value.
  std::array<std::atomic<const AlgorithmSpec*>, 256> byId_{};
  std::array<std::atomic<const AlgorithmSpec*>, kCollectiveKindSlots> robustDefault_{};
};

// Defined by the built-in specs' files (core/plan/builtin_algorithms.cc): the specs in
// the order the tuner weighs them.
void registerBuiltinAlgorithms(AlgorithmRegistry& registry);

// The name of `id`: its spec's, else algorithmName(id) (kAuto, the team algorithms).
std::string algorithmSpecName(Algorithm id);

}  // namespace collie
