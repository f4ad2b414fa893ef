"""Tensor parallelism with parallelize_module: examples/tensor_parallel.cc in Python.

A Megatron MLP block, written as a dtensor.nn.Module as on one device, laid
out on a (dp, tp) mesh of 8 simulated ranks by a plan of parallel styles;
first with replicated activations (one all_reduce), then sequence parallel
(one all_gather and one reduce_scatter), each checked against the same math
on full tensors. Prints what the C++ program prints (the ctest test
example.python.tensor_parallel compares the two).

    PYTHONPATH=build/python python3 python/examples/tensor_parallel.py
"""
import sys

import numpy as np

import dtensor as dt
from dtensor.parallel import ColwiseParallel, RowwiseParallel, SequenceParallel, parallelize_module


class Block(dt.nn.Module):
    """x + down(gelu(up(norm(x)))), the norm left out when not given."""

    def __init__(self, mesh, w_up, b_up, w_down, b_down, g=None, b=None):
        super().__init__(mesh)
        self.has_norm = g is not None
        if self.has_norm:
            self.norm = dt.nn.LayerNorm(mesh, g, b)
        self.up = dt.nn.Linear(mesh, w_up, b_up)
        self.down = dt.nn.Linear(mesh, w_down, b_down)

    def forward(self, x):
        return x + self.down(dt.gelu(self.up(self.norm(x) if self.has_norm else x)))


def placements_str(p):
    return ",".join(str(x) for x in p)


def max_abs_diff(a, b):
    return float(np.max(np.abs(np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64))))


def main():
    world = dt.World.simulated(8)
    mesh = dt.DeviceMesh(world, (2, 4), ["dp", "tp"])
    R, S = dt.Replicate(), dt.Shard

    # Full weights, the same in every process (one seed each).
    hidden, ffn = 16, 64
    w_up, b_up = dt.randn((ffn, hidden), seed=1) * 0.25, dt.randn((ffn,), seed=2) * 0.1
    w_down, b_down = dt.randn((hidden, ffn), seed=3) * 0.125, dt.randn((hidden,), seed=4) * 0.1
    x = dt.randn((4, 8, hidden), seed=5)  # (batch, seq, hidden)
    expected = x + dt.linear(dt.gelu(dt.linear(x, w_up, b_up)), w_down, b_down)

    # 1. Tensor parallel: W_up split by rows (output features), W_down by
    #    columns (input features); the batch is split over dp.
    block = Block(mesh, w_up, b_up, w_down, b_down)
    parallelize_module(block, mesh["tp"], {"up": ColwiseParallel(), "down": RowwiseParallel()})
    print(f"up.weight   {placements_str(block.up.weight.placements)}")
    print(f"down.weight {placements_str(block.down.weight.placements)}")
    dx = dt.distribute_tensor(x, mesh, [S(0), R])
    with dt.CommDebugMode() as comm:
        y = block(dx)
    tp_collectives = comm.get_total_counts()
    print(f"tensor parallel: output {placements_str(y.placements)}, "
          f"{comm.get_comm_counts()['all_reduce']} all_reduce, {tp_collectives} collectives in all")
    diff = max_abs_diff(y.full_tensor(), expected)

    # 2. Sequence parallel: activations split on the sequence dim over tp
    #    between blocks; the norm runs on the slices, `up` all-gathers, and
    #    `down` reduce-scatters back onto the sequence dim.
    g, b = dt.ones((hidden,)), dt.zeros((hidden,))
    sp_block = Block(mesh, w_up, b_up, w_down, b_down, g, b)
    parallelize_module(sp_block, mesh["tp"], {"norm": SequenceParallel(),
                                              "up": ColwiseParallel(),
                                              "down": RowwiseParallel(output_layouts=S(1))})
    sx = dt.distribute_tensor(x, mesh, [S(0), S(1)])
    with dt.CommDebugMode() as comm_sp:
        ys = sp_block(sx)
    sp_collectives = comm_sp.get_total_counts()
    counts = comm_sp.get_comm_counts()
    print(f"sequence parallel: output {placements_str(ys.placements)}, "
          f"{counts['all_gather']} all_gather + {counts['reduce_scatter']} reduce_scatter")
    expected_sp = x + dt.linear(dt.gelu(dt.linear(dt.layer_norm(x, (hidden,), g, b), w_up, b_up)),
                                w_down, b_down)
    diff_sp = max_abs_diff(ys.full_tensor(), expected_sp)

    print(f"max |difference| from the full-tensor math: {diff:g}, {diff_sp:g}")
    ok = diff <= 1e-5 and diff_sp <= 1e-5 and tp_collectives == 1 and sp_collectives == 2
    print("ok" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
