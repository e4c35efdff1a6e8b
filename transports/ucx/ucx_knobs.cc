// The ucx transport's knobs, registered with the transport (transports/ucx/CMakeLists.txt):
// which UCX transports and devices one communicator's UCX context may use, set on that
// context (ucp_config_modify) instead of the process-wide UCX_* variables.
#include "core/config/knob_reader.h"
#include "core/config/knob_registry.h"
#include "transports/ucx/ucx_wires.h"

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
      },
      [](const Config& config) { return ucx::UcxSelection::parse(config).status(); }});
}

namespace ucx {

Result<UcxSelection> UcxSelection::parse(const Config& config) {
  KnobReader read(config);
  UcxSelection selection;
  selection.tls = read.text("COLLIE_UCX_TLS");
  selection.netDevices = read.text("COLLIE_UCX_NET_DEVICES");
  return read.finish(selection);
}

}  // namespace ucx
}  // namespace collie
