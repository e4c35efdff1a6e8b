// `collie info` support for the ucx transport: the UCT transports and devices UCX
// can use on this host (what UCX_TLS / UCX_NET_DEVICES choose from), and whether UCX
// is chosen between hosts by default (only with an RDMA wire, see ucx_transport.cc).
#include <ucp/api/ucp.h>

#include <string>
#include <vector>

#include "transports/ucx/ucx_wires.h"

namespace collie::ucx {

std::string describeUcx() {
  unsigned major = 0, minor = 0, release = 0;
  ucp_get_version(&major, &minor, &release);
  std::string out = "UCX " + std::to_string(major) + "." + std::to_string(minor) + "." +
                    std::to_string(release) + "; transport/device:";
  const std::vector<UctResource> resources = uctResources();
  for (const UctResource& resource : resources) {
    out += " " + resource.transport + "/" + resource.device;
  }
  Result<UcxSelection> selection = UcxSelection::parse(Config::fromEnvironment());
  if (!selection.isOk()) return out + "; " + selection.status().message();
  out += rdmaWireIn(resources, tlsList(*selection))
             ? "; RDMA wire: yes (ucx serves peers on other hosts)"
             : "; RDMA wire: none (peers on other hosts use tcp unless COLLIE_TRANSPORT=ucx)";
  return out;
}

}  // namespace collie::ucx
