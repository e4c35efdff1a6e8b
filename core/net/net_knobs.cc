// The knobs of collie's sockets: which interface the store, the unique id and the tcp
// transport use, and the congestion control of data sockets (tcp's and UCX's).
#include "core/net/net_knobs.h"

#include "core/config/knob_reader.h"
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
      },
      [](const Config& config) { return NetKnobs::parse(config).status(); }});
}

Result<NetKnobs> NetKnobs::parse(const Config& config) {
  KnobReader read(config);
  NetKnobs knobs;
  knobs.socketInterfaces = read.text("COLLIE_SOCKET_IFNAME");
  knobs.tcpCongestion = read.text("COLLIE_TCP_CONGESTION");
  return read.finish(knobs);
}

}  // namespace collie
