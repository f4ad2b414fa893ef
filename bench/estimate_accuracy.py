#!/usr/bin/env python3
"""The accuracy of `dtensor estimate` on this machine (docs/estimate.md).

  bench/estimate_accuracy.py BUILD [--np 4] [--steps 12] [--calibration FILE]

Calibrates (mpirun -np N dtensor calibrate) unless given a file, then for
each layout below measures `mpirun -np N dtensor train` (the median step
time of steps 3..STEPS, --no-check) and estimates the same step with
`dtensor estimate --calibration`, and prints both, their ratio, and the
two rankings of the layouts.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

LAYOUTS = [
    # (name, train/estimate arguments): schemes and sizes that differ enough
    # to rank (the common arguments follow)
    ("fsdp+tp 2x2 h128 l4", ["--mesh", "2x2", "--scheme", "fsdp+tp", "--hidden", "128", "--layers", "4"]),
    ("fsdp 4 h256 l4", ["--mesh", "4", "--scheme", "fsdp", "--hidden", "256", "--layers", "4"]),
    ("tp 4 h256 l4", ["--mesh", "4", "--scheme", "tp", "--hidden", "256", "--layers", "4"]),
    ("ddp+tp 2x2 h384 l4", ["--mesh", "2x2", "--scheme", "ddp+tp", "--hidden", "384", "--layers", "4"]),
    ("hsdp 2x2 h384 l6", ["--mesh", "2x2", "--scheme", "hsdp", "--hidden", "384", "--layers", "6"]),
    ("fsdp+tp 2x2 h512 l4", ["--mesh", "2x2", "--scheme", "fsdp+tp", "--hidden", "512", "--layers", "4"]),
    ("ddp 4 h512 l2", ["--mesh", "4", "--scheme", "ddp", "--hidden", "512", "--layers", "2"]),
    ("fsdp 4 h512 l8", ["--mesh", "4", "--scheme", "fsdp", "--hidden", "512", "--layers", "8"]),
]
COMMON = ["--heads", "8", "--seq", "128", "--batch", "8", "--mixed-precision", "none"]


class MpiRuns:
    """`dtensor` under `mpirun -np N` on this machine, calibrated: what
    estimate_accuracy.py and estimate_search_check.py share."""

    def __init__(self, build, np, calibration=None):
        self.dt = os.path.join(build, "bin", "dtensor")
        self.env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                        OMPI_MCA_btl_vader_single_copy_mechanism="none")
        self.mpirun = ["mpirun", "--oversubscribe", "-np", str(np)]
        self.calibration = calibration
        if not self.calibration:
            self.calibration = "calibration.json"
            subprocess.run(self.mpirun + [self.dt, "calibrate", "--out", self.calibration],
                           env=self.env, check=True, stdout=subprocess.DEVNULL)

    def step_seconds(self, steps, args):
        """The median step time of steps 3..steps of `dtensor train args`."""
        out = subprocess.run(self.mpirun + [self.dt, "train", "--no-check", "--no-svg", "--json",
                                            "--steps", str(steps)] + args,
                             env=self.env, check=True, capture_output=True, text=True).stdout
        return statistics.median(s["wall_ms"] for s in json.loads(out)["steps"][2:]) / 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--np", type=int, default=4)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--calibration")
    a = ap.parse_args()
    runs = MpiRuns(a.build, a.np, a.calibration)
    rows = []
    for name, args in LAYOUTS:
        measured = runs.step_seconds(a.steps, args + COMMON)
        est = json.loads(subprocess.run([runs.dt, "estimate", "--json", "--vocab", "35",
                                         "--calibration", runs.calibration] + args + COMMON,
                                        check=True, capture_output=True, text=True).stdout)
        rows.append((name, measured, est["time"]["step_s"]))
    print(f"{'layout':22} {'measured':>10} {'estimated':>10} {'est/meas':>9}")
    for name, m, e in rows:
        print(f"{name:22} {m * 1e3:8.1f}ms {e * 1e3:8.1f}ms {e / m:9.2f}")
    by_m = [r[0] for r in sorted(rows, key=lambda r: r[1])]
    by_e = [r[0] for r in sorted(rows, key=lambda r: r[2])]
    print("fastest first, measured: ", ", ".join(by_m))
    print("fastest first, estimated:", ", ".join(by_e))


if __name__ == "__main__":
    sys.exit(main())
