#include "transports/shm/shm_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>

#include "core/log/log.h"
#include "transports/shm/shm_names.h"

namespace collie::shm {
namespace {

uint64_t roundUp(uint64_t value, uint64_t align) { return (value + align - 1) / align * align; }

bool isPowerOfTwo(uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }

}  // namespace

std::string toHex(const uint8_t* bytes, size_t n) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * n);
  for (size_t i = 0; i < n; ++i) {
    out.push_back(kDigits[bytes[i] >> 4]);
    out.push_back(kDigits[bytes[i] & 15]);
  }
  return out;
}

Status randomBytes(uint8_t* out, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = getrandom(out + got, n - got, 0);
    if (r < 0) {
      if (errno == EINTR) continue;
      return systemError("shm: getrandom", errno);
    }
    got += static_cast<size_t>(r);
  }
  return Status();
}

uint64_t currentPidNamespace() {
  struct stat st;
  if (stat("/proc/self/ns/pid", &st) != 0) return 0;
  return static_cast<uint64_t>(st.st_ino);
}

Segment::~Segment() {
  if (base_ != nullptr) munmap(base_, size_);
  if (owner_) unlink();
}

void Segment::unlink() {
  if (!owner_ || unlinked_ || name_.empty()) return;
  unlinked_ = true;
  if (shm_unlink(name_.c_str()) != 0 && errno != ENOENT) {
    COLLIE_LOG(WARN, SHM) << "shm_unlink(" << name_ << ") failed: " << std::strerror(errno);
  }
}

std::string Segment::nonceHex() const { return toHex(header_->nonce, kNonceBytes); }

Result<std::unique_ptr<Segment>> Segment::create(const SegmentGeometry& geometry,
                                                 const std::vector<int>& senders,
                                                 std::string_view jobTag) {
  if (!isPowerOfTwo(geometry.fifoBytes) || geometry.nranks < 1 || geometry.nchannels < 1) {
    return internalError("shm: bad segment geometry");
  }
  std::unique_ptr<Segment> seg(new Segment());
  seg->owner_ = true;
  seg->nranks_ = geometry.nranks;
  seg->nchannels_ = geometry.nchannels;
  seg->nslots_ = static_cast<int>(senders.size());
  seg->fifoBytes_ = geometry.fifoBytes;
  seg->fifoStride_ = kPage + geometry.fifoBytes;
  const uint64_t slotTable = roundUp(sizeof(SegmentHeader), kCacheLine);
  seg->fifoBase_ = roundUp(slotTable + sizeof(int32_t) * geometry.nranks, kPage);
  seg->size_ =
      seg->fifoBase_ + static_cast<uint64_t>(seg->nslots_) * geometry.nchannels * seg->fifoStride_;

  Result<std::string> name = newShmName(jobTag, "");
  if (!name.isOk()) return name.status();
  seg->name_ = std::move(*name);
  int fd = shm_open(seg->name_.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) return systemError("shm: shm_open(" + seg->name_ + ", O_CREAT)", errno);
  // From here on the destructor unlinks the name on every failure path.
  int err = 0;
  if (ftruncate(fd, static_cast<off_t>(seg->size_)) != 0) {
    err = errno;
  } else {
    err = posix_fallocate(fd, 0, static_cast<off_t>(seg->size_));
  }
  if (err != 0) {
    close(fd);
    return systemError("shm: cannot allocate " + std::to_string(seg->size_) +
                           " bytes in /dev/shm for " + seg->name_ +
                           " (make /dev/shm larger or lower COLLIE_BUFFSIZE)",
                       err);
  }
  void* base = mmap(nullptr, seg->size_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  err = errno;
  close(fd);
  if (base == MAP_FAILED) return systemError("shm: mmap of " + seg->name_, err);
  seg->base_ = static_cast<uint8_t*>(base);

  auto* h = new (seg->base_) SegmentHeader();
  h->magic = kSegmentMagic;
  h->version = kLayoutVersion;
  h->rank = geometry.rank;
  h->nranks = geometry.nranks;
  h->nchannels = geometry.nchannels;
  h->nslots = seg->nslots_;
  h->pid = static_cast<int32_t>(getpid());
  h->pidNamespace = currentPidNamespace();
  h->fifoBytes = seg->fifoBytes_;
  h->fifoStride = seg->fifoStride_;
  h->fifoBase = seg->fifoBase_;
  h->slotTable = slotTable;
  h->totalBytes = seg->size_;
  COLLIE_RETURN_IF_ERROR(randomBytes(h->nonce, kNonceBytes));
  h->doorbell.store(0);
  h->sleepers.store(0);
  h->closed.store(0);
  seg->header_ = h;

  seg->slots_.assign(geometry.nranks, -1);
  for (size_t i = 0; i < senders.size(); ++i) seg->slots_[senders[i]] = static_cast<int32_t>(i);
  std::memcpy(seg->base_ + slotTable, seg->slots_.data(), sizeof(int32_t) * geometry.nranks);
  for (int slot = 0; slot < seg->nslots_; ++slot) {
    for (int ch = 0; ch < geometry.nchannels; ++ch) {
      auto* ctl = new (seg->fifoControl(slot, ch)) FifoControl();
      ctl->head.store(0);
      ctl->tail.store(0);
      ctl->attached.store(0);
    }
  }
  std::atomic_thread_fence(std::memory_order_release);
  return seg;
}

Result<std::unique_ptr<Segment>> Segment::open(const std::string& name, const std::string& nonceHex,
                                               const SegmentGeometry& expected) {
  if (!isShmName(name)) {
    return remoteError(
        "shm: rank " + std::to_string(expected.rank) + " published a malformed segment name",
        expected.rank);
  }
  std::unique_ptr<Segment> seg(new Segment());
  seg->name_ = name;
  int fd = shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) {
    return systemError("shm: cannot open rank " + std::to_string(expected.rank) + "'s segment " +
                           name + " (is it on another host or in another /dev/shm?)",
                       errno);
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int err = errno;
    close(fd);
    return systemError("shm: fstat " + name, err);
  }
  if (st.st_size < static_cast<off_t>(kPage)) {
    close(fd);
    return remoteError("shm: rank " + std::to_string(expected.rank) + "'s segment is too small",
                       expected.rank);
  }
  seg->size_ = static_cast<size_t>(st.st_size);
  void* base = mmap(nullptr, seg->size_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int err = errno;
  close(fd);
  if (base == MAP_FAILED) return systemError("shm: mmap of " + name, err);
  seg->base_ = static_cast<uint8_t*>(base);
  seg->header_ = reinterpret_cast<SegmentHeader*>(seg->base_);
  COLLIE_RETURN_IF_ERROR(seg->validate(nonceHex, expected));
  return seg;
}

Status Segment::validate(const std::string& nonceHex, const SegmentGeometry& expected) {
  const int peer = expected.rank;
  auto bad = [&](const std::string& what) {
    return remoteError("shm: rank " + std::to_string(peer) + "'s segment " + name_ +
                           " is not valid for this job (" + what + ")",
                       peer);
  };
  // Copy the header once, then check only the copy: the peer could change it meanwhile.
  SegmentHeader h;
  std::memcpy(static_cast<void*>(&h), header_, offsetof(SegmentHeader, doorbell));
  if (h.magic != kSegmentMagic || h.version != kLayoutVersion) return bad("magic/version");
  if (toHex(h.nonce, kNonceBytes) != nonceHex) return bad("nonce differs from the store's");
  if (h.rank != expected.rank || h.nranks != expected.nranks || h.nchannels != expected.nchannels) {
    return bad("rank, nranks or nchannels differ");
  }
  if (h.totalBytes != size_) return bad("size");
  if (!isPowerOfTwo(h.fifoBytes) || h.fifoStride < h.fifoBytes + sizeof(FifoControl) ||
      h.fifoStride % kPage != 0 || h.fifoBase % kPage != 0) {
    return bad("FIFO geometry");
  }
  if (h.nslots < 0 || h.nslots > h.nranks) return bad("slot count");
  // fifoBase bounds the slot table, so it must lie in the segment even without FIFOs.
  if (h.fifoBase > size_ || h.slotTable < sizeof(SegmentHeader) || h.slotTable > h.fifoBase ||
      sizeof(int32_t) * static_cast<uint64_t>(h.nranks) > h.fifoBase - h.slotTable) {
    return bad("slot table");
  }
  const uint64_t fifoSpace = static_cast<uint64_t>(h.nslots) * h.nchannels;
  if (fifoSpace != 0 &&
      (h.fifoStride > size_ / fifoSpace || h.fifoBase > size_ - fifoSpace * h.fifoStride)) {
    return bad("FIFOs exceed the segment");
  }
  nranks_ = h.nranks;
  nchannels_ = h.nchannels;
  nslots_ = h.nslots;
  fifoBytes_ = h.fifoBytes;
  fifoStride_ = h.fifoStride;
  fifoBase_ = h.fifoBase;
  slots_.resize(nranks_);
  std::memcpy(slots_.data(), base_ + h.slotTable, sizeof(int32_t) * nranks_);
  for (int32_t& slot : slots_) {
    if (slot < -1 || slot >= nslots_) return bad("slot table entry");
  }
  return Status();
}

Status Segment::validateImage(const uint8_t* base, size_t size, const std::string& nonceHex,
                              const SegmentGeometry& expected) {
  if (size < kPage) return remoteError("shm: segment image smaller than a page", expected.rank);
  Segment seg;
  seg.name_ = "(image)";
  seg.base_ = const_cast<uint8_t*>(base);  // validate() only reads
  seg.size_ = size;
  seg.header_ = reinterpret_cast<SegmentHeader*>(seg.base_);
  Status status = seg.validate(nonceHex, expected);
  seg.base_ = nullptr;  // not ours to unmap
  return status;
}

int Segment::slotOf(int sender) const {
  if (sender < 0 || sender >= static_cast<int>(slots_.size())) return -1;
  return slots_[sender];
}

FifoControl* Segment::fifoControl(int slot, int channel) const {
  uint64_t offset = fifoBase_ + (static_cast<uint64_t>(slot) * nchannels_ + channel) * fifoStride_;
  return reinterpret_cast<FifoControl*>(base_ + offset);
}

uint8_t* Segment::fifoData(int slot, int channel) const {
  return reinterpret_cast<uint8_t*>(fifoControl(slot, channel)) + kPage;
}

}  // namespace collie::shm
