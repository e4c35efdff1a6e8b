#include "core/tune/tune_cache.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <system_error>
#include <vector>

namespace collie {

namespace fs = std::filesystem;

namespace {

bool isCacheFile(const fs::path& path) {
  const std::string name = path.filename().string();
  return name.size() > 9 && name.compare(0, 5, "tune-") == 0 &&
         name.compare(name.size() - 4, 4, ".txt") == 0;
}

}  // namespace

bool writeTuneCache(const std::string& path, const std::string& line, size_t keep) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return false;
  const std::string dir = path.substr(0, slash);
  const std::string parent = dir.substr(0, dir.rfind('/'));
  if (!parent.empty()) ::mkdir(parent.c_str(), 0755);
  ::mkdir(dir.c_str(), 0755);
  const std::string tmp = path + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream out(tmp);
    out << line << "\n";
    if (!out.flush()) {
      std::remove(tmp.c_str());
      return false;
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return false;
  }
  pruneTuneCache(dir, keep);
  return true;
}

size_t pruneTuneCache(const std::string& dir, size_t keep) {
  struct File {
    fs::path path;
    fs::file_time_type written;
  };
  std::vector<File> files;
  std::error_code error;
  for (fs::directory_iterator it(dir, error), end; !error && it != end; it.increment(error)) {
    if (!isCacheFile(it->path())) continue;
    std::error_code timeError;
    const fs::file_time_type written = fs::last_write_time(it->path(), timeError);
    if (!timeError) files.push_back({it->path(), written});
  }
  if (files.size() <= keep) return 0;
  std::sort(files.begin(), files.end(),
            [](const File& a, const File& b) { return a.written > b.written; });
  size_t removed = 0;
  for (size_t i = keep; i < files.size(); ++i) {
    std::error_code removeError;
    if (fs::remove(files[i].path, removeError)) ++removed;
  }
  return removed;
}

}  // namespace collie
