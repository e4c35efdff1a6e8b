// ReduceOp::kPreMulSum over real transports, ranks as threads: all-reduce (in and out of
// place), reduce, reduce-scatter and reduce-scatter-v, each rank with a DIFFERENT factor,
// over shm and tcp at 2-4 ranks with the algorithm forced (ring, tree, chain, oneshot,
// and on shm the team algorithms board and cma) or the tuner's. Inputs and
// factors are small dyadic numbers, so every partial sum is exact in the dtype and every
// reduction order gives the bits of the float64 reference: a factor applied twice, not
// at all or to another rank's data shows. Every rank's output is compared, so results
// are identical on every rank. The flight recorder shows which algorithm ran (a forced
// team algorithm may decline: its fallback then runs, which is fine for this check).
// Bad arguments (no scalar, a scalar with another op) are refused naming the rank.
// COLLIE_TEST_QUICK=1: 3 ranks, ring and the tuner's choice.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <ostream>
#include <string>
#include <vector>

#include "core/common/half.h"
#include "support/quick_matrix.h"
#include "support/rank_threads.h"

namespace collie {
namespace {

using namespace std::chrono_literals;  // NOLINT(build/namespaces)
using testing::makeCommunicators;
using testing::onEveryRank;
using testing::quickMatrix;

struct PremulCase {
  std::string transport;
  int nranks;
  Algorithm algorithm;
};

void PrintTo(const PremulCase& c, std::ostream* os) {
  *os << c.transport << " " << c.nranks << " " << algorithmName(c.algorithm);
}

// Rank r's factor and input element i: multiples of 1/4 and 1/2 with at most 3 bits each,
// so that products and sums of up to 4 ranks are exact even in bfloat16.
double factorOf(int rank) { return 0.5 * (rank + 1) * (rank % 2 == 0 ? 1 : -1); }
double inputOf(int rank, size_t i) {
  return static_cast<double>(static_cast<int>((i * 7 + rank * 3) % 9) - 4) / 4.0;
}

template <typename T>
T to(double v) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    return fromFloat<T>(static_cast<float>(v));
  } else {
    return static_cast<T>(v);
  }
}
template <typename T>
double from(T v) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    return static_cast<double>(toFloat(v));
  } else {
    return static_cast<double>(v);
  }
}

double expected(int n, size_t i) {
  double sum = 0;
  for (int p = 0; p < n; ++p) sum += factorOf(p) * inputOf(p, i);
  return sum;
}

enum class Kind { kAllReduce, kAllReduceInPlace, kReduce, kReduceScatter, kReduceScatterV };
const char* nameOf(Kind k) {
  switch (k) {
    case Kind::kAllReduce:
      return "allreduce";
    case Kind::kAllReduceInPlace:
      return "allreduce in place";
    case Kind::kReduce:
      return "reduce";
    case Kind::kReduceScatter:
      return "reducescatter";
    default:
      return "reducescatterv";
  }
}

class PremulTest : public ::testing::TestWithParam<PremulCase> {
 protected:
  std::vector<std::unique_ptr<Communicator>> make() {
    Options options;
    options.transport = GetParam().transport;
    options.algorithm = GetParam().algorithm;
    options.timeout = 20s;
    return makeCommunicators(GetParam().nranks, options);
  }

  // Runs `kind` with `count` elements per block on every rank; a combination the
  // forced algorithm does not plan (Unsupported/InvalidArgument at submit on every
  // rank) is counted in *skipped instead.
  template <typename T>
  void check(std::vector<std::unique_ptr<Communicator>>& comms, DataType dtype, Kind kind,
             size_t count, int* ran) {
    const int n = GetParam().nranks;
    const int root = n - 1;
    std::vector<int> refused(n, 0);
    onEveryRank(n, [&](int r) {
      const bool scatter = kind == Kind::kReduceScatter || kind == Kind::kReduceScatterV;
      const size_t inCount = scatter ? count * n : count;
      std::vector<T> in(inCount), out(scatter ? count : inCount, to<T>(99.0));
      for (size_t i = 0; i < inCount; ++i) in[i] = to<T>(inputOf(r, i));
      const std::vector<T> original = in;
      const ReduceScalar scalar = scalarOf(factorOf(r), dtype);
      Result<Work> work = Work();
      switch (kind) {
        case Kind::kAllReduce:
          work = comms[r]->allReduce(in.data(), out.data(), count, dtype, ReduceOp::kPreMulSum,
                                     scalar);
          break;
        case Kind::kAllReduceInPlace:
          work =
              comms[r]->allReduce(in.data(), in.data(), count, dtype, ReduceOp::kPreMulSum, scalar);
          break;
        case Kind::kReduce:
          work = comms[r]->reduce(in.data(), out.data(), count, dtype, ReduceOp::kPreMulSum, root,
                                  scalar);
          break;
        case Kind::kReduceScatter:
          work = comms[r]->reduceScatter(in.data(), out.data(), count, dtype, ReduceOp::kPreMulSum,
                                         scalar);
          break;
        case Kind::kReduceScatterV:
          work = comms[r]->reduceScatterV(in.data(), out.data(), std::vector<size_t>(n, count),
                                          dtype, ReduceOp::kPreMulSum, scalar);
          break;
      }
      if (!work.isOk()) {
        ASSERT_TRUE(work.status().code() == StatusCode::kUnsupported ||
                    work.status().code() == StatusCode::kInvalidArgument)
            << work.status().toString();
        refused[r] = 1;
        return;
      }
      Status done = work->wait(30s);
      ASSERT_TRUE(done.isOk()) << "rank " << r << ": " << done.toString();
      const std::vector<T>& result = kind == Kind::kAllReduceInPlace ? in : out;
      if (kind == Kind::kReduce && r != root) {
        for (size_t i = 0; i < count; ++i) {
          ASSERT_EQ(from(out[i]), 99.0) << "rank " << r << " (not root) wrote its recv at " << i;
        }
      } else {
        const size_t first = scatter ? static_cast<size_t>(r) * count : 0;
        for (size_t i = 0; i < count; ++i) {
          ASSERT_EQ(from(result[i]), expected(n, first + i))
              << "rank " << r << " " << nameOf(kind) << " element " << i;
        }
      }
      if (kind != Kind::kAllReduceInPlace) {
        ASSERT_EQ(std::memcmp(in.data(), original.data(), inCount * sizeof(T)), 0)
            << "rank " << r << ": the input changed";
      }
    });
    int refusals = 0;
    for (int r = 0; r < n; ++r) refusals += refused[r];
    ASSERT_TRUE(refusals == 0 || refusals == n) << "only some ranks refused " << nameOf(kind);
    if (refusals == 0) ++*ran;
  }

  // `sizes`: 1 element, 1001, and 40000 (160 KiB of float32: past the inline limit, several
  // chunks) only where `large`.
  template <typename T>
  void checkAll(std::vector<std::unique_ptr<Communicator>>& comms, DataType dtype, bool large,
                int* ran) {
    const std::vector<size_t> counts = quickMatrix() ? std::vector<size_t>{1001}
                                       : large       ? std::vector<size_t>{1, 1001, 40000}
                                                     : std::vector<size_t>{1001};
    for (size_t count : counts) {
      for (Kind kind : {Kind::kAllReduce, Kind::kAllReduceInPlace, Kind::kReduce,
                        Kind::kReduceScatter, Kind::kReduceScatterV}) {
        SCOPED_TRACE(std::string(nameOf(kind)) + " " + std::string(dataTypeName(dtype)) +
                     " count " + std::to_string(count));
        check<T>(comms, dtype, kind, count, ran);
        if (::testing::Test::HasFatalFailure()) return;
      }
    }
  }
};

TEST_P(PremulTest, SumsEachRanksScaledInputExactlyOnce) {
  int ran = 0;
  auto comms = make();
  ASSERT_EQ(comms.size(), static_cast<size_t>(GetParam().nranks));
  checkAll<float>(comms, DataType::kFloat32, true, &ran);
  if (HasFatalFailure()) return;
  if (!quickMatrix()) {
    checkAll<double>(comms, DataType::kFloat64, false, &ran);
    checkAll<BFloat16>(comms, DataType::kBFloat16, false, &ran);
    checkAll<Half>(comms, DataType::kFloat16, false, &ran);
  }
  EXPECT_GT(ran, 0) << "no collective ran with this algorithm";
}

TEST_P(PremulTest, ScalarMustComeWithPremulSumOnly) {
  if (GetParam().nranks != 3 || GetParam().algorithm != Algorithm::kAuto) {
    GTEST_SKIP() << "argument checks run once per transport";
  }
  auto comms = make();
  float x[4] = {};
  Result<Work> none = comms[1]->allReduce(x, x, 4, DataType::kFloat32, ReduceOp::kPreMulSum);
  ASSERT_FALSE(none.isOk());
  EXPECT_EQ(none.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(none.status().message().find("rank 1"), std::string::npos) << none.status().toString();
  EXPECT_NE(none.status().message().find("scalar"), std::string::npos) << none.status().toString();
  Result<Work> extra = comms[2]->reduce(x, x, 4, DataType::kFloat32, ReduceOp::kSum, 0,
                                        scalarOf(2.0, DataType::kFloat32));
  ASSERT_FALSE(extra.isOk());
  EXPECT_EQ(extra.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(extra.status().message().find("rank 2"), std::string::npos)
      << extra.status().toString();
}

std::vector<PremulCase> premulCases() {
  std::vector<PremulCase> cases;
  const std::vector<int> rankCounts =
      quickMatrix() ? std::vector<int>{3} : std::vector<int>{2, 3, 4};
  for (const char* transport : {"shm", "tcp"}) {
    std::vector<Algorithm> algorithms = {Algorithm::kAuto, Algorithm::kRing};
    if (!quickMatrix()) {
      algorithms.insert(algorithms.end(),
                        {Algorithm::kTree, Algorithm::kChain, Algorithm::kOneShot});
      if (std::string(transport) == "shm") {
        // direct runs on registered buffers only (forced, it fails on others):
        // registered_test covers it; premulsum's scaled copy is not registered.
        algorithms.insert(algorithms.end(), {Algorithm::kBoard, Algorithm::kCma});
      }
    }
    for (int n : rankCounts) {
      for (Algorithm a : algorithms) cases.push_back({transport, n, a});
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Premul, PremulTest, ::testing::ValuesIn(premulCases()),
                         [](const ::testing::TestParamInfo<PremulCase>& info) {
                           return info.param.transport + "_" + std::to_string(info.param.nranks) +
                                  "_" + std::string(algorithmName(info.param.algorithm));
                         });

}  // namespace
}  // namespace collie
