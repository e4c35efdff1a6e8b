// The tcp transport's knobs, registered with the transport (transports/tcp/CMakeLists.txt).
// Its interfaces and congestion control are the net table's (core/net/net_knobs.cc).
#include "transports/tcp/tcp_knobs.h"

#include "core/config/knob_reader.h"
#include "core/config/knob_registry.h"

namespace collie {

void registerTcpKnobs(KnobRegistry& registry) {
  (void)registry.add(KnobTable{
      "tcp",
      "the tcp transport: sockets per peer and their buffers",
      {
          knobs::everyRankAlike(knobs::integer("COLLIE_NSOCKS_PERPEER", "2", 1, 16,
                                               "tcp sockets per peer and channel, striped by "
                                               "message",
                                               "NCCL_NSOCKS_PERTHREAD")),
          knobs::integer("COLLIE_SOCKET_BUFSIZE", "4M", 0, kKnobGiB,
                         "SO_SNDBUF/SO_RCVBUF of tcp data sockets (0: the system's)"),
      },
      [](const Config& config) { return TcpKnobs::parse(config).status(); }});
}

Result<TcpKnobs> TcpKnobs::parse(const Config& config) {
  KnobReader read(config);
  TcpKnobs knobs;
  knobs.socketsPerPeer = static_cast<int>(read.integer("COLLIE_NSOCKS_PERPEER"));
  knobs.socketBufferBytes = read.integer("COLLIE_SOCKET_BUFSIZE");
  return read.finish(knobs);
}

}  // namespace collie
