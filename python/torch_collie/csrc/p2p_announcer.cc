#include "p2p_announcer.h"

#include <c10/util/Exception.h>
#include <c10/util/Logging.h>

#include <algorithm>

#include "work.h"

namespace torch_collie {

namespace {
constexpr std::chrono::microseconds kFirstPoll{200};
constexpr std::chrono::milliseconds kLongestPoll{20};
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
  }
  cv_.notify_all();
}

void P2pAnnouncer::received(int src, int tag) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++received_[{src, tag}];
}

int P2pAnnouncer::pickSource(int tag, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
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
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    cv_.wait(lock, [this] { return stopping_ || !pending_.empty(); });
    if (pending_.empty()) return;  // stopping, nothing left
    std::map<std::pair<int, int>, int64_t> batch;
    batch.swap(pending_);
    lock.unlock();
    for (const auto& [to, count] : batch) {
      const int dst = to.first;
      try {
        store_->add(key(rank_, dst, to.second), count);
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> relock(mutex_);
        if (!failed_) {
          LOG(WARNING) << "collie: rank " << rank_
                       << " could not announce a send in the c10d store (receives from any "
                          "source on rank "
                       << dst << " will not see it): " << e.what();
        }
        failed_ = true;
      }
    }
    lock.lock();
  }
}

void P2pAnnouncer::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

}  // namespace torch_collie
