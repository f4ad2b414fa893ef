#!/usr/bin/python3
"""dtensor's float32 transcendental kernels against torch 1.13, side by side.

    /usr/bin/python3 bench/transcendental_peers.py THREADS [--reps 9]

(with the build's python/ on PYTHONPATH, e.g. PYTHONPATH=build/python).
Each op runs on a 4096 x 4096 float32 tensor, dtensor's Tensor op and
torch's alternately, `--reps` times after one warm-up each; prints the
medians and dtensor / torch. THREADS sets DTENSOR_NUM_THREADS and
torch.set_num_threads. docs/PERFORMANCE.md, "Transcendental kernels
against torch 1.13", has the figures.
"""
import argparse
import os
import statistics
import time

parser = argparse.ArgumentParser()
parser.add_argument("threads", type=int)
parser.add_argument("--reps", type=int, default=9)
args = parser.parse_args()
os.environ["DTENSOR_NUM_THREADS"] = str(args.threads)

import numpy as np  # noqa: E402
import torch  # noqa: E402
import dtensor as dt  # noqa: E402

torch.set_num_threads(args.threads)
rng = np.random.default_rng(0)
a = rng.standard_normal((4096, 4096)).astype(np.float32)
pos = np.abs(a) + 0.1
g = rng.standard_normal((4096, 4096)).astype(np.float32)
ta, tp, tg = torch.from_numpy(a.copy()), torch.from_numpy(pos.copy()), torch.from_numpy(g.copy())
da, dp, dg = dt.tensor(a), dt.tensor(pos), dt.tensor(g)
F = torch.nn.functional
OPS = {
    "gelu": (lambda: dt.gelu(da), lambda: F.gelu(ta)),
    "gelu tanh": (lambda: dt.gelu(da, approximate="tanh"), lambda: F.gelu(ta, approximate="tanh")),
    "gelu_backward": (lambda: dt.gelu_backward(dg, da), lambda: torch.ops.aten.gelu_backward(tg, ta)),
    "gelu_backward tanh": (lambda: dt.gelu_backward(dg, da, approximate="tanh"),
                           lambda: torch.ops.aten.gelu_backward(tg, ta, approximate="tanh")),
    "erf": (lambda: dt.erf(da), lambda: torch.erf(ta)),
    "tanh": (lambda: dt.tanh(da), lambda: torch.tanh(ta)),
    "sigmoid": (lambda: dt.sigmoid(da), lambda: torch.sigmoid(ta)),
    "silu": (lambda: dt.silu(da), lambda: F.silu(ta)),
    "exp": (lambda: dt.exp(da), lambda: torch.exp(ta)),
    "log": (lambda: dt.log(dp), lambda: torch.log(tp)),
    "pow 2.5": (lambda: dt.pow(dp, 2.5), lambda: torch.pow(tp, 2.5)),
    "pow -1": (lambda: dt.pow(dp, -1), lambda: torch.pow(tp, -1)),
    "pow 3": (lambda: dt.pow(dp, 3), lambda: torch.pow(tp, 3)),
    "sqrt": (lambda: dt.sqrt(dp), lambda: torch.sqrt(tp)),
    "rsqrt": (lambda: dt.rsqrt(dp), lambda: torch.rsqrt(tp)),
    "log1p": (lambda: dt.log1p(dp), lambda: torch.log1p(tp)),
    "expm1": (lambda: dt.expm1(da), lambda: torch.expm1(ta)),
    "sin": (lambda: dt.sin(da), lambda: torch.sin(ta)),
    "softplus": (lambda: dt.softplus(da), lambda: F.softplus(ta)),
}
for name, (fd, ft) in OPS.items():
    fd()
    ft()
    td, tt = [], []
    for _ in range(args.reps):
        t0 = time.perf_counter()
        fd()
        td.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        ft()
        tt.append(time.perf_counter() - t0)
    md, mt = statistics.median(td) * 1e3, statistics.median(tt) * 1e3
    print(f"{args.threads} thread(s)  {name:20s} dtensor {md:8.2f} ms  torch {mt:8.2f} ms  "
          f"dtensor/torch {md / mt:5.2f}")
