"""Objects with the buffer protocol (PEP 3118), as mpi4py takes them: bytearray, bytes,
array.array, memoryview, mmap; the format gives the dtype, the read-only flag is kept."""
import array
import mmap

import numpy as np
import pytest

import ccl
from conftest import run_ranks


def test_array_array_and_bytearray(comms2):
    def body(r, c):
        x = array.array("d", [r + 1.0] * 3)
        c.all_reduce(x)                                                   # in place, f64 from 'd'
        out = bytearray(4)
        c.Allgather(bytes([r, r]), out)                                   # bytes in, bytearray out (u8)
        i = array.array("i", [r] * 2)
        got = array.array("i", [0] * 4)
        c.Alltoall(memoryview(i * 2), got)
        return x, out, got

    for r, (x, out, got) in enumerate(run_ranks(comms2, body)):
        assert list(x) == [3.0, 3.0, 3.0]
        assert out == bytearray([0, 0, 1, 1])
        assert list(got) == [0, 0, 1, 1]


def test_mmap_and_send_recv(comms2, tmp_path):
    m = mmap.mmap(-1, 16)
    src = array.array("f", [1, 2, 3, 4])

    def body(r, c):
        if r == 0:
            c.send(memoryview(src).toreadonly(), 1)                       # read-only is fine to send
        else:
            c.recv(memoryview(m).cast("f"), 0)

    run_ranks(comms2, body)
    assert list(memoryview(m).cast("f")) == [1, 2, 3, 4]


def test_buffer_misuse_refused(comms2):
    c = comms2[0]
    raw = b"\x00" * 8
    with pytest.raises(ccl.InvalidArgumentError, match=r"recvbuf is read-only \(a bytes buffer\)"):
        c.all_reduce(raw)
    with pytest.raises(ccl.InvalidArgumentError, match=r"recvbuf is read-only \(a memoryview buffer\)"):
        c.all_reduce(np.zeros(2, np.float32), out=memoryview(bytearray(8)).toreadonly().cast("f"))
    with pytest.raises(ValueError, match="recvbuf is not C-contiguous .a strided memoryview"):
        c.all_reduce(memoryview(bytearray(8))[::2])
    with pytest.raises(ValueError, match="buffer format 'H' .2-byte items. has no CCL equivalent"):
        c.all_reduce(array.array("H", [1, 2]))
    with pytest.raises(ccl.InvalidArgumentError, match="recvbuf holds u8, not f32"):
        c.all_reduce(np.zeros(2, np.float32), out=bytearray(8))
    assert raw == b"\x00" * 8
