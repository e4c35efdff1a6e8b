#include "transports/ucx/ucx_wires.h"

#include <uct/api/uct.h>

#include <cstdlib>
#include <initializer_list>

namespace collie::ucx {
namespace {

bool startsWithAny(const std::string& tl, std::initializer_list<const char*> prefixes) {
  for (const char* prefix : prefixes) {
    if (tl.rfind(prefix, 0) == 0) return true;
  }
  return false;
}

constexpr std::initializer_list<const char*> kRdmaFamilies = {"rc", "ud", "dc"};

// Whether UCX_TLS lets UCX use the RDMA transport family `family` ("rc", "ud", "dc").
bool tlsAllows(const std::vector<std::string>& tls, const char* family) {
  if (tls.empty() || tls[0].empty()) return true;
  const bool exclude = tls[0][0] == '^';
  for (size_t i = 0; i < tls.size(); ++i) {
    std::string tl = (i == 0 && exclude) ? tls[i].substr(1) : tls[i];
    if (tl == "all" || tl == "ib" || startsWithAny(tl, {family})) return !exclude;
  }
  return exclude;
}

}  // namespace

std::string UcxSelection::effectiveTls() const {
  if (!tls.empty()) return tls;
  const char* env = std::getenv("UCX_TLS");
  return env == nullptr ? "" : env;
}

std::vector<std::string> tlsList(const UcxSelection& selection) {
  std::vector<std::string> out;
  const std::string list = selection.effectiveTls();
  if (list.empty()) return out;
  size_t start = 0;
  while (start <= list.size()) {
    size_t comma = list.find(',', start);
    out.push_back(
        list.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

bool networkTransportAllowed(const UcxSelection& selection) {
  std::vector<std::string> tls = tlsList(selection);
  if (tls.empty() || tls[0].empty() || tls[0][0] == '^') return true;
  for (const std::string& tl : tls) {
    if (startsWithAny(tl, {"all", "tcp", "rc", "ud", "dc", "ib"})) return true;
  }
  return false;
}

bool tcpOnly(const UcxSelection& selection) {
  std::vector<std::string> tls = tlsList(selection);
  bool tcp = false;
  for (const std::string& tl : tls) {
    if (tl.empty() || tl[0] == '^' || startsWithAny(tl, {"all", "rc", "ud", "dc", "ib"})) {
      return false;
    }
    tcp = tcp || startsWithAny(tl, {"tcp"});
  }
  return tcp;
}

std::vector<UctResource> uctResources() {
  std::vector<UctResource> out;
  uct_component_h* components = nullptr;
  unsigned count = 0;
  if (uct_query_components(&components, &count) != UCS_OK) return out;
  for (unsigned c = 0; c < count; ++c) {
    uct_component_attr_t attr{};
    attr.field_mask = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCE_COUNT;
    if (uct_component_query(components[c], &attr) != UCS_OK) continue;
    std::vector<uct_md_resource_desc_t> mds(attr.md_resource_count);
    attr.field_mask = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCES;
    attr.md_resources = mds.data();
    if (uct_component_query(components[c], &attr) != UCS_OK) continue;
    for (const uct_md_resource_desc_t& md : mds) {
      uct_md_config_t* config = nullptr;
      if (uct_md_config_read(components[c], nullptr, nullptr, &config) != UCS_OK) continue;
      uct_md_h handle = nullptr;
      ucs_status_t st = uct_md_open(components[c], md.md_name, config, &handle);
      uct_config_release(config);
      if (st != UCS_OK) continue;
      uct_tl_resource_desc_t* tls = nullptr;
      unsigned ntls = 0;
      if (uct_md_query_tl_resources(handle, &tls, &ntls) == UCS_OK) {
        for (unsigned t = 0; t < ntls; ++t) out.push_back({tls[t].tl_name, tls[t].dev_name});
        uct_release_tl_resource_list(tls);
      }
      uct_md_close(handle);
    }
  }
  uct_release_component_list(components);
  return out;
}

bool rdmaWireIn(const std::vector<UctResource>& resources, const std::vector<std::string>& tls) {
  for (const UctResource& resource : resources) {
    for (const char* family : kRdmaFamilies) {
      if (startsWithAny(resource.transport, {family}) && tlsAllows(tls, family)) return true;
    }
  }
  return false;
}

bool rdmaWireUsable(const UcxSelection& selection) {
  return rdmaWireIn(uctResources(), tlsList(selection));
}

}  // namespace collie::ucx
