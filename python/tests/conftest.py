# pytest set-up: the tests import the package built in build/python (ctest
# sets PYTHONPATH; by hand: PYTHONPATH=build/python python3 -m pytest python/tests).
import numpy as np
import pytest


@pytest.fixture
def rng():
    return np.random.default_rng(0)
