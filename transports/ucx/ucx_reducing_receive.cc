#include "transports/ucx/ucx_reducing_receive.h"

#include <algorithm>
#include <mutex>
#include <string>

namespace collie::ucx {

void ReducingReceive::start(const ReduceOnReceive& reduce, size_t bytes) {
  reduce_ = reduce;
  bytes_ = bytes;
  elemSize_ = dataTypeSize(reduce.dtype);
  partials_.clear();
}

// UCX hands fragments over where they lie in its receive buffer, after its own headers
// (over tcp at addresses like ...a32); the kernels take inputs at any byte address
// (core/kernel/reduce_backend.h), so each is reduced straight from there.
void ReducingReceive::reduceElements(size_t first, const uint8_t* incoming, size_t count) {
  uint8_t* dst = reduce_.dst + first * elemSize_;
  const uint8_t* own = reduce_.own + first * elemSize_;
  const uint8_t* a = reduce_.incomingFirst ? incoming : own;
  const uint8_t* b = reduce_.incomingFirst ? own : incoming;
  reduce_.kernels->reduce(dst, a, b, count, reduce_.dtype, reduce_.op, reduce_.divisor);
}

void ReducingReceive::addPartialBytes(size_t offset, const uint8_t* src, size_t length) {
  for (size_t i = 0; i < length; ++i) {
    const size_t at = offset + i;
    const size_t element = at / elemSize_;
    auto it = std::find_if(partials_.begin(), partials_.end(),
                           [element](const Partial& p) { return p.element == element; });
    if (it == partials_.end()) {
      partials_.push_back(Partial{element, {}, 0});
      it = partials_.end() - 1;
    }
    it->bytes[at % elemSize_] = src[i];
    if (++it->have == elemSize_) {
      reduceElements(element, it->bytes, 1);
      partials_.erase(it);
    }
  }
}

void ReducingReceive::apply(size_t offset, const uint8_t* src, size_t length) {
  const size_t end = std::min(offset + length, bytes_);  // UCX never passes more
  if (end <= offset) return;
  const size_t firstWhole = (offset + elemSize_ - 1) / elemSize_ * elemSize_;
  const size_t endWhole = end / elemSize_ * elemSize_;
  if (firstWhole >= endWhole) {  // no whole element in this fragment
    addPartialBytes(offset, src, end - offset);
    return;
  }
  if (firstWhole > offset) addPartialBytes(offset, src, firstWhole - offset);
  reduceElements(firstWhole / elemSize_, src + (firstWhole - offset),
                 (endWhole - firstWhole) / elemSize_);
  if (end > endWhole) addPartialBytes(endWhole, src + (endWhole - offset), end - endWhole);
}

namespace {

void* startPack(void*, const void*, size_t) { return nullptr; }  // receive-only datatype
void* startUnpack(void*, void* buffer, size_t) { return buffer; }
size_t packedSize(void* state) { return static_cast<ReducingReceive*>(state)->bytes(); }
size_t pack(void*, size_t, void*, size_t) { return 0; }
ucs_status_t unpack(void* state, size_t offset, const void* src, size_t length) {
  static_cast<ReducingReceive*>(state)->apply(offset, static_cast<const uint8_t*>(src), length);
  return UCS_OK;
}
void finish(void*) {}

}  // namespace

Result<ucp_datatype_t> reducingDatatype() {
  static std::once_flag once;
  static ucp_datatype_t datatype = 0;
  static ucs_status_t created = UCS_OK;
  std::call_once(once, [] {
    static const ucp_generic_dt_ops_t ops = {startPack, startUnpack, packedSize,
                                             pack,      unpack,      finish};
    created = ucp_dt_create_generic(&ops, nullptr, &datatype);
  });
  if (created != UCS_OK) {
    return unsupported(std::string("ucx: cannot create the reducing datatype: ") +
                       ucs_status_string(created));
  }
  return datatype;
}

}  // namespace collie::ucx
