"""torch's flight recorder on collie groups: what a trace dump says.

torch attaches its FlightRecorderHook to every group of a backend that does not record
itself; collie pushes completions and failures to it (backend_hooks.h).

healthy: 2 ranks issue a mix of calls (blocking and async, small ones collie completes
on the calling thread and 4 MiB ones it completes on its completion thread, collectives
and send/recv); each rank's dump (torch._C._distributed_c10d._dump_fr_trace_json with
backend "collie") must list every call in issue order, each "completed" with a
duration, and both ranks' lists must agree on names, sequence numbers and sizes.

timeout: rank 1 takes part in one all-reduce and then not in the next; rank 0's second
all-reduce fails when the group's timeout passes, and before the error reaches it the
abort hook must have written rank 0's trace to <TORCH_FR_DUMP_TEMP_FILE>0: the first
all-reduce "completed", the second issued and never finished ("scheduled", not
retired), and an abort hook the caller registered (register_abort_hook) has run, after
one that raised; the backend refuses a second hook with the same id and the removal of
an unknown one.

mismatch: rank 0 all-reduces while rank 1 broadcasts; collie fails the call on both
ranks, both dump their traces, and torch's analyzer of such dumps (torchfrtrace, run as
python -m torch.distributed.flight_recorder.fr_trace) names rank 1 as the culprit of a
collective type mismatch.
"""

import datetime
import json
import os
import pickle
import subprocess
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import torch_collie  # noqa: F401  (registers the backend)

SMALL = 1 << 10  # floats: collie completes these on the calling thread
LARGE = 1 << 20  # floats (4 MiB)


def dump():
    raw = torch._C._distributed_c10d._dump_fr_trace_json(backend="collie")
    return json.loads(raw)["entries"]


def backend_error():
    """The collie backend's Backend.get_error(), by name (SUCCESS, TIMEOUT, ...)."""
    return dist.group.WORLD._get_backend(torch.device("cpu")).get_error().name


def summary(entries):
    return [(e["profiling_name"], e["collective_seq_id"], e["p2p_seq_id"], e["input_sizes"],
             e["output_sizes"]) for e in entries]


def healthy(rank, init_file, tmp):
    dist.init_process_group("collie", init_method="file://" + init_file, rank=rank, world_size=2)
    issued = []
    for n in (SMALL, LARGE):
        t = torch.ones(n)
        dist.all_reduce(t)
        issued.append("collie:all_reduce")
        dist.all_reduce(t, async_op=True).wait()
        issued.append("collie:all_reduce")
        fut = dist.all_reduce(t, async_op=True).get_future()
        fut.wait()
        issued.append("collie:all_reduce")
        dist.broadcast(t, 1)
        issued.append("collie:broadcast")
        gathered = torch.empty(2 * n)
        dist.all_gather_into_tensor(gathered, t)
        issued.append("collie:_all_gather_base")
        part = torch.empty(n // 2)
        dist.reduce_scatter_tensor(part, t)
        issued.append("collie:_reduce_scatter_base")
        exchanged = torch.empty(n)
        dist.all_to_all_single(exchanged, t)
        issued.append("collie:all_to_all_single")
        if rank == 0:
            dist.send(t, 1)
            issued.append("collie:send 0->1")
        else:
            dist.recv(t, 0)
            issued.append("collie:recv 1<-0")
    # A call finished on the completion thread is retired by the completion hooks run just
    # after its work completed (as ProcessGroupNCCL's watchdog retires after the fact), so
    # the last one may read "scheduled" for a moment after wait() returned; one that is
    # never retired still fails below.
    entries = dump()
    deadline = time.monotonic() + 5
    while any(e["state"] != "completed" for e in entries) and time.monotonic() < deadline:
        time.sleep(0.01)
        entries = dump()
    with open(os.path.join(tmp, f"healthy{rank}.json"), "w") as f:
        json.dump({"issued": issued, "summary": summary(entries), "error": backend_error(),
                   "states": [e["state"] for e in entries],
                   "durations": [e.get("duration_ms") for e in entries]}, f)
    dist.destroy_process_group()


def timeout(rank, init_file, flag, out):
    dist.init_process_group("collie", init_method="file://" + init_file, rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=3))
    t = torch.ones(SMALL)
    dist.all_reduce(t)
    if rank == 1:
        # Stays alive (a stuck peer, not a dead one) until rank 0 has seen its error.
        deadline = time.monotonic() + 60
        while not os.path.exists(flag) and time.monotonic() < deadline:
            time.sleep(0.05)
        os._exit(0)
    # A hook of the caller's own, beside torch's, and the table's refusals.
    pg = dist.group.WORLD
    hook_calls = []
    def failing_hook():
        raise ValueError("a hook that fails")

    pg.register_abort_hook(6, failing_hook)  # reported on stderr; changes nothing else
    pg.register_abort_hook(7, lambda: hook_calls.append(time.monotonic()))
    refusals = []
    for bad in (lambda: pg.register_abort_hook(7, lambda: None),
                lambda: pg.unregister_abort_hook(8)):
        try:
            bad()
            refusals.append("accepted")
        except RuntimeError as e:
            refusals.append(str(e).splitlines()[0])
    message = "no exception"
    try:
        dist.all_reduce(t)
    except Exception as e:  # noqa: BLE001
        message = f"{type(e).__name__}: {e}"
    dump_file = os.environ["TORCH_FR_DUMP_TEMP_FILE"] + "0"
    entries = []
    if os.path.exists(dump_file):  # written before the error reached this thread
        with open(dump_file, "rb") as f:
            entries = pickle.load(f)["entries"]
    with open(out, "w") as f:
        json.dump({"message": message, "dumped": os.path.exists(dump_file),
                   "error": backend_error(),
                   "supports": [pg.supports_abort_hooks, pg.supports_completion_hooks],
                   "hook_calls": len(hook_calls), "refusals": refusals,
                   "entries": [(e["profiling_name"], e["state"], e["retired"])
                               for e in entries]}, f)
    open(flag, "w").close()
    os._exit(0)  # the group is aborted; skip destroy_process_group


def mismatch(rank, init_file, prefix):
    os.environ["TORCH_FR_DUMP_TEMP_FILE"] = prefix
    dist.init_process_group("collie", init_method="file://" + init_file, rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=20))
    t = torch.ones(SMALL)
    dist.all_reduce(t)
    try:  # collie finds the mismatch on both ranks; each fails, each dumps its trace
        if rank == 0:
            dist.all_reduce(t)
        else:
            dist.broadcast(t, 0)
    except dist.DistBackendError:
        pass
    with open(prefix + f"error{rank}", "w") as f:
        f.write(backend_error())
    os._exit(0)  # the group is aborted; skip destroy_process_group


def check_healthy(tmp):
    outs = [os.path.join(tmp, f"healthy{r}.json") for r in range(2)]
    mp.spawn(healthy, args=(os.path.join(tmp, "init_healthy"), tmp), nprocs=2)
    results = [json.load(open(o)) for o in outs]
    failures = []
    for rank, r in enumerate(results):
        names = [s[0] for s in r["summary"]]
        if names != r["issued"]:
            failures.append(f"rank {rank}: recorded {names}, issued {r['issued']}")
        not_completed = [(n, s) for n, s in zip(names, r["states"]) if s != "completed"]
        if not_completed:
            failures.append(f"rank {rank}: not completed: {not_completed}")
        if r["error"] != "SUCCESS":
            failures.append(f"rank {rank}: get_error() {r['error']} with nothing failed")
        if any(d is None or d < 0 for d in r["durations"]):
            failures.append(f"rank {rank}: durations {r['durations']}")
        seqs = [s[1] for s in r["summary"] if "send" not in s[0] and "recv" not in s[0]]
        if seqs != list(range(1, len(seqs) + 1)):
            failures.append(f"rank {rank}: collective sequence ids {seqs}")
    # The same collectives with the same sizes on both ranks, and each send of rank 0
    # recorded with the sizes rank 1's receive recorded as its output.
    def sizes(r):
        return [s[1:3] + (s[3] + s[4] if "send" in s[0] or "recv" in s[0] else s[3:])
                for s in r["summary"]]
    if sizes(results[0]) != sizes(results[1]):
        failures.append(f"the ranks' traces differ: {results[0]['summary']} against "
                        f"{results[1]['summary']}")
    print(f"healthy: {len(results[0]['summary'])} entries per rank, states "
          f"{sorted(set(results[0]['states'] + results[1]['states']))}")
    return failures


def check_timeout(tmp):
    out = os.path.join(tmp, "timeout.json")
    os.environ["TORCH_FR_DUMP_TEMP_FILE"] = os.path.join(tmp, "fr_trace_")
    mp.spawn(timeout, args=(os.path.join(tmp, "init_timeout"), os.path.join(tmp, "flag"), out),
             nprocs=2)
    r = json.load(open(out))
    print(f"timeout: rank 0 got {r['message'][:160]!r}; dumped {r['dumped']}: {r['entries']}; "
          f"its own abort hook ran {r['hook_calls']} time(s); refusals {r['refusals']}; "
          f"get_error() {r['error']}")
    failures = []
    if "DistBackendError" not in r["message"]:
        failures.append(f"rank 0's second all_reduce: {r['message']}")
    if not r["dumped"]:
        failures.append("no trace was dumped before the error reached the caller")
    if r["error"] != "TIMEOUT":
        failures.append(f"rank 0: get_error() {r['error']} after its call timed out")
    if r["supports"] != [True, True]:
        failures.append(f"supports abort and completion hooks: {r['supports']}")
    if r["hook_calls"] < 1:
        failures.append("the caller's abort hook did not run before the error reached it")
    wanted = ["abort hook id 7 is already registered", "no abort hook has id 8"]
    if any(w not in got for w, got in zip(wanted, r["refusals"])):
        failures.append(f"hook table refusals: {r['refusals']}")
    expected = [["collie:all_reduce", "completed", True], ["collie:all_reduce", "scheduled", False]]
    if r["dumped"] and r["entries"] != expected:
        failures.append(f"the dump has {r['entries']}, expected {expected}")
    return failures


def check_mismatch(tmp):
    traces = os.path.join(tmp, "mismatch")
    os.makedirs(traces)
    mp.spawn(mismatch, args=(os.path.join(tmp, "init_mismatch"), os.path.join(traces, "trace_")),
             nprocs=2)
    errors = []
    for rank in range(2):
        path = os.path.join(traces, f"trace_error{rank}")
        errors.append(open(path).read() if os.path.exists(path) else "not written")
        if os.path.exists(path):
            os.remove(path)
    dumped = sorted(os.listdir(traces))
    if errors != ["COMM_ERROR", "COMM_ERROR"]:
        return [f"mismatch: get_error() {errors}, expected COMM_ERROR on both ranks"]
    if dumped != ["trace_0", "trace_1"]:
        return [f"mismatch: dumps {dumped}, expected one per rank"]
    # torch's own analyzer of flight-recorder dumps (torchfrtrace) names the culprit.
    report = subprocess.run(
        [sys.executable, "-m", "torch.distributed.flight_recorder.fr_trace", traces, "-p",
         "trace_"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120).stdout
    culprit = [line for line in report.splitlines() if "Culprit" in line]
    print(f"mismatch: get_error() {errors}; both ranks dumped; torch's analyzer: {culprit}")
    wanted = "Culprit rank 1; Error type: COLLECTIVE_TYPE_MISMATCH"
    if not any(wanted in line for line in culprit):
        return [f"mismatch: the analyzer did not report {wanted!r}:\n{report}"]
    return []


def main():
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        failures += check_healthy(tmp)
        failures += check_timeout(tmp)
        failures += check_mismatch(tmp)
    for f in failures:
        print("FAIL:", f)
    print("torch_flight_recorder_test:", "FAILED" if failures else "ok")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
