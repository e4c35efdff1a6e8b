// currentPid(): the calling process's id without a system call per use.
//
// glibc stopped caching getpid() in 2.25, so every call is a syscall (100-200 ns in the
// test VM); the shm single-copy paths name their own process in every collective. The
// id is read once and kept; a pthread_atfork child handler forgets it, so a fork()ed
// child reads its own. (A child made by a raw clone() system call runs no atfork
// handler and would keep its parent's id: collie does not do that.)
//
// Thread safety: callable from any thread.
#pragma once

#include <cstdint>

namespace collie {

int32_t currentPid();

}  // namespace collie
