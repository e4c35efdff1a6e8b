"""Shapes of collie's streaming two-into-one sum, timed beside torch.add in one process.

Loads the shared library built from bench/gpu_streaming_variants.cu (its header lists the
variants), then:
  1. checks bits: every variant against collie's kernel, and collie's kernel against
     torch.add, on random finite inputs (every rounding case of bfloat16) over a count
     that is not a whole number of packs, with every pointer 4 bytes past a 16-byte
     boundary (the bare variants: aligned, whole packs);
  2. times, in --rounds interleaved rounds whose order rotates, each variant and torch.add
     on the same zero-filled buffers (as scripts/gpu-check.sh's benchmarks): best of --reps
     batches of --iters calls between two device synchronisations, per size and dtype;
  3. prints one JSON object: per size and dtype, each variant's median microseconds, its
     rounds, and its median over torch.add's (below 1: faster than torch).
Exits 77 ("skipped: ...") without torch or a CUDA device.

Usage: gpu_streaming_variants.py LIBRARY [--rounds N] [--iters N] [--reps N] [--sizes-mib ...]
"""
import argparse
import ctypes
import json
import statistics
import sys
import time


def load(path):
    lib = ctypes.CDLL(path)
    lib.variants_name.restype = ctypes.c_char_p
    lib.variants_launch.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                    ctypes.c_void_p, ctypes.c_uint64]
    return lib


def variants(lib):
    out = []
    for v in range(lib.variants_count()):
        out.append({"index": v, "name": lib.variants_name(v).decode(),
                    "dtype": ("float32", "bfloat16")[lib.variants_dtype(v)],
                    "bare": bool(lib.variants_bare(v))})
    return out


def launcher(lib, torch, v):
    def run(a, b, c):
        rc = lib.variants_launch(v["index"], a.data_ptr(), b.data_ptr(), c.data_ptr(), a.numel())
        if rc != 0:
            raise RuntimeError("%s (%s): CUDA error %d" % (v["name"], v["dtype"], rc))
    return run


def random_finite(torch, dtype, count):
    if dtype == torch.float32:
        return torch.randn(count, device="cuda") * 1000
    bits = torch.randint(-32768, 32768, (count,), dtype=torch.int32, device="cuda").to(torch.int16)
    special = (bits & 0x7F80) == 0x7F80  # Inf/NaN exponent: clear its top bit
    return torch.where(special, bits & -16385, bits).view(torch.bfloat16)


def check_bits(lib, torch, vs, count):
    """Names of variants whose output differs; kernel-vs-torch under 'torch.add'."""
    failed = []
    for dtype_name, dtype in (("float32", torch.float32), ("bfloat16", torch.bfloat16)):
        skew = 4 // torch.tensor([], dtype=dtype).element_size()  # 4 bytes past 16
        a = random_finite(torch, dtype, count + 8)
        b = random_finite(torch, dtype, count + 8)
        ref = torch.full_like(a, 7)
        kernel = next(v for v in vs if v["dtype"] == dtype_name and v["name"] == "kernel")
        launcher(lib, torch, kernel)(a[skew:skew + count], b[skew:skew + count],
                                     ref[skew:skew + count])
        want = torch.add(a[skew:skew + count], b[skew:skew + count])
        if not torch.equal(want.view(torch.uint8), ref[skew:skew + count].view(torch.uint8)):
            failed.append("torch.add/" + dtype_name)
        whole = count - count % 64
        want_bare = torch.add(a[:whole], b[:whole])
        for v in vs:
            if v["dtype"] != dtype_name:
                continue
            out = torch.full_like(a, 7)
            if v["bare"]:
                launcher(lib, torch, v)(a[:whole], b[:whole], out[:whole])
                ok = torch.equal(out[:whole].view(torch.uint8), want_bare.view(torch.uint8))
            else:
                launcher(lib, torch, v)(a[skew:skew + count], b[skew:skew + count],
                                        out[skew:skew + count])
                ok = torch.equal(out.view(torch.uint8), ref.view(torch.uint8))
            if not ok:
                failed.append(v["name"] + "/" + dtype_name)
    torch.cuda.synchronize()
    return failed


def best_us(torch, fn, iters, reps):
    best = float("inf")
    for _ in range(reps):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - start) / iters)
    return best * 1e6


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("library")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--sizes-mib", type=int, nargs="+", default=[32, 64, 128, 256])
    args = parser.parse_args()
    try:
        import torch
    except ImportError:
        print("skipped: no torch")
        return 77
    if not torch.cuda.is_available():
        print("skipped: no CUDA device")
        return 77
    lib = load(args.library)
    vs = variants(lib)
    failed = check_bits(lib, torch, vs, (4 << 20) + 5)

    cells = {}  # (size, dtype) -> name -> [us per round]
    for r in range(args.rounds):
        for size in args.sizes_mib:
            for dtype_name, dtype in (("float32", torch.float32), ("bfloat16", torch.bfloat16)):
                count = (size << 20) // torch.tensor([], dtype=dtype).element_size()
                a = torch.zeros(count, dtype=dtype, device="cuda")
                b = torch.zeros(count, dtype=dtype, device="cuda")
                c = torch.empty(count, dtype=dtype, device="cuda")
                runs = [("torch.add", lambda: torch.add(a, b, out=c))]
                for v in vs:
                    if v["dtype"] == dtype_name:
                        fn = launcher(lib, torch, v)
                        runs.append((v["name"], lambda fn=fn: fn(a, b, c)))
                shift = r % len(runs)
                cell = cells.setdefault((size, dtype_name), {})
                for name, fn in runs[shift:] + runs[:shift]:
                    cell.setdefault(name, []).append(best_us(torch, fn, args.iters, args.reps))
                del a, b, c
    rows = []
    for (size, dtype_name), cell in cells.items():
        torch_us = statistics.median(cell["torch.add"])
        row = {"mib": size, "dtype": dtype_name, "torch_us": round(torch_us, 3), "variants": {}}
        for name, us in cell.items():
            med = statistics.median(us)
            row["variants"][name] = {"us": round(med, 3), "of_torch": round(med / torch_us, 4),
                                     "rounds": [round(u, 3) for u in us]}
        rows.append(row)
    print(json.dumps({"torch": torch.__version__, "device": torch.cuda.get_device_name(0),
                      "rounds": args.rounds, "iters": args.iters, "reps": args.reps,
                      "bits_differ": failed, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
