// Preloaded into the Python ranks of torch_call_allocations_test.py: counts the calls of
// every thread to the heap's allocation functions while counting is on. The test reads
// and switches it through ctypes (collie_malloc_count, collie_malloc_count_enable).
// Each function forwards to glibc's own entry (__libc_malloc ...): dlsym could itself
// allocate before the forward exists.
#define _GNU_SOURCE
#include <stdatomic.h>
#include <stddef.h>

extern void* __libc_malloc(size_t size);
extern void* __libc_calloc(size_t count, size_t size);
extern void* __libc_realloc(void* ptr, size_t size);
extern void* __libc_memalign(size_t alignment, size_t size);

static atomic_int gEnabled;
static atomic_ulong gCount;

static void counted(void) {
  if (atomic_load_explicit(&gEnabled, memory_order_relaxed)) {
    atomic_fetch_add_explicit(&gCount, 1, memory_order_relaxed);
  }
}

void collie_malloc_count_enable(int on) { atomic_store(&gEnabled, on); }
unsigned long collie_malloc_count(void) { return atomic_load(&gCount); }

void* malloc(size_t size) {
  counted();
  return __libc_malloc(size);
}

void* calloc(size_t count, size_t size) {
  counted();
  return __libc_calloc(count, size);
}

void* realloc(void* ptr, size_t size) {
  counted();
  return __libc_realloc(ptr, size);
}

void* memalign(size_t alignment, size_t size) {
  counted();
  return __libc_memalign(alignment, size);
}

void* aligned_alloc(size_t alignment, size_t size) {
  counted();
  return __libc_memalign(alignment, size);
}

int posix_memalign(void** out, size_t alignment, size_t size) {
  counted();
  if (alignment % sizeof(void*) != 0 || (alignment & (alignment - 1)) != 0) return 22;  // EINVAL
  void* p = __libc_memalign(alignment, size);
  if (p == NULL) return 12;  // ENOMEM
  *out = p;
  return 0;
}
