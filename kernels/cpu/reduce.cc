// Host reduction kernels: see cpu_reduce.h for the contract.
//
// Layout: the loops every variant shares are in reduce_loops.h; here are the ISA
// variants that compile them into entry points per (type, op): Baseline (default ISA),
// Avx2 (target attribute; the loops are force-inlined into it and vectorised for AVX2,
// plus streaming stores for outputs past the last-level cache), and Avx512 and
// Avx512Fp16 (Avx2 with the Half/BFloat16 register kernels of half_like_avx512.h); the
// tables of function pointers built from them at compile time; the entry points that
// take any alignment; and the choice of the best variant the CPU runs.
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "kernels/cpu/cpu_cache.h"
#include "kernels/cpu/cpu_reduce.h"
#include "kernels/cpu/reduce_loops.h"
#if COLLIE_X86
#include "kernels/cpu/half_like_avx512.h"
#endif

namespace collie {
namespace {

using cpu::AlignedLoad;
using cpu::AnyAddressLoad;
using cpu::divideTyped;
using cpu::inputsAligned;
using cpu::opFor;
using cpu::reduceTyped;
using cpu::ScalarConvert;
using cpu::scaleTyped;
using cpu::TypeOf;
#if COLLIE_X86
using cpu::F16cConvert;
#endif

// The two ISA levels. Everything above is force-inlined into these entry points, so
// each gets its own vectorised copy of the loops.
struct BaselineIsa {
  // No streaming stores: the fan-out entry reduces into one output and copies it.
  template <typename T, ReduceOp kOp>
  static constexpr auto fanOut = nullptr;
  template <typename T, ReduceOp kOp>
  static void reduce(void* dst, const void* a, const void* b, size_t n, int divisor) {
    if (inputsAligned<T>(a, b)) {
      reduceTyped<ScalarConvert, AlignedLoad, T, kOp>(dst, a, b, n, divisor);
    } else {
      reduceTyped<ScalarConvert, AnyAddressLoad, T, kOp>(dst, a, b, n, divisor);
    }
  }
  template <typename T>
  static void divide(void* dst, const void* src, size_t n, int divisor) {
    divideTyped<ScalarConvert, T>(dst, src, n, divisor);
  }
  template <typename T>
  static void scale(void* dst, const void* src, const void* scalar, size_t n) {
    const T s = AnyAddressLoad::at(static_cast<const T*>(scalar), 0);
    if (inputsAligned<T>(src, src)) {
      scaleTyped<ScalarConvert, AlignedLoad, T>(dst, src, s, n);
    } else {
      scaleTyped<ScalarConvert, AnyAddressLoad, T>(dst, src, s, n);
    }
  }
};

#if COLLIE_X86
// ---- Streaming (non-temporal) stores for outputs larger than the last-level cache ----
// Such an output cannot stay cached, so writing it through the cache only costs a
// read-for-ownership per line and evicts the inputs. It is computed a block at a time
// into an L1-resident buffer and streamed out from there; results are the same bits.

constexpr size_t kStreamBlockBytes = 4096;

// Out of place and at least as large as the last-level cache.
bool streamsOutput(const void* dst, const void* a, const void* b, size_t bytes) {
  return bytes >= (1u << 20) && dst != a && dst != b && bytes >= lastLevelCacheBytes();
}

__attribute__((target("avx2"))) void streamBlock(uint8_t* dst, const uint8_t* src) {
  for (size_t i = 0; i < kStreamBlockBytes; i += 32) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i),
                        _mm256_load_si256(reinterpret_cast<const __m256i*>(src + i)));
  }
}

template <typename T, ReduceOp kOp>
__attribute__((target("avx2,f16c"))) void reduceStreaming(void* dstv, const void* av,
                                                          const void* bv, size_t n, int divisor) {
  auto* dst = static_cast<uint8_t*>(dstv);
  const auto* a = static_cast<const uint8_t*>(av);
  const auto* b = static_cast<const uint8_t*>(bv);
  constexpr size_t kPerBlock = kStreamBlockBytes / sizeof(T);
  // Plain stores up to the first 32-byte boundary of dst (elements are T-aligned).
  const size_t headBytes = (32 - (reinterpret_cast<uintptr_t>(dst) & 31)) & 31;
  const size_t head = std::min(n, headBytes / sizeof(T));
  reduceTyped<F16cConvert, AlignedLoad, T, kOp>(dst, a, b, head, divisor);
  size_t done = head;
  alignas(64) uint8_t block[kStreamBlockBytes];
  if ((reinterpret_cast<uintptr_t>(dst + done * sizeof(T)) & 31) == 0) {
    for (; done + kPerBlock <= n; done += kPerBlock) {
      const size_t at = done * sizeof(T);
      reduceTyped<F16cConvert, AlignedLoad, T, kOp>(block, a + at, b + at, kPerBlock, divisor);
      streamBlock(dst + at, block);
    }
    _mm_sfence();
  }
  const size_t at = done * sizeof(T);
  reduceTyped<F16cConvert, AlignedLoad, T, kOp>(dst + at, a + at, b + at, n - done, divisor);
}

// One reduction into several outputs (the fan-out entry): a line at a time into a
// 64-byte stack line that the compiler keeps in registers, streamed into every output.
// Inputs aligned for T, outputs aligned for T and equal modulo 32 (the entry checks).
template <typename T, ReduceOp kOp>
__attribute__((target("avx2,f16c"))) void fanOutStreaming(void* const* dsts, int ndst,
                                                          const uint8_t* a, const uint8_t* b,
                                                          size_t n, int divisor) {
  constexpr size_t kPerLine = 64 / sizeof(T);
  // Plain stores into dsts[0], copied to the others: the head before the first 32-byte
  // boundary and the tail after the last whole line.
  auto out = [&](int k) { return static_cast<uint8_t*>(dsts[k]); };
  auto plain = [&](size_t first, size_t count) {
    const size_t at = first * sizeof(T);
    reduceTyped<F16cConvert, AlignedLoad, T, kOp>(out(0) + at, a + at, b + at, count, divisor);
    for (int k = 1; k < ndst; ++k) std::memcpy(out(k) + at, out(0) + at, count * sizeof(T));
  };
  const size_t headBytes = (32 - (reinterpret_cast<uintptr_t>(dsts[0]) & 31)) & 31;
  size_t done = std::min(n, headBytes / sizeof(T));
  plain(0, done);
  alignas(64) uint8_t line[64];
  for (; done + kPerLine <= n; done += kPerLine) {
    const size_t at = done * sizeof(T);
    reduceTyped<F16cConvert, AlignedLoad, T, kOp>(line, a + at, b + at, kPerLine, divisor);
    const __m256i low = _mm256_load_si256(reinterpret_cast<const __m256i*>(line));
    const __m256i high = _mm256_load_si256(reinterpret_cast<const __m256i*>(line + 32));
    for (int k = 0; k < ndst; ++k) {
      _mm256_stream_si256(reinterpret_cast<__m256i*>(out(k) + at), low);
      _mm256_stream_si256(reinterpret_cast<__m256i*>(out(k) + at + 32), high);
    }
  }
  _mm_sfence();
  plain(done, n - done);
}

struct Avx2Isa {
  template <typename T, ReduceOp kOp>
  __attribute__((target("avx2,f16c"))) static void fanOut(void* const* dsts, int ndst,
                                                          const void* a, const void* b, size_t n,
                                                          int divisor) {
    fanOutStreaming<T, kOp>(dsts, ndst, static_cast<const uint8_t*>(a),
                            static_cast<const uint8_t*>(b), n, divisor);
  }
  template <typename T, ReduceOp kOp>
  __attribute__((target("avx2,f16c"))) static void reduce(void* dst, const void* a, const void* b,
                                                          size_t n, int divisor) {
    if (!inputsAligned<T>(a, b)) {
      reduceTyped<F16cConvert, AnyAddressLoad, T, kOp>(dst, a, b, n, divisor);
    } else if (streamsOutput(dst, a, b, n * sizeof(T))) {
      reduceStreaming<T, kOp>(dst, a, b, n, divisor);
    } else {
      reduceTyped<F16cConvert, AlignedLoad, T, kOp>(dst, a, b, n, divisor);
    }
  }
  template <typename T>
  __attribute__((target("avx2,f16c"))) static void divide(void* dst, const void* src, size_t n,
                                                          int divisor) {
    divideTyped<F16cConvert, T>(dst, src, n, divisor);
  }
  template <typename T>
  __attribute__((target("avx2,f16c"))) static void scale(void* dst, const void* src,
                                                         const void* scalar, size_t n) {
    const T s = AnyAddressLoad::at(static_cast<const T*>(scalar), 0);
    if (inputsAligned<T>(src, src)) {
      scaleTyped<F16cConvert, AlignedLoad, T>(dst, src, s, n);
    } else {
      scaleTyped<F16cConvert, AnyAddressLoad, T>(dst, src, s, n);
    }
  }
};

// Avx2Isa with the Half and BFloat16 register kernels at 512 bits
// (half_like_avx512.h): twice the elements per instruction, and BFloat16 narrowed by
// vcvtne2ps2bf16 instead of about ten integer operations per vector. Everything else,
// and a reduce whose output streams past the cache (memory-bound), is Avx2Isa's.
struct Avx512Isa : Avx2Isa {
  template <typename T, ReduceOp kOp>
  __attribute__((target("avx2,f16c,avx512f,avx512dq,avx512bw,avx512bf16"))) static void reduce(
      void* dst, const void* a, const void* b, size_t n, int divisor) {
    constexpr bool kRegisterKernel =
        kIsHalfLike<T> && (kOp == ReduceOp::kSum || kOp == ReduceOp::kProd ||
                           kOp == ReduceOp::kMin || kOp == ReduceOp::kMax);
    if constexpr (kRegisterKernel) {
      if (!streamsOutput(dst, a, b, n * sizeof(T))) {
        reduceHalfLike<T, kOp>(static_cast<T*>(dst), static_cast<const T*>(a),
                               static_cast<const T*>(b), n);
        return;
      }
    }
    Avx2Isa::reduce<T, kOp>(dst, a, b, n, divisor);
  }

 private:
  template <typename T, ReduceOp kOp, typename Load>
  __attribute__((target("avx2,f16c,avx512f,avx512dq,avx512bw,avx512bf16"))) static void reduceWith(
      T* dst, const T* a, const T* b, size_t n) {
    if constexpr (std::is_same_v<T, BFloat16>) {
      cpu::reduceBFloat16Avx512<kOp, Load>(dst, a, b, n, opFor<float, kOp>());
    } else {
      cpu::reduceHalfAvx512<kOp, Load>(dst, a, b, n, opFor<float, kOp>());
    }
  }
  template <typename T, ReduceOp kOp>
  __attribute__((target("avx2,f16c,avx512f,avx512dq,avx512bw,avx512bf16"))) static void
  reduceHalfLike(T* dst, const T* a, const T* b, size_t n) {
    if (inputsAligned<T>(a, b)) {
      reduceWith<T, kOp, AlignedLoad>(dst, a, b, n);
    } else {
      reduceWith<T, kOp, AnyAddressLoad>(dst, a, b, n);
    }
  }
};

#if COLLIE_AVX512_FP16_BUILDS
// Avx512Isa with Half sum and prod in AVX512-FP16's own arithmetic (half_like_avx512.h),
// for CPUs that have it.
struct Avx512Fp16Isa : Avx512Isa {
  template <typename T, ReduceOp kOp>
  __attribute__((
      target("avx2,f16c,avx512f,avx512dq,avx512bw,avx512vl,avx512bf16,avx512fp16"))) static void
  reduce(void* dst, const void* a, const void* b, size_t n, int divisor) {
    // Not min and max: vminph/vmaxph return a signalling NaN operand as it is, where
    // the definition's widening to float has quieted it (kernels_test's every-pattern
    // check).
    constexpr bool kNative =
        std::is_same_v<T, Half> && (kOp == ReduceOp::kSum || kOp == ReduceOp::kProd);
    if constexpr (kNative) {
      if (!streamsOutput(dst, a, b, n * sizeof(T))) {
        auto* out = static_cast<Half*>(dst);
        const auto* x = static_cast<const Half*>(a);
        const auto* y = static_cast<const Half*>(b);
        if (inputsAligned<T>(a, b)) {
          cpu::reduceHalfAvx512Fp16<kOp, AlignedLoad>(out, x, y, n, opFor<float, kOp>());
        } else {
          cpu::reduceHalfAvx512Fp16<kOp, AnyAddressLoad>(out, x, y, n, opFor<float, kOp>());
        }
        return;
      }
    }
    Avx512Isa::reduce<T, kOp>(dst, a, b, n, divisor);
  }
};
#endif  // COLLIE_AVX512_FP16_BUILDS
#endif  // COLLIE_X86

// ---- Dispatch tables ----------------------------------------------------------------

using ReduceFn = void (*)(void*, const void*, const void*, size_t, int);
using DivideFn = void (*)(void*, const void*, size_t, int);
using ScaleFn = void (*)(void*, const void*, const void*, size_t);
using FanOutFn = void (*)(void* const*, int, const void*, const void*, size_t, int);

struct Table {
  std::array<std::array<ReduceFn, kNumReduceOps>, kNumDataTypes> reduce{};
  std::array<std::array<FanOutFn, kNumReduceOps>, kNumDataTypes> fanOut{};
  std::array<DivideFn, kNumDataTypes> divide{};
  std::array<ScaleFn, kNumDataTypes> scale{};
};

// Table entry kI: dtype kI / kNumReduceOps, op kI % kNumReduceOps (both enums count
// from 0), and whether the op is defined on the dtype (not bitwise ops on floating types).
template <size_t kI>
struct EntryOf {
  using T = typename TypeOf<static_cast<DataType>(kI / kNumReduceOps)>::type;
  static constexpr auto kOp = static_cast<ReduceOp>(kI % kNumReduceOps);
  static constexpr bool kDefined = !(isBitwise(kOp) && !std::is_integral_v<T>);
};

// The kernel of one (dtype, op), or nullptr where the op is not defined.
template <typename Isa, size_t kI>
constexpr ReduceFn entryFor() {
  using E = EntryOf<kI>;
  if constexpr (E::kDefined) return &Isa::template reduce<typename E::T, E::kOp>;
  return nullptr;
}

// The streaming fan-out of one (dtype, op), or nullptr (not defined, or the ISA has none).
template <typename Isa, size_t kI>
constexpr FanOutFn fanOutFor() {
  using E = EntryOf<kI>;
  if constexpr (E::kDefined) return Isa::template fanOut<typename E::T, E::kOp>;
  return nullptr;
}

template <typename Isa, size_t... kI>
constexpr Table makeTable(std::index_sequence<kI...>) {
  // Entry kI is dtype kI / kNumReduceOps, op kI % kNumReduceOps (both enums count from 0).
  Table t;
  ((t.reduce[kI / kNumReduceOps][kI % kNumReduceOps] = entryFor<Isa, kI>()), ...);
  ((t.fanOut[kI / kNumReduceOps][kI % kNumReduceOps] = fanOutFor<Isa, kI>()), ...);
  return t;
}

template <typename Isa, size_t... kI>
constexpr Table withDivide(Table t, std::index_sequence<kI...>) {
  ((t.divide[kI] = &Isa::template divide<typename TypeOf<static_cast<DataType>(kI)>::type>), ...);
  ((t.scale[kI] = &Isa::template scale<typename TypeOf<static_cast<DataType>(kI)>::type>), ...);
  return t;
}

template <typename Isa>
constexpr Table kTable =
    withDivide<Isa>(makeTable<Isa>(std::make_index_sequence<kNumDataTypes * kNumReduceOps>()),
                    std::make_index_sequence<kNumDataTypes>());

[[noreturn]] void invalidCall(const char* what, unsigned dtype, unsigned op) {
  std::fprintf(stderr, "collie: BUG: host reduce kernel called with %s (dtype %u, op %u)\n", what,
               dtype, op);
  std::abort();
}

// ---- Entry points -------------------------------------------------------------------
// The typed loops store only to addresses aligned for T. A dst that is not (a user buffer
// at an odd address: NCCL accepts those too) is computed a block at a time into an
// aligned buffer on the stack and copied out; exact aliasing stays safe because each
// block of the inputs is read before that block of dst is written. Such buffers are rare,
// so this path is built for correctness, not speed.
constexpr size_t kMisalignedDstBlockBytes = 4096;

// Each DataType's element size, known here at compile time (no call per kernel call).
template <size_t... kI>
constexpr std::array<size_t, kNumDataTypes> elementSizes(std::index_sequence<kI...>) {
  return {sizeof(typename TypeOf<static_cast<DataType>(kI)>::type)...};
}
constexpr std::array<size_t, kNumDataTypes> kElementSize =
    elementSizes(std::make_index_sequence<kNumDataTypes>());

// An address aligned to the element size (a power of two) is aligned for the type
// (sizeof is a multiple of alignof).
bool alignedFor(const void* p, size_t elementSize) {
  return (reinterpret_cast<uintptr_t>(p) & (elementSize - 1)) == 0;
}

// Writes `count` elements of `elementSize` bytes to dst a block at a time:
// fill(block, at, n) computes the n elements that start at byte `at` into the aligned
// block, which is then copied to dst + at.
template <typename Fill>
void throughAlignedBlocks(void* dst, size_t count, size_t elementSize, Fill fill) {
  alignas(64) uint8_t block[kMisalignedDstBlockBytes];
  const size_t perBlock = sizeof(block) / elementSize;
  for (size_t done = 0; done < count; done += perBlock) {
    const size_t n = std::min(perBlock, count - done);
    const size_t at = done * elementSize;
    fill(block, at, n);
    std::memcpy(static_cast<uint8_t*>(dst) + at, block, n * elementSize);
  }
}

template <typename Isa>
void reduceEntry(void* dst, const void* a, const void* b, size_t count, DataType dtype, ReduceOp op,
                 int divisor) {
  const unsigned d = static_cast<unsigned>(dtype);
  const unsigned o = static_cast<unsigned>(op);
  if (d >= kNumDataTypes || o >= kNumReduceOps) invalidCall("an invalid dtype or op", d, o);
  if (count == 0) return;
  const ReduceFn reduce = kTable<Isa>.reduce[d][o];
  if (reduce == nullptr) invalidCall("a bitwise op on a floating dtype", d, o);
  const size_t size = kElementSize[d];
  if (alignedFor(dst, size)) return reduce(dst, a, b, count, divisor);
  // An input that dst aliases is misaligned too: the kernel reads it as any other input.
  throughAlignedBlocks(dst, count, size, [&](uint8_t* block, size_t at, size_t n) {
    reduce(block, static_cast<const uint8_t*>(a) + at, static_cast<const uint8_t*>(b) + at, n,
           divisor);
  });
}

template <typename Isa>
void divideEntry(void* dst, const void* src, size_t count, DataType dtype, int divisor) {
  const unsigned d = static_cast<unsigned>(dtype);
  if (d >= kNumDataTypes) invalidCall("an invalid dtype", d, 0);
  if (count == 0) return;
  const DivideFn divide = kTable<Isa>.divide[d];
  const size_t size = kElementSize[d];
  if (alignedFor(dst, size) && alignedFor(src, size)) return divide(dst, src, count, divisor);
  // divide reads src aligned, so src's block is copied in first and divided in place.
  throughAlignedBlocks(dst, count, size, [&](uint8_t* block, size_t at, size_t n) {
    std::memcpy(block, static_cast<const uint8_t*>(src) + at, n * size);
    divide(block, block, n, divisor);
  });
}

template <typename Isa>
void scaleEntry(void* dst, const void* src, const void* scalar, size_t count, DataType dtype) {
  const unsigned d = static_cast<unsigned>(dtype);
  if (d >= kNumDataTypes) invalidCall("an invalid dtype", d, 0);
  if (count == 0) return;
  const ScaleFn scale = kTable<Isa>.scale[d];
  const size_t size = kElementSize[d];
  if (alignedFor(dst, size)) return scale(dst, src, scalar, count);
  throughAlignedBlocks(dst, count, size, [&](uint8_t* block, size_t at, size_t n) {
    scale(block, static_cast<const uint8_t*>(src) + at, scalar, n);
  });
}

template <typename Isa>
void reduceFanOutEntry(void* const* dsts, int ndst, const void* a, const void* b, size_t count,
                       DataType dtype, ReduceOp op, int divisor) {
  const unsigned d = static_cast<unsigned>(dtype);
  const unsigned o = static_cast<unsigned>(op);
  if (d >= kNumDataTypes || o >= kNumReduceOps) invalidCall("an invalid dtype or op", d, o);
  if (count == 0 || ndst <= 0) return;
  const size_t size = kElementSize[d];
  const FanOutFn fanOut = kTable<Isa>.fanOut[d][o];
  const uintptr_t lane = reinterpret_cast<uintptr_t>(dsts[0]) & 31;
  bool streams =
      fanOut != nullptr && alignedFor(a, size) && alignedFor(b, size) && alignedFor(dsts[0], size);
  for (int k = 1; k < ndst && streams; ++k) {
    streams = (reinterpret_cast<uintptr_t>(dsts[k]) & 31) == lane;
  }
  if (streams) return fanOut(dsts, ndst, a, b, count, divisor);
  reduceEntry<Isa>(dsts[0], a, b, count, dtype, op, divisor);
  for (int k = 1; k < ndst; ++k) std::memcpy(dsts[k], dsts[0], count * size);
}

constexpr ReduceBackend kBaselineBackend{"cpu-baseline", &reduceEntry<BaselineIsa>,
                                         &divideEntry<BaselineIsa>, &scaleEntry<BaselineIsa>,
                                         &reduceFanOutEntry<BaselineIsa>};
#if COLLIE_X86
constexpr ReduceBackend kAvx2Backend{"cpu-avx2", &reduceEntry<Avx2Isa>, &divideEntry<Avx2Isa>,
                                     &scaleEntry<Avx2Isa>, &reduceFanOutEntry<Avx2Isa>};
constexpr ReduceBackend kAvx512Backend{"cpu-avx512", &reduceEntry<Avx512Isa>,
                                       &divideEntry<Avx512Isa>, &scaleEntry<Avx512Isa>,
                                       &reduceFanOutEntry<Avx512Isa>};
#if COLLIE_AVX512_FP16_BUILDS
constexpr ReduceBackend kAvx512Fp16Backend{"cpu-avx512fp16", &reduceEntry<Avx512Fp16Isa>,
                                           &divideEntry<Avx512Fp16Isa>, &scaleEntry<Avx512Fp16Isa>,
                                           &reduceFanOutEntry<Avx512Fp16Isa>};
#endif

bool cpuHasAvx2F16c() {
  // avx2 through the compiler (it also checks that the OS saves ymm state); f16c
  // through cpuid leaf 1, since clang's __builtin_cpu_supports does not know it.
  __builtin_cpu_init();
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
  return __builtin_cpu_supports("avx2") && f16c;
}

// AVX512F, DQ and BW, and AVX512_BF16 (vcvtneps2bf16); the compiler checks that the OS saves
// the zmm and mask state.
bool cpuHasAvx512Bf16() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512bf16");
}

#if COLLIE_AVX512_FP16_BUILDS
// AVX512_FP16 through cpuid leaf 7 (EDX bit 23): clang 14's __builtin_cpu_supports does
// not know it. The OS's zmm state is cpuHasAvx512Bf16's check, asked first.
bool cpuHasAvx512Fp16() {
  __builtin_cpu_init();
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool fp16 = __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) && (edx & (1u << 23)) != 0;
  return __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") && fp16;
}
#endif
#endif  // COLLIE_X86

struct Variants {
  std::array<const ReduceBackend*, 4> list{};
  size_t size = 0;
};

const Variants& variants() {
  static const Variants v = [] {
    Variants out;
    out.list[out.size++] = &kBaselineBackend;
#if COLLIE_X86
    if (cpuHasAvx2F16c()) {
      out.list[out.size++] = &kAvx2Backend;
      if (cpuHasAvx512Bf16()) {
        out.list[out.size++] = &kAvx512Backend;
#if COLLIE_AVX512_FP16_BUILDS
        if (cpuHasAvx512Fp16()) out.list[out.size++] = &kAvx512Fp16Backend;
#endif
      }
    }
#endif
    return out;
  }();
  return v;
}

}  // namespace

const ReduceBackend& cpuReduceBackend() {
  const Variants& v = variants();
  return *v.list[v.size - 1];
}

std::span<const ReduceBackend* const> cpuReduceBackendVariants() {
  const Variants& v = variants();
  return {v.list.data(), v.size};
}

}  // namespace collie
