// Checkpoints of a data-parallel run: parameters, optimizer state and position
// (global step, epoch). Rank 0 alone writes (replicas are identical); every rank
// reads the same file to resume.
//
// File: "COLLIECK" magic, version, then little-endian fields; every length read back
// is checked against the file size and the caller's model before use. save() writes a
// temporary file and renames it over the target, so a crash never leaves a torn
// checkpoint.
//
// Thread safety: plain functions; callers serialise access to one path.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "collie/status.h"

namespace collie::ddp {

struct Checkpoint {
  uint64_t step = 0;   // optimizer steps taken
  uint64_t epoch = 0;  // sampler epoch of the next step
  std::string optimizer;
  int64_t optimizerSteps = 0;
  std::vector<std::vector<float>> params;
  std::vector<std::vector<float>> optimizerState;
};

// The file name used inside a checkpoint directory.
std::string checkpointPath(const std::string& dir);
Status saveCheckpoint(const std::string& path, const Checkpoint& checkpoint);
// Fails with NotFound when the file is missing and InvalidArgument when it is
// malformed (the message says which field).
Result<Checkpoint> loadCheckpoint(const std::string& path);

}  // namespace collie::ddp
