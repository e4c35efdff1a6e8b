// Results of `collie perf`: per-iteration statistics, the nccl-tests style table and
// the JSON document written by --json.
//
// The table matches nccl-tests' layout (header lines start with '#', one row per size
// with out-of-place and in-place time/algbw/busbw/#wrong, then "# Out of bounds values"
// and "# Avg bus bandwidth" footers) so existing parsers of its output keep working.
// Pure functions; safe from any thread.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tools/perf_args.h"

namespace collie::tools {

// Time statistics of one run, already the slowest rank's (max over ranks).
struct PerfTiming {
  double avgUs = 0;  // total time / iterations (as nccl-tests reports)
  double minUs = 0;
  double medianUs = 0;
};

struct PerfMeasurement {
  PerfTiming timing;
  double algBw = 0;  // GB/s from avgUs
  double busBw = 0;
  uint64_t wrong = 0;    // summed over ranks; 0 when not checked
  bool skipped = false;  // not run (the in-place column of a collective without one)
};

struct PerfRow {
  size_t sizeBytes = 0;
  size_t count = 0;
  PerfMeasurement outOfPlace;
  PerfMeasurement inPlace;
};

// min / median / average of per-iteration times (microseconds); empty input gives 0s.
PerfTiming summarizeTimes(std::vector<double> timesUs);
// Fills algBw and busBw from timing.avgUs.
void computeBandwidth(const PerfArgs& args, int nranks, size_t sizeBytes, PerfMeasurement* m);

// nccl-tests' time column: 2 decimals below 100 us, 1 below 10 ms, none above.
std::string formatTime(double us);
// The '#' lines above the rows; `rankLines` describe each rank (one line each).
std::string formatHeader(const PerfArgs& args, int nranks,
                         const std::vector<std::string>& rankLines);
std::string formatRow(const PerfArgs& args, const PerfRow& row);
// Footer: out-of-bounds (wrong) total and the average bus bandwidth of every measurement.
std::string formatFooter(const PerfArgs& args, const std::vector<PerfRow>& rows);
double averageBusBw(const std::vector<PerfRow>& rows);
uint64_t totalWrong(const std::vector<PerfRow>& rows);

nlohmann::json toJson(const PerfArgs& args, int nranks, const std::string& transport,
                      const std::vector<PerfRow>& rows);

}  // namespace collie::tools
