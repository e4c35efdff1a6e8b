"""Writes the report of scripts/gpu-check.sh: OUTDIR/gpu-report.json and gpu-report.md.

Reads OUTDIR/steps.tsv (name, kind, status, exit code, seconds per step) and the
steps' logs (OUTDIR/logs/NAME.log), takes figures from the logs (gtest counts,
device_rank lines, compute-sanitizer's error summary, the benchmarks' JSON), and
evaluates the goals:
  - every correctness check passes;
  - reduce-copy moves >= 85% of cudaMemcpy's bytes/s at 256 MiB (float32, bfloat16);
  - reduce-copy is not slower than torch.add at any size >= 1 MiB.
The benchmark goals compare medians over the interleaved rounds of each benchmark
(steps bench_reduce_copy_N and bench_torch_add_N). A goal whose figures are missing is
"skipped". Exit status: 1 when any step or goal failed, else 0.
"""
import argparse
import json
import os
import re
import sys

GOAL_FRACTION = 0.85
ROOFLINE_BYTES = 256 << 20
# Issue 47's device goals: 2-rank all-reduce of at most 64 KiB within 15 us; 64 MiB-1 GiB
# at this fraction of the memory bound (perf's --device 1 section), by rank count.
LATENCY_MAX_BYTES, LATENCY_GOAL_US = 64 << 10, 15.0
ROOFLINE_SIZES = (64 << 20, 1 << 30)
ROOFLINE_GOALS = {2: 0.5, 4: 0.4}
REFUSED = re.compile(r"not supported|unsupported|unable to|permission|refused", re.I)


def read_log(outdir, name):
    try:
        with open(os.path.join(outdir, "logs", name + ".log"), errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def first_json(text):
    """The first JSON object in text (benchmarks print one), or None."""
    start = text.find("{")
    while start >= 0:
        try:
            value, _ = json.JSONDecoder().raw_decode(text[start:])
            return value
        except ValueError:
            start = text.find("{", start + 1)
    return None


def figures_of(check, text):
    """Per-step figures taken from its log."""
    name = check["name"]
    fig = {}
    m = re.search(r"\[  PASSED  \] (\d+) test", text)
    if m:
        fig["gtest_passed"] = int(m.group(1))
    m = re.search(r"\[  FAILED  \] (\d+) test", text)
    if m:
        fig["gtest_failed"] = int(m.group(1))
    oks = re.findall(r"^device_rank \d+: ok.*$", text, re.M)
    if oks:
        fig["ranks_ok"] = len(oks)
        fig["ok_lines"] = oks[:8]
    wrong = [int(w) for w in re.findall(r"#wrong (\d+)", text)]
    if wrong:
        fig["wrong"] = sum(wrong)
    m = re.findall(r"Timeout naming rank (\d+) after ([0-9.]+) s", text)
    if m:
        fig["timeout_named"] = sorted({int(r) for r, _ in m})
        fig["timeout_seconds_max"] = max(float(s) for _, s in m)
    m = re.findall(r"Mismatch after ([0-9.]+) s", text)
    if m:
        fig["mismatch_seconds_max"] = max(float(s) for s in m)
    m = re.findall(r"device profile: (\d+) (?:step )?kernels waited ([0-9.e+]+) us", text)
    if m:
        # COLLIE_DEVICE_PROFILE: per rank, the step kernels and the time block 0 of each
        # waited for the peers' flags.
        fig["profile_kernels"] = [int(k) for k, _ in m]
        fig["profile_wait_us_per_kernel"] = [round(float(w) / max(1, int(k)), 2) for k, w in m]
    m = re.search(r"^torch_nccl_dropin: (\d+) ranks, (\S+) on (\S+): (?:(\d+) cases|fault)",
                  text, re.M)
    if m:  # tests/gpu/torch_nccl_dropin.py's summary line (printed only when it passed)
        fig["torch_ranks"] = int(m.group(1))
        fig["torch_cases"] = int(m.group(4)) if m.group(4) else "fault"
    graphs = re.findall(r"graph capture: (\d+) launches, #wrong (\d+)", text)
    if graphs:  # nccl_device_check: one line per rank
        fig["graph_ranks"] = len(graphs)
        fig["graph_launches"] = sum(int(n) for n, _ in graphs)
    nccl_ok = re.findall(r"^nccl_device_check rank \d+: ok.*$", text, re.M)
    if nccl_ok:
        fig["ranks_ok"] = len(nccl_ok)
    m = re.search(r"ERROR SUMMARY: (\d+) error", text)
    if m:
        fig["sanitizer_errors"] = int(m.group(1))
    if name.startswith("bench_"):
        value = first_json(text)
        if value is not None:
            fig.update(value)
    if name.startswith("perf_"):
        rows = re.findall(r"^\s+(\d+)\s+\d+\s+\S+\s+\S+\s+-?\d+\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)"
                          r"\s+(\d+)", text, re.M)
        if rows:
            fig["rows"] = [{"bytes": int(b), "time_us": float(t), "algbw_GBps": float(a),
                            "busbw_GBps": float(bb), "wrong": int(w)} for b, t, a, bb, w in rows]
            fig["wrong"] = sum(int(r[4]) for r in rows)
        # --device 1: the memory bound after the table (tools/perf_device_bound.h).
        copies = re.findall(r"^#\s+(.+?)\s+copy\s+([0-9.]+) GB/s of memory traffic, (\d+) rank",
                            text, re.M)
        if copies:
            fig["device_copy"] = [{"device": d, "traffic_GBps": float(g), "ranks": int(k)}
                                  for d, g, k in copies]
        bounds = re.findall(r"^#\s+(\d+)\s+([0-9.]+)\s+([0-9.]+|-)\s+([0-9.]+|-)\s*$", text,
                            re.M)
        if bounds:
            fig["bound_rows"] = [
                {"bytes": int(b), "bound_us": float(u),
                 "out_of_place": None if o == "-" else float(o),
                 "in_place": None if i == "-" else float(i)} for b, u, o, i in bounds]
    return fig


def refine_status(check, text):
    """A sanitizer that refuses the device is "refused", not a failure of collie; a
    step that printed wrong elements failed whatever its exit code."""
    if check["status"] == "pass" and check["figures"].get("wrong", 0) > 0:
        check["status"] = "fail"
        check["detail"] = f"#wrong {check['figures']['wrong']}"
    if check["kind"] == "sanitizer" and check["status"] == "fail":
        if "sanitizer_errors" not in check["figures"] and REFUSED.search(text):
            check["status"] = "refused"
            check["detail"] = "the tool refused: " + REFUSED.search(text).group(0)
    if check["status"] == "skipped" and not check.get("detail"):
        line = text.strip().splitlines()[-1] if text.strip() else ""
        check["detail"] = line[:200]
    if check["status"] == "fail" and not check.get("detail"):
        lines = [l for l in text.strip().splitlines() if l.strip()]
        check["detail"] = " | ".join(lines[-3:])[:400]


def rows_by_bytes(figures):
    return {row["bytes"]: row for row in figures.get("rows", []) if "bytes" in row}


def median(values):
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def bench_rounds(checks, prefix):
    """The rounds of one benchmark (steps PREFIX_1, PREFIX_2, ..., or one step PREFIX),
    merged: {bytes: row of each figure's median over the rounds that measured it}, and
    the number of rounds. gpu-check interleaves the rounds of reduce-copy and
    torch.add, so that both sides see the same minutes of the machine."""
    pattern = re.compile("^" + re.escape(prefix) + r"(_\d+)?$")
    rounds = [rows_by_bytes(c.get("figures", {})) for c in checks
              if pattern.match(c["name"]) and c["status"] == "pass"]
    rounds = [r for r in rounds if r]
    merged = {}
    for size in sorted(set().union(*rounds)) if rounds else []:
        keys = sorted({k for r in rounds if size in r for k in r[size] if k != "bytes"})
        row = {"bytes": size}
        for key in keys:
            values = [r[size][key] for r in rounds
                      if size in r and isinstance(r[size].get(key), (int, float))]
            if values:
                row[key] = round(median(values), 3)
        merged[size] = row
    return merged, len(rounds)


def perf_check(checks, ranks, first=()):
    """The device perf run of `ranks` ranks: the runs named in `first`, then under MPS
    when it ran, else without."""
    by_name = {c["name"]: c for c in checks}
    for name in (*first, f"perf_allreduce_device_n{ranks}_mps", f"perf_allreduce_device_n{ranks}"):
        check = by_name.get(name)
        if check is not None and check["status"] != "skipped":
            return check
    return None


def device_goals(checks):
    """goal_device_latency and goal_device_roofline from the device perf runs."""
    out = []
    # From 8 bytes: the run of the small sizes with the default board.
    check = perf_check(checks, 2, first=("perf_allreduce_device_n2_mps_board",))
    small = [r for r in (check or {}).get("figures", {}).get("rows", [])
             if r["bytes"] <= LATENCY_MAX_BYTES]
    fig, status = {}, "skipped"
    if small:
        worst = max(small, key=lambda r: r["time_us"])
        status = "pass" if worst["time_us"] <= LATENCY_GOAL_US else "fail"
        fig = {"run": check["name"], "sizes": len(small), "worst_bytes": worst["bytes"],
               "worst_us": worst["time_us"], "goal_us": LATENCY_GOAL_US}
    out.append({"name": "goal_device_latency", "kind": "goal", "status": status,
                "figures": fig})

    fig, verdicts = {}, []
    for ranks, goal in ROOFLINE_GOALS.items():
        # The direct kernel on registered windows when it ran, else the default path.
        check = perf_check(checks, ranks, first=(f"perf_allreduce_device_n{ranks}_mps_window",))
        rows = [r for r in (check or {}).get("figures", {}).get("bound_rows", [])
                if ROOFLINE_SIZES[0] <= r["bytes"] <= ROOFLINE_SIZES[1]]
        best = [max(v for v in (r["out_of_place"], r["in_place"]) if v is not None)
                for r in rows if r["out_of_place"] is not None or r["in_place"] is not None]
        if not best:
            continue
        verdicts.append(min(best) >= goal)
        fig[f"n{ranks}"] = {"run": check["name"], "sizes": len(best),
                            "lowest_fraction": min(best), "goal": goal}
    out.append({"name": "goal_device_roofline", "kind": "goal",
                "status": ("skipped" if not verdicts else "pass" if all(verdicts) else "fail"),
                "figures": fig})
    return out


def goals(checks):
    out = []
    correctness = [c for c in checks if c["kind"] == "correctness"]
    bad = [c["name"] for c in correctness if c["status"] not in ("pass",)]
    out.append({"name": "goal_every_correctness_check_passes", "kind": "goal",
                "status": "fail" if bad else ("pass" if correctness else "skipped"),
                "figures": {"checks": len(correctness), "not_passed": bad}})

    # Issue 50's graph row: every rank of an nccl_device_check run launched its
    # captured all-reduce 100 times with #wrong 0 (the "#wrong" figure sums them).
    graph_runs = [c for c in checks if c["name"].startswith("nccl_device_n")]
    graph_ok = [c for c in graph_runs if c["status"] == "pass" and
                c.get("figures", {}).get("graph_ranks") and not c["figures"].get("wrong")]
    out.append({"name": "goal_graph_capture", "kind": "goal",
                "status": ("pass" if graph_runs and len(graph_ok) == len(graph_runs)
                           else "fail" if graph_runs else "skipped"),
                "figures": {"runs": [c["name"] for c in graph_runs],
                            "passed": [c["name"] for c in graph_ok]}})

    # Issue 50's torch row: PyTorch's NCCL backend on collie's libnccl.so.2 passed every
    # case at each rank count run (tests/gpu/torch_nccl_dropin.py), and a rank leaving
    # ended the others with its name.
    torch_runs = [c for c in checks if c["name"].startswith("torch_nccl_")]
    torch_ran = [c for c in torch_runs if c["status"] != "skipped"]
    torch_ok = [c for c in torch_ran if c["status"] == "pass" and
                c.get("figures", {}).get("torch_cases")]
    out.append({"name": "goal_torch_nccl_dropin", "kind": "goal",
                "status": ("pass" if torch_ran and len(torch_ok) == len(torch_ran)
                           else "fail" if torch_ran else "skipped"),
                "figures": {"runs": [c["name"] for c in torch_runs],
                            "passed": [c["name"] for c in torch_ok]}})

    # The torch_collie backend with CUDA tensors: the same cases through backend
    # "collie" (built on the GPU machine against its torch).
    tc_runs = [c for c in checks if c["name"].startswith("torch_collie_cuda_")]
    tc_ran = [c for c in tc_runs if c["status"] != "skipped"]
    tc_ok = [c for c in tc_ran if c["status"] == "pass" and c.get("figures", {}).get("torch_cases")]
    out.append({"name": "goal_torch_collie_cuda", "kind": "goal",
                "status": ("pass" if tc_ran and len(tc_ok) == len(tc_ran)
                           else "fail" if tc_ran else "skipped"),
                "figures": {"runs": [c["name"] for c in tc_runs],
                            "passed": [c["name"] for c in tc_ok]}})

    out += device_goals(checks)

    rows, nrounds = bench_rounds(checks, "bench_reduce_copy")
    roof = rows.get(ROOFLINE_BYTES) or (rows[max(rows)] if rows else None)
    fig, status = {}, "skipped"
    if roof and roof.get("memcpy_GBps"):
        status = "pass"
        fig["bytes"] = roof["bytes"]
        fig["rounds"] = nrounds
        for dtype in ("float32", "bfloat16"):
            ratio = roof.get(dtype + "_GBps", 0) / roof["memcpy_GBps"]
            fig[dtype + "_fraction_of_memcpy"] = round(ratio, 3)
            if ratio < GOAL_FRACTION:
                status = "fail"
        if roof["bytes"] != ROOFLINE_BYTES:
            fig["note"] = "largest size measured, not 256 MiB"
    out.append({"name": "goal_reduce_copy_85pct_of_memcpy_at_256MiB", "kind": "goal",
                "status": status, "figures": fig})

    torch_rows, torch_rounds = bench_rounds(checks, "bench_torch_add")
    fig, status, slower = {}, "skipped", []
    compared = 0
    for size in sorted(set(rows) & set(torch_rows)):
        if size < (1 << 20):
            continue
        for dtype in ("float32", "bfloat16"):
            ours, theirs = rows[size].get(dtype + "_us"), torch_rows[size].get(dtype + "_us")
            if ours is None or theirs is None:
                continue
            compared += 1
            if ours > theirs:
                slower.append({"bytes": size, "dtype": dtype, "reduce_copy_us": ours,
                               "torch_add_us": theirs})
    if compared:
        status = "fail" if slower else "pass"
        fig = {"compared": compared, "rounds": [nrounds, torch_rounds], "slower": slower}
    out.append({"name": "goal_not_slower_than_torch_add_from_1MiB", "kind": "goal",
                "status": status, "figures": fig})
    return out


def markdown(report):
    lines = ["# collie GPU check", "",
             "| | |", "|---|---|",
             f"| date | {report['date']} |",
             f"| mode | {report['mode']} |",
             f"| GPU | {report['gpu']['name']} |",
             f"| driver | {report['gpu']['driver']} (CUDA {report['gpu']['cuda_driver']}) |",
             f"| built with | {report['build'].get('cuda_toolkit', '?')}, "
             f"{report['build'].get('commit', '?')} |",
             f"| wall time | {report['seconds']} s |",
             f"| result | **{'PASS' if report['ok'] else 'FAIL'}** "
             f"({report['summary']}) |", "",
             "| check | kind | status | s | figures / detail |", "|---|---|---|---|---|"]
    for c in report["checks"]:
        fig = {k: v for k, v in c.get("figures", {}).items() if k not in ("rows", "ok_lines")}
        text = json.dumps(fig) if fig else ""
        if c.get("detail"):
            text = (text + " " if text else "") + c["detail"]
        text = text.replace("|", "\\|")
        lines.append(f"| {c['name']} | {c['kind']} | {c['status']} | {c.get('seconds', '')} "
                     f"| {text} |")
    tables = []
    for name, cols in (("bench_reduce_copy", ("memcpy_GBps", "float32_GBps", "bfloat16_GBps",
                                              "float32_us", "bfloat16_us")),
                       ("bench_torch_add", ("float32_GBps", "bfloat16_GBps", "float32_us",
                                            "bfloat16_us"))):
        merged, nrounds = bench_rounds(report["checks"], name)
        if merged:
            rounds = f"{nrounds} interleaved rounds" if nrounds != 1 else "1 round"
            tables.append((f"{name} (median of {rounds})", cols, list(merged.values())))
    tables += [(c["name"], ("time_us", "busbw_GBps", "wrong"), c.get("figures", {}).get("rows"))
               for c in report["checks"] if c["name"].startswith("perf_")]
    for name, cols, rows in tables:
        if not rows:
            continue
        lines += ["", f"## {name}", "", "| bytes | " + " | ".join(cols) + " |",
                  "|---" * (len(cols) + 1) + "|"]
        for row in rows:
            lines.append(f"| {row['bytes']} | " + " | ".join(str(row.get(k, "")) for k in cols)
                         + " |")
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("outdir")
    parser.add_argument("--mode", default="gpu")
    parser.add_argument("--gpu", default="")
    parser.add_argument("--driver", default="")
    parser.add_argument("--cuda-driver", default="")
    parser.add_argument("--manifest", default="")
    parser.add_argument("--seconds", default="")
    args = parser.parse_args()

    build = {}
    if args.manifest and os.path.exists(args.manifest):
        with open(args.manifest) as f:
            for line in f:
                key, _, value = line.partition("=")
                if value:
                    build[key.strip()] = value.strip()
    checks = []
    with open(os.path.join(args.outdir, "steps.tsv")) as f:
        for line in f:
            fields = line.rstrip("\n").split("\t")
            if len(fields) != 5:
                continue
            name, kind, status, rc, seconds = fields
            check = {"name": name, "kind": kind, "status": status,
                     "exit_code": None if rc == "-" else int(rc), "seconds": float(seconds),
                     "log": f"logs/{name}.log"}
            text = read_log(args.outdir, name)
            check["figures"] = figures_of(check, text)
            refine_status(check, text)
            checks.append(check)
    checks += goals(checks)
    summary = {s: sum(c["status"] == s for c in checks)
               for s in ("pass", "fail", "skipped", "refused")}
    report = {
        "date": os.environ.get("GPU_CHECK_DATE", ""),
        "mode": args.mode,
        "gpu": {"name": args.gpu, "driver": args.driver, "cuda_driver": args.cuda_driver},
        "build": build,
        "seconds": args.seconds,
        "checks": checks,
        "summary": summary,
        "ok": summary["fail"] == 0,
    }
    with open(os.path.join(args.outdir, "gpu-report.json"), "w") as f:
        json.dump(report, f, indent=2)
        f.write("\n")
    with open(os.path.join(args.outdir, "gpu-report.md"), "w") as f:
        f.write(markdown(report))
    print(f"gpu-check: {'PASS' if report['ok'] else 'FAIL'} {summary}; "
          f"report in {args.outdir}/gpu-report.md")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
