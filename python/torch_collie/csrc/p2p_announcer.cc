#include "p2p_announcer.h"

#include <c10/util/Exception.h>
#include <c10/util/Logging.h>

#include <algorithm>

#include "work.h"

namespace torch_collie {

namespace {
constexpr std::chrono::microseconds kFirstPoll{200};
constexpr std::chrono::milliseconds kLongestPoll{20};
// How often a rank holding sends not yet announced checks whether it should announce:
// first after kFirstCheck, the interval doubling up to kLongestCheck.
constexpr std::chrono::milliseconds kFirstCheck{100};
constexpr std::chrono::milliseconds kLongestCheck{1000};
const char* const kAnySourceKey = "collie_p2p/any_source";
}  // namespace

P2pAnnouncer::P2pAnnouncer(c10::intrusive_ptr<c10d::Store> store, int rank, int size)
    : store_(std::move(store)), rank_(rank), size_(size) {}

P2pAnnouncer::~P2pAnnouncer() { stop(); }

std::string P2pAnnouncer::key(int src, int dst, int tag) const {
  return "collie_p2p/" + std::to_string(src) + "_" + std::to_string(dst) + "_t" +
         std::to_string(tag);
}

void P2pAnnouncer::sent(int dst, int tag) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) return;
    ++pending_[{dst, tag}];
    if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
    // While only counting, the thread wakes on its own schedule: a send wakes nobody.
    if (!announcing_) return;
  }
  cv_.notify_all();
}

void P2pAnnouncer::received(int src, int tag) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++received_[{src, tag}];
}

int P2pAnnouncer::pickSource(int tag, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  bool request;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    request = !requested_;
    requested_ = true;
  }
  // Every rank of the group announces its sends from now on (including this one's
  // thread, which sees the key at its next check).
  if (request) store_->set(kAnySourceKey, std::vector<uint8_t>{1});
  std::chrono::microseconds poll = kFirstPoll;
  for (;;) {
    for (int src = 0; src < size_; ++src) {
      if (src == rank_) continue;
      int64_t announced = store_->add(key(src, rank_, tag), 0);
      std::lock_guard<std::mutex> lock(mutex_);
      int64_t& received = received_[{src, tag}];
      if (announced > received) {
        ++received;
        return src;
      }
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      std::rethrow_exception(
          makeBackendError("collie: recv from any source on rank " + std::to_string(rank_) +
                           ": no rank sent to this rank with tag " + std::to_string(tag) +
                           " within " + std::to_string(timeout.count()) + " ms"));
    }
    std::this_thread::sleep_for(poll);
    poll = std::min<std::chrono::microseconds>(poll * 2, kLongestPoll);
  }
}

void P2pAnnouncer::run() {
  std::chrono::milliseconds check = kFirstCheck;
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    if (announcing_) {
      cv_.wait(lock, [this] { return stopping_ || !pending_.empty(); });
    } else {
      // Counting only: look for the key while sends wait to be announced.
      cv_.wait_for(lock, check, [this] { return stopping_; });
      check = std::min(check * 2, kLongestCheck);
      if (!stopping_ && !pending_.empty()) {
        lock.unlock();
        bool asked = false;
        try {
          asked = store_->check({kAnySourceKey});
        } catch (const std::exception&) {
          // The store is gone (the job is ending): nothing to announce to.
        }
        lock.lock();
        announcing_ = announcing_ || asked;
        if (!announcing_) continue;
      }
    }
    if (stopping_) return;  // stop() announces what is left
    std::map<std::pair<int, int>, int64_t> batch;
    batch.swap(pending_);
    lock.unlock();
    announce(batch);
    lock.lock();
  }
}

void P2pAnnouncer::announce(const std::map<std::pair<int, int>, int64_t>& batch, bool quiet) {
  for (const auto& [to, count] : batch) {
    const int dst = to.first;
    try {
      store_->add(key(rank_, dst, to.second), count);
    } catch (const std::exception& e) {
      if (quiet) return;
      std::lock_guard<std::mutex> lock(mutex_);
      if (!failed_) {
        LOG(WARNING) << "collie: rank " << rank_
                     << " could not announce a send in the c10d store (receives from any "
                        "source on rank "
                     << dst << " will not see it): " << e.what();
      }
      failed_ = true;
    }
  }
}

void P2pAnnouncer::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  // Whatever is not announced yet, counted sends too: a receive from any source posted
  // after this rank left must still find them. One store round trip per peer and tag
  // this rank sent to; a store that is gone by now (the job is ending) is no error.
  std::map<std::pair<int, int>, int64_t> batch;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    batch.swap(pending_);
  }
  announce(batch, /*quiet=*/!announcing_);
}

}  // namespace torch_collie
