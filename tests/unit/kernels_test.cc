// Host reduction kernels (kernels/cpu) against independent references, for every
// backend variant this CPU runs, every dtype and op, odd sizes and every aliasing case,
// with buffers at aligned and misaligned addresses; and the Half/BFloat16 conversions
// against known bit patterns.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "core/common/half.h"
#include "core/kernel/reduce_backend.h"
#include "kernels/cpu/cpu_cache.h"
#include "kernels/cpu/cpu_reduce.h"

namespace collie {
namespace {

constexpr size_t kSizes[] = {0, 1, 3, 15, 16, 17, 1023, 4097};

uint32_t bitsOf(float f) { return __builtin_bit_cast(uint32_t, f); }
float floatOf(uint32_t u) { return __builtin_bit_cast(float, u); }

template <typename T>
constexpr bool kHalfLike = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

template <typename T>
float widen(T x) {
  if constexpr (std::is_same_v<T, Half>) {
    return halfToFloat(x);
  } else {
    return bfloat16ToFloat(x);
  }
}

template <typename T>
T narrow(float f) {
  if constexpr (std::is_same_v<T, Half>) {
    return floatToHalf(f);
  } else {
    return floatToBFloat16(f);
  }
}

// Reference semantics, written independently of kernels/common/ops.h: integers wrap in
// 64-bit unsigned arithmetic truncated to the width; floats compute in their own
// precision; Half/BFloat16 compute in float and round once.
template <typename C>
C refOp(C a, C b, ReduceOp op) {
  switch (op) {
    case ReduceOp::kProd:
      return a * b;
    case ReduceOp::kMin:
      return a < b ? a : b;
    case ReduceOp::kMax:
      return a > b ? a : b;
    default:
      return a + b;
  }
}

template <typename T>
T reference(T a, T b, ReduceOp op, int divisor) {
  const bool avg = op == ReduceOp::kAvg && divisor > 0;
  if constexpr (std::is_integral_v<T>) {
    const uint64_t ua = static_cast<uint64_t>(static_cast<int64_t>(a));
    const uint64_t ub = static_cast<uint64_t>(static_cast<int64_t>(b));
    if (op == ReduceOp::kProd) return static_cast<T>(ua * ub);
    if (op == ReduceOp::kMin) return a < b ? a : b;
    if (op == ReduceOp::kMax) return a > b ? a : b;
    if (op == ReduceOp::kBand) return static_cast<T>(ua & ub);
    if (op == ReduceOp::kBor) return static_cast<T>(ua | ub);
    if (op == ReduceOp::kBxor) return static_cast<T>(ua ^ ub);
    const T sum = static_cast<T>(ua + ub);
    if (!avg) return sum;
    if constexpr (std::is_signed_v<T>) {
      return static_cast<T>(static_cast<int64_t>(sum) / divisor);
    } else {
      return static_cast<T>(static_cast<uint64_t>(sum) / static_cast<uint64_t>(divisor));
    }
  } else if constexpr (kHalfLike<T>) {
    T r = narrow<T>(refOp(widen(a), widen(b), op));
    if (avg) r = narrow<T>(widen(r) / static_cast<float>(divisor));
    return r;
  } else {
    T r = refOp(a, b, op);
    if (avg) r = r / static_cast<T>(divisor);
    return r;
  }
}

template <typename T>
T referenceDivide(T x, int divisor) {
  if (divisor <= 0) return x;
  if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(x / static_cast<T>(divisor));
  } else if constexpr (kHalfLike<T>) {
    return narrow<T>(widen(x) / static_cast<float>(divisor));
  } else {
    return x / static_cast<T>(divisor);
  }
}

// Random values: integers over their whole range (wraparound is exercised); floats in
// a range where a product of two stays meaningful, with a share of exact small values.
template <typename T>
std::vector<T> randomValues(size_t n, std::mt19937_64& rng) {
  std::vector<T> v(n);
  std::uniform_real_distribution<double> real(-8.0, 8.0);
  for (auto& x : v) {
    if constexpr (std::is_integral_v<T>) {
      x = static_cast<T>(rng());
    } else {
      const double d =
          rng() % 8 == 0 ? static_cast<double>(static_cast<int>(rng() % 9) - 4) : real(rng);
      if constexpr (kHalfLike<T>) {
        x = narrow<T>(static_cast<float>(d));
      } else {
        x = static_cast<T>(d);
      }
    }
  }
  return v;
}

template <typename T>
::testing::AssertionResult sameBits(const std::vector<T>& got, const std::vector<T>& want) {
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0) {
      double g, w;
      if constexpr (kHalfLike<T>) {
        g = widen(got[i]);
        w = widen(want[i]);
      } else {
        g = static_cast<double>(got[i]);
        w = static_cast<double>(want[i]);
      }
      return ::testing::AssertionFailure()
             << "element " << i << " of " << want.size() << ": got " << g << ", want " << w;
    }
  }
  return ::testing::AssertionSuccess();
}

enum class Alias { kNone, kDstIsA, kDstIsB, kAll };
const char* aliasName(Alias a) {
  switch (a) {
    case Alias::kNone:
      return "out-of-place";
    case Alias::kDstIsA:
      return "dst==a";
    case Alias::kDstIsB:
      return "dst==b";
    default:
      return "dst==a==b";
  }
}

struct OpCase {
  ReduceOp op;
  int divisor;
};
constexpr OpCase kOpCases[] = {{ReduceOp::kSum, 0},      {ReduceOp::kProd, 0}, {ReduceOp::kMin, 0},
                               {ReduceOp::kMax, 0},      {ReduceOp::kAvg, 0},  {ReduceOp::kAvg, 3},
                               {ReduceOp::kAvg, 4},      {ReduceOp::kSum, 3},  // divisor ignored
                               {ReduceOp::kBand, 0},     {ReduceOp::kBor, 0},  {ReduceOp::kBxor, 0},
                               {ReduceOp::kPreMulSum, 0}};  // reduces like sum

// Where the buffers lie: shifted by dst, a and b bytes from a 16-byte boundary. Shifts
// of 1..7 misalign every multi-byte T: UCX hands over fragments like that, and users may
// pass such buffers. An input that dst aliases lies where dst does.
struct Shifts {
  size_t dst = 0, a = 0, b = 0;
};

std::string shiftsName(Shifts shift) {
  return " shifts dst " + std::to_string(shift.dst) + " a " + std::to_string(shift.a) + " b " +
         std::to_string(shift.b);
}

template <typename T>
void checkReduce(const ReduceBackend& backend, DataType dtype, uint64_t seed, Shifts shift = {}) {
  std::mt19937_64 rng(seed);
  for (const OpCase& oc : kOpCases) {
    if (!isValidFor(oc.op, dtype)) continue;  // bitwise ops: integers only
    for (size_t n : kSizes) {
      for (Alias alias : {Alias::kNone, Alias::kDstIsA, Alias::kDstIsB, Alias::kAll}) {
        SCOPED_TRACE(std::string(backend.name) + " " + std::string(dataTypeName(dtype)) + " " +
                     std::string(reduceOpName(oc.op)) + "/" + std::to_string(oc.divisor) +
                     " n=" + std::to_string(n) + " " + aliasName(alias) + shiftsName(shift));
        std::vector<T> a = randomValues<T>(n, rng);
        std::vector<T> b = alias == Alias::kAll ? a : randomValues<T>(n, rng);
        std::vector<T> want(n);
        for (size_t i = 0; i < n; ++i) want[i] = reference(a[i], b[i], oc.op, oc.divisor);
        // Each buffer's bytes in storage of its own (operator new aligns it to 16); dst
        // starts as garbage that the kernel must overwrite.
        const size_t bytes = n * sizeof(T);
        std::vector<unsigned char> aBytes(bytes + 8), bBytes(bytes + 8), dstBytes(bytes + 8);
        const bool dstIsA = alias == Alias::kDstIsA || alias == Alias::kAll;
        unsigned char* pa = aBytes.data() + (dstIsA ? shift.dst : shift.a);
        unsigned char* pb = bBytes.data() + (alias == Alias::kDstIsB ? shift.dst : shift.b);
        unsigned char* dst = dstBytes.data() + shift.dst;
        if (bytes > 0) {
          std::memcpy(pa, a.data(), bytes);
          std::memcpy(pb, b.data(), bytes);
          const std::vector<T> garbage = randomValues<T>(n, rng);
          std::memcpy(dst, garbage.data(), bytes);
        }
        if (dstIsA) dst = pa;
        if (alias == Alias::kDstIsB) dst = pb;
        if (alias == Alias::kAll) pb = pa;
        backend.reduce(dst, pa, pb, n, dtype, oc.op, oc.divisor);
        std::vector<T> got(n);
        if (bytes > 0) std::memcpy(got.data(), dst, bytes);
        ASSERT_TRUE(sameBits(got, want));
      }
    }
  }
}

template <typename T>
void checkDivide(const ReduceBackend& backend, DataType dtype, uint64_t seed, Shifts shift = {}) {
  std::mt19937_64 rng(seed);
  for (int divisor : {0, 1, 3, 4}) {
    for (size_t n : kSizes) {
      for (bool inPlace : {false, true}) {
        SCOPED_TRACE(std::string(backend.name) + " " + std::string(dataTypeName(dtype)) + " /" +
                     std::to_string(divisor) + " n=" + std::to_string(n) +
                     (inPlace ? " in-place" : " out-of-place") + shiftsName(shift));
        std::vector<T> src = randomValues<T>(n, rng);
        std::vector<T> want(n);
        for (size_t i = 0; i < n; ++i) want[i] = referenceDivide(src[i], divisor);
        const size_t bytes = n * sizeof(T);
        std::vector<unsigned char> srcBytes(bytes + 8), dstBytes(bytes + 8);
        unsigned char* psrc = srcBytes.data() + (inPlace ? shift.dst : shift.a);
        unsigned char* dst = inPlace ? psrc : dstBytes.data() + shift.dst;
        if (bytes > 0) {
          std::memcpy(psrc, src.data(), bytes);
          if (!inPlace) {
            const std::vector<T> garbage = randomValues<T>(n, rng);
            std::memcpy(dst, garbage.data(), bytes);
          }
        }
        backend.divide(dst, psrc, n, dtype, divisor);
        std::vector<T> got(n);
        if (bytes > 0) std::memcpy(got.data(), dst, bytes);
        ASSERT_TRUE(sameBits(got, want));
      }
    }
  }
}

// kPreMulSum's multiply: x * s with the product computed exactly (float64 holds the
// product of two float32, float16 or bfloat16 values exactly) and rounded once to T;
// float64 itself is one IEEE multiply; integers wrap.
template <typename T>
T referenceScale(T x, T s) {
  if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(static_cast<uint64_t>(x) * static_cast<uint64_t>(s));
  } else if constexpr (kHalfLike<T>) {
    return narrow<T>(static_cast<float>(static_cast<double>(widen(x)) * widen(s)));
  } else {
    return static_cast<T>(static_cast<double>(x) * static_cast<double>(s));
  }
}

template <typename T>
void checkScale(const ReduceBackend& backend, DataType dtype, uint64_t seed, Shifts shift = {}) {
  std::mt19937_64 rng(seed);
  for (size_t n : kSizes) {
    for (bool inPlace : {false, true}) {
      SCOPED_TRACE(std::string(backend.name) + " " + std::string(dataTypeName(dtype)) +
                   " scale n=" + std::to_string(n) + (inPlace ? " in-place" : " out-of-place") +
                   shiftsName(shift));
      std::vector<T> src = randomValues<T>(n, rng);
      const T s = randomValues<T>(1, rng)[0];
      std::vector<T> want(n);
      for (size_t i = 0; i < n; ++i) want[i] = referenceScale(src[i], s);
      const size_t bytes = n * sizeof(T);
      // The scalar lies at the b shift: it may be misaligned too.
      std::vector<unsigned char> srcBytes(bytes + 8), dstBytes(bytes + 8), scalarBytes(16);
      std::memcpy(scalarBytes.data() + shift.b, &s, sizeof(T));
      unsigned char* psrc = srcBytes.data() + (inPlace ? shift.dst : shift.a);
      unsigned char* dst = inPlace ? psrc : dstBytes.data() + shift.dst;
      if (bytes > 0) {
        std::memcpy(psrc, src.data(), bytes);
        if (!inPlace) {
          const std::vector<T> garbage = randomValues<T>(n, rng);
          std::memcpy(dst, garbage.data(), bytes);
        }
      }
      backend.scale(dst, psrc, scalarBytes.data() + shift.b, n, dtype);
      std::vector<T> got(n);
      if (bytes > 0) std::memcpy(got.data(), dst, bytes);
      ASSERT_TRUE(sameBits(got, want));
    }
  }
}

// Buffer placements for the any-address tests: misaligned inputs (as UCX's fragments),
// misaligned outputs, and both. The a shift stands for src in divide.
constexpr Shifts kMisalignedShifts[] = {{0, 1, 2}, {0, 0, 1}, {0, 3, 0}, {0, 7, 5},
                                        {1, 0, 0}, {3, 1, 2}, {5, 5, 5}, {2, 0, 4}};

// Calls f.template operator()<T>(dtype) for every DataType.
template <typename F>
void forEachType(F&& f) {
  f.template operator()<int8_t>(DataType::kInt8);
  f.template operator()<uint8_t>(DataType::kUint8);
  f.template operator()<int32_t>(DataType::kInt32);
  f.template operator()<uint32_t>(DataType::kUint32);
  f.template operator()<int64_t>(DataType::kInt64);
  f.template operator()<uint64_t>(DataType::kUint64);
  f.template operator()<Half>(DataType::kFloat16);
  f.template operator()<float>(DataType::kFloat32);
  f.template operator()<double>(DataType::kFloat64);
  f.template operator()<BFloat16>(DataType::kBFloat16);
}

TEST(KernelsTest, VariantsIncludeTheHostBackend) {
  auto variants = cpuReduceBackendVariants();
  ASSERT_FALSE(variants.empty());
  EXPECT_STREQ(variants[0]->name, "cpu-baseline");
  EXPECT_EQ(&hostReduceBackend(), variants.back());
  EXPECT_EQ(&builtinHostReduceBackend(), &cpuReduceBackend());
}

TEST(KernelsTest, ReduceMatchesReferenceForEveryTypeOpSizeAndAliasing) {
  for (const ReduceBackend* backend : cpuReduceBackendVariants()) {
    uint64_t seed = 1;
    forEachType([&]<typename T>(DataType dtype) { checkReduce<T>(*backend, dtype, seed++); });
  }
}

TEST(KernelsTest, BuffersMayLieAtAnyByteAddress) {
  for (const ReduceBackend* backend : cpuReduceBackendVariants()) {
    uint64_t seed = 50;
    forEachType([&]<typename T>(DataType dtype) {
      for (Shifts shift : kMisalignedShifts) {
        checkReduce<T>(*backend, dtype, seed++, shift);
        checkDivide<T>(*backend, dtype, seed++, shift);
        checkScale<T>(*backend, dtype, seed++, shift);
      }
    });
  }
}

// Outputs larger than the last-level cache are streamed out of an L1 block (head up to
// a 32-byte boundary and tail with plain stores): the same bits, with a misaligned dst.
template <typename T>
void checkLargeOutput(const ReduceBackend& backend, DataType dtype, OpCase oc) {
  const size_t llc = lastLevelCacheBytes();
  const size_t bytes = std::clamp<size_t>(llc + llc / 4, 1 << 20, 256 << 20);
  const size_t n = bytes / sizeof(T) + 5;
  SCOPED_TRACE(std::string(backend.name) + " " + std::string(dataTypeName(dtype)) + " " +
               std::string(reduceOpName(oc.op)) + " n=" + std::to_string(n));
  std::mt19937_64 rng(7);
  std::vector<T> a = randomValues<T>(4096, rng), b = randomValues<T>(4096, rng);
  a.resize(n);
  b.resize(n);
  for (size_t i = 4096; i < n; ++i) {  // cheap to fill, still varied
    a[i] = a[i % 4096 ^ (i >> 12) % 4096];
    b[i] = b[(i * 7) % 4096];
  }
  std::vector<T> want(n);
  for (size_t i = 0; i < n; ++i) want[i] = reference(a[i], b[i], oc.op, oc.divisor);
  std::vector<T> out(n + 1);
  backend.reduce(out.data() + 1, a.data(), b.data(), n, dtype, oc.op, oc.divisor);
  ASSERT_TRUE(sameBits(std::vector<T>(out.begin() + 1, out.end()), want));
}

TEST(KernelsTest, LargeOutputsMatchReference) {
  const ReduceBackend& best = cpuReduceBackend();
  checkLargeOutput<float>(best, DataType::kFloat32, {ReduceOp::kSum, 0});
  checkLargeOutput<Half>(best, DataType::kFloat16, {ReduceOp::kAvg, 3});
  checkLargeOutput<int8_t>(best, DataType::kInt8, {ReduceOp::kMax, 0});
}

// reduceFanOut: every output gets reduce()'s bits, for every type and op, with 1-3
// outputs at equal and at different alignments (the streaming path and the copy
// fallback), and sizes from empty to past several lines, heads and tails included.
template <typename T>
void checkFanOut(const ReduceBackend& backend, DataType dtype, uint64_t seed) {
  std::mt19937_64 rng(seed);
  for (const OpCase& oc : kOpCases) {
    if (!isValidFor(oc.op, dtype)) continue;
    for (size_t n : {size_t{0}, size_t{1}, size_t{31}, size_t{64}, size_t{1000}, size_t{4099}}) {
      for (int ndst : {1, 2, 3}) {
        for (size_t shift : {size_t{0}, size_t{32}, sizeof(T), size_t{3}}) {
          for (size_t lead : {size_t{0}, sizeof(T)}) {
            SCOPED_TRACE(std::string(backend.name) + " " + std::string(dataTypeName(dtype)) + " " +
                         std::string(reduceOpName(oc.op)) + "/" + std::to_string(oc.divisor) +
                         " n=" + std::to_string(n) + " outputs " + std::to_string(ndst) +
                         " outputs at " + std::to_string(lead) + " + k x " + std::to_string(shift));
            const std::vector<T> a = randomValues<T>(n, rng), b = randomValues<T>(n, rng);
            std::vector<T> want(n);
            for (size_t i = 0; i < n; ++i) want[i] = reference(a[i], b[i], oc.op, oc.divisor);
            const size_t bytes = n * sizeof(T);
            // Output k lies lead + k * shift bytes past a 64-byte boundary (garbage before).
            std::vector<std::vector<unsigned char>> storage(ndst);
            void* dsts[3] = {};
            for (int k = 0; k < ndst; ++k) {
              storage[k].resize(bytes + 64 * 3);
              const uintptr_t base = reinterpret_cast<uintptr_t>(storage[k].data());
              const uintptr_t aligned = (base + 63) & ~uintptr_t{63};
              dsts[k] = reinterpret_cast<void*>(aligned + lead + k * shift);
              const std::vector<T> garbage = randomValues<T>(n, rng);
              if (bytes > 0) std::memcpy(dsts[k], garbage.data(), bytes);
            }
            backend.reduceFanOut(dsts, ndst, a.data(), b.data(), n, dtype, oc.op, oc.divisor);
            for (int k = 0; k < ndst; ++k) {
              std::vector<T> got(n);
              if (bytes > 0) std::memcpy(got.data(), dsts[k], bytes);
              ASSERT_TRUE(sameBits(got, want)) << "output " << k;
            }
          }
        }
      }
    }
  }
}

TEST(KernelsTest, FanOutWritesReduceBitsIntoEveryOutput) {
  for (const ReduceBackend* backend : cpuReduceBackendVariants()) {
    uint64_t seed = 900;
    forEachType([&]<typename T>(DataType dtype) { checkFanOut<T>(*backend, dtype, seed++); });
  }
}

TEST(KernelsTest, ScaleMatchesReferenceRoundedOnce) {
  for (const ReduceBackend* backend : cpuReduceBackendVariants()) {
    uint64_t seed = 700;
    forEachType([&]<typename T>(DataType dtype) { checkScale<T>(*backend, dtype, seed++); });
  }
}

TEST(KernelsTest, DivideMatchesReference) {
  for (const ReduceBackend* backend : cpuReduceBackendVariants()) {
    uint64_t seed = 100;
    forEachType([&]<typename T>(DataType dtype) { checkDivide<T>(*backend, dtype, seed++); });
  }
}

TEST(KernelsTest, IntegerWraparoundAndTruncation) {
  const ReduceBackend& backend = hostReduceBackend();
  int8_t a[3] = {127, -128, -7};
  int8_t b[3] = {1, -1, 0};
  int8_t d[3];
  backend.reduce(d, a, b, 3, DataType::kInt8, ReduceOp::kSum, 0);
  EXPECT_EQ(d[0], -128);
  EXPECT_EQ(d[1], 127);
  backend.reduce(d, a, b, 3, DataType::kInt8, ReduceOp::kAvg, 2);
  EXPECT_EQ(d[2], -3);  // -7 / 2 truncates toward zero
  int64_t big[1] = {INT64_MAX};
  int64_t two[1] = {2};
  backend.reduce(big, big, two, 1, DataType::kInt64, ReduceOp::kProd, 0);
  EXPECT_EQ(big[0], -2);
}

// Integer division goes through floating division for narrow types: check it exactly
// on every 8-bit value and on 32-bit edges, against plain integer division.
TEST(KernelsTest, IntegerDivideIsExactTruncation) {
  for (const ReduceBackend* backend : cpuReduceBackendVariants()) {
    SCOPED_TRACE(backend->name);
    std::vector<int8_t> s8(256), d8(256);
    std::vector<uint8_t> u8(256), e8(256);
    for (int i = 0; i < 256; ++i) {
      s8[i] = static_cast<int8_t>(i);
      u8[i] = static_cast<uint8_t>(i);
    }
    std::vector<int32_t> s32, d32;
    std::vector<uint32_t> u32, e32;
    for (int64_t base : {int64_t{0}, int64_t{INT32_MAX}, int64_t{INT32_MIN}, int64_t{1} << 24,
                         int64_t{3} * 1000003, int64_t{UINT32_MAX}}) {
      for (int64_t delta = -3; delta <= 3; ++delta) {
        s32.push_back(static_cast<int32_t>(base + delta));
        u32.push_back(static_cast<uint32_t>(base + delta));
      }
    }
    d32.resize(s32.size());
    e32.resize(u32.size());
    for (int divisor : {1, 2, 3, 7, 128, 255, 256, 1000003, INT32_MAX}) {
      backend->divide(d8.data(), s8.data(), 256, DataType::kInt8, divisor);
      backend->divide(e8.data(), u8.data(), 256, DataType::kUint8, divisor);
      for (int i = 0; i < 256; ++i) {
        ASSERT_EQ(d8[i], s8[i] / divisor) << int(s8[i]) << " / " << divisor;
        ASSERT_EQ(e8[i], u8[i] / divisor) << int(u8[i]) << " / " << divisor;
      }
      backend->divide(d32.data(), s32.data(), s32.size(), DataType::kInt32, divisor);
      backend->divide(e32.data(), u32.data(), u32.size(), DataType::kUint32, divisor);
      for (size_t i = 0; i < s32.size(); ++i) {
        ASSERT_EQ(d32[i], s32[i] / divisor) << s32[i] << " / " << divisor;
        ASSERT_EQ(e32[i], u32[i] / static_cast<uint32_t>(divisor)) << u32[i] << " / " << divisor;
      }
    }
  }
}

// Every Half / BFloat16 bit pattern through the kernel: x + (-0.0) and max(x, x) give x
// back for every non-NaN x (subnormals and infinities included), and a quiet NaN for
// NaN. Exercises the vector conversions (F16C or portable) end to end.
template <typename T>
void checkAllPatterns(const ReduceBackend& backend, DataType dtype, uint16_t quietBit) {
  std::vector<T> x(65536), negZero(65536, T{0x8000}), out(65536);
  for (uint32_t i = 0; i < 65536; ++i) x[i] = T{static_cast<uint16_t>(i)};
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
    SCOPED_TRACE(std::string(backend.name) + " " + std::string(reduceOpName(op)));
    backend.reduce(out.data(), x.data(), op == ReduceOp::kSum ? negZero.data() : x.data(), x.size(),
                   dtype, op, 0);
    for (uint32_t i = 0; i < 65536; ++i) {
      const bool isNan = std::isnan(widen(x[i]));
      const uint16_t want = isNan ? static_cast<uint16_t>(i | quietBit) : static_cast<uint16_t>(i);
      ASSERT_EQ(out[i].bits, want) << "input bits 0x" << std::hex << i;
    }
  }
}

TEST(KernelsTest, EveryHalfAndBFloat16PatternSurvivesTheKernels) {
  for (const ReduceBackend* backend : cpuReduceBackendVariants()) {
    checkAllPatterns<Half>(*backend, DataType::kFloat16, 0x0200);
    checkAllPatterns<BFloat16>(*backend, DataType::kBFloat16, 0x0040);
  }
}

// Every Half / BFloat16 pattern x with partners y that make the rounding work: a sum or
// product whose float result has low bits to round (ties to even both ways, carries
// into the exponent, overflow to infinity, subnormal results), on every variant, against
// the definition (one float op, rounded once). A NaN result may carry either payload.
template <typename T>
void checkRoundingOfEveryPattern(DataType dtype, uint16_t quietBit,
                                 std::initializer_list<uint16_t> partners) {
  std::vector<T> x(65536), y(65536), out(65536);
  for (uint32_t i = 0; i < 65536; ++i) x[i] = T{static_cast<uint16_t>(i)};
  for (const ReduceBackend* backend : cpuReduceBackendVariants()) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kProd}) {
      for (uint16_t partner : partners) {
        SCOPED_TRACE(std::string(backend->name) + " " + std::string(reduceOpName(op)) +
                     " partner bits " + std::to_string(partner));
        std::fill(y.begin(), y.end(), T{partner});
        backend->reduce(out.data(), x.data(), y.data(), x.size(), dtype, op, 0);
        for (uint32_t i = 0; i < 65536; ++i) {
          const float fx = widen(x[i]), fy = widen(y[i]);
          const float exact = op == ReduceOp::kSum ? fx + fy : fx * fy;
          if (std::isnan(exact)) {
            ASSERT_TRUE(std::isnan(widen(out[i])) && (out[i].bits & quietBit))
                << "input bits 0x" << std::hex << i;
            continue;
          }
          ASSERT_EQ(out[i].bits, fromFloat<T>(exact).bits) << "input bits 0x" << std::hex << i;
        }
      }
    }
  }
}

TEST(KernelsTest, HalfAndBFloat16RoundEveryPatternAsTheirDefinition) {
  // BFloat16: 1 (ties and carries against every exponent near 0), 1 + 2^-7 (odd last
  // bit), the largest finite (overflow), the smallest normal and subnormal, -3, 2^-8.
  checkRoundingOfEveryPattern<BFloat16>(DataType::kBFloat16, 0x0040,
                                        {0x3f80, 0x3f81, 0x7f7f, 0x0080, 0x0001, 0xc040, 0x3b80});
  // Half: 1, 1 + 2^-10, the largest finite, the smallest normal and subnormal, -3, 2^-11.
  checkRoundingOfEveryPattern<Half>(DataType::kFloat16, 0x0200,
                                    {0x3c00, 0x3c01, 0x7bff, 0x0400, 0x0001, 0xc200, 0x1000});
}

// Half and BFloat16 sum, prod, min and max against their definition (one float op,
// rounded once) on every variant: random bit patterns (NaNs, infinities, signed zeros
// and subnormals among them) and x against -x, every length 0..70 and a long one, out
// of place, in place into either input and at an odd address. The AVX2 kernels handle
// 8 (Half) or 16 (BFloat16) elements a step, so lengths around those matter.
template <typename T>
void checkOpsAgainstDefinition(DataType dtype, uint16_t quietBit) {
  std::mt19937 rng(1234);
  const size_t kLong = 4099;
  std::vector<T> a(kLong + 1), b(kLong + 1);
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = T{static_cast<uint16_t>(rng())};
    b[i] = i % 5 == 0 ? T{static_cast<uint16_t>(a[i].bits ^ 0x8000)}  // x and -x
                      : T{static_cast<uint16_t>(rng())};
  }
  auto definition = [](ReduceOp op, T x, T y) {
    const float fx = toFloat(x), fy = toFloat(y);
    switch (op) {
      case ReduceOp::kProd:
        return fromFloat<T>(fx * fy);
      case ReduceOp::kMin:
        return fromFloat<T>(fx < fy ? fx : fy);
      case ReduceOp::kMax:
        return fromFloat<T>(fx > fy ? fx : fy);
      default:
        return fromFloat<T>(fx + fy);
    }
  };
  std::vector<size_t> lengths;
  for (size_t n = 0; n <= 70; ++n) lengths.push_back(n);
  lengths.push_back(kLong);
  for (const ReduceBackend* backend : cpuReduceBackendVariants()) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax}) {
      SCOPED_TRACE(std::string(backend->name) + " " + std::string(dataTypeName(dtype)) + " " +
                   std::string(reduceOpName(op)));
      for (size_t n : lengths) {
        for (int form = 0; form < 4; ++form) {  // out of place, into a, into b, odd address
          std::vector<T> x(a.begin(), a.begin() + n + 1), y(b.begin(), b.begin() + n + 1);
          std::vector<T> out(n + 1, T{0x1234});
          const T* in1 = x.data();
          const T* in2 = y.data();
          T* dst = form == 1 ? x.data() : form == 2 ? y.data() : out.data();
          std::vector<uint8_t> shifted(2 * n + 3);
          if (form == 3) {  // the first input one byte off its alignment
            std::memcpy(shifted.data() + 1, x.data(), 2 * n);
            in1 = reinterpret_cast<const T*>(shifted.data() + 1);
          }
          backend->reduce(dst, in1, in2, n, dtype, op, 0);
          for (size_t i = 0; i < n; ++i) {
            // Two NaNs: IEEE 754 lets the result carry either payload (and compilers
            // swap the operands of +), so either one, quieted, is right.
            if (std::isnan(toFloat(a[i])) && std::isnan(toFloat(b[i]))) {
              const uint16_t got = dst[i].bits;
              ASSERT_TRUE(got == (a[i].bits | quietBit) || got == (b[i].bits | quietBit))
                  << "n " << n << " element " << i << ": 0x" << std::hex << got;
              continue;
            }
            ASSERT_EQ(dst[i].bits, definition(op, a[i], b[i]).bits)
                << "n " << n << " form " << form << " element " << i << ": 0x" << std::hex
                << a[i].bits << ", 0x" << b[i].bits;
          }
          if (form != 1 && form != 2) {
            ASSERT_EQ(out[n].bits, 0x1234) << "wrote past n " << n;
          }
        }
      }
    }
  }
}

TEST(KernelsTest, HalfAndBFloat16OpsMatchTheirDefinitionOnEveryVariant) {
  checkOpsAgainstDefinition<BFloat16>(DataType::kBFloat16, 0x0040);
  checkOpsAgainstDefinition<Half>(DataType::kFloat16, 0x0200);
}

TEST(HalfTest, FloatToHalfKnownPatterns) {
  struct Case {
    uint32_t in;
    uint16_t out;
  };
  const Case cases[] = {
      {bitsOf(1.0f), 0x3c00},
      {bitsOf(-2.0f), 0xc000},
      {bitsOf(0.0f), 0x0000},
      {bitsOf(-0.0f), 0x8000},
      {bitsOf(65504.0f), 0x7bff},
      {0x477fefffu, 0x7bff},  // just below 65520
      {bitsOf(65520.0f), 0x7c00},
      {bitsOf(1e9f), 0x7c00},
      {bitsOf(-1e9f), 0xfc00},
      {0x7f800000u, 0x7c00},
      {0xff800000u, 0xfc00},
      {bitsOf(0x1p-14f), 0x0400},  // smallest normal
      {bitsOf(0x1p-24f), 0x0001},
      {bitsOf(0x3ffp-24f), 0x03ff},    // subnormals
      {bitsOf(0x1p-25f), 0x0000},      // tie between 0 and 2^-24: even
      {bitsOf(0x1p-25f) + 1, 0x0001},  // just above the tie
      {bitsOf(0x3p-25f), 0x0002},      // tie between 1 and 2 ulps: even
      {bitsOf(-0x1p-26f), 0x8000},
      {0x00000001u, 0x0000},              // float subnormal
      {bitsOf(1.0f + 0x1p-11f), 0x3c00},  // tie, even down
      {bitsOf(1.0f + 0x3p-11f), 0x3c02},  // tie, even up
      {bitsOf(1.0f + 0x1p-11f) + 1, 0x3c01},
      {bitsOf(0x1.ffcp-15f), 0x0400},  // largest subnormal + half ulp rounds up to normal
      {0x7fc00000u, 0x7e00},
      {0xffc00000u, 0xfe00},
      {0x7f800001u, 0x7e00},
      {0x7fa00000u, 0x7f00},  // signalling NaNs quieted
  };
  for (const Case& c : cases) {
    EXPECT_EQ(floatToHalf(floatOf(c.in)).bits, c.out) << "float bits 0x" << std::hex << c.in;
  }
}

TEST(HalfTest, HalfToFloatKnownPatterns) {
  EXPECT_EQ(halfToFloat(Half{0x3c00}), 1.0f);
  EXPECT_EQ(halfToFloat(Half{0x3555}), 0.333251953125f);
  EXPECT_EQ(halfToFloat(Half{0x7bff}), 65504.0f);
  EXPECT_EQ(halfToFloat(Half{0x0001}), 0x1p-24f);
  EXPECT_EQ(halfToFloat(Half{0x03ff}), 0x3ffp-24f);
  EXPECT_EQ(halfToFloat(Half{0x8001}), -0x1p-24f);
  EXPECT_EQ(bitsOf(halfToFloat(Half{0x8000})), 0x80000000u);
  EXPECT_EQ(bitsOf(halfToFloat(Half{0x7c00})), 0x7f800000u);
  EXPECT_EQ(bitsOf(halfToFloat(Half{0xfc00})), 0xff800000u);
  EXPECT_EQ(bitsOf(halfToFloat(Half{0x7e00})), 0x7fc00000u);
  EXPECT_EQ(bitsOf(halfToFloat(Half{0x7c01})), 0x7f802000u);  // payload kept
}

// Exhaustive: every half round-trips, and the float midway between two neighbouring
// halves rounds to the even one, the floats either side of it to the nearer one.
template <typename T>
void checkRoundTripAndTies(uint16_t infBits, uint16_t quietBit) {
  for (uint32_t i = 0; i < 65536; ++i) {
    const T h{static_cast<uint16_t>(i)};
    const float f = widen(h);
    if (std::isnan(f)) {
      EXPECT_EQ(narrow<T>(f).bits, i | quietBit) << std::hex << i;
      continue;
    }
    ASSERT_EQ(narrow<T>(f).bits, i) << std::hex << i;
    if ((i & 0x7fff) >= infBits) continue;
    // The next value up in magnitude; past the largest finite one, the value one ulp
    // beyond it, whose tie with the largest finite must round to infinity.
    const double lo = f;
    const double hi = (i & 0x7fff) == infBits - 1u ? 2 * lo - widen(T{static_cast<uint16_t>(i - 1)})
                                                   : widen(T{static_cast<uint16_t>(i + 1)});
    const float mid = static_cast<float>((lo + hi) / 2);  // exact: needs one more bit
    ASSERT_EQ(static_cast<double>(mid), (lo + hi) / 2);
    const uint16_t even = (i & 1) ? static_cast<uint16_t>(i + 1) : static_cast<uint16_t>(i);
    ASSERT_EQ(narrow<T>(mid).bits, even) << std::hex << i;
    ASSERT_EQ(narrow<T>(std::nextafter(mid, static_cast<float>(lo))).bits, i) << std::hex << i;
    ASSERT_EQ(narrow<T>(std::nextafter(mid, static_cast<float>(hi))).bits, i + 1) << std::hex << i;
  }
}

TEST(HalfTest, ExhaustiveRoundTripAndTiesToEven) {
  checkRoundTripAndTies<Half>(0x7c00, 0x0200);
  checkRoundTripAndTies<BFloat16>(0x7f80, 0x0040);
}

TEST(BFloat16Test, FloatToBFloat16KnownPatterns) {
  struct Case {
    uint32_t in;
    uint16_t out;
  };
  const Case cases[] = {
      {bitsOf(1.0f), 0x3f80}, {bitsOf(-0.0f), 0x8000}, {0x3f808000u, 0x3f80},  // tie, down
      {0x3f818000u, 0x3f82},                                                   // tie, up
      {0x3f808001u, 0x3f81},  {0x7f7fffffu, 0x7f80},  // FLT_MAX rounds to infinity
      {0x7f7f7fffu, 0x7f7f},  {0x7f800000u, 0x7f80},   {0xff800000u, 0xff80},
      {0x00008000u, 0x0000},  // subnormal tie, even
      {0x00018000u, 0x0002},  {0x7fc00000u, 0x7fc0},   {0x7f800001u, 0x7fc0},
      {0xff812345u, 0xffc1},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(floatToBFloat16(floatOf(c.in)).bits, c.out) << "float bits 0x" << std::hex << c.in;
  }
  EXPECT_EQ(bfloat16ToFloat(BFloat16{0x3f80}), 1.0f);
  EXPECT_EQ(bitsOf(bfloat16ToFloat(BFloat16{0x0001})), 0x00010000u);
}

}  // namespace
}  // namespace collie
