#!/usr/bin/python3
"""dtensor against torch (CPU) on bfloat16 (or float16) tensors, one thread:
time per element of add, mul, exp, sum and the float32 -> 16-bit conversion,
at 1M and 16M elements.

    PYTHONPATH=build/python /usr/bin/python3 bench/half_peers.py [--dtype bf16|f16] [--reps 7]

Run it with Debian's python (python3-torch, torch 1.13). Both libraries run
on one thread (DTENSOR_NUM_THREADS=1, set before dtensor is imported;
torch.set_num_threads(1)). Each figure is the median of --reps calls after
two warm-up calls, in ns per element, from the process's CPU time (on a
shared machine the wall time of one thread includes waiting for a core;
--wall prints wall time instead).

Both sides allocate their result each call. dtensor's allocator keeps freed
blocks; torch's CPU allocator hands large blocks back to the system, so its
"new" column pays for faulting the result's pages in on every call (several
ns per element on some machines, and noisy); "torch out=" writes into a
preallocated tensor (add/mul/exp out=, copy_ for the conversion): the kernel
alone. An op dtensor has no kernel for yet prints its error instead of a time.
"""
import argparse
import os
import platform
import statistics
import sys
import time

os.environ["DTENSOR_NUM_THREADS"] = "1"

import numpy as np  # noqa: E402
import torch  # noqa: E402

import dtensor as dt  # noqa: E402


def median_s(f, reps, wall):
    f()
    f()
    out = []
    for _ in range(reps):
        t0, c0 = time.perf_counter(), time.process_time()
        f()
        out.append(time.perf_counter() - t0 if wall else time.process_time() - c0)
    return statistics.median(out)


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dtype", choices=["bf16", "f16"], default="bf16")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--sizes", default="1048576,16777216", help="element counts, comma-separated")
    ap.add_argument("--wall", action="store_true", help="wall time instead of CPU time")
    args = ap.parse_args()
    torch.set_num_threads(1)
    d, td = (dt.bfloat16, torch.bfloat16) if args.dtype == "bf16" else (dt.float16, torch.float16)

    print(f"# {cpu_model()}; torch {torch.__version__}, dtensor {dt.__version__ if hasattr(dt, '__version__') else ''}; "
          f"1 thread; {'wall' if args.wall else 'CPU'} time, median of {args.reps}")
    print(f"{'op':<12}{'elements':>10}{'dtensor':>10}{'torch new':>11}{'torch out=':>12}"
          f"{'dtensor/torch':>15}   (ns per element; ratio to out= where it exists)")
    rng = np.random.default_rng(0)
    for n in (int(s) for s in args.sizes.split(",")):
        a32 = rng.standard_normal(n).astype(np.float32)
        b32 = rng.standard_normal(n).astype(np.float32)
        ta, tb = torch.from_numpy(a32).to(td), torch.from_numpy(b32).to(td)
        xa, xb = dt.from_dlpack(ta), dt.from_dlpack(tb)              # the same bits, no copy
        x32, t32 = dt.from_numpy(a32), torch.from_numpy(a32)
        out = torch.empty_like(ta)
        ops = [
            ("add", lambda: xa + xb, lambda: ta + tb, lambda: torch.add(ta, tb, out=out)),
            ("mul", lambda: xa * xb, lambda: ta * tb, lambda: torch.mul(ta, tb, out=out)),
            ("exp", lambda: dt.exp(xa), lambda: torch.exp(ta), lambda: torch.exp(ta, out=out)),
            ("sum", lambda: xa.sum(), lambda: ta.sum(), None),
            (f"to({args.dtype})", lambda: x32.to(d), lambda: t32.to(td), lambda: out.copy_(t32)),
        ]
        for name, ours, theirs, theirs_out in ops:
            cols, torch_err, best = [], None, None
            for f in (theirs, theirs_out):
                try:
                    ns = median_s(f, args.reps, args.wall) / n * 1e9 if f else None
                except RuntimeError as e:                            # torch 1.13 lacks some Half ops
                    ns, torch_err = None, str(e).splitlines()[0]
                cols.append(f"{ns:.3f}" if ns is not None else "n/a")
                best = ns if ns is not None else best
            try:
                ours_ns = median_s(ours, args.reps, args.wall) / n * 1e9
            except dt.Error as e:
                print(f"{name:<12}{n:>10}  dtensor: {str(e).splitlines()[0][:60]}...")
                continue
            ratio = f"{ours_ns / best:.2f}" if best else ""
            print(f"{name:<12}{n:>10}{ours_ns:10.3f}{cols[0]:>11}{cols[1]:>12}{ratio:>15}")
            if torch_err:
                print(f"{'':<22}torch: {torch_err[:70]}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
