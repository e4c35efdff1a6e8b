// Interface selection per COLLIE_SOCKET_IFNAME (see socket.h).
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>

#include <algorithm>
#include <cerrno>
#include <sstream>

#include "core/net/socket.h"

namespace collie::net {
namespace {

struct Spec {
  bool exclude = false;
  bool exact = false;
  std::vector<std::string> names;
};

Spec parseSpec(const std::string& text) {
  Spec spec;
  size_t pos = 0;
  if (pos < text.size() && text[pos] == '^') {
    spec.exclude = true;
    ++pos;
  }
  if (pos < text.size() && text[pos] == '=') {
    spec.exact = true;
    ++pos;
  }
  std::stringstream list(text.substr(pos));
  std::string item;
  while (std::getline(list, item, ',')) {
    if (!item.empty()) spec.names.push_back(item);
  }
  return spec;
}

}  // namespace

bool interfaceMatches(const std::string& specText, const std::string& name) {
  Spec spec = parseSpec(specText);
  bool listed = false;
  for (const std::string& entry : spec.names) {
    if (spec.exact ? name == entry : name.compare(0, entry.size(), entry) == 0) {
      listed = true;
      break;
    }
  }
  return spec.exclude ? !listed : listed;
}

Result<std::vector<InterfaceAddress>> listInterfaces() {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return systemError("getifaddrs", errno);
  std::vector<InterfaceAddress> out;
  for (ifaddrs* ifa = list; ifa != nullptr; ifa = ifa->ifa_next) {
    if (ifa->ifa_addr == nullptr || (ifa->ifa_flags & IFF_UP) == 0) continue;
    char buf[INET6_ADDRSTRLEN] = {0};
    int family = ifa->ifa_addr->sa_family;
    if (family == AF_INET) {
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(ifa->ifa_addr)->sin_addr, buf,
                sizeof(buf));
    } else if (family == AF_INET6) {
      const in6_addr& a6 = reinterpret_cast<sockaddr_in6*>(ifa->ifa_addr)->sin6_addr;
      if (IN6_IS_ADDR_LINKLOCAL(&a6)) continue;  // needs a scope id; not advertisable
      inet_ntop(AF_INET6, &a6, buf, sizeof(buf));
    } else {
      continue;
    }
    out.push_back({ifa->ifa_name, buf, (ifa->ifa_flags & IFF_LOOPBACK) != 0});
  }
  ::freeifaddrs(list);
  // IPv4 before IPv6 within one interface, interface order kept.
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    if (a.name != b.name) return false;
    return a.address.find(':') == std::string::npos && b.address.find(':') != std::string::npos;
  });
  return out;
}

bool isAddressOfThisHost(const std::string& host) {
  Result<std::vector<InterfaceAddress>> interfaces = listInterfaces();
  Result<std::vector<SockAddr>> addrs = resolve(host, 0);
  if (host.empty() || !interfaces.isOk() || !addrs.isOk()) return false;
  for (const SockAddr& addr : *addrs) {
    std::string text = addr.toString();
    text = text.substr(0, text.rfind(':'));
    if (text.size() >= 2 && text.front() == '[') text = text.substr(1, text.size() - 2);
    const bool named = text != host;  // resolved from a name, not given as a number
    for (const InterfaceAddress& ifc : *interfaces) {
      if (ifc.address != text) continue;
      if (ifc.loopback && named && host != "localhost") continue;
      return true;
    }
  }
  return false;
}

Result<InterfaceAddress> selectInterface(const std::string& spec) {
  Result<std::vector<InterfaceAddress>> all = listInterfaces();
  if (!all.isOk()) return all.status();
  if (spec.empty()) {
    const InterfaceAddress* loopback = nullptr;
    for (const InterfaceAddress& ifc : *all) {
      bool v4 = ifc.address.find(':') == std::string::npos;
      if (!ifc.loopback && v4) return ifc;
      if (ifc.loopback && loopback == nullptr) loopback = &ifc;
    }
    for (const InterfaceAddress& ifc : *all) {
      if (!ifc.loopback) return ifc;
    }
    if (loopback != nullptr) return *loopback;
    return notFound("no network interface is up");
  }
  for (const InterfaceAddress& ifc : *all) {
    if (interfaceMatches(spec, ifc.name)) return ifc;
  }
  std::string names;
  for (const InterfaceAddress& ifc : *all) {
    if (names.find(ifc.name) == std::string::npos) names += (names.empty() ? "" : ", ") + ifc.name;
  }
  return notFound("no up interface matches COLLIE_SOCKET_IFNAME='" + spec +
                  "' (available: " + names + ")");
}

}  // namespace collie::net
