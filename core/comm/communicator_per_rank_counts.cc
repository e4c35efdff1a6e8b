// Communicator: all-gather and reduce-scatter with a count per rank (reduceScatterV,
// allGatherV): their argument checks, then the engine's ring schedules over uneven
// blocks (core/plan/ring.h, CollectiveArgs::blocks).
#include <cstdint>
#include <string>
#include <vector>

#include "collie/communicator.h"
#include "core/comm/argument_checks.h"
#include "core/comm/communicator_impl.h"

namespace collie {
namespace {

// The counts as BlockCounts, or InvalidArgument naming what is wrong with them.
Result<std::shared_ptr<const BlockCounts>> blocksOf(const char* what, int rank, int nranks,
                                                    const std::vector<size_t>& counts) {
  if (counts.size() != static_cast<size_t>(nranks)) {
    return refusedArgument(what, rank,
                           "counts needs " + std::to_string(nranks) +
                               " entries (one per rank), got " + std::to_string(counts.size()));
  }
  // Far below SIZE_MAX, so that the sum and the byte sizes cannot overflow.
  constexpr size_t kMax = SIZE_MAX / 64;
  size_t total = 0;
  for (size_t p = 0; p < counts.size(); ++p) {
    if (counts[p] > kMax - total) {
      return refusedArgument(what, rank,
                             "the counts (rank " + std::to_string(p) + "'s block) are too large");
    }
    total += counts[p];
  }
  return BlockCounts::packed(counts);
}

// Checks the buffers of a v kind: `block` points at this rank's block (`mine` elements)
// and `whole` at the gathered buffer (`total` elements); they may only overlap in place,
// i.e. when block == whole + offset of this rank's block.
Status checkBuffers(const char* what, int rank, const void* block, size_t mine, const void* whole,
                    size_t total, size_t offset, size_t es) {
  if (mine > 0 && block == nullptr) {
    return refusedArgument(what, rank,
                           "its block buffer is null but its count is " + std::to_string(mine));
  }
  if (total > 0 && whole == nullptr) {
    return refusedArgument(
        what, rank, "the gathered buffer is null but the counts sum to " + std::to_string(total));
  }
  const bool inPlace = whole != nullptr && block == static_cast<const char*>(whole) + offset * es;
  if (!inPlace && rangesOverlap(block, mine * es, whole, total * es)) {
    return refusedArgument(
        what, rank,
        "send and recv overlap other than in place (this rank's block at element " +
            std::to_string(offset) + " of the gathered buffer)");
  }
  return Status();
}

// The arguments of a v kind once its counts and buffers pass: `block` is this rank's
// block (reduce-scatter-v's recv, all-gather-v's send), `whole` the gathered buffer.
Result<CollectiveArgs> argsOf(const char* what, CollectiveKind kind, int rank, int nranks,
                              const void* block, const void* whole,
                              const std::vector<size_t>& counts, DataType dtype, ReduceOp op) {
  Result<std::shared_ptr<const BlockCounts>> blocks = blocksOf(what, rank, nranks, counts);
  if (!blocks.isOk()) return blocks.status();
  const BlockCounts& b = *blocks.value();
  if (isValid(dtype)) {
    COLLIE_RETURN_IF_ERROR(checkBuffers(what, rank, block, b.counts[rank], whole, b.total,
                                        b.offsets[rank], dataTypeSize(dtype)));
  }
  CollectiveArgs args;
  args.kind = kind;
  args.count = b.total;
  args.dtype = dtype;
  args.op = op;
  args.blocks = std::move(blocks).value();
  return args;
}

}  // namespace

Result<Work> Communicator::reduceScatterV(const void* send, void* recv,
                                          const std::vector<size_t>& counts, DataType dtype,
                                          ReduceOp op) {
  return reduceScatterV(send, recv, counts, dtype, op, ReduceScalar());
}

Result<Work> Communicator::reduceScatterV(const void* send, void* recv,
                                          const std::vector<size_t>& counts, DataType dtype,
                                          ReduceOp op, const ReduceScalar& scalar) {
  COLLIE_RETURN_IF_ERROR(checkScalar("reduceScatterV", impl_->rank, op, scalar));
  Result<CollectiveArgs> args = argsOf("reduceScatterV", CollectiveKind::kReduceScatterV,
                                       impl_->rank, impl_->nranks, recv, send, counts, dtype, op);
  if (!args.isOk()) return args.status();
  COLLIE_RETURN_IF_ERROR(
      impl_->check("reduceScatterV", send, recv, args->count, dtype, &op, nullptr));
  args->scalar = scalar;
  return impl_->submit(args.value(), send, recv);
}

Result<Work> Communicator::allGatherV(const void* send, void* recv,
                                      const std::vector<size_t>& counts, DataType dtype) {
  Result<CollectiveArgs> args = argsOf("allGatherV", CollectiveKind::kAllGatherV, impl_->rank,
                                       impl_->nranks, send, recv, counts, dtype, ReduceOp::kSum);
  if (!args.isOk()) return args.status();
  COLLIE_RETURN_IF_ERROR(
      impl_->check("allGatherV", send, recv, args->count, dtype, nullptr, nullptr));
  return impl_->submit(args.value(), send, recv);
}

}  // namespace collie
