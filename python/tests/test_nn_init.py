# Modules and random ops without a seed (the global generator,
# dtensor.manual_seed), sizes checked before anything is allocated, and an
# optimizer made before parallelize_module/fully_shard refusing to step.
import numpy as np
import pytest

import dtensor as dt
import dtensor.nn as nn
from dtensor.parallel import ColwiseParallel, RowwiseParallel, fully_shard, parallelize_module


@pytest.fixture
def mesh():
    return dt.DeviceMesh(dt.World.simulated(4), (2, 2), ["dp", "tp"])


def full(d):
    return np.asarray(d.full_tensor())


def test_unseeded_linears_of_one_shape_differ(mesh):
    wq, wk, wv = (nn.Linear(mesh, 16, 16) for _ in range(3))
    assert not np.array_equal(full(wq.weight), full(wk.weight))
    assert not np.array_equal(full(wk.weight), full(wv.weight))
    assert not np.array_equal(full(wq.bias), full(wk.bias))
    a, b = nn.Embedding(mesh, 8, 4), nn.Embedding(mesh, 8, 4)
    assert not np.array_equal(full(a.weight), full(b.weight))


def test_manual_seed_repeats_modules_and_random_ops(mesh):
    def draw():
        lin = nn.Linear(mesh, 8, 4)
        x = dt.randn((6, 4), device_mesh=mesh, placements=[dt.Shard(0), dt.Replicate()])
        y = dt.rand((3, 3))
        d = dt.dropout(dt.distribute_tensor(np.ones((4, 4), np.float32), mesh,
                                            [dt.Replicate(), dt.Shard(1)]), 0.5)
        return [full(lin.weight), full(lin.bias), full(x), np.asarray(y), full(d)]

    dt.manual_seed(123)
    assert dt.initial_seed() == 123
    first = draw()
    dt.manual_seed(123)
    for a, b in zip(first, draw()):
        np.testing.assert_array_equal(a, b)
    dt.manual_seed(124)
    assert not np.array_equal(first[0], draw()[0])


def test_unseeded_random_ops_are_layout_invariant(mesh):
    dt.manual_seed(5)
    a = dt.randn((6, 4), device_mesh=mesh, placements=[dt.Shard(0), dt.Shard(1)])
    dt.manual_seed(5)
    b = dt.randn((6, 4), device_mesh=mesh, placements=[dt.Replicate(), dt.Replicate()])
    dt.manual_seed(5)
    c = dt.randn((6, 4))
    np.testing.assert_array_equal(full(a), full(b))
    np.testing.assert_array_equal(full(a), np.asarray(c))


def test_explicit_seeds_keep_their_values(mesh):
    lin = nn.Linear(mesh, 5, 3, seed=11)
    bound = 1 / np.sqrt(5)
    expected = np.asarray(dt.rand((3, 5), seed=11)) * (2 * bound) - bound
    np.testing.assert_allclose(full(lin.weight), expected, rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(full(nn.Embedding(mesh, 4, 2, seed=3).weight),
                                  np.asarray(dt.randn((4, 2), seed=3)))


def test_sizes_are_checked_before_anything_is_made(mesh):
    with pytest.raises(dt.Error, match=r"Linear\(in_features=1099511627776, out_features=4\).*nothing was allocated"):
        nn.Linear(mesh, 2**40, 4)
    with pytest.raises(dt.Error, match=r"Linear\(in_features=268435456, out_features=268435456\).*nothing was allocated"):
        nn.Linear(mesh, 2**28, 2**28)
    with pytest.raises(dt.Error, match=r"Embedding\(num_embeddings="):
        nn.Embedding(mesh, 2**40, 64)


class Model(nn.Module):
    def __init__(self, mesh):
        super().__init__(mesh)
        self.up = nn.Linear(mesh, 4, 8, seed=1)
        self.down = nn.Linear(mesh, 8, 4, seed=2)
        self.scale = nn.Parameter(np.ones(4, np.float32))

    def forward(self, x):
        return self.down(self.up(x)) * self.scale


def step(model, opt, mesh):
    opt.zero_grad()
    x = dt.distribute_tensor(np.ones((2, 4), np.float32), mesh, [dt.Shard(0), dt.Replicate()])
    dt.mean(model(x)).backward()
    opt.step()


def test_optimizer_made_before_parallelize_module_refuses(mesh):
    model = Model(mesh)
    early = dt.optim.SGD(model.named_parameters(), lr=0.1)
    parallelize_module(model, mesh["tp"], {"up": ColwiseParallel(), "down": RowwiseParallel()})
    with pytest.raises(dt.Error, match=r"'up.weight'.*parallelize_module.*build the optimizer after"):
        early.step()
    with pytest.raises(dt.Error, match=r"build the optimizer after parallelize_module/fully_shard"):
        early.zero_grad()
    late = dt.optim.SGD(model.named_parameters(), lr=0.1)
    before = full(model.up.weight)
    step(model, late, mesh)
    assert not np.array_equal(full(model.up.weight), before)


def test_optimizer_made_before_fully_shard_refuses(mesh):
    model = Model(mesh)
    early = dt.optim.AdamW(model.parameters(), lr=0.1)
    fully_shard(model, mesh=mesh["dp"])
    with pytest.raises(dt.Error, match=r"replaced in its module by fully_shard"):
        early.step()


def test_assigning_a_parameter_supersedes_the_old_one(mesh):
    model = Model(mesh)
    opt = dt.optim.SGD(model.parameters(), lr=0.1)
    model.scale = dt.distribute_tensor(np.zeros(4, np.float32), mesh,
                                       [dt.Replicate(), dt.Replicate()])
    with pytest.raises(dt.Error, match=r"assignment to the module's attribute 'scale'"):
        opt.step()
