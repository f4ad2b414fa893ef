"""A first DTensor program: examples/first_dtensor.cc in Python.

A 4-rank simulated world as a 2x2 (dp, tp) mesh; one tensor sharded both
ways, a pointwise op, a redistribution counted by CommDebugMode, a sum that
leaves a pending reduction. Prints what the C++ program prints (the ctest
test example.python.first_dtensor compares them).

    PYTHONPATH=build/python python3 python/examples/first_dtensor.py
"""
import sys

import numpy as np

import dtensor as dt


def placements_str(p):
    return ",".join(str(x) for x in p)


def main():
    world = dt.World.simulated(4)                       # 4 ranks, all in this process
    mesh = dt.DeviceMesh(world, (2, 2), ["dp", "tp"])   # ranks [[0, 1], [2, 3]]
    x = dt.randn((8, 6), seed=0)

    # Rows split over dp, columns over tp: each rank holds a 4x3 block.
    d = dt.distribute_tensor(x, mesh, [dt.Shard(0), dt.Shard(1)])
    print(dt.visualize_sharding(d), end="")

    # A pointwise op keeps the layout and moves nothing.
    y = d * 2.0 + 1.0
    print(f"y = d * 2 + 1: {placements_str(y.placements)}")

    # Gather the rows over dp: one all_gather, counted by CommDebugMode.
    with dt.CommDebugMode() as comm:
        r = y.redistribute([dt.Replicate(), dt.Shard(1)])
    shape = "[" + ", ".join(str(s) for s in r.to_local(3).shape) + "]"
    print(f"redistributed to {placements_str(r.placements)} with "
          f"{comm.get_comm_counts()['all_gather']} all_gather; rank 3 holds {shape}")

    # A sum over the sharded column dim leaves a pending reduction over tp.
    s = dt.sum(r, 1)
    print(f"sum over dim 1: {placements_str(s.placements)}")

    x_np = np.asarray(x)
    same = (np.array_equal(np.asarray(r.full_tensor()), x_np * np.float32(2) + np.float32(1)) and
            np.allclose(np.asarray(s.full_tensor()), (x_np * 2 + 1).sum(1), rtol=1e-5, atol=1e-5))
    print("full tensors match the plain math" if same else "MISMATCH")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
