#include "transports/ibverbs/ib_device.h"

#include <cstring>
#include <memory>
#include <sstream>

#include "core/log/log.h"

namespace collie::ib {

HcaSpec parseHcaSpec(const std::string& text) {
  HcaSpec spec;
  std::string s = text;
  if (!s.empty() && s[0] == '^') {
    spec.exclude = true;
    s.erase(0, 1);
  }
  if (!s.empty() && s[0] == '=') {
    spec.exact = true;
    s.erase(0, 1);
  }
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (item.empty()) continue;
    HcaSpec::Entry entry;
    size_t colon = item.find(':');
    entry.device = item.substr(0, colon);
    if (colon != std::string::npos) {
      char* end = nullptr;
      long port = std::strtol(item.c_str() + colon + 1, &end, 10);
      entry.port = (end != item.c_str() + colon + 1 && *end == '\0' && port > 0) ? int(port) : -1;
    }
    spec.entries.push_back(entry);
  }
  return spec;
}

bool hcaMatches(const HcaSpec& spec, const std::string& device, int port) {
  if (spec.entries.empty()) return true;
  bool listed = false;
  for (const HcaSpec::Entry& e : spec.entries) {
    bool name = spec.exact ? device == e.device : device.rfind(e.device, 0) == 0;
    if (name && (e.port < 0 || e.port == port)) listed = true;
  }
  return spec.exclude ? !listed : listed;
}

IbPort::~IbPort() {
  if (pd != nullptr) ibv_dealloc_pd(pd);
  if (context != nullptr) ibv_close_device(context);
}

namespace {

struct DeviceList {
  ibv_device** list = nullptr;
  int count = 0;
  DeviceList() { list = ibv_get_device_list(&count); }
  ~DeviceList() {
    if (list != nullptr) ibv_free_device_list(list);
  }
};

bool ipv4Mapped(const ibv_gid& gid) {
  static const uint8_t kPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return std::memcmp(gid.raw, kPrefix, 12) == 0;
}

int chooseGid(ibv_context* ctx, int port, int tableLength) {
  int best = 0;
  for (int i = 0; i < tableLength; ++i) {
    ibv_gid gid{};
    if (ibv_query_gid(ctx, static_cast<uint8_t>(port), i, &gid) != 0) continue;
    if (ipv4Mapped(gid)) best = i;
  }
  return best;
}

}  // namespace

std::vector<std::string> describeIbPorts() {
  std::vector<std::string> out;
  DeviceList devices;
  for (int d = 0; d < devices.count; ++d) {
    ibv_context* ctx = ibv_open_device(devices.list[d]);
    if (ctx == nullptr) continue;
    ibv_device_attr attr{};
    if (ibv_query_device(ctx, &attr) == 0) {
      for (int p = 1; p <= attr.phys_port_cnt; ++p) {
        ibv_port_attr port{};
        if (ibv_query_port(ctx, static_cast<uint8_t>(p), &port) != 0) continue;
        std::ostringstream line;
        line << ibv_get_device_name(devices.list[d]) << ":" << p << " "
             << (port.link_layer == IBV_LINK_LAYER_ETHERNET ? "RoCE" : "IB") << " "
             << ibv_port_state_str(port.state) << " lid " << port.lid << " mtu "
             << (128 << port.active_mtu);
        out.push_back(line.str());
      }
    }
    ibv_close_device(ctx);
  }
  return out;
}

Result<std::unique_ptr<IbPort>> openIbPort(const std::string& hcaSpec, int gidIndex) {
  DeviceList devices;
  if (devices.list == nullptr || devices.count == 0) {
    return unsupported("no InfiniBand device found");
  }
  HcaSpec spec = parseHcaSpec(hcaSpec);
  std::string seen;
  for (int d = 0; d < devices.count; ++d) {
    std::string name = ibv_get_device_name(devices.list[d]);
    ibv_context* ctx = ibv_open_device(devices.list[d]);
    if (ctx == nullptr) continue;
    ibv_device_attr attr{};
    if (ibv_query_device(ctx, &attr) != 0) {
      ibv_close_device(ctx);
      continue;
    }
    for (int p = 1; p <= attr.phys_port_cnt; ++p) {
      ibv_port_attr port{};
      if (ibv_query_port(ctx, static_cast<uint8_t>(p), &port) != 0) continue;
      seen += (seen.empty() ? "" : ", ") + name + ":" + std::to_string(p);
      if (port.state != IBV_PORT_ACTIVE || !hcaMatches(spec, name, p)) continue;
      auto out = std::make_unique<IbPort>();
      out->context = ctx;
      out->device = name;
      out->port = p;
      out->lid = port.lid;
      out->ethernet = port.link_layer == IBV_LINK_LAYER_ETHERNET;
      out->mtu = port.active_mtu;
      out->gidIndex = gidIndex >= 0 ? gidIndex : chooseGid(ctx, p, port.gid_tbl_len);
      if (ibv_query_gid(ctx, static_cast<uint8_t>(p), out->gidIndex, &out->gid) != 0) {
        return systemError("ibverbs: querying GID " + std::to_string(out->gidIndex) + " of " +
                               name + ":" + std::to_string(p),
                           errno);
      }
      out->pd = ibv_alloc_pd(ctx);
      if (out->pd == nullptr) return systemError("ibverbs: ibv_alloc_pd on " + name, errno);
      COLLIE_LOG(INFO, NET) << "ibverbs: using " << name << ":" << p
                            << (out->ethernet ? " (RoCE, GID index " : " (IB, lid ")
                            << (out->ethernet ? out->gidIndex : out->lid) << ")";
      return out;
    }
    ibv_close_device(ctx);
  }
  return notFound("ibverbs: no active port matches COLLIE_IB_HCA='" + hcaSpec +
                  "' (ports: " + (seen.empty() ? "none" : seen) + ")");
}

}  // namespace collie::ib
