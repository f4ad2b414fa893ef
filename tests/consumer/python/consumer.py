"""The Python consumer test: the installed dtensor package, imported from
the prefix consumer.install filled (argv[1]), runs the C++ consumers'
program (tests/consumer/first_program.cc) and prints the same line."""
import os
import sys

import numpy as np

import dtensor as dt

prefix = os.path.realpath(sys.argv[1])
if not os.path.realpath(dt.__file__).startswith(prefix + os.sep):
    sys.exit(f"dtensor was imported from {dt.__file__}, not from the prefix {prefix}")

world = dt.World.simulated(4)
mesh = dt.DeviceMesh(world, (2, 2), ["dp", "tp"])
x = np.random.default_rng(0).standard_normal((8, 6)).astype(np.float32)
d = dt.distribute_tensor(x, mesh, [dt.Shard(0), dt.Shard(1)])
y = (d * 2.0 + 1.0).redistribute([dt.Replicate(), dt.Shard(1)])
s = dt.sum(y, [1])
same = np.array_equal(np.asarray(y.full_tensor()), x * np.float32(2.0) + np.float32(1.0))
placements = lambda p: ",".join(str(q) for q in p)
print(f"dtensor consumer (python): {placements(y.placements)} then {placements(s.placements)}, "
      f"{'match' if same else 'MISMATCH'}")
sys.exit(0 if same else 1)
