"""torch.add(a, b, out=c) on CUDA buffers, timed like bench/gpu_reduce_copy_bench.cc.

Same sizes (1 MiB x4 .. --max-bytes), float32 and bfloat16, best of --reps batches of
--iters calls between two torch.cuda.synchronize(); bytes moved = 3 x size. Prints one
JSON object; exits 77 ("skipped: ...") when torch or a CUDA device is missing.
"""
import argparse
import json
import sys
import time


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--max-bytes", type=int, default=256 << 20)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    try:
        import torch
    except ImportError:
        print("skipped: no torch")
        return 77
    if not torch.cuda.is_available():
        print("skipped: no CUDA device")
        return 77
    rows = []
    size = 1 << 20
    while size <= args.max_bytes:
        row = {"bytes": size}
        for name, dtype in (("float32", torch.float32), ("bfloat16", torch.bfloat16)):
            count = size // torch.tensor([], dtype=dtype).element_size()
            a = torch.zeros(count, dtype=dtype, device="cuda")
            b = torch.zeros(count, dtype=dtype, device="cuda")
            c = torch.empty(count, dtype=dtype, device="cuda")
            best = float("inf")
            for _ in range(args.reps):
                torch.cuda.synchronize()
                start = time.perf_counter()
                for _ in range(args.iters):
                    torch.add(a, b, out=c)
                torch.cuda.synchronize()
                best = min(best, (time.perf_counter() - start) / args.iters)
            row[name + "_us"] = round(best * 1e6, 3)
            row[name + "_GBps"] = round(3 * size / best / 1e9, 1)
            del a, b, c
        rows.append(row)
        size *= 4
    print(json.dumps({"torch": torch.__version__, "device": torch.cuda.get_device_name(0),
                      "iters": args.iters, "reps": args.reps, "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
