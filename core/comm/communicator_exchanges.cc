// Communicator: the exchanges (all-to-all, all-to-all with a count per peer, gather,
// scatter): their argument checks, then the engine's schedules (core/plan/exchange.h).
#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "collie/communicator.h"
#include "core/comm/argument_checks.h"
#include "core/comm/communicator_impl.h"

namespace collie {
namespace {

// Packed offsets (prefix sums of `counts`) where `offsets` is empty.
std::vector<size_t> offsetsOf(const std::vector<size_t>& counts,
                              const std::vector<size_t>& offsets) {
  if (!offsets.empty()) return offsets;
  std::vector<size_t> packed(counts.size());
  size_t at = 0;
  for (size_t p = 0; p < counts.size(); ++p) {
    packed[p] = at;
    at += counts[p];
  }
  return packed;
}

// Checks one side (send or recv) of an alltoallv layout; *end receives the elements
// the side spans. Blocks of the receive side must not overlap.
Status checkSide(const char* side, int rank, int nranks, const std::vector<size_t>& counts,
                 const std::vector<size_t>& offsets, bool disjoint, size_t* end) {
  const size_t n = static_cast<size_t>(nranks);
  if (counts.size() != n || offsets.size() != n) {
    return refusedArgument("allToAllV", rank,
                           std::string(side) + " counts and offsets need " +
                               std::to_string(nranks) + " entries each, got " +
                               std::to_string(counts.size()) + " and " +
                               std::to_string(offsets.size()));
  }
  constexpr size_t kMax = SIZE_MAX / 16;
  std::vector<std::pair<size_t, size_t>> blocks;
  *end = 0;
  for (size_t p = 0; p < n; ++p) {
    if (counts[p] > kMax || offsets[p] > kMax) {
      return refusedArgument(
          "allToAllV", rank,
          std::string(side) + " block for rank " + std::to_string(p) + " is too large");
    }
    *end = std::max(*end, offsets[p] + counts[p]);
    if (counts[p] > 0) blocks.emplace_back(offsets[p], offsets[p] + counts[p]);
  }
  if (!disjoint) return Status();
  std::sort(blocks.begin(), blocks.end());
  for (size_t i = 1; i < blocks.size(); ++i) {
    if (blocks[i].first < blocks[i - 1].second) {
      return refusedArgument("allToAllV", rank,
                             std::string(side) + " blocks overlap at element " +
                                 std::to_string(blocks[i].first) +
                                 "; two peers' blocks would land on the same bytes");
    }
  }
  return Status();
}

}  // namespace

// In place (send == recv) the engine copies what peers still read before any block
// lands (docs/decisions/exchanges.md); a partial overlap is refused, and so is in place on
// device buffers (the device path moves blocks between the ranks' buffers directly).
Status Communicator::Impl::checkInPlace(const char* what, int rank, const void* send,
                                        size_t sendBytes, const void* recv,
                                        size_t recvBytes) const {
  const bool inPlace = send == recv && rangesOverlap(send, sendBytes, recv, recvBytes);
  COLLIE_RETURN_IF_ERROR(
      checkOverlap(what, rank, send, sendBytes, recv, recvBytes, inPlace, "send == recv"));
  if (inPlace && device != nullptr && isDeviceBuffer(send)) {
    return refusedArgument(what, rank,
                           "in place (send == recv) on device buffers is not supported; use two "
                           "buffers");
  }
  return Status();
}

Result<Work> Communicator::allToAll(const void* send, void* recv, size_t count, DataType dtype,
                                    void* stream) {
  COLLIE_RETURN_IF_ERROR(impl_->check("allToAll", send, recv, count, dtype, nullptr, nullptr));
  const int rank = impl_->rank;
  if (count > 0 && (send == nullptr || recv == nullptr)) {
    return refusedArgument("allToAll", rank,
                           std::string(send == nullptr ? "send" : "recv") +
                               " buffer is null but count is " + std::to_string(count));
  }
  const size_t bytes = count * dataTypeSize(dtype) * static_cast<size_t>(impl_->nranks);
  COLLIE_RETURN_IF_ERROR(impl_->checkInPlace("allToAll", rank, send, bytes, recv, bytes));
  return impl_->submit({.kind = CollectiveKind::kAllToAll, .count = count, .dtype = dtype}, send,
                       recv, stream);
}

Result<Work> Communicator::allToAllV(const void* send, const std::vector<size_t>& sendCounts,
                                     const std::vector<size_t>& sendOffsets, void* recv,
                                     const std::vector<size_t>& recvCounts,
                                     const std::vector<size_t>& recvOffsets, DataType dtype) {
  const int rank = impl_->rank, n = impl_->nranks;
  auto layout = std::make_shared<ExchangeLayout>();
  layout->sendCounts = sendCounts;
  layout->recvCounts = recvCounts;
  layout->sendOffsets = offsetsOf(sendCounts, sendOffsets);
  layout->recvOffsets = offsetsOf(recvCounts, recvOffsets);
  size_t sendEnd = 0, recvEnd = 0;
  COLLIE_RETURN_IF_ERROR(
      checkSide("send", rank, n, layout->sendCounts, layout->sendOffsets, false, &sendEnd));
  COLLIE_RETURN_IF_ERROR(
      checkSide("recv", rank, n, layout->recvCounts, layout->recvOffsets, true, &recvEnd));
  size_t sendTotal = 0, recvTotal = 0;
  for (int p = 0; p < n; ++p) {
    sendTotal += sendCounts[p];
    recvTotal += recvCounts[p];
  }
  COLLIE_RETURN_IF_ERROR(impl_->check("allToAllV", send, recv, std::max(sendTotal, recvTotal),
                                      dtype, nullptr, nullptr));
  if (sendTotal > 0 && send == nullptr) {
    return refusedArgument(
        "allToAllV", rank,
        "send buffer is null but it sends " + std::to_string(sendTotal) + " elements");
  }
  if (recvTotal > 0 && recv == nullptr) {
    return refusedArgument(
        "allToAllV", rank,
        "recv buffer is null but it receives " + std::to_string(recvTotal) + " elements");
  }
  if (sendCounts[rank] != recvCounts[rank]) {
    return refusedArgument("allToAllV", rank,
                           "it sends " + std::to_string(sendCounts[rank]) +
                               " elements to itself but receives " +
                               std::to_string(recvCounts[rank]));
  }
  const size_t es = dataTypeSize(dtype);
  COLLIE_RETURN_IF_ERROR(
      impl_->checkInPlace("allToAllV", rank, send, sendEnd * es, recv, recvEnd * es));
  CollectiveArgs args;
  args.kind = CollectiveKind::kAllToAllV;
  args.dtype = dtype;
  args.layout = std::move(layout);
  return impl_->submit(args, send, recv);
}

Result<Work> Communicator::gather(const void* send, void* recv, size_t count, DataType dtype,
                                  int root, void* stream) {
  COLLIE_RETURN_IF_ERROR(impl_->check("gather", send, recv, count, dtype, nullptr, &root));
  const int rank = impl_->rank;
  if (count > 0 && send == nullptr) {
    return refusedArgument("gather", rank,
                           "send buffer is null but count is " + std::to_string(count));
  }
  if (count > 0 && rank == root && recv == nullptr) {
    return refusedArgument("gather", rank,
                           "recv buffer (root) is null but count is " + std::to_string(count));
  }
  if (rank == root) {  // recv is written on the root only
    const size_t block = count * dataTypeSize(dtype);
    COLLIE_RETURN_IF_ERROR(checkOverlap("gather", rank, send, block, recv, block * impl_->nranks,
                                        send == static_cast<const char*>(recv) + block * root,
                                        "send == recv + root * count"));
  }
  return impl_->submit(
      {.kind = CollectiveKind::kGather, .count = count, .dtype = dtype, .root = root}, send, recv,
      stream);
}

Result<Work> Communicator::scatter(const void* send, void* recv, size_t count, DataType dtype,
                                   int root, void* stream) {
  COLLIE_RETURN_IF_ERROR(impl_->check("scatter", send, recv, count, dtype, nullptr, &root));
  const int rank = impl_->rank;
  if (count > 0 && rank == root && send == nullptr) {
    return refusedArgument("scatter", rank,
                           "send buffer (root) is null but count is " + std::to_string(count));
  }
  if (count > 0 && recv == nullptr) {
    return refusedArgument("scatter", rank,
                           "recv buffer is null but count is " + std::to_string(count));
  }
  if (rank == root) {  // send is read on the root only
    const size_t block = count * dataTypeSize(dtype);
    COLLIE_RETURN_IF_ERROR(checkOverlap("scatter", rank, send, block * impl_->nranks, recv, block,
                                        recv == static_cast<const char*>(send) + block * root,
                                        "recv == send + root * count"));
  }
  return impl_->submit(
      {.kind = CollectiveKind::kScatter, .count = count, .dtype = dtype, .root = root}, send, recv,
      stream);
}

}  // namespace collie
