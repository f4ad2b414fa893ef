"""FSDP2 + tensor parallelism from Python, the same bits in both worlds.

A two-block MLP model written as dtensor.nn modules, tensor-parallelized over
tp (ColwiseParallel / RowwiseParallel), fully sharded over dp (one
fully_shard per block, then the root), trained by AdamW with a warm-up and
gradient clipping on a (dp, tp) = (2, 2) mesh. Prints each step's loss as a
hex float and the final parameters' checksum; the simulated world and
`mpirun -np 4` print the same lines (ctest example.python.train_fsdp_tp.mpi
compares them when MPI is built).

    PYTHONPATH=build/python python3 python/examples/train_fsdp_tp.py
    PYTHONPATH=build/python mpirun -np 4 python3 python/examples/train_fsdp_tp.py
"""
import sys

import numpy as np

import dtensor as dt
from dtensor.parallel import ColwiseParallel, RowwiseParallel, fully_shard, parallelize_module


class Block(dt.nn.Module):
    def __init__(self, mesh, dim, hidden, seed):
        super().__init__(mesh)
        self.norm = dt.nn.LayerNorm(mesh, dim)
        self.up = dt.nn.Linear(mesh, dim, hidden, seed=seed)
        self.down = dt.nn.Linear(mesh, hidden, dim, seed=seed + 1)

    def forward(self, x):
        return x + self.down(dt.gelu(self.up(self.norm(x))))


class Model(dt.nn.Module):
    def __init__(self, mesh, dim=16, hidden=64, blocks=2):
        super().__init__(mesh)
        self.n = blocks
        for i in range(blocks):
            setattr(self, f"block{i}", Block(mesh, dim, hidden, seed=10 * i))
        self.head = dt.nn.Linear(mesh, dim, dim, seed=99)

    def forward(self, x):
        for i in range(self.n):
            x = getattr(self, f"block{i}")(x)
        return self.head(x)


def main():
    world = dt.World.from_launcher(4)
    mesh = dt.DeviceMesh(world, (2, 2), ["dp", "tp"])
    model = Model(mesh)
    plan = {}
    for i in range(model.n):
        plan[f"block{i}.up"] = ColwiseParallel()
        plan[f"block{i}.down"] = RowwiseParallel()
    parallelize_module(model, mesh["tp"], plan)
    for i in range(model.n):
        fully_shard(getattr(model, f"block{i}"), mesh=mesh["dp"])
    fully_shard(model, mesh=mesh["dp"])

    opt = dt.optim.AdamW(model.named_parameters(), lr=3e-3, weight_decay=0.01)
    sched = dt.optim.lr_scheduler.LinearLR(opt, start_factor=0.1, total_iters=3)
    R, S = dt.Replicate(), dt.Shard
    x = dt.distribute_tensor(dt.randn((8, 4, 16), seed=1), mesh, [S(0), R])
    target = dt.distribute_tensor(dt.randn((8, 4, 16), seed=2) * 0.5, mesh, [S(0), R])
    lines = []
    for step in range(6):
        opt.zero_grad()
        err = model(x) - target
        loss = dt.mean(err * err)
        loss.backward()
        norm = dt.optim.clip_grad_norm_(opt.params, 1.0)
        opt.step()
        sched.step()
        lines.append(f"step {step} loss {loss.full_tensor().item().hex()} grad norm {float(norm).hex()}")
    total = 0.0
    for name, p in model.named_parameters():
        total += float(np.asarray(p.full_tensor(), dtype=np.float64).sum())
    lines.append(f"parameter sum {total.hex()}")
    if 0 in world.held_ranks:  # one process prints
        print("\n".join(lines), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
