#include "transports/shm/shm_names.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "core/net/job_secret.h"
#include "transports/shm/shm_segment.h"

namespace collie::shm {
namespace {

constexpr size_t kTagDigits = 16;  // publicJobTag()
constexpr size_t kRandomBytes = 16;

bool isTag(std::string_view tag) {
  if (tag.size() != kTagDigits) return false;
  for (char c : tag) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

}  // namespace

std::string jobScopeTag(const JobSecret& secret, const std::optional<LauncherScope>& launcher) {
  if (launcher) return launcherShmTag(launcher->secret, launcher->nodeRank);
  return publicJobTag(secret);
}

std::string launcherShmTag(const JobSecret& jobSecret, int nodeRank) {
  if (nodeRank == 0) return publicJobTag(jobSecret);
  return publicJobTag(deriveJobSecret(jobSecret, "collie run node " + std::to_string(nodeRank)));
}

Result<std::string> newShmName(std::string_view tag, std::string_view kind) {
  if (!isTag(tag)) return internalError("shm: bad job tag for a shared-memory name");
  uint8_t random[kRandomBytes];
  COLLIE_RETURN_IF_ERROR(randomBytes(random, sizeof(random)));
  std::string name = std::string(kShmNamePrefix) + std::string(tag) + "-" + std::string(kind) +
                     toHex(random, sizeof(random));
  if (name.size() > kMaxShmNameLength) return internalError("shm: name too long: " + name);
  return name;
}

bool isShmName(std::string_view name, std::string_view kind) {
  if (name.size() > kMaxShmNameLength || !name.starts_with(kShmNamePrefix)) return false;
  for (char c : name.substr(1)) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || c == '-')) return false;
  }
  const std::string_view rest = name.substr(kShmNamePrefix.size());
  if (rest.size() <= kTagDigits + 1 || !isTag(rest.substr(0, kTagDigits)) ||
      rest[kTagDigits] != '-') {
    return false;
  }
  return rest.substr(kTagDigits + 1).starts_with(kind);
}

std::vector<std::string> removeJobShm(std::string_view tag) {
  std::vector<std::string> removed;
  if (!isTag(tag)) return removed;
  const std::string prefix = std::string(kShmNamePrefix.substr(1)) + std::string(tag) + "-";
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return removed;
  while (const dirent* entry = readdir(dir)) {
    const std::string file = entry->d_name;
    if (file.rfind(prefix, 0) != 0) continue;
    // Only this user's: as root, another user's look-alike name is not ours to remove.
    struct stat st;
    if (fstatat(dirfd(dir), file.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode) ||
        st.st_uid != geteuid()) {
      continue;
    }
    if (shm_unlink(("/" + file).c_str()) == 0) removed.push_back(file);
  }
  closedir(dir);
  return removed;
}

}  // namespace collie::shm
