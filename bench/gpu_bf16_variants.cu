// Shapes of a bfloat16 two-into-one sum kernel beyond the L2 cache, timed side by side
// (docs/decisions/cuda-reduce-copy-grid.md, "bfloat16 packs"). Standalone (no
// libcollie), one process; each variant writes the same bits as collie16 or is listed
// in "bits_differ" (checked first on random finite inputs, every rounding case among
// them). The variants are bare: no head/tail split per thread, no divisor, unlike
// collie's streamingReduceCopyKernel, so a shape that wins here must be measured again
// inside that kernel (8-byte packs won here and lost there).
//
//   collie16  16 bytes per thread, float-widened sum, rounding in integer arithmetic
//             (the pack size and arithmetic of collie's streamingReduceCopyKernel)
//   cvt16     16 bytes per thread, rounding by the hardware conversion (cvt.rn.bf16x2)
//   hadd16    16 bytes per thread, native bfloat16x2 additions
//   collie8   8 bytes per thread, integer rounding
//   cvt8      8 bytes per thread, hardware conversion
//   collie32  32 bytes per thread (two 16-byte packs), integer rounding
//   f32_16    float32, 16 bytes per thread (the reference shape for float32)
//
// Figures: microseconds per call, best of --reps batches of --iters calls timed on the
// host between two device synchronisations (as bench/gpu_reduce_copy_bench.cc and
// bench/gpu_torch_add.py time theirs), for 64 MiB and 256 MiB per buffer; --rounds
// interleaved rounds, and the median of the rounds per cell. Prints one JSON object;
// without a device: "skipped: no CUDA device", exit 77.
//
// Usage: gpu_bf16_variants [--rounds N] [--iters N] [--reps N]
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

constexpr unsigned kBlock = 128;

__device__ __forceinline__ float widen(uint16_t b) { return __uint_as_float(uint32_t{b} << 16); }

// Round to nearest even in integer arithmetic (kernels/common/half.h's floatToBFloat16).
__device__ __forceinline__ uint16_t narrowInteger(float f) {
  const uint32_t x = __float_as_uint(f);
  const uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  const uint32_t nan = (x >> 16) | 0x0040u;
  const bool isNan = (x & 0x7fffffffu) > 0x7f800000u;
  return static_cast<uint16_t>(isNan ? nan : rounded);
}

// Two bfloat16 sums packed in one word: integer rounding.
__device__ __forceinline__ uint32_t sumPairInteger(uint32_t a, uint32_t b) {
  const uint16_t lo = narrowInteger(widen(a & 0xffffu) + widen(b & 0xffffu));
  const uint16_t hi = narrowInteger(widen(a >> 16) + widen(b >> 16));
  return uint32_t{lo} | (uint32_t{hi} << 16);
}

// The same through the hardware conversion of two floats (round to nearest even).
__device__ __forceinline__ uint32_t sumPairCvt(uint32_t a, uint32_t b) {
  const float lo = widen(a & 0xffffu) + widen(b & 0xffffu);
  const float hi = widen(a >> 16) + widen(b >> 16);
  __nv_bfloat162 r = __floats2bfloat162_rn(lo, hi);
  uint32_t bits;
  memcpy(&bits, &r, 4);
  return bits;
}

__device__ __forceinline__ uint32_t sumPairHadd(uint32_t a, uint32_t b) {
  __nv_bfloat162 x, y;
  memcpy(&x, &a, 4);
  memcpy(&y, &b, 4);
  __nv_bfloat162 r = __hadd2(x, y);
  uint32_t bits;
  memcpy(&bits, &r, 4);
  return bits;
}

enum class Pair { kInteger, kCvt, kHadd };

template <Pair P>
__device__ __forceinline__ uint32_t sumPair(uint32_t a, uint32_t b) {
  if constexpr (P == Pair::kInteger) return sumPairInteger(a, b);
  if constexpr (P == Pair::kCvt) return sumPairCvt(a, b);
  return sumPairHadd(a, b);
}

template <Pair P>
__global__ void bf16x16(const uint4* a, const uint4* b, uint4* c, size_t packs) {
  const size_t t = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= packs) return;
  const uint4 x = a[t], y = b[t];
  c[t] = make_uint4(sumPair<P>(x.x, y.x), sumPair<P>(x.y, y.y), sumPair<P>(x.z, y.z),
                    sumPair<P>(x.w, y.w));
}

template <Pair P>
__global__ void bf16x8(const uint2* a, const uint2* b, uint2* c, size_t packs) {
  const size_t t = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= packs) return;
  const uint2 x = a[t], y = b[t];
  c[t] = make_uint2(sumPair<P>(x.x, y.x), sumPair<P>(x.y, y.y));
}

// Two 16-byte packs per thread, a block's packs apart (coalesced).
__global__ void bf16x32(const uint4* a, const uint4* b, uint4* c, size_t packs) {
  const size_t base = static_cast<size_t>(blockIdx.x) * blockDim.x * 2 + threadIdx.x;
  uint4 x[2], y[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const size_t t = base + i * blockDim.x;
    if (t < packs) {
      x[i] = a[t];
      y[i] = b[t];
    }
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const size_t t = base + i * blockDim.x;
    if (t < packs) {
      c[t] = make_uint4(sumPairInteger(x[i].x, y[i].x), sumPairInteger(x[i].y, y[i].y),
                        sumPairInteger(x[i].z, y[i].z), sumPairInteger(x[i].w, y[i].w));
    }
  }
}

__global__ void f32x16(const float4* a, const float4* b, float4* c, size_t packs) {
  const size_t t = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= packs) return;
  const float4 x = a[t], y = b[t];
  c[t] = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
}

unsigned blocksFor(size_t threads) {
  return static_cast<unsigned>((threads + kBlock - 1) / kBlock);
}

// Launches `kernel` over `packs` packs of type T, `threads` threads in all.
template <typename T>
void launchPacks(void (*kernel)(const T*, const T*, T*, size_t), size_t threads, void* a, void* b,
                 void* c, size_t packs) {
  kernel<<<blocksFor(threads), kBlock>>>(static_cast<const T*>(a), static_cast<const T*>(b),
                                         static_cast<T*>(c), packs);
}

// Launches variant v over `bytes` of each buffer.
bool launch(int v, void* a, void* b, void* c, size_t bytes) {
  const size_t p16 = bytes / 16, p8 = bytes / 8;
  switch (v) {
    case 0:
      launchPacks(bf16x16<Pair::kInteger>, p16, a, b, c, p16);
      break;
    case 1:
      launchPacks(bf16x16<Pair::kCvt>, p16, a, b, c, p16);
      break;
    case 2:
      launchPacks(bf16x16<Pair::kHadd>, p16, a, b, c, p16);
      break;
    case 3:
      launchPacks(bf16x8<Pair::kInteger>, p8, a, b, c, p8);
      break;
    case 4:
      launchPacks(bf16x8<Pair::kCvt>, p8, a, b, c, p8);
      break;
    case 5:
      launchPacks(bf16x32, (p16 + 1) / 2, a, b, c, p16);
      break;
    default:
      launchPacks(f32x16, p16, a, b, c, p16);
  }
  return cudaGetLastError() == cudaSuccess;
}

constexpr const char* kNames[] = {"collie16", "cvt16",    "hadd16", "collie8",
                                  "cvt8",     "collie32", "f32_16"};
constexpr int kVariants = 7;

double bestUs(int v, void* a, void* b, void* c, size_t bytes, int reps, int iters) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    cudaDeviceSynchronize();
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) {
      if (!launch(v, a, b, c, bytes)) return -1;
    }
    cudaDeviceSynchronize();
    const std::chrono::duration<double, std::micro> elapsed =
        std::chrono::steady_clock::now() - start;
    best = std::min(best, elapsed.count() / iters);
  }
  return best;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 3, iters = 20, reps = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--rounds") rounds = std::atoi(argv[i + 1]);
    if (flag == "--iters") iters = std::atoi(argv[i + 1]);
    if (flag == "--reps") reps = std::atoi(argv[i + 1]);
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("skipped: no CUDA device\n");
    return 77;
  }
  const size_t maxBytes = size_t{256} << 20;
  void *a, *b, *c, *d;
  if (cudaMalloc(&a, maxBytes) != cudaSuccess || cudaMalloc(&b, maxBytes) != cudaSuccess ||
      cudaMalloc(&c, maxBytes) != cudaSuccess || cudaMalloc(&d, maxBytes) != cudaSuccess) {
    std::fprintf(stderr, "gpu_bf16_variants: cudaMalloc failed\n");
    return 1;
  }
  // Same bits from every bfloat16 variant: random words (every rounding case, NaNs with
  // payloads excepted: the hardware conversion makes its own NaN) over 4 MiB.
  const size_t checkBytes = size_t{4} << 20;
  const size_t checkElements = checkBytes / sizeof(uint16_t);
  std::vector<uint16_t> host(2 * checkElements);  // input a, then input b
  uint64_t state = 0x9e3779b97f4a7c15ull;
  for (uint16_t& h : host) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    h = static_cast<uint16_t>(state >> 48);
    if ((h & 0x7f80u) == 0x7f80u) h &= 0xbfffu;  // no Inf/NaN exponent: finite inputs
  }
  cudaMemcpy(a, host.data(), checkBytes, cudaMemcpyHostToDevice);
  cudaMemcpy(b, host.data() + checkElements, checkBytes, cudaMemcpyHostToDevice);
  std::vector<uint8_t> want(checkBytes), got(checkBytes);
  launch(0, a, b, d, checkBytes);
  cudaMemcpy(want.data(), d, checkBytes, cudaMemcpyDeviceToHost);
  std::string differing;  // variants whose bits differ from collie16's (still timed)
  for (int v = 1; v < kVariants - 1; ++v) {
    cudaMemset(c, 0xee, checkBytes);
    launch(v, a, b, c, checkBytes);
    cudaMemcpy(got.data(), c, checkBytes, cudaMemcpyDeviceToHost);
    if (got != want) differing += std::string(differing.empty() ? "\"" : ", \"") + kNames[v] + "\"";
  }
  cudaMemset(a, 0, maxBytes);  // zeros for the timing, as the GPU check's benchmarks use
  cudaMemset(b, 0, maxBytes);
  const size_t sizes[] = {size_t{64} << 20, size_t{256} << 20};
  std::vector<double> us[2][kVariants];
  for (int r = 0; r < rounds; ++r) {
    for (int s = 0; s < 2; ++s) {
      for (int v = 0; v < kVariants; ++v) {
        const double t = bestUs(v, a, b, c, sizes[s], reps, iters);
        if (t < 0) {
          std::fprintf(stderr, "gpu_bf16_variants: %s failed: %s\n", kNames[v],
                       cudaGetErrorString(cudaGetLastError()));
          return 1;
        }
        us[s][v].push_back(t);
      }
    }
  }
  cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, 0);
  std::printf(
      "{\"device\": \"%s\", \"rounds\": %d, \"iters\": %d, \"reps\": %d, \"bits_differ\": [%s], "
      "\"rows\": [",
      prop.name, rounds, iters, reps, differing.c_str());
  for (int s = 0; s < 2; ++s) {
    std::printf("%s\n  {\"bytes\": %zu", s ? "," : "", sizes[s]);
    for (int v = 0; v < kVariants; ++v) {
      std::printf(", \"%s_us\": %.3f, \"%s_rounds\": [", kNames[v], median(us[s][v]), kNames[v]);
      for (size_t i = 0; i < us[s][v].size(); ++i) {
        std::printf("%s%.3f", i ? ", " : "", us[s][v][i]);
      }
      std::printf("]");
    }
    std::printf("}");
  }
  std::printf("\n]}\n");
  return 0;
}
