"""Plain tensors: examples/tensor_basics.cc in Python.

dtensor.Tensor is the dense CPU tensor each rank's shard is: counter-based
random numbers (same seed, same values), linear, gelu, softmax, argmax; and
it converts to NumPy without a copy.

    PYTHONPATH=build/python python3 python/examples/tensor_basics.py
"""
import sys

import numpy as np

import dtensor as dt


def main():
    x = dt.randn((4, 8), seed=0)              # counter-based: same seed, same values
    w = dt.randn((16, 8), seed=1)
    b = dt.zeros((16,))
    h = dt.gelu(dt.linear(x, w, b))           # x @ w^T + b, then GELU: (4, 16)
    p = dt.softmax(h, -1)                     # each row sums to 1
    row_sums = dt.sum(p, 1)
    print(f"h: {tuple(h.shape)}  row sums: {np.asarray(row_sums)}")
    top = dt.argmax(p, 1)                     # int64 class per row
    print(f"argmax per row: {np.asarray(top)}")
    # The same math in NumPy, on the same numbers.
    hn = np.asarray(h)
    ok = (np.allclose(np.asarray(row_sums), 1, rtol=1e-5, atol=1e-6) and
          np.array_equal(np.asarray(top), hn.argmax(1)))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
