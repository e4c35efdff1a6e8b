"""Point-to-point matched by (peer, tag) on the collie backend, as on gloo (issue 51).

Two ranks, each case on a "collie" group and on a "gloo" group over the same ranks (the
reference: the same calls must give the same tensors). Rank 0 sends tag 11 (small) and
tag 22 (large); rank 1 posts irecv(tag=22) before irecv(tag=11) and then waits:
  - isend, isend against irecv, irecv;
  - the blocking sends (dist.send twice) against irecv, irecv, then the waits;
  - the receive of 11 posted only after the receive of 22 completed (rank 1 holds 11;
    collie only: gloo deadlocks there);
  - batch_isend_irecv with the two receives listed 22 first;
  - receives from any source with a tag, the first asked for well after its send;
  - a blocking ping-pong (on collie its calls are finished by the threads that wait for
    them), then an isend polled with is_completed() instead of waited for;
  - on three ranks, a receive from any source asked for after its sender (rank 1, not the
    store's host) left the group (collie announces sends only once asked: the leaving
    rank announces what it counted).
Every received tensor is compared bitwise with what was sent. Exits 0 when all hold."""

import os
import sys
import tempfile
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import torch_collie  # registers "collie"

SMALL, LARGE = 5, 300_001


def payload(tag, n):
    # Bit patterns that differ per tag and element (float32 views of int32 values).
    return (torch.arange(n, dtype=torch.int32) * 7919 + tag * 1_000_003).view(torch.float32)


def cases(rank, pg, failures, name):
    def expect(what, got, want):
        if not torch.equal(got.view(torch.int32), want.view(torch.int32)):
            failures.append(f"{name} rank {rank}: {what}: received other bytes than were sent")

    a, b = payload(11, SMALL), payload(22, LARGE)
    # isend 11, isend 22 against irecv 22, irecv 11.
    if rank == 0:
        for w in [dist.isend(a, 1, group=pg, tag=11), dist.isend(b, 1, group=pg, tag=22)]:
            w.wait()
    else:
        g22, g11 = torch.empty(LARGE), torch.empty(SMALL)
        works = [dist.irecv(g22, 0, group=pg, tag=22), dist.irecv(g11, 0, group=pg, tag=11)]
        for w in works:
            w.wait()
        expect("irecv(22), irecv(11) against isend(11), isend(22)", g22, b)
        expect("irecv(11) after irecv(22)", g11, a)
    # Blocking sends: send(11) returns before rank 1 has posted more than irecv(22).
    a, b = payload(11, LARGE), payload(22, SMALL)
    if rank == 0:
        dist.send(a, 1, group=pg, tag=11)
        dist.send(b, 1, group=pg, tag=22)
    else:
        g22, g11 = torch.empty(SMALL), torch.empty(LARGE)
        works = [dist.irecv(g22, 0, group=pg, tag=22), dist.irecv(g11, 0, group=pg, tag=11)]
        for w in works:
            w.wait()
        expect("blocking send(11), send(22) against irecv(22), irecv(11): tag 22", g22, b)
        expect("blocking send(11), send(22) against irecv(22), irecv(11): tag 11", g11, a)
    # The receive of 11 posted only once the receive of 22 is done: rank 1 holds the early
    # send of 11. Not on gloo, which holds no large early send: its blocking send waits
    # for the receive of 11, and the run deadlocks.
    if name == "gloo":
        pass
    elif rank == 0:
        dist.send(a, 1, group=pg, tag=11)
        dist.send(b, 1, group=pg, tag=22)
    else:
        g22, g11 = torch.empty(SMALL), torch.empty(LARGE)
        dist.recv(g22, 0, group=pg, tag=22)
        dist.recv(g11, 0, group=pg, tag=11)
        expect("recv(22) then recv(11) against send(11), send(22): tag 22", g22, b)
        expect("recv(22) then recv(11) against send(11), send(22): tag 11", g11, a)
    # batch_isend_irecv: both ranks list their receives 22 first, their sends 11 first.
    mine = {t: payload(t + rank, n) for t, n in ((11, SMALL), (22, LARGE))}
    got = {11: torch.empty(SMALL), 22: torch.empty(LARGE)}
    peer = 1 - rank
    ops = [dist.P2POp(dist.irecv, got[22], peer, group=pg, tag=22),
           dist.P2POp(dist.irecv, got[11], peer, group=pg, tag=11),
           dist.P2POp(dist.isend, mine[11], peer, group=pg, tag=11),
           dist.P2POp(dist.isend, mine[22], peer, group=pg, tag=22)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    expect("batch_isend_irecv tag 22", got[22], payload(22 + peer, LARGE))
    expect("batch_isend_irecv tag 11", got[11], payload(11 + peer, SMALL))
    # Receives from any source with a tag: the first asked for 0.3 s after its send was
    # posted (collie announces sends only once a rank of the group asks, the ones before
    # too), the second at once.
    if rank == 0:
        dist.send(payload(7, SMALL), 1, group=pg, tag=7)
        dist.send(payload(8, SMALL), 1, group=pg, tag=8)
    else:
        time.sleep(0.3)
        for tag in (7, 8):
            g = torch.empty(SMALL)
            src = dist.recv(g, group=pg, tag=tag)
            if src != 0:
                failures.append(f"{name} rank {rank}: recv from any source with tag {tag}: "
                                f"source {src}")
            expect(f"recv from any source with tag {tag}", g, payload(tag, SMALL))
    # A blocking ping-pong: collie's engine runs each send and receive on the waiting
    # thread, and that thread then finishes its torch call itself (by_waiter).
    before = torch_collie.completion_stats()["by_waiter"]
    t = torch.empty(SMALL)
    for i in range(200):
        if rank == 0:
            dist.send(payload(1000 + i, SMALL), 1, group=pg, tag=9)
            dist.recv(t, 1, group=pg, tag=9)
            expect(f"ping-pong round {i}", t, payload(2000 + i, SMALL))
        else:
            dist.recv(t, 0, group=pg, tag=9)
            expect(f"ping-pong round {i}", t, payload(1000 + i, SMALL))
            dist.send(payload(2000 + i, SMALL), 0, group=pg, tag=9)
    if name == "collie" and torch_collie.completion_stats()["by_waiter"] == before:
        failures.append(f"{name} rank {rank}: no ping-pong call was finished by its waiter")
    # After that streak, a send queued without waking anyone that its caller does not wait
    # for at once: it must still go out (collie's threads look every 10 ms). gloo's send
    # completes only in wait(), so only collie's is polled.
    if rank == 0:
        w = dist.isend(payload(3, LARGE), 1, group=pg, tag=10)
        deadline = time.monotonic() + 5
        while name == "collie" and not w.is_completed() and time.monotonic() < deadline:
            time.sleep(0.001)
        if name == "collie" and not w.is_completed():
            failures.append(f"{name} rank {rank}: an isend polled with is_completed() never "
                            "completed")
        w.wait()
    else:
        g = torch.empty(LARGE)
        dist.recv(g, 0, group=pg, tag=10)
        expect("isend polled with is_completed()", g, payload(3, LARGE))


def worker(rank, init_file, result):
    dist.init_process_group("collie", init_method="file://" + init_file, rank=rank, world_size=2,
                            timeout=timedelta(seconds=60))
    gloo = dist.new_group(backend="gloo")
    failures = []
    for name, pg in (("gloo", gloo), ("collie", dist.group.WORLD)):
        try:
            cases(rank, pg, failures, name)
        except Exception as e:  # noqa: BLE001
            failures.append(f"{name} rank {rank}: {type(e).__name__}: {e}")
    dist.barrier(group=gloo)
    with open(f"{result}.{rank}", "w") as f:
        f.write("\n".join(failures))
    dist.destroy_process_group()


def leaving_sender(rank, init_file, result):
    dist.init_process_group("collie", init_method="file://" + init_file, rank=rank, world_size=3,
                            timeout=timedelta(seconds=60))
    failures = []
    if rank == 1:
        dist.send(payload(5, SMALL), 2, tag=5)
        dist.destroy_process_group()
    elif rank == 2:
        time.sleep(1.0)  # rank 1 has left by now
        g = torch.empty(SMALL)
        src = dist.recv(g, tag=5)
        if src != 1 or not torch.equal(g.view(torch.int32), payload(5, SMALL).view(torch.int32)):
            failures.append(f"collie rank 2: recv from any source after the sender left: "
                            f"source {src}")
        dist.destroy_process_group()
    else:
        time.sleep(2.0)  # the store's host stays until rank 2 received
        dist.destroy_process_group()
    with open(f"{result}.{rank}", "w") as f:
        f.write("\n".join(failures))


def main():
    with tempfile.TemporaryDirectory() as tmp:
        result = os.path.join(tmp, "result")
        mp.spawn(worker, args=(os.path.join(tmp, "init"), result), nprocs=2)
        failures = [line for r in range(2) for line in open(f"{result}.{r}").read().splitlines()]
        left = os.path.join(tmp, "left")
        mp.spawn(leaving_sender, args=(os.path.join(tmp, "init3"), left), nprocs=3)
        failures += [line for r in range(3) for line in open(f"{left}.{r}").read().splitlines()]
    for line in failures:
        print("FAIL:", line)
    print("torch_p2p_tags_test:", "FAILED" if failures else "ok")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
