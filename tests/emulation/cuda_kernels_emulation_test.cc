// The CUDA kernels of kernels/cuda, compiled by the host compiler and run through the
// emulator (kernels/cuda/emulation): every kernel, every dtype and op, odd sizes and
// misaligned pointers, against the host backend (kernels/cpu) applied as a left fold
// in source order, which is the bit-exact contract. Whole ring and tree all-reduces
// over emulated ranks are checked against the exact references of tests/support.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/kernel/reduce_backend.h"
#include "kernels/cuda/kernel_table.h"
#include "support/reference.h"

namespace collie::cuda {
namespace {

constexpr size_t kSizes[] = {0, 1, 15, 16, 17, 4099};
constexpr DataType kTypes[] = {DataType::kInt8,    DataType::kUint8,   DataType::kInt32,
                               DataType::kUint32,  DataType::kInt64,   DataType::kUint64,
                               DataType::kFloat16, DataType::kFloat32, DataType::kFloat64,
                               DataType::kBFloat16};
constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax,
                             ReduceOp::kAvg};
constexpr unsigned kBlock = 64;
constexpr unsigned kMaxBlocks = 3;

std::string label(DataType dtype, ReduceOp op, size_t count) {
  return std::string(dataTypeName(dtype)) + "/" + std::string(reduceOpName(op)) +
         "/n=" + std::to_string(count);
}

// Random elements that are finite in every type (floats in [-4, 4]).
void fillRandom(std::mt19937_64& rng, DataType dtype, void* out, size_t count) {
  const size_t es = dataTypeSize(dtype);
  std::uniform_real_distribution<double> real(-4.0, 4.0);
  auto* bytes = static_cast<unsigned char*>(out);
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

// A buffer whose data starts `offset` bytes past a 64-byte boundary, with guard bytes.
struct Buffer {
  Buffer(size_t bytes, size_t offset) : storage(bytes + offset + 192, 0xA5), offset(offset) {
    auto base = reinterpret_cast<uintptr_t>(storage.data());
    shift = 64 + (64 - base % 64) % 64;
  }
  unsigned char* data() { return storage.data() + shift + offset; }
  std::vector<unsigned char> storage;
  size_t offset;
  size_t shift = 0;
};

// The expected fold of `srcs` with the host backend: ((s0 op s1) op s2) ..., divided.
std::vector<unsigned char> hostFold(const std::vector<const void*>& srcs, size_t count,
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

unsigned gridFor(size_t bytes) { return launchGrid(bytes, kBlock, kMaxBlocks); }

// One reduce-copy launch with nsrcs sources and ndsts destinations at the given byte
// offsets; checks every destination and the guard bytes around it.
void checkReduceCopy(std::mt19937_64& rng, DataType dtype, ReduceOp op, size_t count, int nsrcs,
                     int ndsts, const std::vector<size_t>& offsets) {
  SCOPED_TRACE(label(dtype, op, count) + " srcs=" + std::to_string(nsrcs) +
               " dsts=" + std::to_string(ndsts) + " offset0=" + std::to_string(offsets[0]));
  const size_t bytes = count * dataTypeSize(dtype);
  std::vector<Buffer> buffers;
  for (int i = 0; i < nsrcs + ndsts; ++i) buffers.emplace_back(bytes, offsets[i % offsets.size()]);
  ReduceCopyArgs args;
  std::vector<const void*> srcs;
  for (int s = 0; s < nsrcs; ++s) {
    fillRandom(rng, dtype, buffers[s].data(), count);
    args.srcs[s] = buffers[s].data();
    srcs.push_back(buffers[s].data());
  }
  for (int d = 0; d < ndsts; ++d) args.dsts[d] = buffers[nsrcs + d].data();
  args.nsrcs = nsrcs;
  args.ndsts = ndsts;
  args.count = count;
  args.divisor = op == ReduceOp::kAvg ? nsrcs : 0;
  std::vector<unsigned char> expected = hostFold(srcs, count, dtype, op, args.divisor);
  auto kernel = kernelFor<ReduceCopyFamily>(dtype, op);
  ASSERT_NE(kernel, nullptr);
  emulatedLaunch(kernel, dim3(gridFor(bytes)), dim3(kBlock), args);
  for (int d = 0; d < ndsts; ++d) {
    Buffer& out = buffers[nsrcs + d];
    ASSERT_EQ(0, std::memcmp(out.data(), expected.data(), bytes)) << "destination " << d;
    ASSERT_EQ(out.data()[-1], 0xA5) << "wrote before destination " << d;
    ASSERT_EQ(out.data()[bytes], 0xA5) << "wrote past destination " << d;
  }
}

TEST(CudaEmulation, ReduceCopyEveryTypeOpSizeAndAlignment) {
  std::mt19937_64 rng(1);
  for (DataType dtype : kTypes) {
    const size_t es = dataTypeSize(dtype);
    for (ReduceOp op : kOps) {
      for (size_t i = 0; i < std::size(kSizes); ++i) {
        const size_t count = kSizes[i];
        const size_t shared = 1 + (i * 5 + static_cast<size_t>(op)) % 15;
        const int nsrcs = 1 + static_cast<int>((i + static_cast<size_t>(op)) % kMaxSources);
        const int ndsts = 1 + static_cast<int>(i % 3);
        // Aligned; congruent but misaligned by whole elements; congruent and misaligned
        // by any byte; not congruent.
        checkReduceCopy(rng, dtype, op, count, nsrcs, ndsts, {0});
        checkReduceCopy(rng, dtype, op, count, nsrcs, ndsts, {(shared * es) % 16});
        checkReduceCopy(rng, dtype, op, count, nsrcs, ndsts, {shared});
        checkReduceCopy(rng, dtype, op, count, nsrcs, ndsts, {0, es, 3 * es, shared});
        if (HasFatalFailure()) return;
      }
    }
  }
}

TEST(CudaEmulation, ReduceCopyEveryByteOffset) {
  std::mt19937_64 rng(2);
  for (DataType dtype : {DataType::kInt8, DataType::kFloat16, DataType::kFloat32}) {
    for (size_t offset = 1; offset < 16; ++offset) {
      checkReduceCopy(rng, dtype, ReduceOp::kSum, 4099, 2, 2, {offset});
      checkReduceCopy(rng, dtype, ReduceOp::kMax, 17, 3, 1, {offset, 16 - offset});
      if (HasFatalFailure()) return;
    }
  }
}

// Ring reduce-scatter step and all-gather step, one launch each, on every dtype/op.
TEST(CudaEmulation, RingStepKernels) {
  std::mt19937_64 rng(3);
  for (DataType dtype : kTypes) {
    const size_t es = dataTypeSize(dtype);
    for (ReduceOp op : kOps) {
      for (size_t i = 0; i < std::size(kSizes); ++i) {
        const size_t count = kSizes[i];
        const size_t bytes = count * es;
        SCOPED_TRACE(label(dtype, op, count));
        const size_t offset = (i * es) % 16;
        Buffer local(bytes, offset), incoming(bytes, offset), out(bytes, offset),
            peerOut(bytes, i % 2 ? 1 : offset);
        fillRandom(rng, dtype, local.data(), count);
        fillRandom(rng, dtype, incoming.data(), count);
        RingReduceStep step;
        step.local = local.data();
        step.incoming = incoming.data();
        step.out = out.data();
        step.peerOut = peerOut.data();
        step.count = count;
        step.divisor = op == ReduceOp::kAvg ? 2 : 0;
        std::vector<unsigned char> expected =
            hostFold({local.data(), incoming.data()}, count, dtype, op, step.divisor);
        emulatedLaunch(kernelFor<RingReduceScatterFamily>(dtype, op), dim3(gridFor(bytes)),
                       dim3(kBlock), step);
        ASSERT_EQ(0, std::memcmp(out.data(), expected.data(), bytes));
        ASSERT_EQ(0, std::memcmp(peerOut.data(), expected.data(), bytes));

        Buffer gathered(bytes, (offset + 3) % 16), forwarded(bytes, offset);
        RingCopyStep copy;
        copy.src = out.data();
        copy.out = gathered.data();
        copy.peerOut = forwarded.data();
        copy.bytes = bytes;
        emulatedLaunch(&ringAllGatherStepKernel<>, dim3(gridFor(bytes)), dim3(kBlock), copy);
        ASSERT_EQ(0, std::memcmp(gathered.data(), expected.data(), bytes));
        ASSERT_EQ(0, std::memcmp(forwarded.data(), expected.data(), bytes));
        ASSERT_EQ(gathered.data()[bytes], 0xA5);
      }
    }
  }
}

// Tree reduce with 0, 1 and 2 children, and tree broadcast to 0..2 children.
TEST(CudaEmulation, TreeKernels) {
  std::mt19937_64 rng(4);
  for (DataType dtype : kTypes) {
    const size_t es = dataTypeSize(dtype);
    for (ReduceOp op : kOps) {
      for (size_t i = 0; i < std::size(kSizes); ++i) {
        const size_t count = kSizes[i];
        const size_t bytes = count * es;
        const int nchildren = static_cast<int>(i % 3);
        SCOPED_TRACE(label(dtype, op, count) + " children=" + std::to_string(nchildren));
        const size_t offset = i % 2 ? es % 16 : 0;
        Buffer local(bytes, offset), c0(bytes, offset), c1(bytes, offset), out(bytes, offset);
        fillRandom(rng, dtype, local.data(), count);
        fillRandom(rng, dtype, c0.data(), count);
        fillRandom(rng, dtype, c1.data(), count);
        TreeReduceStep up;
        up.local = local.data();
        up.children[0] = c0.data();
        up.children[1] = c1.data();
        up.nchildren = nchildren;
        up.out = out.data();
        up.count = count;
        up.divisor = op == ReduceOp::kAvg ? 3 : 0;
        std::vector<const void*> srcs = {local.data(), c0.data(), c1.data()};
        srcs.resize(1 + nchildren);
        std::vector<unsigned char> expected = hostFold(srcs, count, dtype, op, up.divisor);
        emulatedLaunch(kernelFor<TreeReduceFamily>(dtype, op), dim3(gridFor(bytes)), dim3(kBlock),
                       up);
        ASSERT_EQ(0, std::memcmp(out.data(), expected.data(), bytes));

        Buffer d0(bytes, (offset + 1) % 16), d1(bytes, offset);
        TreeBroadcastStep down;
        down.src = out.data();
        down.out = out.data();  // in place: only the children are written
        down.childOut[0] = d0.data();
        down.childOut[1] = d1.data();
        down.nchildren = nchildren;
        down.bytes = bytes;
        emulatedLaunch(&treeBroadcastKernel<>, dim3(gridFor(bytes)), dim3(kBlock), down);
        if (nchildren > 0) {
          ASSERT_EQ(0, std::memcmp(d0.data(), expected.data(), bytes));
        }
        if (nchildren > 1) {
          ASSERT_EQ(0, std::memcmp(d1.data(), expected.data(), bytes));
        } else if (bytes > 0) {
          ASSERT_EQ(d1.data()[0], 0xA5) << "wrote a missing child";
        }
      }
    }
  }
}

}  // namespace
}  // namespace collie::cuda
