#!/usr/bin/env python3
"""Checks every `#include "..."` edge against the layer table of docs/architecture.md.

Usage: scripts/check_layering.py [REPO_ROOT]   (default: this script's repository)

Reads every *.h, *.cc, *.cu, *.cuh and *.c under SCANNED (core/, transports/, kernels/,
ddp/, tools/, python/torch_collie/csrc/, include/), resolves each quoted include the way
the build does (the including file's folder, then the repository root, then include/),
maps both ends to a layer of LAYERS (longest path prefix wins) and reports every edge
that LAYERS does not allow, one `file:line: <from layer> includes <to layer> (<header>)`
line each, and every include of a header in PRIVATE_HEADERS from outside its folder.
Always allowed: the public API (`include/collie/`, layer `public`) and a layer's own files. Explicit exceptions, each a documented part of the design, are in
ALLOWED; includes still to be fixed are in KNOWN_VIOLATIONS.

Exit 1 when an edge is neither allowed nor in KNOWN_VIOLATIONS, or when an entry of
KNOWN_VIOLATIONS or ALLOWED no longer occurs (so both lists only shrink). On success
prints "layering check: N files, M includes ok, K known violations".
Python 3 standard library only.
"""
import os
import re
import sys

# ---------------------------------------------------------------------------------------
# The table of docs/architecture.md ("## Layers") as data.
#   layer -> (paths it covers: folders or single files, longest prefix wins;
#             layers it may include besides itself and `public`)
# Where the table is silent or loose, the choice made is commented.
BOTTOM = ["common", "config", "log"]
CORE_SEAMS = ["transport_seam", "kernel_seam"]
# Every layer under core/ (the tools row reads them all).
CORE_LAYERS = BOTTOM + ["net", "bootstrap", "memory", "plan", "tune", "sim"] + CORE_SEAMS + [
    "device_runtime", "team", "engine", "device", "comm"]
LAYERS = {
    # include/collie/: the public API, includable by every layer.
    "public": (["include/collie"], []),
    # The bottom. One table row: its folders may include each other (config and log do).
    "common": (["core/common"], ["config", "log"]),
    "config": (["core/config"], ["common", "log"]),
    "log": (["core/log"], ["common", "config"]),
    # Table: "config, log"; common (the public types' definitions, half.h) is bottom too.
    "net": (["core/net"], BOTTOM),
    # Same row as core/net: the TCP store server and client run over its sockets.
    "bootstrap": (["core/bootstrap"], BOTTOM + ["net"]),
    # Not in the table: shared-memory regions (collie/shared_memory.h, the shm transport,
    # the emulated device's windows). Placed beside net: a platform service on the bottom.
    "memory": (["core/memory"], BOTTOM),
    # Table: "types", which are include/collie/types.h (public). Bottom allowed.
    "plan": (["core/plan"], BOTTOM),
    "tune": (["core/tune"], BOTTOM + ["plan"]),
    # The schedule simulator runs every rank's schedule with real bytes, reducing with the
    # host kernels: above plan and the kernel seam, used by tests and `collie sim`.
    "sim": (["core/sim"], BOTTOM + ["plan", "kernel_seam"]),
    # The two seams. Table: "—", read as the bottom only (see ALLOWED for the team offer).
    "transport_seam": (["core/transport"], BOTTOM),
    "kernel_seam": (["core/kernel"], BOTTOM),
    # `DeviceRuntime`, which the table names as a dependency of its own (core/device,
    # transports/cuda_ipc): the interface header, the selection next to it and the step
    # handles it passes to the kernels (device_steps.h) form a third seam. Its
    # implementations live in kernels/cuda (docs/cuda.md).
    "device_runtime": (["core/device/device_runtime.h", "core/device/device_runtime.cc",
                        "core/device/device_steps.h"],
                       BOTTOM),
    # The team collectives (board, direct, cma) over the transport seam's team board; the
    # engine's executor runs team steps through them.
    "team": (["core/team"], BOTTOM + ["plan", "memory"] + CORE_SEAMS),
    "engine": (["core/engine"], BOTTOM + ["plan", "tune", "team"] + CORE_SEAMS),
    # Table: "plan, transport seam, DeviceRuntime".
    "device": (["core/device"], BOTTOM + ["plan", "transport_seam", "device_runtime"]),
    # Table: "everything in core" (one row: api calls into comm).
    "comm": (["core/comm", "core/api"],
             BOTTOM + ["net", "bootstrap", "memory", "plan", "tune", "team", "engine", "device",
                       "device_runtime"] + CORE_SEAMS),
    # Table: "core seams, net". memory added (the shm transport's regions; not in table).
    "transport_shm": (["transports/shm"], BOTTOM + CORE_SEAMS + ["net", "memory"]),
    "transport_tcp": (["transports/tcp"], BOTTOM + CORE_SEAMS + ["net", "memory"]),
    "transport_ucx": (["transports/ucx"], BOTTOM + CORE_SEAMS + ["net", "memory"]),
    "transport_ibverbs": (["transports/ibverbs"], BOTTOM + CORE_SEAMS + ["net", "memory"]),
    # Table: "core seams, DeviceRuntime" (no net).
    "transport_cuda_ipc": (["transports/cuda_ipc"], BOTTOM + CORE_SEAMS + ["device_runtime"]),
    # Table: "core seam". kernels/common is shared by cpu and cuda (its 16-bit float
    # types come from core/common/half.h); cpu and cuda implement
    # the DeviceRuntime seam (docs/cuda.md: cuda_device_runtime.cc, the emulated runtime,
    # the no-CUDA stubs); kernels/cuda/emulation is part of kernels/cuda (cuda_compat.h
    # compiles the CUDA kernels through it). Bottom allowed (half.h, log).
    "kernels_common": (["kernels/common"], ["common"]),
    "kernels_cpu": (["kernels/cpu"],
                    BOTTOM + ["kernel_seam", "device_runtime", "kernels_common"]),
    "kernels_cuda": (["kernels/cuda"],
                     BOTTOM + ["kernel_seam", "device_runtime", "kernels_common"]),
    # The host kernel backend's registration (docs/architecture.md: "chosen the same way
    # through kernels/builtin_kernels.cc"), like the generated builtin_transports.cc.
    "kernels_builtin": (["kernels/builtin_kernels.cc"], ["kernel_seam", "kernels_cpu"]),
    # Table: "public API"; ddp/demo/ sits above ddp/.
    "ddp": (["ddp"], []),
    "ddp_demo": (["ddp/demo"], ["ddp"]),
    # Table: "public API, torch" (torch comes through <...> includes, not checked).
    "python": (["python/torch_collie/csrc"], []),
    # Table: "public API, core" (decisions/tools-read-core.md: the CLI may read every
    # layer of core, never a transport or a kernel backend); the ddp-demo command runs
    # ddp/demo (docs/architecture.md, ddp/ row: "the collie ddp-demo training run").
    "tools": (["tools"], CORE_LAYERS + ["ddp_demo"]),
}

SCANNED = ["core", "transports", "kernels", "ddp", "tools", "python/torch_collie/csrc",
           "include"]
EXTENSIONS = (".h", ".cc", ".cu", ".cuh", ".c")

# Edges the table does not list but the design documents: (file, included header, why).
ALLOWED = [
    # The tuner costs team algorithms from the transport's offer, and tune may only use
    # plan, so the offer's types (TeamOffer, TeamAlgorithms, CollectiveArgs) live in
    # core/plan/team_step.h and the transport seam speaks them (architecture.md "Team
    # collectives", "Where a new algorithm goes"; decisions/team-collectives.md).
    ("core/transport/transport.h", "core/plan/team_step.h",
     "TransportFactory::teamOffer returns the plan's TeamOffer"),
    ("core/transport/team_board.h", "core/plan/team_step.h",
     "TeamBoard::offer returns the plan's TeamOffer"),
    # A board note says where a rank's registered buffers are (collie/shared_memory.h).
    ("core/transport/team_board.h", "core/memory/shared_region.h",
     "BoardNote carries SharedWindow"),
    ("core/transport/peer_memory.h", "core/memory/shared_region.h",
     "PeerMemory::resolveWindow maps the SharedWindow a board note carries"),
    # Connections reduce on receive with the communicator's kernels (architecture.md,
    # "One collective" step 3: postRecvReduce); TransportContext::kernels carries them.
    ("core/transport/transport.h", "core/kernel/reduce_backend.h",
     "TransportContext::kernels for postRecvReduce and the team's reductions"),
    # The emulated device maps its windows between processes with the shm transport's
    # shared regions (docs/cuda.md: mapSharedWindow, "shared with the shm transport").
    ("kernels/cuda/emulation/emulated_runtime.cc", "core/memory/shared_region.h",
     "emulated IPC handles map windows through core/memory (docs/cuda.md)"),
]

# Includes the table forbids that are still in the tree: (file, included header, note).
# Each fix removes its entry; an entry that no longer occurs fails the check.
KNOWN_VIOLATIONS = []

# ---------------------------------------------------------------------------------------

INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


def layer_of(path):
    """The layer covering repo-relative `path` (longest prefix), or None."""
    best, best_len = None, -1
    for name, (prefixes, _) in LAYERS.items():
        for prefix in prefixes:
            if (path == prefix or path.startswith(prefix + "/")) and len(prefix) > best_len:
                best, best_len = name, len(prefix)
    return best


def resolve(root, includer, header):
    """Repo-relative path of `header` as included from repo-relative `includer`."""
    candidates = [os.path.normpath(os.path.join(os.path.dirname(includer), header)),
                  os.path.normpath(header),
                  os.path.normpath(os.path.join("include", header))]
    for candidate in candidates:
        if os.path.isfile(os.path.join(root, candidate)):
            return candidate
    # Not in the tree (a generated header): classify it by how it is written.
    for candidate in candidates[1:]:
        if layer_of(candidate) is not None:
            return candidate
    return None


# Headers private to one folder, whatever the layers say: header -> the folder that may
# include it. Communicator::Impl is seen only by core/comm: the ABI check
# (tests/install/abi_check.sh) rebuilds exactly that folder with a padded Impl, so a file
# elsewhere that saw the Impl would escape it.
PRIVATE_HEADERS = {
    "core/comm/communicator_impl.h": "core/comm/",
}


def allowed(from_layer, to_layer, target=""):
    return (to_layer == from_layer or to_layer == "public" or
            to_layer in LAYERS[from_layer][1])


def source_files(root):
    for top in SCANNED:
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
            dirnames.sort()
            for name in sorted(filenames):
                if name.endswith(EXTENSIONS):
                    yield os.path.relpath(os.path.join(dirpath, name), root)


def check(root):
    """(files, includes, edges, notes): edges are (file, line, from, to, header, target)
    for every include the table does not allow; notes are unresolvable includes."""
    files = includes = 0
    edges, notes = [], []
    for rel in source_files(root):
        rel = rel.replace(os.sep, "/")
        from_layer = layer_of(rel)
        if from_layer is None:
            notes.append(f"{rel}: in no layer of LAYERS")
            continue
        files += 1
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
            for lineno, text in enumerate(f, 1):
                m = INCLUDE.match(text)
                if not m:
                    continue
                header = m.group(1)
                target = resolve(root, rel, header)
                to_layer = layer_of(target) if target else None
                if to_layer is None:
                    notes.append(f"{rel}:{lineno}: cannot place \"{header}\" in a layer")
                    continue
                includes += 1
                owner = PRIVATE_HEADERS.get(target)
                if owner is not None and not rel.startswith(owner):
                    edges.append((rel, lineno, from_layer, f"{owner}'s private", header, target))
                elif not allowed(from_layer, to_layer, target):
                    edges.append((rel, lineno, from_layer, to_layer, header, target))
    return files, includes, edges, notes


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(
        os.path.dirname(os.path.abspath(__file__)))
    files, includes, edges, notes = check(root)
    for note in notes:
        print(f"note: {note}")
    allowed_keys = {(f, h) for f, h, _ in ALLOWED}
    known_keys = {(f, h) for f, h, _ in KNOWN_VIOLATIONS}
    seen = set()
    failures = []
    for rel, lineno, from_layer, to_layer, header, target in edges:
        key = (rel, target)
        if key in allowed_keys or key in known_keys:
            seen.add(key)
            continue
        failures.append(f"{rel}:{lineno}: {from_layer} includes {to_layer} ({header})")
    for name, entries in (("ALLOWED", ALLOWED), ("KNOWN_VIOLATIONS", KNOWN_VIOLATIONS)):
        for f, h, why in entries:
            if (f, h) not in seen:
                failures.append(f"{f}: {name} entry for {h} no longer occurs; remove it ({why})")
    if failures:
        for line in failures:
            print(line)
        print(f"layering check: {len(failures)} problem(s) in {files} files "
              f"(table: docs/architecture.md, data: scripts/check_layering.py)")
        return 1
    ok = includes - sum(1 for rel, _, _, _, _, target in edges if (rel, target) in known_keys)
    print(f"layering check: {files} files, {ok} includes ok, "
          f"{len(KNOWN_VIOLATIONS)} known violations")
    return 0


if __name__ == "__main__":
    sys.exit(main())
