#include "tools/perf_report.h"

#include <algorithm>
#include <cstdio>
#include <numeric>

namespace collie::tools {
namespace {

std::string printf1(const char* format, auto... values) {
  char buf[256];
  std::snprintf(buf, sizeof buf, format, values...);
  return buf;
}

std::string opColumn(const PerfArgs& args) {
  return hasReduction(args.collective) ? std::string(reduceOpName(args.op)) : "none";
}

std::string centered(const std::string& text, size_t width) {
  if (text.size() >= width) return text;
  size_t left = (width - text.size() + 1) / 2;
  return std::string(left, ' ') + text + std::string(width - text.size() - left, ' ');
}

int rootColumn(const PerfArgs& args) { return hasRoot(args.collective) ? args.root : -1; }

nlohmann::json measurementJson(const PerfMeasurement& m, bool checked) {
  nlohmann::json j = {{"time_us", m.timing.avgUs},
                      {"min_us", m.timing.minUs},
                      {"median_us", m.timing.medianUs},
                      {"algbw_gbs", m.algBw},
                      {"busbw_gbs", m.busBw}};
  if (checked) {
    j["wrong"] = m.wrong;
  } else {
    j["wrong"] = nullptr;
  }
  return j;
}

}  // namespace

PerfTiming summarizeTimes(std::vector<double> timesUs) {
  PerfTiming t;
  if (timesUs.empty()) return t;
  std::sort(timesUs.begin(), timesUs.end());
  size_t n = timesUs.size();
  t.minUs = timesUs.front();
  t.medianUs = n % 2 == 1 ? timesUs[n / 2] : (timesUs[n / 2 - 1] + timesUs[n / 2]) / 2.0;
  t.avgUs = std::accumulate(timesUs.begin(), timesUs.end(), 0.0) / static_cast<double>(n);
  return t;
}

void computeBandwidth(const PerfArgs& args, int nranks, size_t sizeBytes, PerfMeasurement* m) {
  m->algBw = algBwGBs(static_cast<double>(sizeBytes), m->timing.avgUs * 1e-6);
  m->busBw = m->algBw * busBwFactor(args.collective, nranks);
}

std::string formatTime(double us) {
  if (us >= 10000.0) return printf1("%7.0f", us);
  if (us >= 100.0) return printf1("%7.1f", us);
  return printf1("%7.2f", us);
}

std::string formatHeader(const PerfArgs& args, int nranks,
                         const std::vector<std::string>& rankLines) {
  std::string out;
  out += printf1("# collie perf %s: nranks %d minBytes %lld maxBytes %lld",
                 std::string(collectiveName(args.collective)).c_str(), nranks,
                 static_cast<long long>(args.minBytes), static_cast<long long>(args.maxBytes));
  if (args.stepFactor > 1) {
    out += printf1(" step: %lld(factor)", static_cast<long long>(args.stepFactor));
  } else {
    out += printf1(" step: %lld(bytes)", static_cast<long long>(args.stepBytes));
  }
  out += printf1(" warmup iters: %d iters: %d validation: %d unalign: %lld", args.warmup,
                 args.iters, args.check ? 1 : 0, static_cast<long long>(args.unalign));
  if (args.unalignBytes != 0) {
    out += printf1(" unalign_bytes: %lld", static_cast<long long>(args.unalignBytes));
  }
  out += "\n";
  out += printf1("# algo: %s transport: %s\n", std::string(algorithmName(args.algorithm)).c_str(),
                 args.transport.empty() ? "auto" : args.transport.c_str());
  out += "#\n# Using devices\n";
  for (const std::string& line : rankLines) out += "#  " + line + "\n";
  out += "#\n";
  // Group titles centred over the 33-character measurement blocks after the 52-character
  // size/count/type/redop/root block of each row.
  out += printf1("#%51s%33s%33s\n", "", centered("out-of-place", 33).c_str(),
                 centered("in-place", 33).c_str());
  out += printf1("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s\n", "size",
                 "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time",
                 "algbw", "busbw", "#wrong");
  out += printf1("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s\n", "(B)",
                 "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)",
                 "(GB/s)", "");
  return out;
}

std::string formatRow(const PerfArgs& args, const PerfRow& row) {
  std::string out = printf1("%12zu  %12zu  %8s  %6s  %6d", row.sizeBytes, row.count,
                            std::string(dataTypeName(args.dtype)).c_str(), opColumn(args).c_str(),
                            rootColumn(args));
  for (const PerfMeasurement* m : {&row.outOfPlace, &row.inPlace}) {
    if (m->skipped) {
      out += printf1("  %7s  %6s  %6s  %6s", "N/A", "N/A", "N/A", "N/A");
      continue;
    }
    std::string wrong = args.check ? std::to_string(m->wrong) : "N/A";
    out += printf1("  %7s  %6.2f  %6.2f  %6s", formatTime(m->timing.avgUs).c_str(), m->algBw,
                   m->busBw, wrong.c_str());
  }
  return out + "\n";
}

double averageBusBw(const std::vector<PerfRow>& rows) {
  if (rows.empty()) return 0.0;
  double sum = 0;
  size_t measured = 0;
  for (const PerfRow& row : rows) {
    for (const PerfMeasurement* m : {&row.outOfPlace, &row.inPlace}) {
      if (m->skipped) continue;
      sum += m->busBw;
      ++measured;
    }
  }
  return measured > 0 ? sum / static_cast<double>(measured) : 0.0;
}

uint64_t totalWrong(const std::vector<PerfRow>& rows) {
  uint64_t total = 0;
  for (const PerfRow& row : rows) total += row.outOfPlace.wrong + row.inPlace.wrong;
  return total;
}

std::string formatFooter(const PerfArgs& args, const std::vector<PerfRow>& rows) {
  uint64_t wrong = totalWrong(rows);
  std::string out = printf1("# Out of bounds values : %llu %s\n",
                            static_cast<unsigned long long>(wrong), wrong == 0 ? "OK" : "FAILED");
  out += printf1("# Avg bus bandwidth    : %g \n#\n", averageBusBw(rows));
  return out;
}

nlohmann::json toJson(const PerfArgs& args, int nranks, const std::string& transport,
                      const std::vector<PerfRow>& rows) {
  nlohmann::json results = nlohmann::json::array();
  for (const PerfRow& row : rows) {
    results.push_back(
        {{"size", row.sizeBytes},
         {"count", row.count},
         {"out_of_place", measurementJson(row.outOfPlace, args.check)},
         {"in_place", row.inPlace.skipped ? nlohmann::json(nullptr)
                                          : measurementJson(row.inPlace, args.check)}});
  }
  return {{"collective", collectiveName(args.collective)},
          {"nranks", nranks},
          {"type", dataTypeName(args.dtype)},
          {"redop", opColumn(args)},
          {"root", rootColumn(args)},
          {"algo", algorithmName(args.algorithm)},
          {"transport", transport},
          {"iters", args.iters},
          {"warmup_iters", args.warmup},
          {"check", args.check},
          {"unalign", args.unalign},
          {"unalign_bytes", args.unalignBytes},
          {"results", std::move(results)},
          {"avg_busbw_gbs", averageBusBw(rows)},
          {"wrong_total", totalWrong(rows)}};
}

}  // namespace collie::tools
