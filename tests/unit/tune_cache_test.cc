// The tuner's cache directory: atomic writes and pruning to the newest files.
#include "core/tune/tune_cache.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>

namespace collie {
namespace {

namespace fs = std::filesystem;

class TuneCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/collie-tune-cache-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A file written `age` seconds ago.
  void touch(const std::string& name, int age) {
    const fs::path path = fs::path(dir_) / name;
    std::ofstream(path) << "1 1 probe\n";
    fs::last_write_time(path, fs::file_time_type::clock::now() - std::chrono::seconds(age));
  }

  std::string dir_;
};

TEST_F(TuneCacheTest, KeepsTheNewestCacheFilesAndNothingElseIsTouched) {
  for (int i = 0; i < 10; ++i) touch("tune-" + std::to_string(1000 + i) + "-shm.txt", 100 - i);
  touch("notes.txt", 1000);              // not a cache file
  touch("tune-incomplete.tmp42", 1000);  // a temporary of a writer
  EXPECT_EQ(pruneTuneCache(dir_, 4), 6u);
  for (int i = 0; i < 10; ++i) {
    const bool kept =
        fs::exists(fs::path(dir_) / ("tune-" + std::to_string(1000 + i) + "-shm.txt"));
    EXPECT_EQ(kept, i >= 6) << "file " << i << " (written " << 100 - i << " s ago)";
  }
  EXPECT_TRUE(fs::exists(fs::path(dir_) / "notes.txt"));
  EXPECT_TRUE(fs::exists(fs::path(dir_) / "tune-incomplete.tmp42"));
  EXPECT_EQ(pruneTuneCache(dir_, 4), 0u);
}

TEST_F(TuneCacheTest, WriteCreatesTheDirectoryAndPrunesAfterwards) {
  const std::string sub = dir_ + "/a/collie";
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(writeTuneCache(sub + "/tune-" + std::to_string(i) + "-tcp.txt", "2.5 1.25 probe",
                               /*keep=*/2));
    // Distinct modification times, oldest first.
    fs::last_write_time(sub + "/tune-" + std::to_string(i) + "-tcp.txt",
                        fs::file_time_type::clock::now() - std::chrono::seconds(10 - i));
  }
  EXPECT_FALSE(fs::exists(sub + "/tune-0-tcp.txt"));
  std::ifstream in(sub + "/tune-2-tcp.txt");
  std::string line;
  ASSERT_TRUE(std::getline(in, line));
  EXPECT_EQ(line, "2.5 1.25 probe");
  size_t entries = 0;
  for (const auto& entry : fs::directory_iterator(sub)) entries += entry.is_regular_file();
  EXPECT_EQ(entries, 2u);  // no temporary left behind
}

TEST_F(TuneCacheTest, MissingOrUnwritableDirectoriesAreNotErrors) {
  EXPECT_EQ(pruneTuneCache(dir_ + "/absent", 1), 0u);
  EXPECT_FALSE(writeTuneCache(dir_ + "/absent/deeper/still/tune-1-shm.txt", "1 1 probe"));
  EXPECT_FALSE(writeTuneCache("no-directory", "1 1 probe"));
}

}  // namespace
}  // namespace collie
