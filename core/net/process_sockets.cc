#include "core/net/process_sockets.h"

#include <dirent.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "core/net/socket.h"

namespace collie::net {
namespace {

int intOption(int fd, int level, int option) {
  int value = -1;
  socklen_t length = sizeof(value);
  if (::getsockopt(fd, level, option, &value, &length) != 0) return -1;
  return value;
}

std::string addressOf(int fd, bool peer) {
  SockAddr addr;
  addr.length = sizeof(addr.storage);
  auto* raw = reinterpret_cast<sockaddr*>(&addr.storage);
  int rc = peer ? ::getpeername(fd, raw, &addr.length) : ::getsockname(fd, raw, &addr.length);
  return rc == 0 ? addr.toString() : "?";
}

// "ip:port" -> {ip, port}; the ip keeps IPv6 brackets. Empty ip when there is no ':'.
std::pair<std::string, std::string> splitAtPort(const std::string& address) {
  size_t colon = address.rfind(':');
  if (colon == std::string::npos) return {"", ""};
  return {address.substr(0, colon), address.substr(colon + 1)};
}

}  // namespace

Result<std::vector<TcpSocketInfo>> processTcpSockets() {
  std::vector<TcpSocketInfo> out;
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return systemError("listing this process's sockets (/proc/self/fd)", errno);
  while (struct dirent* entry = ::readdir(dir)) {
    if (entry->d_name[0] < '0' || entry->d_name[0] > '9') continue;
    int fd = std::atoi(entry->d_name);
    if (fd == ::dirfd(dir)) continue;
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    int domain = intOption(fd, SOL_SOCKET, SO_DOMAIN);
    if ((domain != AF_INET && domain != AF_INET6) ||
        intOption(fd, SOL_SOCKET, SO_TYPE) != SOCK_STREAM ||
        intOption(fd, SOL_SOCKET, SO_PROTOCOL) != IPPROTO_TCP) {
      continue;
    }
    TcpSocketInfo info;
    info.fd = fd;
    info.inode = static_cast<uint64_t>(st.st_ino);
    info.listening = intOption(fd, SOL_SOCKET, SO_ACCEPTCONN) == 1;
    info.local = addressOf(fd, false);
    info.peer = info.listening ? "?" : addressOf(fd, true);
    out.push_back(std::move(info));
  }
  ::closedir(dir);
  return out;
}

std::string congestionControlOf(int fd) {
  char name[16] = {0};  // TCP_CA_NAME_MAX in the kernel
  socklen_t length = sizeof(name);
  if (::getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, &length) != 0) return "?";
  return std::string(name, strnlen(name, sizeof(name)));
}

std::string systemCongestionControl() {
  std::string name;
  std::ifstream("/proc/sys/net/ipv4/tcp_congestion_control") >> name;
  return name.empty() ? "?" : name;
}

bool setsCongestionControl(const std::string& setting) {
  return !setting.empty() && setting != "system";
}

bool setCongestionControl(int fd, const std::string& name, int* err) {
  if (::setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name.data(),
                   static_cast<socklen_t>(name.size())) == 0) {
    return true;
  }
  if (err != nullptr) *err = errno;
  return false;
}

bool reachesListener(const std::string& peer, const std::string& listener) {
  auto [peerIp, peerPort] = splitAtPort(peer);
  auto [listenIp, listenPort] = splitAtPort(listener);
  if (peerPort.empty() || peerPort != listenPort) return false;
  return peerIp == listenIp || listenIp == "0.0.0.0" || listenIp == "[::]";
}

}  // namespace collie::net
