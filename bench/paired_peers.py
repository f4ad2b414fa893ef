#!/usr/bin/python3
"""dtensor's dense ops against torch and NumPy, timed alternately in one
process, and the median of the per-iteration ratios ours / best peer.

    PYTHONPATH=build/python /usr/bin/python3 bench/paired_peers.py [--threads 1] [--reps 20]

compare_peers.py times each library in its own run, minutes apart from
elementwise_bench and nn_bench. On a machine whose memory bandwidth moves
with its neighbours' load (the Zen 3 VM of docs/PERFORMANCE.md: a 64 MiB
memcpy took 7 to 10 ms within one session), that spread is larger than
the 1.1x the targets ask for. Here each iteration calls torch, NumPy and
dtensor once each, back to back, so all three see the same load, and the
ratio is taken per iteration before the median.

Needs the dtensor Python module (built with the project: build/python) and
Debian's python3-torch and python3-numpy. Each library allocates its own
operands the way its users would (dtensor.randn, torch.randn, NumPy's
generator). The thread count applies to all three: DTENSOR_NUM_THREADS,
torch.set_num_threads, OpenBLAS/OpenMP variables for NumPy (whose
elementwise ops and reductions are single-threaded anyway).

torch's OpenMP workers spin for a while after each parallel op; at 2
threads they then hold the core that dtensor's pool needs for the next
call, and dtensor's ops measured 1.3-1.9x slower than alone. The script
sets OMP_WAIT_POLICY=PASSIVE so idle workers sleep (torch's ops here take
milliseconds; the wake-up costs microseconds).
"""
import argparse
import os
import statistics
import sys
import time

from compare_peers import np_cross_entropy, np_layer_norm, np_softmax


def ops_of(dt, torch, np):
    n = 4096
    rng = np.random.default_rng(1)
    na = rng.standard_normal((n, n), dtype=np.float32)
    nb = rng.standard_normal((n, n), dtype=np.float32)
    nw = rng.standard_normal(n, dtype=np.float32)
    nbias = rng.standard_normal(n, dtype=np.float32)
    nt = rng.integers(0, n, n)
    g = torch.Generator().manual_seed(1)
    ta, tb = torch.randn(n, n, generator=g), torch.randn(n, n, generator=g)
    tw, tbias = torch.randn(n, generator=g), torch.randn(n, generator=g)
    tt = torch.randint(0, n, (n,), generator=g)
    da, db = dt.randn([n, n], seed=1), dt.randn([n, n], seed=2)
    dw, dbias = dt.randn([n], seed=3), dt.randn([n], seed=4)
    dtarget = dt.tensor(nt)
    F = torch.nn.functional
    # add_ accumulates into copies, so the other ops keep their inputs.
    na_, ta_, da_ = na.copy(), ta.clone(), da.clone()

    # op: (dtensor, torch, numpy)
    return {
        "add": (lambda: da + db, lambda: ta + tb, lambda: na + nb),
        "add_": (lambda: da_.add_(db), lambda: ta_.add_(tb), lambda: np.add(na_, nb, out=na_)),
        "clone": (lambda: da.clone(), lambda: ta.clone(), lambda: na.copy()),
        "a.t()+b": (lambda: da.t() + db, lambda: ta.t() + tb, lambda: na.T + nb),
        "a.t().contiguous()": (lambda: da.t().contiguous(), lambda: ta.t().contiguous(),
                               lambda: np.ascontiguousarray(na.T)),
        "sum(dim=-1)": (lambda: da.sum(-1), lambda: ta.sum(dim=-1), lambda: na.sum(axis=-1)),
        "sum(dim=0)": (lambda: da.sum(0), lambda: ta.sum(dim=0), lambda: na.sum(axis=0)),
        "sum()": (lambda: da.sum(), lambda: ta.sum(), lambda: na.sum()),
        "amax(dim=-1)": (lambda: da.amax(-1), lambda: ta.amax(dim=-1), lambda: na.max(axis=-1)),
        "amax()": (lambda: da.amax(), lambda: ta.amax(), lambda: na.max()),
        "exp": (lambda: dt.exp(da), lambda: torch.exp(ta), lambda: np.exp(na)),
        "sigmoid": (lambda: dt.sigmoid(da), lambda: torch.sigmoid(ta),
                    lambda: 1 / (1 + np.exp(-na))),
        "softmax(-1)": (lambda: dt.softmax(da, -1), lambda: torch.softmax(ta, -1),
                        lambda: np_softmax(np, na)),
        "layer_norm": (lambda: dt.layer_norm(da, [n], dw, dbias),
                       lambda: F.layer_norm(ta, (n,), tw, tbias),
                       lambda: np_layer_norm(np, na, nw, nbias)),
        "cross_entropy": (lambda: dt.cross_entropy(da, dtarget), lambda: F.cross_entropy(ta, tt),
                          lambda: np_cross_entropy(np, na, nt)),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    if args.threads < 1 or args.reps < 1:
        ap.error(f"--threads and --reps take a count of at least 1 (got {args.threads}, {args.reps})")
    th = str(args.threads)
    # Read when each library loads, so set before the imports.
    os.environ.update(DTENSOR_NUM_THREADS=th, OPENBLAS_NUM_THREADS=th, OMP_NUM_THREADS=th,
                      OMP_WAIT_POLICY="PASSIVE")
    import numpy as np
    import torch
    import dtensor as dt
    torch.set_num_threads(args.threads)

    print(f"{args.threads} thread(s), medians of {args.reps} iterations, wall ms")
    print(f"{'op':20s}{'dtensor':>9s}{'torch':>9s}{'numpy':>9s}  ours/best peer (median of pairs)")
    for name, fs in ops_of(dt, torch, np).items():
        for f in fs:  # warm-up: caches, allocators, page faults
            f()
            f()
        times = [[], [], []]
        ratios = []
        for _ in range(args.reps):
            it = []
            for k, f in enumerate(fs):
                t0 = time.perf_counter()
                f()
                it.append((time.perf_counter() - t0) * 1e3)
                times[k].append(it[-1])
            ratios.append(it[0] / min(it[1], it[2]))
        med = [statistics.median(t) for t in times]
        print(f"{name:20s}{med[0]:9.2f}{med[1]:9.2f}{med[2]:9.2f}  {statistics.median(ratios):.2f}")


if __name__ == "__main__":
    main()
