// Checks of the step kernels of kernels/cuda, shared by the emulation test (the kernel
// sources compiled by the host compiler, tests/emulation/cuda_kernels_emulation_test.cc)
// and the GPU test (the same kernels on a device, tests/gpu/gpu_collectives_test.cc):
// every kernel x dtype x op x size x pointer offsets, each result compared bit for bit
// with the host backend (kernels/cpu) applied as a left fold in source order, which is
// the kernels' exactness contract; guard bytes around every output catch stray writes.
//
// A check lays its buffers out in a host KernelArena and hands one kernel handle, whose
// pointers point into the arena, to a KernelLauncher. The emulation launcher runs the
// kernel on the arena itself; the GPU launcher copies the arena to a device mirror,
// moves the handle's pointers by the same distance, runs the kernel and copies the
// arena back. Offsets within the arena are kept modulo 256, so pointer alignment (what
// the kernels' fast paths depend on) is the same on both sides.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "collie/types.h"
#include "core/common/half.h"
#include "core/kernel/reduce_backend.h"
#include "kernels/cuda/device_handles.h"

namespace collie::testing {

inline constexpr DataType kKernelTypes[] = {
    DataType::kInt8,    DataType::kUint8,   DataType::kInt32,   DataType::kUint32,
    DataType::kInt64,   DataType::kUint64,  DataType::kFloat16, DataType::kFloat32,
    DataType::kFloat64, DataType::kBFloat16};
// Every op; the matrices skip the bitwise ones on floating types (isValidFor).
// kPreMulSum reduces as sum in every kernel (its factor is applied before the steps).
inline constexpr ReduceOp kKernelOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin,
                                          ReduceOp::kMax, ReduceOp::kAvg,  ReduceOp::kBand,
                                          ReduceOp::kBor, ReduceOp::kBxor, ReduceOp::kPreMulSum};
// Empty, one element, around one 16-byte vector, and an odd count past many vectors.
inline constexpr size_t kKernelSizes[] = {0, 1, 15, 16, 17, 4099};

inline constexpr unsigned char kGuardByte = 0xA5;

// Host memory for one check: buffers at a chosen offset past a 256-byte boundary, each
// with at least 64 guard bytes before and after.
class KernelArena {
 public:
  // Room for `nbuffers` buffers of at most `bytes` each.
  KernelArena(int nbuffers, size_t bytes)
      : storage_(static_cast<size_t>(nbuffers) * (bytes + 512) + 256, kGuardByte) {
    auto address = reinterpret_cast<uintptr_t>(storage_.data());
    base_ = storage_.data() + (256 - address % 256) % 256;
    capacity_ = storage_.size() - static_cast<size_t>(base_ - storage_.data());
  }
  KernelArena(const KernelArena&) = delete;
  KernelArena& operator=(const KernelArena&) = delete;

  // A buffer of `bytes` starting `offset` (< 64) bytes past a 256-byte boundary.
  unsigned char* take(size_t bytes, size_t offset) {
    const size_t at = used_ + 64 + offset % 64;
    used_ = (at + bytes + 64 + 255) / 256 * 256;
    if (used_ > capacity_) {
      ADD_FAILURE() << "KernelArena too small";
      std::abort();
    }
    return base_ + at;
  }
  unsigned char* base() { return base_; }
  size_t used() const { return used_; }  // bytes from base() that hold buffers

 private:
  std::vector<unsigned char> storage_;
  unsigned char* base_ = nullptr;
  size_t capacity_ = 0;
  size_t used_ = 0;
};

// Runs one kernel whose handle's pointers point into `arena`; returns once the results
// are in the arena. Failures are reported through gtest (ADD_FAILURE / FAIL).
class KernelLauncher {
 public:
  virtual ~KernelLauncher() = default;
  virtual void reduceCopy(KernelArena& arena, const cuda::ReduceCopyArgs& args, DataType dtype,
                          ReduceOp op) = 0;
  virtual void ringReduceStep(KernelArena& arena, const DeviceReduceStep& step, DataType dtype,
                              ReduceOp op) = 0;
  virtual void ringCopyStep(KernelArena& arena, const DeviceCopyStep& step) = 0;
  virtual void treeReduce(KernelArena& arena, const cuda::TreeReduceStep& step, DataType dtype,
                          ReduceOp op) = 0;
  virtual void treeBroadcast(KernelArena& arena, const cuda::TreeBroadcastStep& step) = 0;
  virtual void scale(KernelArena& arena, const DeviceScaleStep& args, DataType dtype) = 0;
};

inline std::string kernelLabel(DataType dtype, ReduceOp op, size_t count) {
  return std::string(dataTypeName(dtype)) + "/" + std::string(reduceOpName(op)) +
         "/n=" + std::to_string(count);
}

// Random elements that are finite in every type (floats in [-4, 4]). Past a prime
// number of elements the random block repeats, so that multi-MiB buffers cost little
// to fill (the kernels see no pattern in it).
inline void fillRandom(std::mt19937_64& rng, DataType dtype, void* out, size_t count) {
  constexpr size_t kTile = 65521;
  const size_t es = dataTypeSize(dtype);
  auto* bytes = static_cast<unsigned char*>(out);
  if (count > kTile) {
    fillRandom(rng, dtype, out, kTile);
    for (size_t done = kTile; done < count; done += std::min(done, count - done)) {
      std::memcpy(bytes + done * es, bytes, std::min(done, count - done) * es);
    }
    return;
  }
  std::uniform_real_distribution<double> real(-4.0, 4.0);
  for (size_t i = 0; i < count; ++i) {
    unsigned char* p = bytes + i * es;
    if (dtype == DataType::kFloat32) {
      float f = static_cast<float>(real(rng));
      std::memcpy(p, &f, 4);
    } else if (dtype == DataType::kFloat64) {
      double d = real(rng);
      std::memcpy(p, &d, 8);
    } else if (dtype == DataType::kFloat16) {
      Half h = floatToHalf(static_cast<float>(real(rng)));
      std::memcpy(p, &h, 2);
    } else if (dtype == DataType::kBFloat16) {
      BFloat16 b = floatToBFloat16(static_cast<float>(real(rng)));
      std::memcpy(p, &b, 2);
    } else {
      uint64_t v = rng();
      std::memcpy(p, &v, es);
    }
  }
}

// The expected fold of `srcs` with the host backend: ((s0 op s1) op s2) ..., divided.
inline std::vector<unsigned char> hostFold(const std::vector<const void*>& srcs, size_t count,
                                           DataType dtype, ReduceOp op, int divisor) {
  const ReduceBackend& host = hostReduceBackend();
  const size_t bytes = count * dataTypeSize(dtype);
  std::vector<unsigned char> acc(bytes);
  if (bytes > 0) std::memcpy(acc.data(), srcs[0], bytes);
  for (size_t s = 1; s < srcs.size(); ++s) {
    const bool last = s + 1 == srcs.size();
    host.reduce(acc.data(), acc.data(), srcs[s], count, dtype, op, last ? divisor : 0);
  }
  if (srcs.size() == 1 && divisor > 0) host.divide(acc.data(), acc.data(), count, dtype, divisor);
  return acc;
}

// One reduce-copy with nsrcs sources and ndsts destinations at the given byte offsets
// (buffer i at offsets[i % size]); checks every destination and the guards around it.
inline void checkReduceCopy(KernelLauncher& launcher, std::mt19937_64& rng, DataType dtype,
                            ReduceOp op, size_t count, int nsrcs, int ndsts,
                            const std::vector<size_t>& offsets) {
  SCOPED_TRACE(kernelLabel(dtype, op, count) + " srcs=" + std::to_string(nsrcs) +
               " dsts=" + std::to_string(ndsts) + " offset0=" + std::to_string(offsets[0]));
  const size_t bytes = count * dataTypeSize(dtype);
  KernelArena arena(nsrcs + ndsts, bytes);
  std::vector<unsigned char*> buffers;
  for (int i = 0; i < nsrcs + ndsts; ++i) {
    buffers.push_back(arena.take(bytes, offsets[i % offsets.size()]));
  }
  cuda::ReduceCopyArgs args;
  std::vector<const void*> srcs;
  for (int s = 0; s < nsrcs; ++s) {
    fillRandom(rng, dtype, buffers[s], count);
    args.srcs[s] = buffers[s];
    srcs.push_back(buffers[s]);
  }
  for (int d = 0; d < ndsts; ++d) args.dsts[d] = buffers[nsrcs + d];
  args.nsrcs = nsrcs;
  args.ndsts = ndsts;
  args.count = count;
  args.divisor = op == ReduceOp::kAvg ? nsrcs : 0;
  std::vector<unsigned char> expected = hostFold(srcs, count, dtype, op, args.divisor);
  launcher.reduceCopy(arena, args, dtype, op);
  for (int d = 0; d < ndsts; ++d) {
    unsigned char* out = buffers[nsrcs + d];
    ASSERT_EQ(0, std::memcmp(out, expected.data(), bytes)) << "destination " << d;
    ASSERT_EQ(out[-1], kGuardByte) << "wrote before destination " << d;
    ASSERT_EQ(out[bytes], kGuardByte) << "wrote past destination " << d;
  }
}

// PREMUL_SUM's multiply: dst = src x factor, against the host backend's scale, with the
// source and destination at their own offsets (in place when they are the same).
inline void checkScale(KernelLauncher& launcher, std::mt19937_64& rng, DataType dtype, size_t count,
                       size_t srcOffset, size_t dstOffset, bool inPlace) {
  SCOPED_TRACE(std::string(dataTypeName(dtype)) + "/scale/n=" + std::to_string(count) +
               " offsets " + std::to_string(srcOffset) + "," + std::to_string(dstOffset) +
               (inPlace ? " in place" : ""));
  const size_t es = dataTypeSize(dtype);
  const size_t bytes = count * es;
  KernelArena arena(2, bytes);
  unsigned char* src = arena.take(bytes, srcOffset);
  unsigned char* dst = inPlace ? src : arena.take(bytes, dstOffset);
  fillRandom(rng, dtype, src, count);
  unsigned char factor[8] = {};
  fillRandom(rng, dtype, factor, 1);
  std::vector<unsigned char> expected(bytes);
  hostReduceBackend().scale(expected.data(), src, factor, count, dtype);
  DeviceScaleStep args;
  args.src = src;
  args.dst = dst;
  args.count = count;
  std::memcpy(&args.factor, factor, sizeof(args.factor));
  launcher.scale(arena, args, dtype);
  ASSERT_EQ(0, std::memcmp(dst, expected.data(), bytes));
  ASSERT_EQ(dst[-1], kGuardByte) << "wrote before the destination";
  ASSERT_EQ(dst[bytes], kGuardByte) << "wrote past the destination";
}

// Every dtype x size, congruent, misaligned by an element, byte-misaligned, in place.
inline void scaleMatrix(KernelLauncher& launcher, std::span<const size_t> sizes) {
  std::mt19937_64 rng(29);
  for (DataType dtype : kKernelTypes) {
    const size_t es = dataTypeSize(dtype);
    for (size_t count : sizes) {
      checkScale(launcher, rng, dtype, count, 0, 0, false);
      checkScale(launcher, rng, dtype, count, es, 3 * es, false);
      checkScale(launcher, rng, dtype, count, 1, 6, false);
      checkScale(launcher, rng, dtype, count, es, es, true);
    }
  }
}

// A ring reduce-scatter step (local op incoming -> out and the next rank's slot), then
// a ring all-gather step forwarding its result.
inline void checkRingSteps(KernelLauncher& launcher, std::mt19937_64& rng, DataType dtype,
                           ReduceOp op, size_t count, size_t offset, size_t peerOffset) {
  const size_t bytes = count * dataTypeSize(dtype);
  SCOPED_TRACE(kernelLabel(dtype, op, count) + " offset=" + std::to_string(offset) +
               " peerOffset=" + std::to_string(peerOffset));
  KernelArena arena(6, bytes);
  unsigned char* local = arena.take(bytes, offset);
  unsigned char* incoming = arena.take(bytes, offset);
  unsigned char* out = arena.take(bytes, offset);
  unsigned char* peerOut = arena.take(bytes, peerOffset);
  unsigned char* gathered = arena.take(bytes, (offset + 3) % 16);
  unsigned char* forwarded = arena.take(bytes, offset);
  fillRandom(rng, dtype, local, count);
  fillRandom(rng, dtype, incoming, count);
  DeviceReduceStep step;
  step.local = local;
  step.incoming = incoming;
  step.out = out;
  step.peerOut = peerOut;
  step.count = count;
  step.divisor = op == ReduceOp::kAvg ? 2 : 0;
  std::vector<unsigned char> expected = hostFold({local, incoming}, count, dtype, op, step.divisor);
  launcher.ringReduceStep(arena, step, dtype, op);
  ASSERT_EQ(0, std::memcmp(out, expected.data(), bytes));
  ASSERT_EQ(0, std::memcmp(peerOut, expected.data(), bytes));
  ASSERT_EQ(peerOut[bytes], kGuardByte);

  DeviceCopyStep copy;
  copy.src = out;
  copy.out = gathered;
  copy.peerOut = forwarded;
  copy.bytes = bytes;
  launcher.ringCopyStep(arena, copy);
  ASSERT_EQ(0, std::memcmp(gathered, expected.data(), bytes));
  ASSERT_EQ(0, std::memcmp(forwarded, expected.data(), bytes));
  ASSERT_EQ(gathered[bytes], kGuardByte);
}

// Tree reduce of the local data and `nchildren` (0..2) children's, then a tree
// broadcast of the result, in place, to that many children.
inline void checkTreeSteps(KernelLauncher& launcher, std::mt19937_64& rng, DataType dtype,
                           ReduceOp op, size_t count, int nchildren, size_t offset) {
  const size_t bytes = count * dataTypeSize(dtype);
  SCOPED_TRACE(kernelLabel(dtype, op, count) + " children=" + std::to_string(nchildren) +
               " offset=" + std::to_string(offset));
  KernelArena arena(6, bytes);
  unsigned char* local = arena.take(bytes, offset);
  unsigned char* c0 = arena.take(bytes, offset);
  unsigned char* c1 = arena.take(bytes, offset);
  unsigned char* out = arena.take(bytes, offset);
  unsigned char* d0 = arena.take(bytes, (offset + 1) % 16);
  unsigned char* d1 = arena.take(bytes, offset);
  fillRandom(rng, dtype, local, count);
  fillRandom(rng, dtype, c0, count);
  fillRandom(rng, dtype, c1, count);
  cuda::TreeReduceStep up;
  up.local = local;
  up.children[0] = c0;
  up.children[1] = c1;
  up.nchildren = nchildren;
  up.out = out;
  up.count = count;
  up.divisor = op == ReduceOp::kAvg ? 3 : 0;
  std::vector<const void*> srcs = {local, c0, c1};
  srcs.resize(1 + nchildren);
  std::vector<unsigned char> expected = hostFold(srcs, count, dtype, op, up.divisor);
  launcher.treeReduce(arena, up, dtype, op);
  ASSERT_EQ(0, std::memcmp(out, expected.data(), bytes));

  cuda::TreeBroadcastStep down;
  down.src = out;
  down.out = out;  // in place: only the children are written
  down.childOut[0] = d0;
  down.childOut[1] = d1;
  down.nchildren = nchildren;
  down.bytes = bytes;
  launcher.treeBroadcast(arena, down);
  if (nchildren > 0) {
    ASSERT_EQ(0, std::memcmp(d0, expected.data(), bytes));
  }
  if (nchildren > 1) {
    ASSERT_EQ(0, std::memcmp(d1, expected.data(), bytes));
  } else if (bytes > 0) {
    ASSERT_EQ(d1[0], kGuardByte) << "wrote a missing child";
  }
}

// Counts above this run fewer pointer layouts (aligned, and not congruent), to keep the
// host-side reference of a multi-MiB case affordable.
inline constexpr size_t kKernelLargeCount = 1 << 16;

// Every dtype x op x size: 1..kMaxSources sources, 1..3 destinations, pointers aligned;
// congruent but misaligned by whole elements; congruent and misaligned by any byte;
// not congruent.
inline void reduceCopyMatrix(KernelLauncher& launcher, std::span<const size_t> sizes) {
  std::mt19937_64 rng(1);
  for (DataType dtype : kKernelTypes) {
    const size_t es = dataTypeSize(dtype);
    for (ReduceOp op : kKernelOps) {
      if (!isValidFor(op, dtype)) continue;
      for (size_t i = 0; i < sizes.size(); ++i) {
        const size_t count = sizes[i];
        const size_t shared = 1 + (i * 5 + static_cast<size_t>(op)) % 15;
        const int nsrcs = 1 + static_cast<int>((i + static_cast<size_t>(op)) % cuda::kMaxSources);
        const int ndsts = 1 + static_cast<int>(i % 3);
        checkReduceCopy(launcher, rng, dtype, op, count, nsrcs, ndsts, {0});
        if (count <= kKernelLargeCount) {
          checkReduceCopy(launcher, rng, dtype, op, count, nsrcs, ndsts, {(shared * es) % 16});
          checkReduceCopy(launcher, rng, dtype, op, count, nsrcs, ndsts, {shared});
        }
        checkReduceCopy(launcher, rng, dtype, op, count, nsrcs, ndsts, {0, es, 3 * es, shared});
        if (::testing::Test::HasFatalFailure()) return;
      }
    }
  }
}

// Two sources into one destination, the streaming kernel's shape (on a GPU, the bare
// reduce-copy's path beyond L2): pointers aligned; congruent but misaligned by whole
// elements; congruent and misaligned by `byteOffset` (not element-aligned when the
// element is wider than a byte); and not congruent. The first two stream, the others
// take the general kernel.
inline void checkReduceCopyTwoToOne(KernelLauncher& launcher, std::mt19937_64& rng, DataType dtype,
                                    ReduceOp op, size_t count, size_t byteOffset) {
  const size_t es = dataTypeSize(dtype);
  checkReduceCopy(launcher, rng, dtype, op, count, 2, 1, {0});
  checkReduceCopy(launcher, rng, dtype, op, count, 2, 1, {(3 * es) % 16 == 0 ? es : 3 * es});
  checkReduceCopy(launcher, rng, dtype, op, count, 2, 1, {byteOffset});
  checkReduceCopy(launcher, rng, dtype, op, count, 2, 1, {0, es, 3 * es});
}

// Every byte offset 1..15 for 1-, 2- and 4-byte elements.
inline void reduceCopyByteOffsets(KernelLauncher& launcher) {
  std::mt19937_64 rng(2);
  for (DataType dtype : {DataType::kInt8, DataType::kFloat16, DataType::kFloat32}) {
    for (size_t offset = 1; offset < 16; ++offset) {
      checkReduceCopy(launcher, rng, dtype, ReduceOp::kSum, 4099, 2, 2, {offset});
      checkReduceCopy(launcher, rng, dtype, ReduceOp::kMax, 17, 3, 1, {offset, 16 - offset});
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

// Ring reduce-scatter and all-gather steps on every dtype x op x size.
inline void ringStepMatrix(KernelLauncher& launcher, std::span<const size_t> sizes) {
  std::mt19937_64 rng(3);
  for (DataType dtype : kKernelTypes) {
    const size_t es = dataTypeSize(dtype);
    for (ReduceOp op : kKernelOps) {
      if (!isValidFor(op, dtype)) continue;
      for (size_t i = 0; i < sizes.size(); ++i) {
        const size_t offset = (i * es) % 16;
        checkRingSteps(launcher, rng, dtype, op, sizes[i], offset, i % 2 ? 1 : offset);
        if (::testing::Test::HasFatalFailure()) return;
      }
    }
  }
}

// Tree reduce with 0, 1 and 2 children and tree broadcast to as many, every dtype x op
// x size.
inline void treeStepMatrix(KernelLauncher& launcher, std::span<const size_t> sizes) {
  std::mt19937_64 rng(4);
  for (DataType dtype : kKernelTypes) {
    const size_t es = dataTypeSize(dtype);
    for (ReduceOp op : kKernelOps) {
      if (!isValidFor(op, dtype)) continue;
      for (size_t i = 0; i < sizes.size(); ++i) {
        const size_t offset = i % 2 ? es % 16 : 0;
        checkTreeSteps(launcher, rng, dtype, op, sizes[i], static_cast<int>(i % 3), offset);
        if (::testing::Test::HasFatalFailure()) return;
      }
    }
  }
}

}  // namespace collie::testing
