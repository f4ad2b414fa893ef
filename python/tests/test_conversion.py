# Python values into dtensor: every entry point (tensor, as_tensor, Tensor,
# distribute_tensor, from_local and its callable and dict forms) gives the
# dtype and shape torch.tensor gives, for every kind of input. Data that
# has a dtype keeps it; a Python float is float32, an int int64, a bool
# bool; a scalar stays 0-d.
import array

import numpy as np
import pytest

import dtensor as dt

MESH = dt.DeviceMesh(dt.World.simulated(2), (2,))


class WithArray:
    """An object exposing only __array__ (as a torch tensor does)."""

    def __init__(self, a):
        self.a = a

    def __array__(self, dtype=None, copy=None):
        return self.a if dtype is None else self.a.astype(dtype)


class WithDLPack:
    """An object exposing only __dlpack__ (as a JAX or CuPy array does)."""

    def __init__(self, a):
        self.a = a

    def __dlpack__(self, stream=None, max_version=None):
        return self.a.__dlpack__()

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()


# 0.1 is not a float32: a detour through float32 would show.
F64 = np.array([[0.1, -2.5, 3.0], [4.0, 5.5, -6.0]])

# (id, make the input, expected dtype, expected shape, expected values as NumPy)
INPUTS = [
    ("py_float", lambda: 1.5, dt.float32, (), np.float32(1.5)),
    ("py_int", lambda: 3, dt.int64, (), np.int64(3)),
    ("py_bool", lambda: True, dt.bool, (), np.bool_(True)),
    ("list_float", lambda: [1.5, 2.5], dt.float32, (2,), np.array([1.5, 2.5], np.float32)),
    ("list_int", lambda: [1, 2], dt.int64, (2,), np.array([1, 2])),
    ("list_bool", lambda: [True, False], dt.bool, (2,), np.array([True, False])),
    ("list_int_float", lambda: [[1, 2.5]], dt.float32, (1, 2), np.array([[1, 2.5]], np.float32)),
    ("list_bool_int", lambda: [True, 2], dt.int64, (2,), np.array([1, 2])),
    ("list_np_float64", lambda: [np.float64(0.1), 2], dt.float64, (2,), np.array([0.1, 2.0])),
    ("list_of_arrays", lambda: [F64[0], F64[1]], dt.float64, (2, 3), F64),
    ("tuple_float", lambda: (0.5,), dt.float32, (1,), np.array([0.5], np.float32)),
    ("empty_list", lambda: [], dt.float32, (0,), np.zeros((0,), np.float32)),
    ("np_scalar_f64", lambda: np.float64(0.1), dt.float64, (), np.float64(0.1)),
    ("np_scalar_f32", lambda: np.float32(0.1), dt.float32, (), np.float32(0.1)),
    ("np_scalar_f16", lambda: np.float16(0.5), dt.float16, (), np.float16(0.5)),
    ("np_scalar_i32", lambda: np.int32(7), dt.int64, (), np.int64(7)),
    ("np_scalar_u8", lambda: np.uint8(200), dt.int64, (), np.int64(200)),
    ("np_scalar_bool", lambda: np.bool_(True), dt.bool, (), np.bool_(True)),
    ("np_0d_f64", lambda: np.array(0.1), dt.float64, (), np.float64(0.1)),
    ("np_0d_i64", lambda: np.array(5), dt.int64, (), np.int64(5)),
    ("object_with_array_f64", lambda: WithArray(F64.copy()), dt.float64, (2, 3), F64),
    ("object_with_array_0d", lambda: WithArray(np.array(0.1)), dt.float64, (), np.float64(0.1)),
    ("object_with_dlpack_f64", lambda: WithDLPack(F64.copy()), dt.float64, (2, 3), F64),
    ("array_array_d", lambda: array.array("d", [0.1, 2.0]), dt.float64, (2,), np.array([0.1, 2.0])),
    ("array_array_i", lambda: array.array("i", [1, -2]), dt.int64, (2,), np.array([1, -2])),
    ("memoryview_f64", lambda: memoryview(F64.copy()), dt.float64, (2, 3), F64),
    ("memoryview_f32", lambda: memoryview(np.array([0.1], np.float32)), dt.float32, (1,),
     np.array([0.1], np.float32)),
]
for name, np_dtype, want in [("bool", np.bool_, dt.bool), ("int8", np.int8, dt.int64),
                             ("int16", np.int16, dt.int64), ("int32", np.int32, dt.int64),
                             ("int64", np.int64, dt.int64), ("uint8", np.uint8, dt.int64),
                             ("uint32", np.uint32, dt.int64), ("float16", np.float16, dt.float16),
                             ("float32", np.float32, dt.float32), ("float64", np.float64, dt.float64)]:
    values = (F64 * 10).astype(np_dtype)
    INPUTS.append(("np_array_" + name, lambda v=values: v.copy(), want, (2, 3), values))
    INPUTS.append(("np_array_transposed_" + name, lambda v=values: v.copy().T, want, (3, 2), values.T))


def whole(x):
    """The global value of what an entry point returned, as a NumPy array."""
    if isinstance(x, dt.DTensor):
        x = x.full_tensor()
    return np.asarray(x)


def FROM_LOCAL(x):
    return dt.DTensor.from_local(x, MESH, [dt.Replicate()])


# (id, entry point: input -> Tensor or DTensor)
ENTRY_POINTS = [
    ("tensor", dt.tensor),
    ("as_tensor", dt.as_tensor),
    ("Tensor", dt.Tensor),
    ("distribute_tensor", lambda x: dt.distribute_tensor(x, MESH, [dt.Replicate()])),
    ("distribute_tensor_src_rank",
     lambda x: dt.distribute_tensor(x, MESH, [dt.Replicate()], src_rank=0)),
    ("from_local", FROM_LOCAL),
    ("from_local_dict", lambda x: dt.DTensor.from_local({0: x, 1: x}, MESH, [dt.Replicate()])),
    ("from_local_callable", lambda x: dt.DTensor.from_local(lambda rank: x, MESH, [dt.Replicate()])),
]


@pytest.mark.parametrize("entry", [e[1] for e in ENTRY_POINTS], ids=[e[0] for e in ENTRY_POINTS])
@pytest.mark.parametrize("make,dtype,shape,values", [i[1:] for i in INPUTS], ids=[i[0] for i in INPUTS])
def test_every_entry_point_keeps_dtype_and_shape(entry, make, dtype, shape, values):
    data = make()
    if entry is FROM_LOCAL and isinstance(data, (list, tuple)):
        data = {0: data, 1: data}  # a list there is one shard per rank (its dict form takes lists)
    out = entry(data)
    assert out.dtype == dtype
    assert tuple(out.shape) == shape
    got = whole(out)
    assert got.shape == shape
    expected = np.asarray(values).astype(np.asarray(got).dtype)
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("make,dtype,shape,values", [i[1:] for i in INPUTS], ids=[i[0] for i in INPUTS])
def test_an_explicit_dtype_wins(make, dtype, shape, values):
    out = dt.tensor(make(), dtype=dt.float64)
    assert out.dtype == dt.float64 and tuple(out.shape) == shape


def test_float64_keeps_its_bits():
    # 0.1 in float64 is not 0.1 in float32: a float32 detour would show.
    x = np.float64(0.1)
    assert np.asarray(dt.tensor(x)).item() == 0.1
    assert dt.distribute_tensor(np.array([0.1]), MESH, [dt.Shard(0)]).full_tensor().numpy()[0] == 0.1


@pytest.mark.parametrize("bad,what", [
    ("abc", "str"), (["a"], "str"), ([None], "NoneType"), (None, "NoneType"), (object(), "object"),
    (np.array([1 + 2j]), "complex128"),
])
def test_what_cannot_be_a_tensor_names_itself(bad, what):
    for entry in (dt.tensor, dt.as_tensor,
                  lambda x: dt.distribute_tensor(x, MESH, [dt.Replicate()]),
                  lambda x: FROM_LOCAL({0: x, 1: x})):
        with pytest.raises(dt.Error, match=what):
            entry(bad)


@pytest.mark.parametrize("args,kwargs,dtype,values", [
    ((0, 1, 0.25), {}, dt.float32, [0, 0.25, 0.5, 0.75]),
    ((2.5,), {}, dt.float32, [0, 1, 2]),
    ((0.5, 3), {}, dt.float32, [0.5, 1.5, 2.5]),
    ((np.float64(1.0),), {}, dt.float32, [0]),
    ((4,), {}, dt.int64, [0, 1, 2, 3]),
    ((1, 7, 2), {}, dt.int64, [1, 3, 5]),
    ((np.int32(3),), {}, dt.int64, [0, 1, 2]),
    ((0, 1, 0.25), {"dtype": dt.float64}, dt.float64, [0, 0.25, 0.5, 0.75]),
    ((0, 3), {"dtype": dt.float32}, dt.float32, [0, 1, 2]),
])
def test_arange_float_arguments_give_floats(args, kwargs, dtype, values):
    out = dt.arange(*args, **kwargs)
    assert out.dtype == dtype
    np.testing.assert_array_equal(out.numpy(), np.array(values, dtype=out.numpy().dtype))
