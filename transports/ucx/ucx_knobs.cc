// The ucx transport's knobs, registered with the transport (transports/ucx/CMakeLists.txt):
// which UCX transports and devices one communicator's UCX context may use, set on that
// context (ucp_config_modify) instead of the process-wide UCX_* variables.
#include "core/config/knob_registry.h"

namespace collie {

void registerUcxKnobs(KnobRegistry& registry) {
  (void)registry.add(KnobTable{
      "ucx",
      "the UCX transport's context (UCX's own UCX_* variables still apply underneath)",
      {
          knobs::text("COLLIE_UCX_TLS", "",
                      "UCX transports of this communicator's UCX context, as UCX_TLS (tcp; "
                      "posix,cma; ^ib); empty: the environment's UCX_TLS, else UCX's choice"),
          knobs::text("COLLIE_UCX_NET_DEVICES", "",
                      "network devices of this communicator's UCX context, as UCX_NET_DEVICES "
                      "(lo; eth0; mlx5_0:1); empty: the environment's UCX_NET_DEVICES, else all"),
      }});
}

}  // namespace collie
