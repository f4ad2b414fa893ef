#!/usr/bin/env python3
"""Does `dtensor estimate --search` pick a layout that is fast when measured?

  bench/estimate_search_check.py BUILD [--np 4] [--steps 10] [--repeat 3]
                                       [--calibration FILE] [--memory-budget GIB]
                                       [--model "--hidden 512 --seq 256 ..."]

Calibrates (mpirun -np N dtensor calibrate) unless given a file, runs
`dtensor estimate --search --json --calibration` for the model, then
measures every layout it ranked (`mpirun -np N dtensor train --no-check`,
the median step time of steps 3..STEPS; REPEAT rounds over all layouts in
turn, each layout's median of its rounds: single runs of one layout here
differ by 10-20%, as much as the layouts do) and prints, fastest measured
first, each layout's estimated and measured time, then the search's
winner against the best measured one: the issue asks for the winner to
be within 10% of it (docs/estimate.md, "Searching the layouts").
"""
import argparse
import json
import statistics
import subprocess
import sys

from estimate_accuracy import MpiRuns

MODEL = ["--hidden", "256", "--heads", "8", "--layers", "4", "--seq", "128", "--batch", "8",
         "--mixed-precision", "none"]


def layout_args(row):
    args = ["--mesh", row["mesh"], "--scheme", row["scheme"]]
    if row["activation_checkpointing"] != "no":
        args += ["--activation-checkpointing", "1"]
    if row["activation_checkpointing"] == "selective":
        args += ["--activation-checkpointing-save", "linear,matmul,scaled_dot_product_attention"]
    fsdp = "fsdp" in row["scheme"] or row["scheme"] == "hsdp"
    if fsdp and row["prefetch"]:
        args += ["--prefetch"]
    if fsdp and not row["reshard_after_forward"]:
        args += ["--no-reshard-after-forward"]
    return args


def name_of(row):
    fsdp = "fsdp" in row["scheme"] or row["scheme"] == "hsdp"
    return " ".join([row["mesh"], row["scheme"], row["activation_checkpointing"] + " ckpt"] +
                    (["prefetch"] if fsdp and row["prefetch"] else []) +
                    (["keep"] if fsdp and not row["reshard_after_forward"] else []))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--np", type=int, default=4)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--calibration")
    ap.add_argument("--memory-budget", type=float)
    ap.add_argument("--model", help="the model's train/estimate arguments, one string")
    a = ap.parse_args()
    model = a.model.split() if a.model else MODEL
    runs = MpiRuns(a.build, a.np, a.calibration)
    search = [runs.dt, "estimate", "--search", "--json", "--vocab", "35", "--calibration",
              runs.calibration, "--mesh", str(a.np)] + model
    if a.memory_budget:
        search += ["--memory-budget", str(a.memory_budget)]
    ranked = json.loads(subprocess.run(search, check=True, capture_output=True,
                                       text=True).stdout)["fit"]
    times = [[] for _ in ranked]
    for round_ in range(a.repeat):
        for i, row in enumerate(ranked):
            times[i].append(runs.step_seconds(a.steps, layout_args(row) + model))
            print(f"  round {round_ + 1}: {name_of(row)}: {times[i][-1] * 1e3:.1f} ms",
                  file=sys.stderr)
    rows = [(name_of(row), i + 1, row["step_s"], statistics.median(times[i]))
            for i, row in enumerate(ranked)]
    best = min(r[3] for r in rows)
    print(f"{len(rows)} layouts, fastest measured first:")
    print(f"  {'layout':40} {'est. rank':>9} {'estimated':>10} {'measured':>10}")
    for name, rank, est, meas in sorted(rows, key=lambda r: r[3]):
        print(f"  {name:40} {rank:>9} {est * 1e3:>8.1f} ms {meas * 1e3:>7.1f} ms")
    winner = rows[0]
    ratio = winner[3] / best
    print(f"search's winner: {winner[0]}, measured {winner[3] * 1e3:.1f} ms, "
          f"{ratio:.3f} x the best measured ({best * 1e3:.1f} ms): "
          f"{'within' if ratio <= 1.10 else 'NOT within'} 10%")


if __name__ == "__main__":
    main()
