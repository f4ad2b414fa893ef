"""The same program in both worlds: `python3 mpi_program.py` (a simulated
world of 4 ranks) and `mpirun -np 4 python3 mpi_program.py` (4 processes)
must print the same lines (ctest python.mpi.np4 compares them). Rank 0
prints the digests of every result, its own shard and the collectives run.
"""
import hashlib

import numpy as np

import dtensor as dt


def digest(t):
    a = np.ascontiguousarray(np.asarray(t))
    return f"{a.dtype} {a.shape} {hashlib.sha256(a.tobytes()).hexdigest()[:16]}"


def main():
    world = dt.World.from_launcher(4)
    assert world.size == 4, world
    lines = []
    mesh = dt.init_device_mesh((2, 2), mesh_dim_names=("dp", "tp"), world=world)
    # every rank makes the same global values (counter-based random numbers)
    a = np.asarray(dt.randn((7, 5), seed=1))
    b = np.asarray(dt.randn((5, 6), seed=2))
    da = dt.distribute_tensor(a, mesh, [dt.Shard(0), dt.Shard(1)])
    db = dt.distribute_tensor(b, mesh, [dt.Replicate(), dt.Shard(0)])
    with dt.CommDebugMode() as comm:
        y = dt.relu(da @ db) + 1.5
        s = dt.sum(y, dim=1)
        r = y.redistribute([dt.Shard(1), dt.Replicate()])
        full = r.full_tensor()
        total = s.full_tensor()
    lines.append(f"y {y.placements} {digest(full)}")
    lines.append(f"s {s.placements} {digest(total)}")
    lines.append(f"matches numpy {np.allclose(np.asarray(full), np.maximum(a @ b, 0) + 1.5, atol=1e-5)}")
    lines.append(f"collectives {sorted(comm.get_comm_counts().items())}")
    local = r.to_local() if not world.is_simulated else r.to_local(rank=0)
    lines.append(f"rank 0 shard {digest(local)}")
    sm = dt.softmax(da.redistribute([dt.Shard(0), dt.Replicate()]), -1)
    lines.append(f"softmax {digest(sm.full_tensor())}")
    # unseeded: every process draws the same seeds from the global generator
    dt.manual_seed(7)
    lin = dt.nn.Linear(mesh, 5, 3)
    noise = dt.rand((6, 4), device_mesh=mesh, placements=[dt.Shard(0), dt.Shard(1)])
    lines.append(f"unseeded {digest(lin.weight.full_tensor())} {digest(noise.full_tensor())}")
    # a model made without a mesh (each process holds it whole, the same
    # draws), then laid out on the mesh: tp, then fully_shard over dp
    def mlp():
        dt.manual_seed(11)
        return dt.nn.Sequential(dt.nn.Linear(5, 8, bias=False), dt.nn.SiLU(),
                                dt.nn.Linear(8, 5, bias=False))

    whole = mlp()  # unsharded: each process runs it alone
    want = whole(dt.tensor(a))
    want.sum().backward()
    model = mlp()
    dt.parallelize_module(model, mesh["tp"], {"0": dt.ColwiseParallel(), "2": dt.RowwiseParallel()})
    dt.fully_shard(model, mesh=mesh["dp"])
    x = dt.distribute_tensor(a, mesh, [dt.Shard(0), dt.Replicate()])
    out = model(x)
    out.sum().backward()
    grads = " ".join(digest(p.grad.full_tensor()) for p in model.parameters())
    lines.append(f"meshless model {digest(out.full_tensor())} {grads}")
    same = np.allclose(np.asarray(out.full_tensor()), np.asarray(want.full_tensor()), atol=1e-5)
    for p, q in zip(model.parameters(), whole.parameters()):
        same = same and np.allclose(np.asarray(p.grad.full_tensor()),
                                    np.asarray(q.grad.full_tensor()), atol=1e-5)
    assert same, "the meshless model laid out differs from it unsharded"
    lines.append(f"meshless model matches unsharded {same}")
    # rank 0's view through the current rank (under MPI each process's own)
    with dt.current_rank(world.held_ranks[0]):
        lines.append(f"current rank {mesh.get_rank()} coordinate {mesh.get_coordinate()} "
                     f"tp {mesh.get_local_rank('tp')} shard {digest(r.to_local())}")
    logits = dt.distribute_tensor(np.asarray(dt.randn((6, 10), seed=4)), mesh,
                                  [dt.Shard(0), dt.Shard(1)]).requires_grad_()
    labels = dt.distribute_tensor(np.arange(6) % 10, mesh, [dt.Shard(0), dt.Replicate()])
    with dt.parallel.loss_parallel():
        loss = dt.cross_entropy(logits, labels)
        loss.backward()
    lines.append(f"loss_parallel {digest(loss.full_tensor())} {digest(logits.grad.full_tensor())}")
    if world.rank == 0:
        print("\n".join(lines), flush=True)


if __name__ == "__main__":
    main()
