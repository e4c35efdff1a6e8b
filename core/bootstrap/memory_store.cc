// Store for ranks that are threads of one process.
#include <condition_variable>
#include <map>
#include <mutex>

#include "collie/store.h"

namespace collie {
namespace {

class InMemoryStore final : public Store {
 public:
  Status set(const std::string& key, const Bytes& value) override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      values_[key] = value;
    }
    changed_.notify_all();
    return Status();
  }

  Result<Bytes> get(const std::string& key, Deadline deadline) override {
    std::unique_lock<std::mutex> lock(mutex_);
    bool found = changed_.wait_until(lock, deadline, [&] { return values_.count(key) != 0; });
    if (!found) return timeoutError("store key '" + key + "' was not set before the deadline");
    return values_[key];
  }

  Result<int64_t> add(const std::string& key, int64_t delta) override {
    int64_t result;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      result = (counters_[key] += delta);
      Bytes text(reinterpret_cast<const uint8_t*>(&result),
                 reinterpret_cast<const uint8_t*>(&result) + sizeof(result));
      values_[key] = text;
    }
    changed_.notify_all();
    return result;
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, Bytes> values_;
  std::map<std::string, int64_t> counters_;
};

}  // namespace

std::shared_ptr<Store> makeInMemoryStore() { return std::make_shared<InMemoryStore>(); }

}  // namespace collie
