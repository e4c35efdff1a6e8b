#include "ddp/timeline.h"

#include <stdio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace collie::ddp {

void Timeline::setContext(int rank, int step, int phase) {
  std::lock_guard<std::mutex> lock(mutex_);
  rank_ = rank;
  step_ = step;
  phase_ = phase;
}

void Timeline::record(EventKind kind, int index, double startUs, double endUs, double issueUs) {
  std::lock_guard<std::mutex> lock(mutex_);
  events_.push_back({kind, index, step_, phase_, rank_, startUs, endUs, issueUs});
}

std::vector<TimelineEvent> Timeline::events() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return events_;
}

void Timeline::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  events_.clear();
}

std::vector<double> toDoubles(const std::vector<TimelineEvent>& events, size_t capacity) {
  std::vector<double> out(capacity * kDoublesPerEvent, 0.0);
  for (size_t i = 0; i < capacity; ++i) {
    double* d = &out[i * kDoublesPerEvent];
    if (i >= events.size()) {
      d[0] = -1;
      continue;
    }
    const TimelineEvent& e = events[i];
    d[0] = static_cast<double>(e.kind);
    d[1] = e.index;
    d[2] = e.step;
    d[3] = e.phase;
    d[4] = e.rank;
    d[5] = e.startUs;
    d[6] = e.endUs;
    d[7] = e.issueUs;
  }
  return out;
}

std::vector<TimelineEvent> fromDoubles(const double* data, size_t capacity) {
  std::vector<TimelineEvent> out;
  for (size_t i = 0; i < capacity; ++i) {
    const double* d = data + i * kDoublesPerEvent;
    if (d[0] < 0 || d[0] > static_cast<double>(EventKind::kStep)) continue;
    out.push_back({static_cast<EventKind>(static_cast<int>(d[0])), static_cast<int>(d[1]),
                   static_cast<int>(d[2]), static_cast<int>(d[3]), static_cast<int>(d[4]), d[5],
                   d[6], d[7]});
  }
  return out;
}

namespace {

std::string eventName(const TimelineEvent& e) {
  switch (e.kind) {
    case EventKind::kForward:
      return "forward L" + std::to_string(e.index);
    case EventKind::kBackward:
      return "backward L" + std::to_string(e.index);
    case EventKind::kAllReduce:
      return "allreduce bucket " + std::to_string(e.index);
    case EventKind::kStep:
      return std::string("step ") + std::to_string(e.step) +
             (e.phase == 0 ? " (no overlap)" : " (overlap)");
  }
  return "?";
}

}  // namespace

std::string chromeTraceJson(const std::vector<TimelineEvent>& events) {
  std::ostringstream out;
  out << "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[";
  bool first = true;
  auto sep = [&] {
    if (!first) out << ",\n";
    first = false;
  };
  int maxRank = -1;
  for (const auto& e : events) maxRank = std::max(maxRank, e.rank);
  for (int r = 0; r <= maxRank; ++r) {
    sep();
    out << "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" << r << ",\"args\":{\"name\":\"rank "
        << r << "\"}}";
    const char* lanes[] = {"compute", "all-reduce", "steps"};
    for (int t = 0; t < 3; ++t) {
      sep();
      out << "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":" << r << ",\"tid\":" << t
          << ",\"args\":{\"name\":\"" << lanes[t] << "\"}}";
    }
  }
  char buf[64];
  for (const auto& e : events) {
    int tid = e.kind == EventKind::kAllReduce ? 1 : e.kind == EventKind::kStep ? 2 : 0;
    sep();
    std::snprintf(buf, sizeof(buf), "%.3f", e.startUs);
    out << "{\"name\":\"" << eventName(e) << "\",\"ph\":\"X\",\"pid\":" << e.rank
        << ",\"tid\":" << tid << ",\"ts\":" << buf;
    std::snprintf(buf, sizeof(buf), "%.3f", std::max(0.0, e.endUs - e.startUs));
    out << ",\"dur\":" << buf << ",\"args\":{\"step\":" << e.step << ",\"phase\":\""
        << (e.phase == 0 ? "no-overlap" : "overlap") << "\"";
    if (e.kind == EventKind::kAllReduce) {
      std::snprintf(buf, sizeof(buf), "%.3f", e.issueUs);
      out << ",\"issued_us\":" << buf;
    }
    out << "}}";
  }
  out << "]}\n";
  return out.str();
}

namespace {

// A "nice" tick spacing (1, 2, 5 x 10^k) giving about `want` ticks over `span`.
double tickSpacing(double span, int want) {
  double raw = span / std::max(want, 1);
  double mag = std::pow(10.0, std::floor(std::log10(std::max(raw, 1e-9))));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * mag >= raw) return m * mag;
  }
  return 10 * mag;
}

}  // namespace

std::string timelineSvg(const std::vector<TimelineEvent>& events, int step, int nranks,
                        const std::string& title) {
  constexpr double kLeft = 150, kRight = 30, kWidth = 1100, kLane = 22, kLaneGap = 4;
  constexpr double kRankGap = 10, kPanelHead = 46, kPanelGap = 24, kTop = 40;
  const double plotW = kWidth - kLeft - kRight;

  // Per phase: its origin (earliest step start over ranks) and duration.
  double origin[2] = {1e300, 1e300}, span[2] = {0, 0};
  bool present[2] = {false, false};
  for (const auto& e : events) {
    if (e.step != step || e.kind != EventKind::kStep || e.phase < 0 || e.phase > 1) continue;
    present[e.phase] = true;
    origin[e.phase] = std::min(origin[e.phase], e.startUs);
  }
  for (const auto& e : events) {
    if (e.step != step || e.phase < 0 || e.phase > 1 || !present[e.phase]) continue;
    span[e.phase] = std::max(span[e.phase], e.endUs - origin[e.phase]);
  }
  double maxSpanMs = std::max(span[0], span[1]) / 1000.0;
  if (maxSpanMs <= 0) maxSpanMs = 1;
  const double pxPerMs = plotW / maxSpanMs;
  const double panelH = kPanelHead + nranks * (2 * kLane + kLaneGap + kRankGap) + 24;
  int panels = (present[0] ? 1 : 0) + (present[1] ? 1 : 0);
  const double height = kTop + panels * (panelH + kPanelGap) + 40;

  std::ostringstream svg;
  char buf[512];
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kWidth << "\" height=\"" << height
      << "\" font-family=\"Helvetica, Arial, sans-serif\" font-size=\"12\">\n";
  svg << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  svg << "<text x=\"" << kLeft << "\" y=\"24\" font-size=\"16\" font-weight=\"bold\">" << title
      << "</text>\n";

  double y0 = kTop;
  for (int phase = 0; phase < 2; ++phase) {
    if (!present[phase]) continue;
    double spanMs = span[phase] / 1000.0;
    std::snprintf(buf, sizeof(buf),
                  "<text x=\"%g\" y=\"%g\" font-size=\"14\" font-weight=\"bold\">%s: step %d, "
                  "%.1f ms</text>\n",
                  kLeft, y0 + 18,
                  phase == 0
                      ? "(a) no overlap: all-reduce after backward"
                      : "(b) bucketed overlap: each bucket's all-reduce starts when it is full",
                  step, spanMs);
    svg << buf;
    double axisY = y0 + kPanelHead - 8;
    double tick = tickSpacing(maxSpanMs, 10);
    for (double t = 0; t <= maxSpanMs + 1e-9; t += tick) {
      double x = kLeft + t * pxPerMs;
      std::snprintf(buf, sizeof(buf),
                    "<line x1=\"%.1f\" y1=\"%g\" x2=\"%.1f\" y2=\"%g\" stroke=\"#ddd\"/>"
                    "<text x=\"%.1f\" y=\"%g\" text-anchor=\"middle\" fill=\"#666\" "
                    "font-size=\"10\">%g ms</text>\n",
                    x, axisY, x, y0 + panelH - 20, x, axisY - 3, t);
      svg << buf;
    }
    for (int r = 0; r < nranks; ++r) {
      double laneY = y0 + kPanelHead + r * (2 * kLane + kLaneGap + kRankGap);
      std::snprintf(buf, sizeof(buf),
                    "<text x=\"%g\" y=\"%g\" text-anchor=\"end\">rank %d compute</text>\n"
                    "<text x=\"%g\" y=\"%g\" text-anchor=\"end\">rank %d all-reduce</text>\n",
                    kLeft - 8, laneY + 15, r, kLeft - 8, laneY + kLane + kLaneGap + 15, r);
      svg << buf;
    }
    for (const auto& e : events) {
      if (e.step != step || e.phase != phase || e.kind == EventKind::kStep) continue;
      if (e.rank < 0 || e.rank >= nranks) continue;
      double laneY = y0 + kPanelHead + e.rank * (2 * kLane + kLaneGap + kRankGap);
      if (e.kind == EventKind::kAllReduce) laneY += kLane + kLaneGap;
      double x = kLeft + (e.startUs - origin[phase]) / 1000.0 * pxPerMs;
      double w = std::max(1.0, (e.endUs - e.startUs) / 1000.0 * pxPerMs);
      const char* fill = "#bbbbbb";
      std::string label;
      if (e.kind == EventKind::kBackward) {
        fill = e.index % 2 ? "#4c78a8" : "#72a0d0";
        label = "L" + std::to_string(e.index);
      } else if (e.kind == EventKind::kForward) {
        fill = "#c7c7c7";
        label = "f" + std::to_string(e.index);
      } else {
        fill = e.index % 2 ? "#f58518" : "#e45756";
        label = "b" + std::to_string(e.index);
      }
      std::snprintf(buf, sizeof(buf),
                    "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%g\" fill=\"%s\" "
                    "stroke=\"white\" stroke-width=\"0.5\"><title>rank %d %s: %.2f ms</title>"
                    "</rect>\n",
                    x, laneY, w, kLane, fill, e.rank, eventName(e).c_str(),
                    (e.endUs - e.startUs) / 1000.0);
      svg << buf;
      if (w > 8.0 * label.size()) {
        std::snprintf(buf, sizeof(buf),
                      "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"white\" "
                      "font-size=\"10\">%s</text>\n",
                      x + w / 2, laneY + 15, label.c_str());
        svg << buf;
      }
    }
    y0 += panelH + kPanelGap;
  }
  std::snprintf(buf, sizeof(buf),
                "<g font-size=\"11\"><rect x=\"%g\" y=\"%g\" width=\"12\" height=\"12\" "
                "fill=\"#c7c7c7\"/><text x=\"%g\" y=\"%g\">forward</text>"
                "<rect x=\"%g\" y=\"%g\" width=\"12\" height=\"12\" fill=\"#4c78a8\"/>"
                "<text x=\"%g\" y=\"%g\">backward, per layer (last layer first)</text>"
                "<rect x=\"%g\" y=\"%g\" width=\"12\" height=\"12\" fill=\"#f58518\"/>"
                "<text x=\"%g\" y=\"%g\">bucket all-reduce (average), from when it can run "
                "until done</text></g>\n",
                kLeft, y0, kLeft + 16, y0 + 10, kLeft + 90, y0, kLeft + 106, y0 + 10, kLeft + 350,
                y0, kLeft + 366, y0 + 10);
  svg << buf;
  svg << "</svg>\n";
  return svg.str();
}

Status writeFileAtomically(const std::string& path, const std::string& text) {
  std::string tmp = path + ".tmp." + std::to_string(getpid());
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) return systemError("cannot create " + tmp, errno);
  bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  ok = (std::fflush(f) == 0) && ok;
  ok = (fsync(fileno(f)) == 0) && ok;
  int err = errno;
  std::fclose(f);
  if (!ok) {
    std::remove(tmp.c_str());
    return systemError("cannot write " + tmp, err);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    err = errno;
    std::remove(tmp.c_str());
    return systemError("cannot rename " + tmp + " to " + path, err);
  }
  return Status::ok();
}

}  // namespace collie::ddp
