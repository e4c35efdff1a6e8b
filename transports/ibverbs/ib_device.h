// InfiniBand / RoCE device selection for the ibverbs transport.
//
// COLLIE_IB_HCA follows NCCL_IB_HCA: a comma list of `device[:port]` entries; names
// are prefixes unless the list starts with '='; a leading '^' excludes the listed
// entries instead ("^=mlx5_1:1" combines both). Empty selects every active port.
// COLLIE_IB_GID_INDEX picks the GID table entry for RoCE; -1 (default) chooses the
// highest IPv4-mapped GID (RoCE v2 on common drivers), else index 0.
//
// parseHcaSpec/hcaMatches are pure (unit-tested without hardware); openIbPort()
// talks to the verbs library. Thread safety: reentrant.
#pragma once

#include <infiniband/verbs.h>

#include <string>
#include <vector>

#include "collie/status.h"

namespace collie::ib {

struct HcaSpec {
  bool exclude = false;
  bool exact = false;
  struct Entry {
    std::string device;
    int port = -1;  // -1: any port
  };
  std::vector<Entry> entries;
};

HcaSpec parseHcaSpec(const std::string& text);
// Whether (device, port) is selected by `spec` (an empty spec selects everything).
bool hcaMatches(const HcaSpec& spec, const std::string& device, int port);

// An opened device port: context, protection domain and the addressing of the port.
struct IbPort {
  ibv_context* context = nullptr;
  ibv_pd* pd = nullptr;
  std::string device;
  int port = 1;
  uint16_t lid = 0;
  bool ethernet = false;  // RoCE: needs a GID
  int gidIndex = 0;
  ibv_gid gid{};
  ibv_mtu mtu = IBV_MTU_1024;

  IbPort() = default;
  IbPort(const IbPort&) = delete;
  IbPort& operator=(const IbPort&) = delete;
  ~IbPort();
};

// Names and ports of every active port, "mlx5_0:1 (IB, 200 Gb/s class)", for `collie info`.
// Empty when there is no device (or no driver).
std::vector<std::string> describeIbPorts();

// Opens the first active port selected by COLLIE_IB_HCA. Unsupported with
// "no InfiniBand device found" when the verbs library lists none, NotFound when none
// matches the spec.
Result<std::unique_ptr<IbPort>> openIbPort(const std::string& hcaSpec, int gidIndex);

}  // namespace collie::ib
