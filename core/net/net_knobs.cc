// The knobs of collie's sockets: which interface the store, the unique id and the tcp
// transport use, and the congestion control of data sockets (tcp's and UCX's).
#include "core/config/knob_registry.h"

namespace collie {

void registerNetKnobs(KnobRegistry& registry) {
  (void)registry.add(KnobTable{
      "net",
      "network interfaces and TCP settings shared by the store and the socket transports",
      {
          knobs::text("COLLIE_SOCKET_IFNAME", "",
                      "network interfaces for tcp: prefix match, '=' exact, '^' exclude (as "
                      "NCCL's)",
                      "NCCL_SOCKET_IFNAME"),
          knobs::text("COLLIE_TCP_CONGESTION", "cubic",
                      "TCP congestion control of tcp's and UCX's sockets ('system' keeps the "
                      "default)"),
      }});
}

}  // namespace collie
