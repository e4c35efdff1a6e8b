// The rendezvous store's knobs (core/bootstrap/tcp_store_server.cc, and where the store
// of a torchrun/mpirun job listens, core/comm/launcher_environment.cc).
#include "core/bootstrap/store_knobs.h"

#include "core/config/knob_reader.h"
#include "core/config/knob_registry.h"

namespace collie {

void registerStoreKnobs(KnobRegistry& registry) {
  using namespace knobs;  // NOLINT(build/namespaces)
  (void)registry.add(KnobTable{
      "store",
      "the rendezvous store server (a store started without a communicator reads the "
      "environment)",
      {
          duration("COLLIE_STORE_HANDSHAKE_TIMEOUT", "5s", 100 * kKnobMs, 120 * kKnobSecond,
                   "the store drops a connection that has not sent a valid job secret within "
                   "this long"),
          integer("COLLIE_STORE_MAX_PENDING", "256", 1, 65536,
                  "unauthenticated connections the store holds at once; a new one evicts the "
                  "oldest pending over 500 ms, else is refused (clients retry)"),
          integer("COLLIE_STORE_MAX_PENDING_PER_HOST", "32", 1, 65536,
                  "unauthenticated connections the store holds per source address; a new one "
                  "evicts that address's oldest pending over 500 ms, else is refused"),
          text("COLLIE_STORE_BIND", "",
               "address the store of a torchrun/mpirun job listens on (default: MASTER_ADDR's "
               "or COLLIE_MASTER_ADDR's when local, else COLLIE_SOCKET_IFNAME's interface, else "
               "all; '*' for all)"),
      },
      [](const Config& config) { return StoreKnobs::parse(config).status(); }});
}

Result<StoreKnobs> StoreKnobs::parse(const Config& config) {
  KnobReader read(config);
  StoreKnobs knobs;
  knobs.handshakeTimeout = read.duration("COLLIE_STORE_HANDSHAKE_TIMEOUT");
  knobs.maxPending = static_cast<size_t>(read.integer("COLLIE_STORE_MAX_PENDING"));
  knobs.maxPendingPerHost = static_cast<size_t>(read.integer("COLLIE_STORE_MAX_PENDING_PER_HOST"));
  knobs.bind = read.text("COLLIE_STORE_BIND");
  return read.finish(knobs);
}

}  // namespace collie
