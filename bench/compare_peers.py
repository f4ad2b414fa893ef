#!/usr/bin/python3
"""Times the dense ops of bench/elementwise_bench.cc and bench/nn_bench.cc in
NumPy and torch (CPU) at 1 and 2 threads, and prints one table in ms.

    /usr/bin/python3 bench/compare_peers.py [--reps 10] [--skip-big]

Run it with Debian's python (python3-numpy, python3-torch): a pyenv python
on PATH does not see those packages. Each figure is the median of --reps
calls after two warm-up calls. NumPy's thread count is set through the BLAS
/ OpenMP variables before numpy is imported; its elementwise ops and
reductions are single-threaded whatever they say, so its 2-thread column is
mostly a repeat. torch uses torch.set_num_threads.

Shapes (float32): 4096 x 4096 for everything except cross_entropy, which
uses 4096 x 32000 logits (as BM_cross_entropy_vocab32000; 500 MiB) unless
--skip-big. "memcpy" is torch's copy_ into a preallocated tensor (its
parallel copy) and numpy.copyto: the bandwidth yardstick.

Ops that return a fresh 64 MiB tensor pay for faulting its pages in when
the allocator hands back memory it got from mmap (glibc does for blocks
this large, so both peers do, every call); "alloc+fill 64MiB" shows that
cost alone, and the "(out=)" rows the same ops into a preallocated output.
"""
import argparse
import os
import statistics
import sys
import time


def median_ms(f, reps):
    """(wall, cpu) medians in ms. cpu is the process's CPU time: on a shared
    machine the wall time of one thread includes waiting for a core, while
    at 1 thread the CPU time is close to what the call costs alone."""
    f()
    f()
    wall, cpu = [], []
    for _ in range(reps):
        t0, c0 = time.perf_counter(), time.process_time()
        f()
        wall.append((time.perf_counter() - t0) * 1e3)
        cpu.append((time.process_time() - c0) * 1e3)
    return statistics.median(wall), statistics.median(cpu)


# The ops NumPy has no function for, as its users write them (also used by
# paired_peers.py). numpy comes as an argument: it is imported only after
# the thread variables are set.
def np_softmax(np, x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def np_layer_norm(np, x, w, bias):
    mu = x.mean(axis=-1, keepdims=True)
    var = x.var(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + 1e-5) * w + bias


def np_cross_entropy(np, x, target):
    m = x.max(axis=-1, keepdims=True)
    lse = np.log(np.exp(x - m).sum(axis=-1, keepdims=True)) + m
    return -(x[np.arange(x.shape[0]), target] - lse[:, 0]).mean()


def numpy_ops(np, big):
    rng = np.random.default_rng(1)
    a = rng.standard_normal((4096, 4096), dtype=np.float32)
    b = rng.standard_normal((4096, 4096), dtype=np.float32)
    flat_a, flat_b = a.reshape(-1), b.reshape(-1)
    out = np.empty_like(a)
    w = rng.standard_normal(4096, dtype=np.float32)
    bias = rng.standard_normal(4096, dtype=np.float32)
    t = rng.integers(0, 4096, 4096)

    def softmax_out(x):
        # In place in a preallocated output: no fresh 64 MiB to fault in.
        np.subtract(x, x.max(axis=-1, keepdims=True), out=out)
        np.exp(out, out=out)
        np.divide(out, out.sum(axis=-1, keepdims=True), out=out)

    ops = {
        "memcpy": lambda: np.copyto(out, a),
        "alloc+fill 64MiB": lambda: np.empty((4096, 4096), np.float32).fill(0),
        "add (out=)": lambda: np.add(a, b, out=out),
        "a.t()+b (out=)": lambda: np.add(a.T, b, out=out),
        "a.t() copy (out=)": lambda: np.copyto(out, a.T),
        "softmax(-1) (out=)": lambda: softmax_out(a),
        "add": lambda: flat_a + flat_b,
        "add_": lambda: np.add(flat_a, flat_b, out=flat_a),
        "clone": lambda: a.copy(),
        "a.t()+b": lambda: a.T + b,
        "a.t().contiguous()": lambda: np.ascontiguousarray(a.T),
        "sum(dim=-1)": lambda: a.sum(axis=-1),
        "sum(dim=0)": lambda: a.sum(axis=0),
        "sum()": lambda: a.sum(),
        "amax(dim=-1)": lambda: a.max(axis=-1),
        "amax()": lambda: a.max(),
        "softmax(-1)": lambda: np_softmax(np, a),
        "layer_norm": lambda: np_layer_norm(np, a, w, bias),
        "cross_entropy 4096x4096": lambda: np_cross_entropy(np, a, t),
    }
    if big:
        logits = rng.standard_normal((4096, 32000), dtype=np.float32)
        t32 = rng.integers(0, 32000, 4096)
        ops["cross_entropy 4096x32000"] = lambda: np_cross_entropy(np, logits, t32)
    return ops


def torch_ops(torch, big):
    g = torch.Generator().manual_seed(1)
    a = torch.randn(4096, 4096, generator=g)
    b = torch.randn(4096, 4096, generator=g)
    flat_a, flat_b = a.reshape(-1), b.reshape(-1)
    out = torch.empty_like(a)
    w = torch.randn(4096, generator=g)
    bias = torch.randn(4096, generator=g)
    t = torch.randint(0, 4096, (4096,), generator=g)
    F = torch.nn.functional
    ops = {
        "memcpy": lambda: out.copy_(a),
        "alloc+fill 64MiB": lambda: torch.empty(4096, 4096).fill_(0),
        "add (out=)": lambda: torch.add(a, b, out=out),
        "a.t()+b (out=)": lambda: torch.add(a.t(), b, out=out),
        "a.t() copy (out=)": lambda: out.copy_(a.t()),
        "add": lambda: flat_a + flat_b,
        "add_": lambda: flat_a.add_(flat_b),
        "clone": lambda: a.clone(),
        "a.t()+b": lambda: a.t() + b,
        "a.t().contiguous()": lambda: a.t().contiguous(),
        "sum(dim=-1)": lambda: a.sum(dim=-1),
        "sum(dim=0)": lambda: a.sum(dim=0),
        "sum()": lambda: a.sum(),
        "amax(dim=-1)": lambda: a.amax(dim=-1),
        "amax()": lambda: a.amax(),
        "softmax(-1)": lambda: torch.softmax(a, -1),
        "layer_norm": lambda: F.layer_norm(a, (4096,), w, bias),
        "cross_entropy 4096x4096": lambda: F.cross_entropy(a, t),
    }
    if big:
        logits = torch.randn(4096, 32000, generator=g)
        t32 = torch.randint(0, 32000, (4096,), generator=g)
        ops["cross_entropy 4096x32000"] = lambda: F.cross_entropy(logits, t32)
    return ops


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--skip-big", action="store_true")
    args = ap.parse_args()
    big = not args.skip_big

    results = {}  # (lib, threads) -> {op: ms}
    for threads in (1, 2):
        # NumPy reads its thread variables when it loads, so each thread
        # count runs in a fresh interpreter.
        env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads),
                   MKL_NUM_THREADS=str(threads), COMPARE_PEERS_CHILD=str(threads))
        import subprocess
        cmd = [sys.executable, __file__, "--reps", str(args.reps)] + (["--skip-big"] if not big else [])
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            sys.stderr.write(proc.stderr)
            sys.exit(proc.returncode)
        for line in proc.stdout.splitlines():
            lib, op, wall, cpu = line.split("\t")
            results.setdefault((lib, threads), {})[op] = (float(wall), float(cpu))

    ops = list(results[("numpy", 1)].keys())
    cols = [("numpy", 1), ("numpy", 2), ("torch", 1), ("torch", 2)]
    nan = (float("nan"), float("nan"))
    print("wall ms (1-thread CPU ms in brackets)")
    print(f"{'op':28s}" + "".join(f"{f'{lib} {th}t':>18s}" for lib, th in cols))
    for op in ops:
        row = ""
        for c in cols:
            wall, cpu = results[c].get(op, nan)
            row += f"{wall:9.2f} [{cpu:6.2f}]" if c[1] == 1 else f"{wall:18.2f}"
        print(f"{op:28s}{row}")


def child(threads, reps, big):
    import numpy as np
    import torch
    torch.set_num_threads(threads)
    for lib, ops in (("numpy", numpy_ops(np, big)), ("torch", torch_ops(torch, big))):
        for op, f in ops.items():
            wall, cpu = median_ms(f, reps)
            print(f"{lib}\t{op}\t{wall:.3f}\t{cpu:.3f}", flush=True)


if __name__ == "__main__":
    if "COMPARE_PEERS_CHILD" in os.environ:
        a = sys.argv
        reps = int(a[a.index("--reps") + 1]) if "--reps" in a else 10
        child(int(os.environ["COMPARE_PEERS_CHILD"]), reps, "--skip-big" not in a)
    else:
        main()
