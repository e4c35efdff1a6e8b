#include "core/kernel/reduce_backend.h"

namespace collie {

const ReduceBackend& hostReduceBackend() {
  static const ReduceBackend& backend = builtinHostReduceBackend();
  return backend;
}

}  // namespace collie
