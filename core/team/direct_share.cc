#include "core/team/direct_share.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "core/kernel/reduce_backend.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace collie {
namespace {
std::atomic<uint64_t> gDirectShares{0};

void streamingCopy(uint8_t* dst, const uint8_t* src, size_t bytes) {
#if defined(__x86_64__)
  // Plain bytes up to the first 16-byte boundary of dst, streaming stores after it (src
  // is the 64-byte aligned scratch, so only dst's alignment matters for the stores).
  const size_t head = std::min(bytes, (16 - reinterpret_cast<uintptr_t>(dst) % 16) % 16);
  std::memcpy(dst, src, head);
  size_t i = head;
  for (; i + 64 <= bytes; i += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 32));
    const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 48), d);
  }
  std::memcpy(dst + i, src + i, bytes - i);
#else
  std::memcpy(dst, src, bytes);
#endif
}

void streamingFence() {
#if defined(__x86_64__)
  _mm_sfence();
#endif
}
}  // namespace

uint64_t directShareCount() { return gDirectShares.load(std::memory_order_relaxed); }

ShareRange shareRange(size_t count, size_t elementBytes, int nranks, int rank) {
  const size_t unit = 64 / elementBytes;
  const size_t units = (count + unit - 1) / unit;
  return ShareRange{std::min(count, units * static_cast<size_t>(rank) / nranks * unit),
                    std::min(count, units * static_cast<size_t>(rank + 1) / nranks * unit)};
}

void reduceInOrder(uint8_t* dst, const std::vector<const uint8_t*>& sources, size_t elems,
                   DataType dtype, ReduceOp op, uint8_t* scratch) {
  const ReduceBackend& kernels = hostReduceBackend();
  const int n = static_cast<int>(sources.size());
  const int divisor = op == ReduceOp::kAvg ? n : 0;
  if (n == 1) {
    if (divisor > 1) {
      kernels.divide(dst, sources[0], elems, dtype, divisor);
    } else if (dst != sources[0]) {
      std::memcpy(dst, sources[0], elems * dataTypeSize(dtype));
    }
    return;
  }
  if (n == 2) {
    kernels.reduce(dst, sources[0], sources[1], elems, dtype, op, divisor);
    return;
  }
  kernels.reduce(scratch, sources[0], sources[1], elems, dtype, op, 0);
  for (int r = 2; r < n - 1; ++r) {
    kernels.reduce(scratch, scratch, sources[r], elems, dtype, op, 0);
  }
  kernels.reduce(dst, scratch, sources[n - 1], elems, dtype, op, divisor);
}

namespace {
// dst = the ring's fold of elems elements from position `first` (core/plan/fold_order.h):
// each next position's value first, as the ring's reduce steps apply op; rank r's values
// at sources[r] + offset.
void reduceRingOrder(uint8_t* dst, const std::vector<const uint8_t*>& sources, size_t offset,
                     int first, size_t elems, DataType dtype, ReduceOp op, uint8_t* scratch) {
  const ReduceBackend& kernels = hostReduceBackend();
  const int n = static_cast<int>(sources.size());
  const int divisor = op == ReduceOp::kAvg ? n : 0;
  auto at = [&](int k) { return sources[(first + k) % n] + offset; };
  if (n == 2) {
    kernels.reduce(dst, at(1), at(0), elems, dtype, op, divisor);
    return;
  }
  kernels.reduce(scratch, at(1), at(0), elems, dtype, op, 0);
  for (int k = 2; k < n - 1; ++k) kernels.reduce(scratch, at(k), scratch, elems, dtype, op, 0);
  kernels.reduce(dst, at(n - 1), scratch, elems, dtype, op, divisor);
}
}  // namespace

void reduceAsFolded(uint8_t* dst, const std::vector<const uint8_t*>& sources, size_t at,
                    size_t elems, size_t count, const FoldOrder& fold, DataType dtype, ReduceOp op,
                    uint8_t* scratch) {
  const int n = static_cast<int>(sources.size());
  if (!fold.isRing() || n == 1) {
    reduceInOrder(dst, sources, elems, dtype, op, scratch);
    return;
  }
  const size_t es = dataTypeSize(dtype);
  for (size_t done = 0; done < elems;) {
    const FoldRun run = ringFoldRun(fold, count, n, at + done);
    const size_t length = std::min(run.end - at, elems) - done;
    reduceRingOrder(dst + done * es, sources, done * es, run.first, length, dtype, op,
                    scratch == dst ? scratch + done * es : scratch);
    done += length;
  }
}

void directAllReduceShare(const std::vector<const uint8_t*>& inputs,
                          const std::vector<uint8_t*>& outputs, size_t count, DataType dtype,
                          ReduceOp op, const FoldOrder& fold, int rank, uint8_t* scratch,
                          std::vector<const uint8_t*>* tileSources, bool stream) {
  const int n = static_cast<int>(inputs.size());
  const size_t es = dataTypeSize(dtype);
  const ShareRange share = shareRange(count, es, n, rank);
  // Streaming, small tiles keep the reads of the next tile in flight while the last
  // one's stores drain: 2 KiB beat 16 KiB at 4-256 MiB by 3-40% (roofline-shm.md).
  const size_t tile = (stream ? kDirectStreamingTileBytes : kDirectTileBytes) / es;
  gDirectShares.fetch_add(1, std::memory_order_relaxed);
  // Plain stores read each output line before writing it; streaming ones do not, but
  // they evict: they win out of place from 4 MiB and lose at 1 MiB and in place
  // (docs/decisions/roofline-shm.md).
  // Outputs not equally aligned modulo 32 would make the fan-out copy with plain stores;
  // the tiles below stream each output with its own head.
  const bool sameLane =
      n == 2 &&
      (reinterpret_cast<uintptr_t>(outputs[0]) - reinterpret_cast<uintptr_t>(outputs[1])) % 32 == 0;
  if (stream && sameLane) {
    // The whole share in one pass: reduced in registers and streamed into both outputs,
    // as the dual-write bound does (docs/decisions/roofline-shm.md).
    // In the ring's order a segment started by rank f is op(x(f + 1), x(f)); rank order,
    // op(x0, x1), is the whole share as if rank 1 started it.
    for (size_t first = share.begin; first < share.end;) {
      const FoldRun run =
          fold.isRing() ? ringFoldRun(fold, count, n, first) : FoldRun{share.end, 1};
      const size_t end = std::min(run.end, share.end);
      const size_t offset = first * es;
      void* const dsts[2] = {outputs[0] + offset, outputs[1] + offset};
      hostReduceBackend().reduceFanOut(dsts, 2, inputs[(run.first + 1) % 2] + offset,
                                       inputs[run.first] + offset, end - first, dtype, op,
                                       op == ReduceOp::kAvg ? 2 : 0);
      first = end;
    }
    return;
  }
  std::vector<const uint8_t*>& sources = *tileSources;
  sources.resize(n);
  for (size_t first = share.begin; first < share.end; first += tile) {
    const size_t elems = std::min(tile, share.end - first);
    const size_t offset = first * es;
    for (int r = 0; r < n; ++r) sources[r] = inputs[r] + offset;
    reduceAsFolded(scratch, sources, first, elems, count, fold, dtype, op, scratch);
    for (int r = 0; r < n; ++r) {
      if (stream) {
        streamingCopy(outputs[r] + offset, scratch, elems * es);
      } else {
        std::memcpy(outputs[r] + offset, scratch, elems * es);
      }
    }
  }
  if (stream) streamingFence();  // before the meeting that lets the peers read them
}

}  // namespace collie
