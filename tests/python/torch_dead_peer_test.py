"""A dead peer surfaces as a Python exception on the survivor that names it.

Rank 1 leaves without a word (os._exit) after a barrier; rank 0 then all-reduces
and must get torch.distributed.DistBackendError mentioning rank 1, within the
collie timeout (COLLIE_TIMEOUT, set short by the runner), and the backend's get_error()
must then say REMOTE_ERROR. Run twice: a small ordinary tensor (one-shot board) and a
4 MB torch_collie.empty_shared tensor (the zero-copy path)."""

import os
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import torch_collie


def worker(rank, init_file, result, shared):
    dist.init_process_group("collie", init_method="file://" + init_file, rank=rank, world_size=2)
    dist.barrier()
    if rank == 1:
        os._exit(0)
    time.sleep(0.5)
    start = time.monotonic()
    message = "no exception"
    try:
        t = torch_collie.empty_shared(1 << 20) if shared else torch.ones(1 << 16)
        dist.all_reduce(t)
    except Exception as e:  # noqa: BLE001
        message = f"{type(e).__name__}: {e}"
    error = dist.group.WORLD._get_backend(torch.device("cpu")).get_error().name
    with open(result, "w") as f:
        f.write(f"{time.monotonic() - start:.1f}\n{error}\n{message}")
    os._exit(0)  # the group is broken; skip destroy_process_group


def main():
    failed = False
    for shared in (False, True):
        with tempfile.TemporaryDirectory() as tmp:
            result = os.path.join(tmp, "result")
            mp.spawn(worker, args=(os.path.join(tmp, "init"), result, shared), nprocs=2)
            seconds, error, message = open(result).read().split("\n", 2)
            what = "empty_shared" if shared else "ordinary"
            print(f"{what}: rank 0 after {seconds} s: {message}; get_error() {error}")
            ok = "DistBackendError" in message and ("rank 1" in message or "peer 1" in message)
            ok = ok and error == "REMOTE_ERROR"
            failed = failed or not ok
    print("torch_dead_peer_test:", "FAILED" if failed else "ok")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
