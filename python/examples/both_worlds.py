"""One program, two worlds: examples/both_worlds.cc in Python.

Run alone it simulates 4 ranks in this process; under
`mpirun -np 4 python3 python/examples/both_worlds.py` each process holds
one rank. The same lines either way (the ctest test
example.python.both_worlds compares the simulated run with the C++ program's).

    PYTHONPATH=build/python python3 python/examples/both_worlds.py
"""
import sys

import numpy as np

import dtensor as dt


def dims(v):
    return "[" + ", ".join(str(int(x)) for x in v) + "]"


def main():
    world = dt.World.from_launcher(4)
    if world.size != 4:
        print(f"this example needs 4 ranks, got {world.size}; run it alone or with mpirun -np 4",
              file=sys.stderr)
        return 2
    mesh = dt.DeviceMesh(world, (2, 2), ["dp", "tp"])
    # Every rank makes the same global tensor (same seed) and keeps its part;
    # 7 rows over dp = 2 give uneven shards of 4 and 3 rows.
    x = dt.randn((7, 6), seed=0)
    d = dt.distribute_tensor(x, mesh, [dt.Shard(0), dt.Shard(1)])

    with dt.CommDebugMode() as comm:
        r = d.redistribute([dt.Replicate(), dt.Shard(1)])  # all_gather over dp
    gathers = comm.get_comm_counts()["all_gather"]
    same = np.array_equal(np.asarray(r.full_tensor()), np.asarray(x))  # a collective: every rank calls it

    # The ranks this process holds: all 4 when simulated, its own under MPI.
    # One write per process, so the lines of different processes do not mix.
    kind = "simulated" if world.is_simulated else "MPI"
    out = "".join(
        f"{kind} rank {rank} of {world.size} {dims(mesh.coordinate(rank))}: S(0),S(1) shard "
        f"{dims(d.to_local(rank).shape)} -> R,S(1) shard {dims(r.to_local(rank).shape)}, "
        f"{gathers} all_gather, full_tensor == x: {'yes' if same else 'no'}\n"
        for rank in world.held_ranks)
    sys.stdout.write(out)
    sys.stdout.flush()
    return 0 if same and gathers == 1 else 1


if __name__ == "__main__":
    sys.exit(main())
