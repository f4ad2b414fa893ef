# The dense Tensor: dtypes, creation from NumPy, arithmetic against NumPy.
import numpy as np
import pytest

import dtensor as dt


def test_roundtrip_and_arithmetic(rng):
    a = rng.standard_normal((3, 4)).astype(np.float32)
    b = rng.standard_normal((3, 4)).astype(np.float32)
    x, y = dt.from_numpy(a), dt.from_numpy(b)
    assert x.shape == (3, 4)
    assert x.dtype == dt.float32 and x.dtype == np.float32
    np.testing.assert_allclose(np.asarray(x + y), a + b, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(x * 2 - y / 3), a * 2 - b / 3, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(x @ y.T), a @ b.T, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(np.asarray(x > y), a > b)
