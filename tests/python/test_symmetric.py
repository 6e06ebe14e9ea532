"""comm.empty: symmetric-heap buffers as numpy arrays and torch CPU tensors."""
import gc

import numpy as np
import pytest

import ccl
from conftest import run_ranks


def test_empty_numpy_zero_copy(comms4):
    def body(r, c):
        a = c.empty((3, 5), np.float32)
        assert a.shape == (3, 5) and a.dtype == np.float32
        a[:] = r + 1
        c.all_reduce(a)
        return a.copy()

    for out in run_ranks(comms4, body):
        np.testing.assert_array_equal(out, np.full((3, 5), 10, np.float32))


def test_empty_freed_when_dropped(comms2):
    def body(r, c):
        for _ in range(50):  # would run out of a small heap if nothing were freed
            a = c.empty(1 << 16, "f64")
            a[:] = 1
            c.all_reduce(a)
            del a
            gc.collect()
        return True

    assert all(run_ranks(comms2, body))


def test_empty_torch_cpu(comms2):
    torch = pytest.importorskip("torch")

    def body(r, c):
        t = c.empty((4, 2), torch.bfloat16)
        assert isinstance(t, torch.Tensor) and t.dtype == torch.bfloat16
        t.fill_(r + 1)
        c.all_reduce(t)
        return t.clone()

    for out in run_ranks(comms2, body):
        assert torch.equal(out, torch.full((4, 2), 3, dtype=torch.bfloat16))
