// The size of this CPU's last-level cache, for choosing streaming (non-temporal)
// stores: an output larger than the cache cannot stay cached, so writing it through
// the cache only costs a read-for-ownership per line and evicts the inputs.
//
// The value comes from sysfs (/sys/devices/system/cpu/cpu0/cache/index*/size: the
// largest cache a core can use). glibc's sysconf(_SC_LEVEL3_CACHE_SIZE) reads cpuid,
// which under a hypervisor can report the whole host's L3 (384 MiB on the test VM
// against the 32 MiB it has), so it is only the fallback; 32 MiB when neither answers.
//
// Thread safety: computed once on first use; safe to call from any thread.
#pragma once

#include <cstddef>

namespace collie {

size_t lastLevelCacheBytes();

}  // namespace collie
