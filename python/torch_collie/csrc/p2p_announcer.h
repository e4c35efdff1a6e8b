// P2pAnnouncer: how a receive from any source learns which rank sent.
//
// collie matches point-to-point messages per pair of ranks and tag; it has no wildcard
// receive. So the sends of the backend are announced in the group's c10d store: a
// counter per (source, destination, tag), "collie_p2p/<src>_<dst>_t<tag>", raised by a
// thread of this class (sends never wait for the store; bursts are summed into one
// add). A receive from any source with tag t polls the counters of tag t into this rank
// and takes the lowest rank that has announced more messages with that tag than this rank
// has received from it (directed receives count too), then receives from that rank as
// usual (gloo's recvAnysource matches the tag the same way).
//
// Announcing costs a store round trip per burst of sends, which a group that never
// receives from any source should not pay (measured: a 4 KiB send/recv round trip
// between two ranks took 290 us with it, 155 us without). So sends are only counted
// until some rank of the group first receives from any source: that rank sets
// "collie_p2p/any_source" in the store, and the thread of every rank holding sends not
// yet announced checks that key, 100 ms after its first send, then at intervals
// doubling up to 1 s (one store check a second at most, as ProcessGroupNCCL's monitor
// polls). Once the key is set, the rank announces everything it counted so far and
// every send from then on, as above. The first receive from any source of a group
// therefore waits up to a second for its senders; later ones do not. stop() announces
// what is left, counted sends too (a store round trip per peer and tag the rank sent
// to, at the group's end), so a receive from any source posted after its sender left
// the group still finds the send.
//
// pickSource waits until a sender has *posted* its send (not until data arrived), so a
// receive from any source returns its Work only after that. Every wait has a deadline:
// pickSource throws DistBackendError when none arrived in time.
//
// Thread safety: all methods may be called from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <utility>
#include <vector>

namespace torch_collie {

class P2pAnnouncer {
 public:
  P2pAnnouncer(c10::intrusive_ptr<c10d::Store> store, int rank, int size);
  ~P2pAnnouncer();

  // One message with `tag` from this rank to `dst` (announced soon, once announcing).
  void sent(int dst, int tag);
  // One message with `tag` this rank receives from `src` by a directed receive.
  void received(int src, int tag);
  // The source of the next receive from any source with `tag` (counted as received).
  int pickSource(int tag, std::chrono::milliseconds timeout);
  // Joins the thread and announces every send not announced yet.
  void stop();

 private:
  void run();
  // Adds `batch`'s counts to the store's counters (on the thread, or at stop()); a
  // failure is warned about once, unless `quiet` (it then ends the batch).
  void announce(const std::map<std::pair<int, int>, int64_t>& batch, bool quiet = false);
  std::string key(int src, int dst, int tag) const;

  const c10::intrusive_ptr<c10d::Store> store_;
  const int rank_;
  const int size_;
  std::mutex mutex_;
  std::condition_variable cv_;
  // (destination, tag) -> messages not yet announced
  std::map<std::pair<int, int>, int64_t> pending_;
  std::map<std::pair<int, int>, int64_t> received_;  // per (source, tag)
  // Some rank of the group received from any source: every send is announced (above).
  bool announcing_ = false;
  bool requested_ = false;  // this rank has set the store's key
  bool stopping_ = false;
  bool failed_ = false;  // the store refused an announcement (warned once)
  std::thread thread_;   // started by the first send
};

}  // namespace torch_collie
