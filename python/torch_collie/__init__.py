"""collie as a torch.distributed backend.

    import torch_collie  # registers the "collie" backend
    torch.distributed.init_process_group("collie", ...)

Every process group on this backend owns one collie communicator; group rank 0
publishes the collie unique id through the c10d store torch gives the backend.
CPU tensors, and CUDA tensors for the collectives and point-to-point calls that
data-parallel training uses (enqueued on the current stream, as torch's NCCL backend
does; one backend serves "cpu:collie,cuda:collie").  See docs/pytorch.md.
"""

import weakref

import torch
import torch.distributed as dist

from . import _C
from .devices import Device, create_device, device_knobs

# gloo code calls create_device on the group's backend object.
_C.Backend.create_device = staticmethod(create_device)

__version__ = _C.collie_version()

__all__ = [
    "Device",
    "all_reduce_",
    "SharedBuckets",
    "completion_stats",
    "create_backend",
    "create_device",
    "device_knobs",
    "empty_shared",
    "init_method_from_env",
    "shared_allocator_stats",
    "shared_allreduce_hook",
    "use_shared_cpu_allocator",
]


def create_backend(opts, backend_options=None):
    """The backend creator torch.distributed calls for each group (extended API): torch's
    ProcessGroup over the collie backend, named "collie" (a plain one reports plugins as
    "custom" to DDP's logging). Under TORCH_DISTRIBUTED_DEBUG=DETAIL the backend is
    wrapped in torch's collective checker first, as torch wraps the backends it creates
    itself.

    ``backend_options`` is the group's ``pg_options``: None, or a mapping of collie
    knobs to values for this group's communicator only, over the environment's::

        dist.new_group(backend="collie", pg_options={"COLLIE_TRANSPORT": "tcp"})

    An unknown knob or a refused value fails the group's creation, naming it.
    """
    store, rank, size, timeout = opts.store, opts.group_rank, opts.group_size, opts.timeout
    backend = _C.create_backend(store, rank, size, timeout, _knobs(backend_options))
    if dist.get_debug_level() == dist.DebugLevel.DETAIL:
        backend = dist.distributed_c10d._create_process_group_wrapper(
            backend, "collie", store, rank, size, timeout)
    return _C.make_process_group(store, rank, size, backend)


def all_reduce_(tensor, op=dist.ReduceOp.SUM, group=None):
    """All-reduce ``tensor`` in place across ``group`` (default: the default group) and
    return it, for callers bound by latency, as DeepSpeed's ``inference_all_reduce``
    serves tensor-parallel inference: on a "collie" group the collective is issued and
    waited for on the calling thread, with no Work, Future, dispatcher or flight-recorder
    entry (torch's own per-call cost, which ``dist.all_reduce`` pays on every backend).
    The result is the same as ``dist.all_reduce(tensor, op, group)``'s, bit for bit, and
    the call takes its place in the group's order of collectives like any other. Dense
    CPU tensors, every op and dtype ``dist.all_reduce`` takes. On a group of another
    backend (or under TORCH_DISTRIBUTED_DEBUG=DETAIL) it is ``dist.all_reduce``. Errors
    raise as ``dist.all_reduce``'s (DistBackendError naming the rank).
    """
    if group is None:
        group = _world.default_pg
        if group is None:
            group = dist.distributed_c10d._get_default_group()  # raises: not initialized
    try:
        backend = _direct_backends.get(group, _UNKNOWN)
    except TypeError:  # not weakly referable: GroupMember.NON_GROUP_MEMBER, an int
        if group == dist.GroupMember.NON_GROUP_MEMBER:
            return tensor  # as dist.all_reduce: this rank is not in the group
        raise
    if backend is _UNKNOWN:
        backend = group._get_backend(torch.device("cpu"))
        backend = backend if isinstance(backend, _C.Backend) else None
        _direct_backends[group] = backend
    if backend is not None and tensor.device.type == "cpu":
        backend._all_reduce_now(tensor, op)
    else:
        dist.all_reduce(tensor, op=op, group=group)
    return tensor


_world = dist.distributed_c10d._world
_UNKNOWN = object()
# A group's collie Backend (None: not one) as all_reduce_ found it; weak, so that a
# destroyed group leaves nothing behind.
_direct_backends = weakref.WeakKeyDictionary()


def _knobs(backend_options):
    """pg_options as collie's Options::config: {str: str}."""
    if backend_options is None:
        return {}
    if not hasattr(backend_options, "items"):
        raise TypeError(
            "torch_collie: pg_options must be a mapping of collie knobs to values, e.g. "
            "{'COLLIE_TRANSPORT': 'tcp'}, not " + type(backend_options).__name__)
    return {str(name): str(value) for name, value in backend_options.items()}


def empty_shared(*size, dtype=torch.float32):
    """A zero-filled CPU tensor in collie shared memory (memfd).

    When every rank all-reduces such a tensor on a one-host "collie" group, collie's
    shared-memory transport reduces it in one pass with no copies (each rank reduces
    its share from every rank's tensor into every rank's tensor); ordinary tensors go
    through the FIFO ring.  ``empty_shared(25 * 2**20)`` or ``empty_shared((4, 8))``.
    """
    if len(size) == 1 and isinstance(size[0], (tuple, list, torch.Size)):
        size = tuple(size[0])
    return _C.empty_shared([int(s) for s in size], dtype)


class SharedBuckets:
    """State of shared_allreduce_hook: one empty_shared buffer per DDP bucket."""

    def __init__(self, group=None):
        self.group = group
        self.buffers = {}


def shared_allreduce_hook(state, bucket):
    """DDP comm hook: average a gradient bucket through collie shared memory.

        model.register_comm_hook(torch_collie.SharedBuckets(), torch_collie.shared_allreduce_hook)

    Copies the bucket into its own empty_shared buffer (kept across steps) and
    all-reduces that with AVG: one copy and collie's zero-copy reduction instead of the
    FIFO ring's copies; DDP reads the averaged gradients straight from the buffer.
    Same result as DDP's default hook (sum / world size, rounded once).
    """
    grad = bucket.buffer()
    buf = state.buffers.get(bucket.index())
    if buf is None or buf.numel() != grad.numel() or buf.dtype != grad.dtype:
        buf = empty_shared(grad.numel(), dtype=grad.dtype)
        state.buffers[bucket.index()] = buf
    buf.copy_(grad.view(-1))
    work = dist.all_reduce(buf, op=dist.ReduceOp.AVG, group=state.group, async_op=True)
    return work.get_future().then(lambda fut: fut.value()[0])


class use_shared_cpu_allocator:
    """Serve large CPU allocations from collie shared memory (opt-in).

        torch_collie.use_shared_cpu_allocator(min_bytes=1 << 20)   # for the process
        model = DistributedDataParallel(model, gradient_as_bucket_view=True)

        with torch_collie.use_shared_cpu_allocator():              # or scoped
            model = DistributedDataParallel(model, gradient_as_bucket_view=True)

    Installs a torch CPU allocator that takes requests of at least ``min_bytes`` from a
    caching pool of collie shared memory (size classes, so repeated allocations reuse
    blocks instead of mapping fresh pages) and leaves smaller ones to the allocator it
    replaces.  Tensors made while it is installed (DDP's gradient buckets, when DDP is
    built inside it) all-reduce zero-copy on a one-host "collie" group when every rank
    does the same: the backend registers each pool block once.  With
    ``gradient_as_bucket_view=True`` the gradients live in those buckets, so DDP copies
    nothing either.  ``max_cached_bytes`` bounds the idle memory the pool keeps.
    Leaving the ``with`` block (or ``close()``) restores the previous allocator; pool
    tensors stay valid.  Install it before starting threads that allocate.
    """

    def __init__(self, min_bytes=1 << 20, max_cached_bytes=1 << 30):
        _C.install_shared_allocator(int(min_bytes), int(max_cached_bytes))

    def close(self):
        _C.uninstall_shared_allocator()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def shared_allocator_stats():
    """Counters of the shared CPU allocator's pool and of registered all-reduces.

    ``registered_allreduces`` counts this process's all-reduces whose buffer was
    registered shared memory (a pool block or an ``empty_shared`` tensor), i.e. offered
    to the zero-copy path; collie takes it when every rank offers.
    """
    return dict(_C.shared_allocator_stats())


def completion_stats():
    """Where this process's calls on collie groups completed, counted since it started.

    ``on_caller``: on the thread that made the call, before the call returned (collie ran
    the collective there: up to 256 KiB per rank on shared memory, and larger ones once
    the caller is seen to wait for each at once); ``on_thread``: on a group's completion
    thread (the call overlapped the caller's work, or was handed off).
    """
    return dict(_C.completion_stats())


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
    dist.Backend.register_backend(
        "collie", create_backend, extended_api=True, devices=["cpu", "cuda"]
    )
