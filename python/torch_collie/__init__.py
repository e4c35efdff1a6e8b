"""collie as a torch.distributed backend.

    import torch_collie  # registers the "collie" backend
    torch.distributed.init_process_group("collie", ...)

Every process group on this backend owns one collie communicator; group rank 0
publishes the collie unique id through the c10d store torch gives the backend.
CPU tensors only.  See docs/pytorch.md.
"""

import torch
import torch.distributed as dist

from . import _C

__all__ = ["create_backend", "init_method_from_env"]


def create_backend(store, rank, size, timeout):
    """The backend creator torch.distributed calls for each group."""
    return _C.create_backend(store, rank, size, timeout)


def init_method_from_env():
    """An init_method that works under torchrun and under `collie run`.

    torchrun sets MASTER_ADDR/MASTER_PORT ("env://" works); `collie run` sets
    COLLIE_RANK/COLLIE_WORLD_SIZE/COLLIE_UNIQUE_ID but no MASTER_*: then a free port
    next to the collie store is not known, so a file under COLLIE_TMPDIR (or /tmp)
    named after the job's unique id serves as the rendezvous.
    Returns (init_method, rank, world_size).
    """
    import hashlib
    import os

    if "MASTER_ADDR" in os.environ and "MASTER_PORT" in os.environ:
        return "env://", int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if "COLLIE_UNIQUE_ID" in os.environ:
        uid = os.environ["COLLIE_UNIQUE_ID"]
        # A digest, not the id: the file name must not reveal the job secret.
        tag = hashlib.sha256(uid.encode()).hexdigest()[:16]
        tmp = os.environ.get("COLLIE_TMPDIR", "/tmp")
        return (
            "file://" + os.path.join(tmp, "torch_collie_" + tag),
            int(os.environ["COLLIE_RANK"]),
            int(os.environ["COLLIE_WORLD_SIZE"]),
        )
    raise RuntimeError(
        "torch_collie: no launcher variables: start with torchrun or `collie run`, "
        "or pass init_method, rank and world_size to init_process_group"
    )


if "collie" not in dist.Backend.backend_list:
    dist.Backend.register_backend("collie", create_backend, devices=["cpu"])
