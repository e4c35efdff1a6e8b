"""Make a CUDA-wheel PyTorch importable on a machine without the NVIDIA libraries.

PyPI's Linux torch wheels are CUDA builds: libtorch_cpu.so, libtorch_cuda.so and
libtorch_python.so name libcudart, libcublas, libcudnn, libnccl ... as DT_NEEDED,
and those come as several GB of nvidia-* wheels.  For CPU-only use none of them is
ever called, but the dynamic linker must still find them.  This script writes tiny
stub libraries with the right sonames into torch/lib ($ORIGIN is on the torch
libraries' rpath, ahead of the system's cache), each defining every symbol the
torch libraries import from it (with the symbol version they ask for).  Every stub
function returns 100 (cudaErrorNoDevice and, for the other libraries, some
non-success code), so torch.cuda.is_available() is False and the CPU path works.

Usage: python make_cuda_stubs.py <torch/lib dir>     (idempotent)
"""

import os
import re
import subprocess
import sys
import tempfile

# CUDA sonames torch's libraries may need; the stubs replace all of them so that the
# result is the same on machines with and without a system CUDA.
CUDA_PREFIXES = ("libcuda", "libcublas", "libcudnn", "libcufft", "libcufile", "libcupti",
                 "libcusparse", "libcusolver", "libnccl", "libnvrtc", "libnvshmem",
                 "libnvJitLink", "libnvToolsExt", "libcurand", "libcudart")
TORCH_LIBS = ("libc10.so", "libc10_cuda.so", "libtorch_cpu.so", "libtorch_cuda.so",
              "libtorch.so", "libtorch_python.so", "libtorch_global_deps.so",
              "libtorch_nvshmem.so", "libshm.so", "libtorch_cuda_linalg.so")
MARK = "collie-cuda-stub"


def run(args):
    return subprocess.run(args, check=True, capture_output=True, text=True).stdout


def needed(path):
    return re.findall(r"\(NEEDED\).*\[(.*)\]", run(["readelf", "-d", path]))


def undefined(path):
    """(name, version or None) for each undefined dynamic symbol."""
    out = []
    for line in run(["nm", "-D", "--undefined-only", path]).splitlines():
        sym = line.split()[-1]
        name, _, version = sym.partition("@")
        out.append((name, version.lstrip("@") or None))
    return out


def defined(paths):
    names = set()
    for p in paths:
        for line in run(["nm", "-D", "--defined-only", p]).splitlines():
            names.add(line.split()[-1].split("@")[0])
    return names


def system_lib(soname):
    out = run(["ldconfig", "-p"])
    m = re.search(r"\s" + re.escape(soname) + r" \(libc6,x86-64\) => (\S+)", out)
    return m.group(1) if m else None


def main():
    lib_dir = sys.argv[1]
    libs = [os.path.join(lib_dir, n) for n in TORCH_LIBS if os.path.exists(os.path.join(lib_dir, n))]
    cuda = sorted({s for p in libs for s in needed(p) if s.startswith(CUDA_PREFIXES)})
    if not cuda:
        print("no CUDA dependencies: nothing to stub")
        return
    # Versioned imports name their library; unversioned ones (nccl, cufile, cusparseLt)
    # go to whichever CUDA stub is loaded first: give them to every stub is wasteful,
    # so they all go into a first-loaded one (libcudart, needed by libtorch_global_deps).
    own = defined(libs)
    sys_libs = [l for l in (system_lib(n) for n in ("libc.so.6", "libm.so.6", "libstdc++.so.6",
                "libgcc_s.so.1", "libpthread.so.0", "libdl.so.2", "librt.so.1")) if l]
    sys_libs += [os.path.join(lib_dir, n) for n in os.listdir(lib_dir) if n.startswith("libgomp")]
    provided = own | defined(sys_libs)
    per_lib = {s: {} for s in cuda}
    loose = set()
    # Version nodes that are not sonames, and the library that defines them.
    node_lib = {v: s for s in cuda for v, prefix in (("NVSHMEM", "libnvshmem_host"),)
                if s.startswith(prefix)}
    for p in libs:
        for name, version in undefined(p):
            if version in per_lib:
                per_lib[version][name] = version
            elif version in node_lib:
                per_lib[node_lib[version]][name] = version
            elif version is None and name not in provided and not name.startswith("_ITM") \
                    and name not in ("__gmon_start__",):
                loose.add(name)
    cudart = next((s for s in cuda if s.startswith("libcudart")), cuda[0])
    for name in loose:
        per_lib[cudart][name] = None
    with tempfile.TemporaryDirectory() as tmp:
        for soname, syms in per_lib.items():
            src = os.path.join(tmp, "stub.c")
            vers = os.path.join(tmp, "stub.map")
            with open(src, "w") as f:
                f.write('static const char kMsg[] = "%s: no CUDA in this build";\n' % MARK)
                f.write('const char* %s_marker(void) { return kMsg; }\n' % re.sub(r"\W", "_", soname))
                for name in sorted(syms):
                    if name.endswith(("GetErrorString", "GetErrorName")):
                        f.write("const char* %s(void) { return kMsg; }\n" % name)
                    else:
                        f.write("int %s(void) { return 100; }\n" % name)
            # Unversioned imports bind to a symbol's default version, so the loose
            # ones join the soname's node.
            nodes = {}
            for n, v in syms.items():
                nodes.setdefault(v or soname, []).append(n)
            versioned = bool(syms)
            with open(vers, "w") as f:
                for node, names in sorted(nodes.items()):
                    f.write("%s { global: %s};\n" % (node, "".join(n + "; " for n in sorted(names))))
                f.write("%s_LOCAL { local: *; };\n" % re.sub(r"\W", "_", soname))
            out = os.path.join(lib_dir, soname)
            if os.path.exists(out) and MARK.encode() not in open(out, "rb").read():
                print("keeping real library", out)
                continue
            args = ["cc", "-shared", "-fPIC", "-O0", "-w", "-o", out, "-Wl,-soname," + soname, src]
            if versioned:
                args.insert(-1, "-Wl,--version-script=" + vers)
            run(args)
            print("stub %-24s %4d symbols" % (soname, len(syms)))


if __name__ == "__main__":
    main()
