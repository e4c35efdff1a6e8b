// Segment: one rank's shared-memory segment (see shm_layout.h), created by its owner
// or mapped by a peer.
//
// create() makes a POSIX shm object named "/collie-<job tag>-<32 random hex digits>"
// (shm_names.h; mode 0600, O_EXCL), sizes and allocates it (so a full /dev/shm fails
// here, not with SIGBUS later), maps it and fills in the header; a failure on the way
// removes the name before create() returns. The name and a random nonce are what the
// owner publishes through the job's (secret-protected) store; open() maps a peer's
// segment by that name and accepts it only if the header carries the expected magic,
// rank, geometry and nonce. The owner unlinks the name as soon as every peer mapped it
// or connecting failed, and in its destructor at the latest. A rank killed during
// connect cannot: `collie run` removes its job's names when it exits (shm_names.h).
//
// Thread safety: a Segment is used by one thread; the shared memory it maps is not.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "collie/status.h"
#include "transports/shm/shm_layout.h"

namespace collie::shm {

struct SegmentGeometry {
  int rank = 0;
  int nranks = 1;
  int nchannels = 1;
  uint64_t fifoBytes = 0;  // power of two
};

// Lower-case hex of `n` bytes, and `n` bytes from the OS's CSPRNG (names, nonces).
std::string toHex(const uint8_t* bytes, size_t n);
Status randomBytes(uint8_t* out, size_t n);

class Segment {
 public:
  ~Segment();
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;

  // Creates this rank's segment with one FIFO slot per rank in `senders` (in order),
  // named after `jobTag` (jobScopeTag()). On failure nothing is left in /dev/shm.
  static Result<std::unique_ptr<Segment>> create(const SegmentGeometry& geometry,
                                                 const std::vector<int>& senders,
                                                 std::string_view jobTag);
  // Maps a peer's segment. `expected` gives the peer's rank, nranks and nchannels.
  static Result<std::unique_ptr<Segment>> open(const std::string& name, const std::string& nonceHex,
                                               const SegmentGeometry& expected);

  // Validates a peer's segment image held in `base[0, size)` (at least a page) as
  // open() does, without mapping anything: for tests and fuzzing. Pure.
  static Status validateImage(const uint8_t* base, size_t size, const std::string& nonceHex,
                              const SegmentGeometry& expected);

  // Removes the name from /dev/shm (owner only; idempotent). Mappings stay valid.
  void unlink();

  const std::string& name() const { return name_; }
  std::string nonceHex() const;
  SegmentHeader* header() const { return header_; }
  uint64_t fifoBytes() const { return fifoBytes_; }
  // The FIFO slot that rank `sender` writes into, or -1 when it has none.
  int slotOf(int sender) const;
  FifoControl* fifoControl(int slot, int channel) const;
  uint8_t* fifoData(int slot, int channel) const;

 private:
  Segment() = default;
  Status validate(const std::string& nonceHex, const SegmentGeometry& expected);

  std::string name_;
  bool owner_ = false;
  bool unlinked_ = false;
  uint8_t* base_ = nullptr;
  size_t size_ = 0;
  SegmentHeader* header_ = nullptr;
  // Validated copies of the header's geometry (a peer could rewrite the header).
  int nranks_ = 0;
  int nchannels_ = 0;
  int nslots_ = 0;
  uint64_t fifoBytes_ = 0;
  uint64_t fifoStride_ = 0;
  uint64_t fifoBase_ = 0;
  std::vector<int32_t> slots_;  // sender rank -> slot
};

// Inode of this process's pid namespace (0 if unknown).
uint64_t currentPidNamespace();

}  // namespace collie::shm
