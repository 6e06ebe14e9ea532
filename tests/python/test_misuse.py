"""Misuse from Python: every case must raise a clear error (its message checked) before
anything is written that the caller did not offer for writing. Read-only buffers."""
import mmap
import os

import numpy as np
import pytest

import ccl
from conftest import run_ranks


def frozen(values, dtype=np.float32):
    """A read-only array over an immutable bytes object (np.frombuffer), and the bytes."""
    raw = np.asarray(values, dtype).tobytes()
    return np.frombuffer(raw, dtype), raw


# ---- read-only buffers: every buffer a call writes is checked ----

class ReadOnlyInterface:
    """An object with only __array_interface__, which says read-only."""

    def __init__(self, a):
        self._a = a
        self.__array_interface__ = dict(a.__array_interface__, data=(a.ctypes.data, True))


class DLPackOnly:
    """An object with only __dlpack__ (numpy's: DLPack 1.0 capsules flag read-only arrays)."""

    def __init__(self, a):
        self._a = a

    def __dlpack__(self, **kw):
        return self._a.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


@pytest.fixture
def memmap_r(tmp_path):
    path = tmp_path / "ro.bin"
    np.arange(4, dtype=np.float32).tofile(path)
    return np.memmap(path, dtype=np.float32, mode="r"), path


def test_read_only_recvbuf_refused(comms2):
    c = comms2[0]
    ro, raw = frozen([1, 2, 3, 4])
    x = np.ones(4, np.float32)
    with pytest.raises(ccl.InvalidArgumentError, match=r"recvbuf is read-only \(numpy's flags.writeable is False\)"):
        c.all_reduce(x, out=ro)
    with pytest.raises(ccl.InvalidArgumentError, match="recvbuf is read-only"):
        c.all_reduce(ro)
    with pytest.raises(ccl.InvalidArgumentError, match="recvbuf is read-only"):
        c.Allreduce(x, ro)
    with pytest.raises(ccl.InvalidArgumentError, match="recvbuf is read-only"):
        c.all_gather(np.frombuffer(bytes(32), np.float32), x)
    with pytest.raises(ccl.InvalidArgumentError, match="output is read-only"):
        c.all_gather_v(ro, x[:2], [2, 2])
    with pytest.raises(ccl.InvalidArgumentError, match="output is read-only"):
        c.all_to_all_v(ro, x, [2, 2], [2, 2])
    with pytest.raises(ccl.InvalidArgumentError, match="dst is read-only"):
        c.copy(ro, x)
    assert raw == np.asarray([1, 2, 3, 4], np.float32).tobytes()     # the bytes object is as it was


def test_read_only_memmap_recv_is_an_error_not_a_crash(comms2, memmap_r):
    m, path = memmap_r
    with pytest.raises(ccl.InvalidArgumentError, match="tensor is read-only"):
        comms2[1].recv(m, 0)
    with pytest.raises(ccl.InvalidArgumentError, match="buf is read-only"):
        comms2[1].Recv(m, 0)
    with pytest.raises(ccl.InvalidArgumentError, match="tensor is read-only"):
        with ccl.group():
            comms2[1].recv(m, 0)
    np.testing.assert_array_equal(np.fromfile(path, np.float32), np.arange(4))


def test_read_only_interfaces_refused(comms2):
    c = comms2[0]
    base = np.zeros(4, np.float32)
    with pytest.raises(ccl.InvalidArgumentError, match="recvbuf is read-only .its array interface says so"):
        c.all_reduce(np.ones(4, np.float32), out=ReadOnlyInterface(base))
    ro = np.zeros(4, np.float32)
    ro.flags.writeable = False
    with pytest.raises(ccl.InvalidArgumentError, match="recvbuf is read-only .its DLPack capsule is flagged"):
        c.all_reduce(np.ones(4, np.float32), out=DLPackOnly(ro))
    assert not base.any() and not ro.any()


def test_read_only_input_still_read(comms2):
    # Inputs may be read-only, and so may the root's buffer of an in-place broadcast.
    def body(r, c):
        src, _ = frozen([r + 1.0] * 3)
        out = c.all_reduce(src, out=np.zeros(3, np.float32))
        b = frozen([5.0] * 3)[0] if r == 0 else np.zeros(3, np.float32)
        c.broadcast(b, root=0)
        c.Bcast(b, root=0)
        return out, b

    for out, b in run_ranks(comms2, body):
        np.testing.assert_array_equal(out, [3, 3, 3])
        np.testing.assert_array_equal(b, [5, 5, 5])
