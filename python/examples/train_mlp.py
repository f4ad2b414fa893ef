"""Training a tensor-parallel MLP with autograd: examples/train_mlp.cc in Python.

The Megatron MLP on a (dp, tp) mesh of 8 simulated ranks, fitted to a random
linear target by SGD with momentum. The same seeds, layouts, ops and
optimizer as the C++ program, so it prints the same lines (the ctest test
example.python.train_mlp compares them with the C++ program's output).

    PYTHONPATH=build/python python3 python/examples/train_mlp.py
"""
import sys

import numpy as np

import dtensor as dt
from dtensor.optim import SGD


def parameter(full, mesh, placements):
    """A leaf that requires grad, laid out by `placements` (an nn.Parameter)."""
    return dt.distribute_tensor(full, mesh, placements).requires_grad_()


def placements_str(p):
    return ",".join(str(x) for x in p)


def main():
    world = dt.World.simulated(8)
    mesh = dt.DeviceMesh(world, (2, 4), ["dp", "tp"])
    batch, d, hidden = 16, 8, 32
    x_full = dt.randn((batch, d), seed=1)
    target_full = dt.linear(x_full, dt.randn((d, d), seed=2) * 0.5)

    R, S = dt.Replicate(), dt.Shard
    # Column-parallel up (W1 rows split over tp), row-parallel down (W2
    # columns split over tp); replicated over dp. The batch is split over dp.
    w1 = parameter(dt.randn((hidden, d), seed=3) * 0.3, mesh, [R, S(0)])
    b1 = parameter(dt.zeros((hidden,)), mesh, [R, S(0)])
    w2 = parameter(dt.randn((d, hidden), seed=4) * 0.2, mesh, [R, S(1)])
    b2 = parameter(dt.zeros((d,)), mesh, [R, R])
    x = dt.distribute_tensor(x_full, mesh, [S(0), R])
    target = dt.distribute_tensor(target_full, mesh, [S(0), R])

    def forward(a, w1_, b1_, w2_, b2_):
        y = dt.linear(dt.gelu(dt.linear(a, w1_, b1_)), w2_, b2_)  # Partial(sum) on tp
        err = y.redistribute([S(0), R]) - target  # one all_reduce
        return dt.mean(err * err)

    optimizer = SGD([w1, b1, w2, b2], lr=0.05, momentum=0.9)
    first = last = 0.0
    for step in range(30):
        optimizer.zero_grad()
        with dt.CommDebugMode() as comm:
            loss = forward(x, w1, b1, w2, b2)
            loss.backward()
        last = loss.full_tensor().item()
        if step == 0:
            first = last
            print(f"gradients: W1 {placements_str(w1.grad.placements)}, "
                  f"b1 {placements_str(b1.grad.placements)}, "
                  f"W2 {placements_str(w2.grad.placements)}, "
                  f"b2 {placements_str(b2.grad.placements)}")
            print(f"step 0 forward+backward: {comm.get_total_counts()} collective(s)")
            # The same step on replicated tensors.
            rr = [R, R]
            reps = [parameter(p.full_tensor(), mesh, rr) for p in (w1, b1, w2, b2)]
            forward(dt.distribute_tensor(x_full, mesh, rr), *reps).backward()
            diff = max(float(np.max(np.abs(np.asarray(a.grad.full_tensor()) -
                                           np.asarray(b.grad.full_tensor()))))
                       for a, b in zip((w1, b1, w2, b2), reps))
            print(f"largest difference from the replicated gradients: {diff:.3g}")
            if diff > 1e-5:
                return 1
        if step % 5 == 0 or step == 29:
            print(f"step {step:2d} loss {last:.6f}")
        optimizer.step()
    learned = last < 0.5 * first
    print(f"{'trained' if learned else 'NOT LEARNING'}: loss {first:.6f} -> {last:.6f}")
    return 0 if learned else 1


if __name__ == "__main__":
    sys.exit(main())
