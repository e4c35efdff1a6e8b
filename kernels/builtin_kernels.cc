// The host kernel backend this build uses: kernels/cpu (see core/kernel/reduce_backend.h).
#include "core/kernel/reduce_backend.h"
#include "kernels/cpu/cpu_reduce.h"

namespace collie {

const ReduceBackend& builtinHostReduceBackend() { return cpuReduceBackend(); }

}  // namespace collie
