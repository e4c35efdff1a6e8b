// `collie info` support for the ucx transport: the UCT transports and devices UCX
// can use on this host (what UCX_TLS / UCX_NET_DEVICES choose from).
#include <ucp/api/ucp.h>
#include <uct/api/uct.h>

#include <string>
#include <vector>

namespace collie::ucx {

std::string describeUcx() {
  unsigned major = 0, minor = 0, release = 0;
  ucp_get_version(&major, &minor, &release);
  std::string out = "UCX " + std::to_string(major) + "." + std::to_string(minor) + "." +
                    std::to_string(release) + "; transport/device:";
  uct_component_h* components = nullptr;
  unsigned count = 0;
  if (uct_query_components(&components, &count) != UCS_OK) return out + " (query failed)";
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
        for (unsigned t = 0; t < ntls; ++t) {
          out += std::string(" ") + tls[t].tl_name + "/" + tls[t].dev_name;
        }
        uct_release_tl_resource_list(tls);
      }
      uct_md_close(handle);
    }
  }
  uct_release_component_list(components);
  return out;
}

}  // namespace collie::ucx
