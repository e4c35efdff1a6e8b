// ReducingReceive: a UCP receive that reduces the message into place as UCX delivers
// it, instead of storing it (Connection::postRecvReduce).
//
// UCX hands the bytes of a receive posted with a generic datatype to an unpack
// callback, fragment by fragment (out of order when a message takes several lanes), at
// byte offsets that need not fall on element boundaries. apply() reduces the whole
// elements of each fragment straight out of UCX's buffer and assembles the elements
// that a fragment boundary cuts in a small side list, reducing each once all its bytes
// arrived. So every element is reduced exactly once, from the same bytes a stored
// receive would have held.
//
// reducingDatatype() is the generic datatype whose buffer argument is a
// ReducingReceive*; pass the message's byte count as the count.
//
// Thread safety: one receive at a time per object; the datatype is immutable.
#pragma once

#include <ucp/api/ucp.h>

#include <cstdint>
#include <vector>

#include "collie/status.h"
#include "core/transport/transport.h"

namespace collie::ucx {

class ReducingReceive {
 public:
  // Starts a receive of `bytes` (a whole number of elements) into `reduce`.
  void start(const ReduceOnReceive& reduce, size_t bytes);
  // Reduces message bytes [offset, offset + length) held at `src`.
  void apply(size_t offset, const uint8_t* src, size_t length);
  size_t bytes() const { return bytes_; }
  // Elements cut by a fragment boundary that still wait for some of their bytes.
  size_t pendingElements() const { return partials_.size(); }

 private:
  struct Partial {
    size_t element = 0;
    uint8_t bytes[8] = {};
    size_t have = 0;
  };
  void reduceElements(size_t first, const uint8_t* incoming, size_t count);
  void addPartialBytes(size_t offset, const uint8_t* src, size_t length);

  ReduceOnReceive reduce_;
  size_t bytes_ = 0;
  size_t elemSize_ = 1;
  std::vector<Partial> partials_;  // a few per message: fragment boundaries only
};

// The generic datatype (created once per process, never destroyed).
Result<ucp_datatype_t> reducingDatatype();

}  // namespace collie::ucx
