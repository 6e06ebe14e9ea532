"""comm.register / comm.deregister (ccl_mem_register) on the CPU backend: a
Registration is a context manager, a range registered again is the same registration,
errors on one rank reach every rank, and a dead registration is refused. (The GPU side,
torch's expandable segments and ccl.torch.mem_pool, is tests/torch/register_torch.py.)"""
import numpy as np
import pytest

import ccl
from conftest import run_ranks


def test_register_records_and_collectives_run(comms2):
    def body(r, c):
        a = np.full(1000, r + 1, np.float32)
        with c.register(a) as reg:
            assert reg.registered and reg.nbytes == a.nbytes and reg.ptr == a.ctypes.data
            again = c.register(a[10:20])  # inside: from the cache, no exchange
            assert again._handle == reg._handle
            again.deregister()
            c.all_reduce(a)
        assert not reg.registered
        return a.copy()

    for out in run_ranks(comms2, body):
        np.testing.assert_array_equal(out, np.full(1000, 3, np.float32))


def test_register_sizes_differ_fails_every_rank(comms2):
    def body(r, c):
        a = np.zeros(64, np.uint8)
        with pytest.raises(ccl.InvalidArgumentError) as e:
            c.register(a, nbytes=16 if r else 32)
        return str(e.value)

    for msg in run_ranks(comms2, body):
        assert "rank 0 registers 32 bytes" in msg and "rank 1 16 bytes" in msg, msg


def test_register_symmetric_buffer_and_dead_registration(comms2):
    def body(r, c):
        a = c.empty(256, np.float32)
        reg = c.register(a)
        c.deregister(reg)
        with pytest.raises(ccl.InvalidUsageError, match="deregistered already"):
            c.deregister(reg)
        with pytest.raises(ccl.InvalidArgumentError, match="not a Registration"):
            c.deregister("nope")
        return True

    assert all(run_ranks(comms2, body))


def test_register_raw_pointer_needs_nbytes(comms2):
    with pytest.raises(ccl.InvalidArgumentError, match="nbytes="):
        comms2[0].register(12345)
