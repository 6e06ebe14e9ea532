"""The per-call fast road (``array_info`` and ``Communicator._quick``): what it takes,
what it leaves to the general road, and that both roads give the same results and the
same errors. numpy arrays here; test_torch.py has the torch side."""
import numpy as np
import pytest

import ccl
from ccl._buffers import array_info
from conftest import run_ranks

N = 2


class Sub(np.ndarray):
    pass


def test_array_info_takes_plain_writable_contiguous_arrays():
    x = np.arange(12, dtype=np.float64).reshape(3, 4)
    assert array_info(x) == (x.ctypes.data, 12, ccl.DType.F64, -1)
    assert array_info(x[1:]) == (x[1:].ctypes.data, 8, ccl.DType.F64, -1)
    assert array_info(np.ones(3, np.uint8))[2] is ccl.DType.U8


@pytest.mark.parametrize("what", ["read-only", "not contiguous", "empty", "subclass", "no CCL dtype", "list",
                                  "int pointer", "None"])
def test_array_info_leaves_the_rest_to_as_buf(what):
    ro = np.ones(4, np.float32)
    ro.flags.writeable = False
    obj = {"read-only": ro, "not contiguous": np.ones((4, 4), np.float32)[:, 1], "empty": np.ones(0, np.float32),
           "subclass": np.ones(4, np.float32).view(Sub), "no CCL dtype": np.ones(4, np.complex64),
           "list": [1.0], "int pointer": 1234, "None": None}[what]
    assert array_info(obj) is None


def kw(send, recv, count, datatype):
    """The same buffers as raw pointers: the general road."""
    return dict(sendbuf=send.ctypes.data, recvbuf=recv.ctypes.data, count=count, datatype=datatype)


def test_fast_and_general_roads_agree(comms2):
    def body(r, c):
        x = np.arange(6, dtype=np.float32) + r
        big = np.arange(6 * N, dtype=np.int64) + 10 * r
        out = {}
        for raw in (False, True):
            a, o = x.copy(), np.zeros(6, np.float32)
            g, rs, aa = np.zeros(6 * N, np.float32), np.zeros(6, np.int64), np.zeros(6 * N, np.int64)
            b, d = x.copy(), np.zeros(6, np.float32)
            if raw:
                c.all_reduce(op="max", **kw(a, o, 6, "f32"))
                c.all_gather(**kw(x, g, 6, "f32"))
                c.reduce_scatter(**kw(big, rs, 6, "i64"))
                c.all_to_all(**kw(big, aa, 6, "i64"))
                c.broadcast(root=1, **kw(b, b, 6, "f32"))
                c.reduce(root=0, op="sum", **kw(x, d, 6, "f32"))
            else:
                c.all_reduce(a, "max", out=o)
                c.all_gather(g, x)
                c.reduce_scatter(rs, big)
                c.all_to_all(aa, big)
                c.broadcast(b, root=1)
                c.reduce(x, root=0, op="sum", out=d)
            out[raw] = (o, g, rs, aa, b, d if r == 0 else None)
        return out

    for res in run_ranks(comms2, body):
        for fast, slow in zip(res[False], res[True]):
            if fast is not None:
                np.testing.assert_array_equal(fast, slow)
    r0 = run_ranks(comms2, body)[0][False]
    np.testing.assert_array_equal(r0[0], np.arange(6, dtype=np.float32) + 1)
    np.testing.assert_array_equal(r0[5], 2 * np.arange(6, dtype=np.float32) + 1)


def test_general_road_still_says_what_is_wrong(comms2):
    c = comms2[0]
    # Each of these reaches _quick first, which leaves it to the general road's message.
    with pytest.raises(ccl.InvalidArgumentError, match="recvbuf holds f64, not f32"):
        c.all_reduce(np.ones(4, np.float32), out=np.ones(4, np.float64))
    with pytest.raises(ccl.InvalidArgumentError, match="recvbuf has 3 elements, fewer than the 4"):
        c.broadcast(np.ones(4, np.float32), out=np.ones(3, np.float32))
    with pytest.raises(ccl.InvalidArgumentError, match="sendbuf's 5 elements are not a multiple of 2"):
        c.reduce_scatter(np.ones(2, np.float32), np.ones(5, np.float32))
    with pytest.raises(ccl.InvalidArgumentError, match="recvbuf has 3 elements, fewer than the 4"):
        c.all_gather(np.ones(3, np.float32), np.ones(2, np.float32))
    with pytest.raises(TypeError, match="stream: str is not a CUDA stream"):
        c.all_reduce(np.ones(4, np.float32), stream="s")
    # A root out of range, checked before the fast road's call.
    with pytest.raises(ccl.InvalidArgumentError, match="reduce: root is 9, out of range"):
        c.reduce(np.ones(4, np.float32), root=9)


def test_read_only_send_takes_the_general_road(comms2):
    def body(r, c):
        x = np.frombuffer(np.full(3, r + 1.0, np.float32).tobytes(), np.float32)
        assert not x.flags.writeable
        return c.all_reduce(x, out=np.zeros(3, np.float32))

    for o in run_ranks(comms2, body):
        np.testing.assert_array_equal(o, np.full(3, 3.0, np.float32))


def test_async_on_the_fast_road(comms2):
    xs = [np.full(5, r + 1, np.int32) for r in range(N)]
    works = [c.all_reduce(x, async_op=True) for c, x in zip(comms2, xs)]
    assert all(isinstance(w, ccl.Work) for w in works)
    for w, x in zip(works, xs):
        assert w.wait() is x
        np.testing.assert_array_equal(x, np.full(5, 3, np.int32))


def test_destroyed_communicator_on_the_fast_road():
    c = ccl.init_all(1, backend="cpu")[0]
    x = np.ones(2, np.float32)
    c.all_reduce(x)
    c.destroy()
    with pytest.raises(ccl.InvalidArgumentError, match="destroyed"):
        c.all_reduce(x)
