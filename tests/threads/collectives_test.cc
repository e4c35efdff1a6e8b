// Every collective over real transports with ranks as threads: transport x nranks,
// and inside each, counts x dtypes x ops x in-place/out-of-place. Each rank checks
// its bytes against the exact expected values; all ranks' outputs of an all-reduce
// must be bitwise identical.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <string>
#include <utility>

#include "support/quick_matrix.h"
#include "support/rank_threads.h"
#include "support/reference.h"

namespace collie {
namespace {

using testing::expectedReduction;
using testing::makeInput;

constexpr size_t kLargeCount = (1 << 20) + 3;

// COLLIE_TEST_QUICK=1 (sanitizer runs) shrinks the matrix: 1..4 ranks, fewer small
// counts and the large count for every third dtype only; under TSan also one op per
// dtype (testing::sampledOp, as above 4 ranks everywhere) and the large count for two
// dtypes.
std::vector<int> rankCounts() {
  return testing::quickMatrix() ? std::vector<int>{1, 2, 3, 4}
                                : std::vector<int>{1, 2, 3, 4, 5, 6, 7, 8};
}

std::vector<size_t> smallCounts() {
  return testing::quickMatrix() ? std::vector<size_t>{0, 7, 1023}
                                : std::vector<size_t>{0, 1, 7, 1023};
}

using testing::Failures;

std::string describe(CollectiveKind kind, DataType dtype, ReduceOp op, size_t count, bool inPlace,
                     int rank) {
  return std::string(collectiveName(kind)) + " " + std::string(dataTypeName(dtype)) + " " +
         std::string(reduceOpName(op)) + " count=" + std::to_string(count) +
         (inPlace ? " in-place" : " out-of-place") + " rank " + std::to_string(rank);
}

// A buffer's bytes placed `shift` bytes past a 16-byte boundary. With shift 0 the
// vector itself is used: copying large buffers in and out made the TSan run 1.7x slower.
class ShiftedBytes {
 public:
  ShiftedBytes(std::vector<uint8_t> bytes, size_t shift) : shift_(shift) {
    if (shift == 0) {
      storage_ = std::move(bytes);  // operator new aligns it to 16
    } else {
      storage_.resize(bytes.size() + shift);
      std::copy(bytes.begin(), bytes.end(), storage_.begin() + shift);
    }
  }
  uint8_t* data() { return storage_.data() + shift_; }
  // The bytes, given back.
  std::vector<uint8_t> release() && {
    if (shift_ == 0) return std::move(storage_);
    return {storage_.begin() + shift_, storage_.end()};
  }

 private:
  std::vector<uint8_t> storage_;
  size_t shift_;
};

// Runs one collective on this rank and checks its result. The send buffer lies
// `inShift` bytes and the receive buffer `outShift` bytes past a 16-byte boundary.
void runAndCheck(Communicator& comm, CollectiveKind kind, DataType dtype, ReduceOp op, size_t count,
                 bool inPlace, Failures* failures, size_t inShift = 0, size_t outShift = 0) {
  const int n = comm.size();
  const int r = comm.rank();
  const size_t es = dataTypeSize(dtype);
  const int root = n > 1 ? 1 : 0;
  std::vector<uint8_t> input, output, expected;
  std::function<Result<Work>(uint8_t * in, uint8_t * out)> launch;
  switch (kind) {
    case CollectiveKind::kAllReduce: {
      input = makeInput(dtype, op, r, count);
      output.assign(count * es, 0xEE);
      if (inPlace) output = input;
      launch = [&](uint8_t* in, uint8_t* out) {
        return comm.allReduce(inPlace ? out : in, out, count, dtype, op);
      };
      expected = expectedReduction(dtype, op, n, 0, count);
      break;
    }
    case CollectiveKind::kReduceScatter: {
      input = makeInput(dtype, op, r, count * n);
      output.assign(count * es, 0xEE);
      launch = [&](uint8_t* in, uint8_t* out) {
        return comm.reduceScatter(in, inPlace ? in + r * count * es : out, count, dtype, op);
      };
      expected = expectedReduction(dtype, op, n, r * count, count);
      break;
    }
    case CollectiveKind::kAllGather: {
      // Rank r contributes elements [r * count, (r + 1) * count) of one sequence.
      input = makeInput(dtype, op, 0, count, r * count);
      output.assign(count * n * es, 0xEE);
      if (inPlace) std::copy(input.begin(), input.end(), output.begin() + r * count * es);
      launch = [&](uint8_t* in, uint8_t* out) {
        return comm.allGather(inPlace ? out + r * count * es : in, out, count, dtype);
      };
      expected = makeInput(dtype, op, 0, count * n);
      break;
    }
    case CollectiveKind::kBroadcast: {
      input = makeInput(dtype, op, r, count);
      output.assign(count * es, 0xEE);
      if (inPlace) output = input;
      launch = [&](uint8_t* in, uint8_t* out) {
        return comm.broadcast(inPlace ? out : in, out, count, dtype, root);
      };
      expected = makeInput(dtype, op, root, count);
      break;
    }
    case CollectiveKind::kReduce: {
      input = makeInput(dtype, op, r, count);
      output.assign(count * es, 0xEE);
      if (inPlace) output = input;
      launch = [&](uint8_t* in, uint8_t* out) {
        return comm.reduce(inPlace ? out : in, out, count, dtype, op, root);
      };
      expected = r == root ? expectedReduction(dtype, op, n, 0, count) : output;
      break;
    }
    default:
      return failures->add("runAndCheck: unsupported kind");
  }
  std::string what = describe(kind, dtype, op, count, inPlace, r);
  if (inShift != 0 || outShift != 0) {
    what += " shifts " + std::to_string(inShift) + "/" + std::to_string(outShift);
  }
  ShiftedBytes in(std::move(input), inShift), out(std::move(output), outShift);
  Result<Work> work = launch(in.data(), out.data());
  if (!work.isOk()) return failures->add(what + ": " + work.status().toString());
  Status status = work->wait(std::chrono::minutes(2));
  if (!status.isOk()) return failures->add(what + ": " + status.toString());
  input = std::move(in).release();
  output = std::move(out).release();
  const std::vector<uint8_t>& actual =
      (kind == CollectiveKind::kReduceScatter && inPlace)
          ? std::vector<uint8_t>(input.begin() + r * count * es,
                                 input.begin() + (r + 1) * count * es)
          : output;
  if (kind == CollectiveKind::kReduce && r != root) return;  // untouched, checked implicitly
  if (actual != expected) {
    size_t first = 0;
    while (first < actual.size() && actual[first] == expected[first]) ++first;
    failures->add(what + ": wrong bytes from element " + std::to_string(first / es));
  }
}

struct Params {
  std::string transport;
  int nranks;
};

class CollectivesTest : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

// "shm-ring" is shm with the one-shot board disabled, so that small collectives also
// take the ring/chain schedules over shm FIFOs.
std::vector<std::unique_ptr<Communicator>> makeComms(const std::string& transport, int nranks,
                                                     Options options) {
  const bool ringOnly = transport == "shm-ring";
  options.transport = ringOnly ? "shm" : transport;
  if (ringOnly) options.config["COLLIE_SHM_ONESHOT_MAX"] = "0";
  return testing::makeCommunicators(nranks, options);
}

// The collectives runAndCheck checks.
constexpr CollectiveKind kCheckedKinds[] = {
    CollectiveKind::kAllReduce, CollectiveKind::kReduceScatter, CollectiveKind::kAllGather,
    CollectiveKind::kBroadcast, CollectiveKind::kReduce};

// The communicators of the checking tests: every wait gets 60 s.
Options patientOptions() {
  Options options;
  options.timeout = std::chrono::seconds(60);
  return options;
}

TEST_P(CollectivesTest, EveryCollectiveDtypeOpAndCount) {
  const std::string transport = std::get<0>(GetParam());
  const int nranks = std::get<1>(GetParam());
  auto comms = makeComms(transport, nranks, patientOptions());
  ASSERT_EQ(comms.size(), static_cast<size_t>(nranks));
  Failures failures;
  testing::onEveryRank(nranks, [&](int r) {
    Communicator& comm = *comms[r];
    for (CollectiveKind kind : kCheckedKinds) {
      const bool reduces = kind == CollectiveKind::kAllReduce ||
                           kind == CollectiveKind::kReduceScatter ||
                           kind == CollectiveKind::kReduce;
      for (int d = 0; d < kNumDataTypes; ++d) {
        const DataType dtype = static_cast<DataType>(d);
        for (int o = 0; o < (reduces ? kNumReduceOps : 1); ++o) {
          if (reduces && !testing::sampledOp(d, o, nranks)) continue;
          const ReduceOp op = static_cast<ReduceOp>(o);
          for (size_t count : smallCounts()) {
            for (bool inPlace : {false, true}) {
              runAndCheck(comm, kind, dtype, op, count, inPlace, &failures);
            }
          }
        }
        // The large count once per dtype, cycling through the ops.
        if (testing::quickMatrix() && d % 3 != 0) continue;
        // Under TSan (a large collective takes ~1 s there) int8 and bfloat16 only.
        if (testing::kThreadSanitized && d % 9 != 0) continue;
        ReduceOp op = reduces ? static_cast<ReduceOp>(d % kNumReduceOps) : ReduceOp::kSum;
        // Bitwise ops: integers only; premulsum needs a scalar (premul_test covers it).
        if (!isValidFor(op, dtype) || op == ReduceOp::kPreMulSum) op = ReduceOp::kSum;
        runAndCheck(comm, kind, dtype, op, kLargeCount, d % 2 == 0, &failures);
      }
    }
  });
  for (const std::string& message : failures.messages) ADD_FAILURE() << message;
}

// Counts for the misaligned-buffer test: 1023 float64 elements span two of the kernels'
// 4 KiB blocks; 65537 (many blocks, several chunks per rank) is left to unsanitized runs,
// where it takes milliseconds (under TSan the test took 90 s with it).
std::vector<size_t> misalignedCounts() {
  return testing::quickMatrix() ? std::vector<size_t>{7, 1023}
                                : std::vector<size_t>{7, 1023, 65537};
}

// User buffers at addresses misaligned for their dtype (NCCL accepts them too): every
// collective gives the same bytes as with aligned ones, in and out of place.
TEST_P(CollectivesTest, BuffersMisalignedForTheirDtype) {
  const std::string transport = std::get<0>(GetParam());
  const int nranks = std::get<1>(GetParam());
  auto comms = makeComms(transport, nranks, patientOptions());
  ASSERT_EQ(comms.size(), static_cast<size_t>(nranks));
  Failures failures;
  const DataType dtypes[] = {DataType::kFloat16, DataType::kFloat32, DataType::kFloat64,
                             DataType::kInt64};
  testing::onEveryRank(nranks, [&](int r) {
    for (CollectiveKind kind : kCheckedKinds) {
      for (size_t d = 0; d < std::size(dtypes); ++d) {
        // Odd shifts misalign every multi-byte dtype; the ops cycle with the dtype.
        const size_t inShift = 1 + 2 * d, outShift = (inShift * 5) % 8;
        ReduceOp op = static_cast<ReduceOp>((d + static_cast<size_t>(kind)) % kNumReduceOps);
        if (!isValidFor(op, dtypes[d]) || op == ReduceOp::kPreMulSum) op = ReduceOp::kSum;
        for (size_t count : misalignedCounts()) {
          for (bool inPlace : {false, true}) {
            runAndCheck(*comms[r], kind, dtypes[d], op, count, inPlace, &failures, inShift,
                        outShift);
          }
        }
      }
    }
  });
  for (const std::string& message : failures.messages) ADD_FAILURE() << message;
}

TEST_P(CollectivesTest, AllReduceOfRandomFloatsIsBitwiseIdenticalOnEveryRank) {
  const std::string transport = std::get<0>(GetParam());
  const int nranks = std::get<1>(GetParam());
  auto comms = makeComms(transport, nranks, Options{});
  ASSERT_EQ(comms.size(), static_cast<size_t>(nranks));
  const size_t count = 300001;
  std::vector<std::vector<float>> outputs(nranks, std::vector<float>(count));
  std::vector<std::vector<double>> inputs(nranks, std::vector<double>(count));
  testing::onEveryRank(nranks, [&](int r) {
    std::mt19937 rng(1234 + r);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<float> input(count);
    for (size_t i = 0; i < count; ++i) inputs[r][i] = input[i] = dist(rng);
    auto work = comms[r]->allReduce(input.data(), outputs[r].data(), count, DataType::kFloat32,
                                    ReduceOp::kSum);
    ASSERT_TRUE(work.isOk()) << work.status().toString();
    ASSERT_TRUE(work->wait().isOk());
  });
  for (int r = 1; r < nranks; ++r) {
    ASSERT_EQ(0, std::memcmp(outputs[0].data(), outputs[r].data(), count * sizeof(float)))
        << "rank " << r << " differs from rank 0";
  }
  for (size_t i = 0; i < count; ++i) {
    double reference = 0;
    for (int r = 0; r < nranks; ++r) reference += inputs[r][i];
    ASSERT_NEAR(outputs[0][i], reference, 1e-5 * nranks) << "element " << i;
  }
}

TEST_P(CollectivesTest, PointToPointAndBarrier) {
  const std::string transport = std::get<0>(GetParam());
  const int nranks = std::get<1>(GetParam());
  if (nranks < 2) GTEST_SKIP() << "needs two ranks";
  auto comms = makeComms(transport, nranks, Options{});
  ASSERT_EQ(comms.size(), static_cast<size_t>(nranks));
  testing::onEveryRank(nranks, [&](int r) {
    // Every rank sends to the next and receives from the previous one.
    const size_t count = 100003;
    std::vector<int32_t> out(count), in(count, -1);
    for (size_t i = 0; i < count; ++i) out[i] = static_cast<int32_t>(r * 1000003 + i);
    int next = (r + 1) % nranks, prev = (r + nranks - 1) % nranks;
    auto sent = comms[r]->send(out.data(), count, DataType::kInt32, next);
    auto received = comms[r]->recv(in.data(), count, DataType::kInt32, prev);
    ASSERT_TRUE(sent.isOk() && received.isOk());
    ASSERT_TRUE(sent->wait().isOk());
    ASSERT_TRUE(received->wait().isOk());
    for (size_t i = 0; i < count; ++i) {
      ASSERT_EQ(in[i], static_cast<int32_t>(prev * 1000003 + i)) << "rank " << r;
    }
    for (int i = 0; i < 3; ++i) {
      auto barrier = comms[r]->barrier();
      ASSERT_TRUE(barrier.isOk());
      ASSERT_TRUE(barrier->wait().isOk());
    }
  });
}

std::string name(const ::testing::TestParamInfo<std::tuple<std::string, int>>& info) {
  std::string transport = std::get<0>(info.param);
  std::replace(transport.begin(), transport.end(), '-', '_');
  return transport + "_" + std::to_string(std::get<1>(info.param)) + "ranks";
}

INSTANTIATE_TEST_SUITE_P(Transports, CollectivesTest,
                         ::testing::Combine(::testing::Values("shm", "shm-ring", "tcp"),
                                            ::testing::ValuesIn(rankCounts())),
                         name);

}  // namespace
}  // namespace collie
