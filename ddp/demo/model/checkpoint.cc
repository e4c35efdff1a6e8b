#include "ddp/demo/model/checkpoint.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "ddp/timeline.h"

namespace collie::ddp {
namespace {

constexpr char kMagic[8] = {'C', 'O', 'L', 'L', 'I', 'E', 'C', 'K'};
constexpr uint32_t kVersion = 1;
constexpr uint64_t kMaxTensors = 1u << 20;

template <typename T>
void put(std::string* out, T value) {
  out->append(reinterpret_cast<const char*>(&value), sizeof(value));
}

void putTensors(std::string* out, const std::vector<std::vector<float>>& tensors) {
  put<uint64_t>(out, tensors.size());
  for (const auto& t : tensors) {
    put<uint64_t>(out, t.size());
    out->append(reinterpret_cast<const char*>(t.data()), t.size() * sizeof(float));
  }
}

class Reader {
 public:
  explicit Reader(const std::string& data) : data_(data) {}
  template <typename T>
  bool get(T* value) {
    if (data_.size() - pos_ < sizeof(T)) return false;
    std::memcpy(value, data_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  bool getTensors(std::vector<std::vector<float>>* tensors) {
    uint64_t n = 0;
    if (!get(&n) || n > kMaxTensors) return false;
    tensors->resize(n);
    for (auto& t : *tensors) {
      uint64_t count = 0;
      if (!get(&count) || count > (data_.size() - pos_) / sizeof(float)) return false;
      t.resize(count);
      std::memcpy(t.data(), data_.data() + pos_, count * sizeof(float));
      pos_ += count * sizeof(float);
    }
    return true;
  }
  bool atEnd() const { return pos_ == data_.size(); }

 private:
  const std::string& data_;
  size_t pos_ = 0;
};

}  // namespace

std::string checkpointPath(const std::string& dir) { return dir + "/collie_ddp_checkpoint.bin"; }

Status saveCheckpoint(const std::string& path, const Checkpoint& c) {
  std::string out(kMagic, sizeof(kMagic));
  put<uint32_t>(&out, kVersion);
  put<uint64_t>(&out, c.step);
  put<uint64_t>(&out, c.epoch);
  put<int64_t>(&out, c.optimizerSteps);
  put<uint32_t>(&out, static_cast<uint32_t>(c.optimizer.size()));
  out += c.optimizer;
  putTensors(&out, c.params);
  putTensors(&out, c.optimizerState);
  // The directory is created on first use, like torch.save's callers expect of a run dir.
  std::error_code ec;
  std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (!dir.empty() && !std::filesystem::create_directories(dir, ec) && ec) {
    return systemError("saving checkpoint: cannot create directory " + dir.string(), ec.value());
  }
  return writeFileAtomically(path, out).withContext("saving checkpoint");
}

Result<Checkpoint> loadCheckpoint(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return notFound("no checkpoint at " + path + ": " + std::strerror(errno));
  std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto bad = [&](const char* what) {
    return invalidArgument("checkpoint " + path + " is malformed (" + what +
                           "); delete it or resume from another one");
  };
  if (data.size() < sizeof(kMagic) || std::memcmp(data.data(), kMagic, sizeof(kMagic)) != 0) {
    return bad("magic");
  }
  std::string body = data.substr(sizeof(kMagic));
  Reader r(body);
  uint32_t version = 0, nameLen = 0;
  Checkpoint c;
  if (!r.get(&version) || version != kVersion) return bad("version");
  if (!r.get(&c.step) || !r.get(&c.epoch) || !r.get(&c.optimizerSteps)) return bad("header");
  if (!r.get(&nameLen) || nameLen > 64) return bad("optimizer name");
  for (uint32_t i = 0; i < nameLen; ++i) {
    char ch = 0;
    if (!r.get(&ch)) return bad("optimizer name");
    c.optimizer.push_back(ch);
  }
  if (!r.getTensors(&c.params)) return bad("parameters");
  if (!r.getTensors(&c.optimizerState)) return bad("optimizer state");
  if (!r.atEnd()) return bad("trailing bytes");
  return c;
}

}  // namespace collie::ddp
