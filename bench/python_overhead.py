"""Per-op overhead of calling dtensor from Python.

Times, in one process:
  - `a + b` on DTensors from Python: a [32, 8] float32 tensor sharded on dim
    0 over a simulated world of 4 ranks (8x8 shards), the case of
    bench/dispatch_bench.cc's BM_Add;
  - `a + b` on plain 8x8 dtensor Tensors from Python;
  - NumPy's own `a + b` on 8x8 float32 arrays (what any Python array
    library pays per call);
  - PyTorch's `a + b` on plain 8x8 float32 CPU tensors, when torch imports
    (Debian's python3-torch, 1.13: the peer issue 43 measures against);
and, when given the dispatch_bench binary, runs its BM_Add (the same DTensor
add called from C++) and reports the difference: what the Python binding
adds per op (argument conversion, the result object, releasing and taking
back the GIL).

    PYTHONPATH=build/python python3 bench/python_overhead.py \\
        --dispatch-bench build/bin/dispatch_bench

Each figure is the median over --repeat interleaved rounds of --number
calls each (timeit); the C++ figure is Google Benchmark's median of 5.
"""
import argparse
import json
import statistics
import subprocess
import sys
import timeit

import numpy as np

import dtensor as dt

try:
    import torch
except ImportError:  # the torch figure is left out
    torch = None


def per_call_ns(stmt, number, repeat):
    times = timeit.repeat(stmt, number=number, repeat=repeat)
    return statistics.median(times) / number * 1e9


def cpp_add_ns(binary, min_time):
    out = subprocess.run(
        [binary, "--benchmark_filter=^BM_Add$", f"--benchmark_min_time={min_time}",
         "--benchmark_repetitions=5", "--benchmark_report_aggregates_only=true",
         "--benchmark_format=json"],
        check=True, capture_output=True, text=True).stdout
    runs = json.loads(out)["benchmarks"]
    median = next(r for r in runs if r.get("aggregate_name") == "median")
    unit = {"ns": 1.0, "us": 1e3, "ms": 1e6}[median["time_unit"]]
    return median["real_time"] * unit, median.get("overhead_ns")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dispatch-bench", help="path to the dispatch_bench binary (C++ figure)")
    ap.add_argument("--number", type=int, default=20000)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--min-time", type=float, default=0.3)
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = ap.parse_args()

    mesh = dt.DeviceMesh(dt.World.simulated(4), (4,))
    a = dt.distribute_tensor(dt.randn((32, 8), seed=1), mesh, [dt.Shard(0)])
    b = dt.distribute_tensor(dt.randn((32, 8), seed=2), mesh, [dt.Shard(0)])
    ta, tb = dt.randn((8, 8), seed=1), dt.randn((8, 8), seed=2)
    na, nb = np.asarray(ta).copy(), np.asarray(tb).copy()
    a + b  # warm the propagation cache

    cases = {
        "python_dtensor_add_ns": lambda: a + b,
        "python_tensor_add_ns": lambda: ta + tb,
        "numpy_add_ns": lambda: na + nb,
        "python_noop_lambda_ns": lambda: None,
    }
    if torch is not None:
        torch.set_num_threads(1)
        xa, xb = torch.from_numpy(na.copy()), torch.from_numpy(nb.copy())
        cases["torch_tensor_add_ns"] = lambda: xa + xb
    # Interleaved: each of --repeat rounds times every case once (number
    # calls each), so a change of the machine's load reaches all of them
    # alike; a figure is the median of its rounds.
    times = {k: [] for k in cases}
    for _ in range(args.repeat):
        for key, fn in cases.items():
            times[key].append(per_call_ns(fn, args.number, 1))
    figures = {k: statistics.median(v) for k, v in times.items()}
    if args.dispatch_bench:
        cpp, cpp_overhead = cpp_add_ns(args.dispatch_bench, args.min_time)
        figures["cpp_dtensor_add_ns"] = cpp
        if cpp_overhead is not None:
            figures["cpp_dispatch_overhead_ns"] = cpp_overhead
        figures["python_binding_overhead_ns"] = figures["python_dtensor_add_ns"] - cpp
        figures["python_over_cpp"] = figures["python_dtensor_add_ns"] / cpp
    if "torch_tensor_add_ns" in figures:
        figures["python_dtensor_over_torch"] = (figures["python_dtensor_add_ns"] /
                                                figures["torch_tensor_add_ns"])

    if args.json:
        print(json.dumps(figures, indent=1))
        return 0
    rows = [
        ("DTensor add, 4 ranks x 8x8 shards, from Python", "python_dtensor_add_ns"),
        ("the same from C++ (dispatch_bench BM_Add)", "cpp_dtensor_add_ns"),
        ("  Python binding's share (difference)", "python_binding_overhead_ns"),
        ("  C++ dispatch overhead over 4 local adds", "cpp_dispatch_overhead_ns"),
        ("plain 8x8 Tensor add, from Python", "python_tensor_add_ns"),
        ("NumPy 8x8 float32 add", "numpy_add_ns"),
        ("PyTorch 8x8 float32 CPU tensor add, 1 thread", "torch_tensor_add_ns"),
        ("an empty Python lambda call (timing floor)", "python_noop_lambda_ns"),
    ]
    for label, key in rows:
        if key in figures:
            print(f"{label:<52} {figures[key]:8.0f} ns")
    for label, key in (("DTensor add from Python / from C++", "python_over_cpp"),
                       ("DTensor add from Python / torch's plain add", "python_dtensor_over_torch")):
        if key in figures:
            print(f"{label:<52} {figures[key]:8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
