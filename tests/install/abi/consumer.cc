// The ABI check's consumer: built by abi_check.sh against the installed public headers
// only, then run on the library it was built against and on one built with
// COLLIE_ABI_CHECK_PADDING (a member added to Communicator::Impl). It must behave the
// same on both: two ranks (threads) all-reduce and broadcast, and the Communicator the
// library allocated is exactly as large as these headers say (unique_ptr's deleter,
// inlined here, frees it with this size).
#include <collie/communicator.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <string>
#include <thread>
#include <vector>

namespace {

// The size of every live allocation made through operator new(size_t), by address:
// open addressing over a fixed table (no allocation inside operator new), one spin lock.
constexpr size_t kSlots = size_t{1} << 18;
struct Slot {
  void* ptr;
  size_t size;
};
Slot table[kSlots];
void* const kErased = reinterpret_cast<void*>(1);
std::atomic_flag locked = ATOMIC_FLAG_INIT;

struct Lock {
  Lock() {
    while (locked.test_and_set(std::memory_order_acquire)) {
    }
  }
  ~Lock() { locked.clear(std::memory_order_release); }
};

size_t slotOf(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) >> 4) * 2654435761u % kSlots;
}

void remember(void* p, size_t size) {
  Lock lock;
  for (size_t i = slotOf(p), n = 0; n < kSlots; i = (i + 1) % kSlots, ++n) {
    if (table[i].ptr == nullptr || table[i].ptr == kErased) {
      table[i] = {p, size};
      return;
    }
  }
}

void forget(void* p) {
  Lock lock;
  for (size_t i = slotOf(p), n = 0; n < kSlots && table[i].ptr != nullptr;
       i = (i + 1) % kSlots, ++n) {
    if (table[i].ptr == p) {
      table[i].ptr = kErased;
      return;
    }
  }
}

size_t allocatedSize(const void* p) {
  Lock lock;
  for (size_t i = slotOf(p), n = 0; n < kSlots && table[i].ptr != nullptr;
       i = (i + 1) % kSlots, ++n) {
    if (table[i].ptr == p) return table[i].size;
  }
  return 0;
}

bool fail(int rank, const std::string& what) {
  std::fprintf(stderr, "abi consumer rank %d: FAILED: %s\n", rank, what.c_str());
  return false;
}

bool runRank(const collie::UniqueId& id, int rank, int nranks,
             std::shared_ptr<collie::Store> store) {
  collie::Options options;
  options.store = store;
  // A knob set in code, through the installed header alone (and one the library must
  // refuse, by name).
  options.config = {{"COLLIE_NO_SUCH_KNOB", "1"}};
  auto refused = collie::Communicator::create(id, rank, nranks, options);
  if (refused.isOk() ||
      refused.status().message().find("COLLIE_NO_SUCH_KNOB") == std::string::npos) {
    return fail(rank, "an unknown knob in Options::config was not refused by name");
  }
  options.config = {{"COLLIE_TRANSPORT", "tcp"}, {"COLLIE_SOCKET_IFNAME", "lo"}};
  auto created = collie::Communicator::create(id, rank, nranks, options);
  if (!created.isOk()) return fail(rank, "create: " + created.status().toString());
  std::unique_ptr<collie::Communicator> comm = std::move(*created);
  const size_t allocated = allocatedSize(comm.get());
  if (allocated != sizeof(collie::Communicator)) {
    return fail(rank, "the library allocated the Communicator as " + std::to_string(allocated) +
                          " bytes, the installed headers say " +
                          std::to_string(sizeof(collie::Communicator)) +
                          ": the public class's layout depends on the library's internals");
  }
  if (comm->rank() != rank || comm->size() != nranks) {
    return fail(rank, "rank()/size() say " + std::to_string(comm->rank()) + "/" +
                          std::to_string(comm->size()));
  }
  std::vector<float> data(1000);
  for (size_t i = 0; i < data.size(); ++i) data[i] = float(rank + 1) * float(i);
  auto work = comm->allReduce(data.data(), data.data(), data.size(), collie::DataType::kFloat32,
                              collie::ReduceOp::kSum);
  if (!work.isOk() || !work->wait().isOk()) return fail(rank, "allReduce did not complete");
  for (size_t i = 0; i < data.size(); ++i) {
    if (data[i] != 3.0f * float(i))
      return fail(rank, "allReduce: wrong value at " + std::to_string(i));
  }
  int value = rank == 0 ? 42 : 0;
  work = comm->broadcast(&value, &value, 1, collie::DataType::kInt32, 0);
  if (!work.isOk() || !work->wait().isOk() || value != 42) return fail(rank, "broadcast");
  if (!comm->asyncError().isOk()) return fail(rank, "asyncError: " + comm->asyncError().toString());
  if (comm->transportTo(1 - rank) != "tcp") return fail(rank, "Options::config did not force tcp");
  return true;
}

}  // namespace

void* operator new(size_t size) {
  void* p = std::malloc(size == 0 ? 1 : size);
  if (p == nullptr) throw std::bad_alloc();
  remember(p, size);
  return p;
}

void operator delete(void* p) noexcept {
  if (p == nullptr) return;
  forget(p);
  std::free(p);
}

void operator delete(void* p, size_t) noexcept { operator delete(p); }

int main() {
  auto id = collie::UniqueId::generate("127.0.0.1", 0);
  if (!id.isOk()) {
    fail(0, "UniqueId::generate: " + id.status().toString());
    return 1;
  }
  auto store = collie::makeInMemoryStore();
  std::atomic<bool> ok{true};
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      if (!runRank(*id, r, 2, store)) ok = false;
    });
  }
  for (std::thread& t : ranks) t.join();
  if (!ok) return 1;
  std::printf("abi consumer ok (sizeof(Communicator) = %zu)\n", sizeof(collie::Communicator));
  return 0;
}
