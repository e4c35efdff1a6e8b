// allocShared/freeShared and the table of registered ranges (see shared_region.h).
#include "collie/shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <vector>

#include "core/log/log.h"
#include "core/memory/process_id.h"
#include "core/memory/shared_region.h"

#ifndef MFD_HUGETLB
#define MFD_HUGETLB 0x0004U
#endif

namespace collie {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;

struct Region {
  void* base;
  size_t bytes;  // mapped length
  int fd;
  uint64_t id;
  uint64_t inode;
};

struct Registration {
  const void* owner;
  const uint8_t* begin;
  const uint8_t* end;
};

struct Table {
  std::mutex mutex;
  std::vector<Region> regions;
  std::vector<Registration> registrations;
  // regions.size(), written under the mutex: a lookup in a process that has no
  // allocShared memory (most) takes no lock.
  std::atomic<size_t> live{0};
  // Advanced under the mutex by every allocation and free: a lookup remembered at the
  // same generation is still true.
  std::atomic<uint64_t> generation{0};
};

// The last lookups of this thread (a collective looks up its input and its output):
// found or not, at which table generation and in which process (a fork()ed child
// inherits its parent's thread state, not its pid).
struct Lookup {
  const void* ptr = nullptr;
  size_t bytes = 0;
  uint64_t generation = 0;
  int32_t pid = 0;
  bool found = false;
  SharedWindow window;
};
thread_local Lookup tLookups[2];
thread_local unsigned tNextLookup = 0;

Table& table() {
  static Table* t = new Table();  // never destroyed: used from exit paths
  return *t;
}

const Region* regionOf(const Table& t, const void* ptr, size_t bytes) {
  const auto* p = static_cast<const uint8_t*>(ptr);
  for (const Region& r : t.regions) {
    const auto* base = static_cast<const uint8_t*>(r.base);
    if (p >= base && p <= base + r.bytes && bytes <= static_cast<size_t>(base + r.bytes - p)) {
      return &r;
    }
  }
  return nullptr;
}

uint64_t randomId() {
  uint64_t id = 0;
  while (id == 0) {
    if (getrandom(&id, sizeof id, 0) != sizeof id) id = static_cast<uint64_t>(getpid()) << 32 | 1;
  }
  return id;
}

// Maps a fresh memfd of `bytes` bytes; huge pages first when asked.
void* mapMemfd(size_t bytes, bool huge, int* fdOut) {
  int fd = memfd_create("collie-shared", MFD_CLOEXEC | (huge ? MFD_HUGETLB : 0));
  if (fd < 0) return MAP_FAILED;
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    close(fd);
    return MAP_FAILED;
  }
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (base == MAP_FAILED) {
    int err = errno;
    close(fd);
    errno = err;
    return MAP_FAILED;
  }
  *fdOut = fd;
  return base;
}

}  // namespace

Result<void*> allocShared(size_t bytes) {
  if (bytes == 0) return invalidArgument("allocShared: bytes is 0");
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  int fd = -1;
  void* base = MAP_FAILED;
  size_t mapped = (bytes + page - 1) / page * page;
  if (bytes >= kHugePage) {
    // Reserved huge pages (vm.nr_hugepages) cut TLB misses when peers stream the
    // buffer; without a reservation the mapping fails at once and we fall back.
    size_t hugeBytes = (bytes + kHugePage - 1) / kHugePage * kHugePage;
    base = mapMemfd(hugeBytes, true, &fd);
    if (base != MAP_FAILED) mapped = hugeBytes;
  }
  if (base == MAP_FAILED) {
    base = mapMemfd(mapped, false, &fd);
    if (base == MAP_FAILED) {
      return systemError("allocShared: mapping " + std::to_string(bytes) + " bytes of memfd",
                         errno);
    }
    if (bytes >= kHugePage) madvise(base, mapped, MADV_HUGEPAGE);  // shmem THP if enabled
  }
  struct stat st {};
  fstat(fd, &st);
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  t.regions.push_back(Region{base, mapped, fd, randomId(), static_cast<uint64_t>(st.st_ino)});
  t.live.store(t.regions.size(), std::memory_order_release);
  t.generation.fetch_add(1, std::memory_order_release);
  return base;
}

Status freeShared(void* ptr) {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  for (size_t i = 0; i < t.regions.size(); ++i) {
    Region r = t.regions[i];
    if (r.base != ptr) continue;
    std::erase_if(t.registrations, [&](const Registration& reg) {
      return reg.begin >= static_cast<const uint8_t*>(r.base) &&
             reg.begin < static_cast<const uint8_t*>(r.base) + r.bytes;
    });
    t.regions.erase(t.regions.begin() + static_cast<std::ptrdiff_t>(i));
    t.live.store(t.regions.size(), std::memory_order_release);
    t.generation.fetch_add(1, std::memory_order_release);
    munmap(r.base, r.bytes);
    close(r.fd);
    return Status();
  }
  return invalidArgument("freeShared: pointer was not returned by allocShared (or already freed)");
}

Status registerSharedRange(const void* owner, const void* ptr, size_t bytes) {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  const Region* region = ptr == nullptr ? nullptr : regionOf(t, ptr, bytes);
  if (region == nullptr) {
    return invalidArgument(
        "registerBuffer: the range is not inside memory from collie::allocShared (peers can "
        "map only that); allocate the buffer with allocShared");
  }
  const auto* begin = static_cast<const uint8_t*>(ptr);
  t.registrations.push_back(Registration{owner, begin, begin + bytes});
  return Status();
}

Status deregisterSharedRange(const void* owner, const void* ptr) {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  for (auto it = t.registrations.begin(); it != t.registrations.end(); ++it) {
    if (it->owner == owner && it->begin == ptr) {
      t.registrations.erase(it);
      return Status();
    }
  }
  return notFound("deregisterBuffer: this pointer is not registered on this communicator");
}

void dropSharedRanges(const void* owner) {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  std::erase_if(t.registrations, [&](const Registration& reg) { return reg.owner == owner; });
}

bool findSharedWindow(const void* ptr, size_t bytes, SharedWindow* window) {
  Table& t = table();
  // A pointer into allocShared memory was returned after its region was counted.
  if (t.live.load(std::memory_order_acquire) == 0) return false;
  const uint64_t generation = t.generation.load(std::memory_order_acquire);
  const int32_t pid = currentPid();
  for (const Lookup& seen : tLookups) {
    if (seen.ptr == ptr && seen.bytes == bytes && seen.generation == generation &&
        seen.pid == pid) {
      if (seen.found) *window = seen.window;
      return seen.found;
    }
  }
  std::lock_guard<std::mutex> lock(t.mutex);
  const auto* p = static_cast<const uint8_t*>(ptr);
  // Every live allocShared region is shareable, registered or not: the table is the
  // registration cache, and freeShared() is its invalidation (the region leaves it).
  // Peers tell a region reallocated at the same address by its new random id.
  Lookup& entry = tLookups[tNextLookup++ % 2];
  entry = Lookup{ptr, bytes, t.generation.load(std::memory_order_relaxed), pid, false, {}};
  const Region* region = regionOf(t, ptr, bytes);
  if (region != nullptr) {
    window->regionId = region->id;
    window->pid = pid;
    window->fd = region->fd;
    window->inode = region->inode;
    window->regionBytes = region->bytes;
    window->base = reinterpret_cast<uint64_t>(region->base);
    window->offset = static_cast<uint64_t>(p - static_cast<const uint8_t*>(region->base));
    entry.found = true;
    entry.window = *window;
    return true;
  }
  return false;
}

Result<void*> mapSharedWindow(const SharedWindow& window, const std::string& who, int peer) {
  const std::string path =
      "/proc/" + std::to_string(window.pid) + "/fd/" + std::to_string(window.fd);
  int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    return systemError("opening " + who + " through " + path +
                           " (ranks must run as one user in one pid namespace)",
                       errno);
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_ino) != window.inode ||
      static_cast<uint64_t>(st.st_size) < window.regionBytes) {
    close(fd);
    return remoteError(who + " changed under us (inode or size differ from what it published)",
                       peer);
  }
  void* base =
      mmap(nullptr, window.regionBytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  int err = errno;
  close(fd);
  if (base == MAP_FAILED) return systemError("mapping " + who, err);
  return base;
}

}  // namespace collie
