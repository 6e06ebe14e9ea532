"""The six collectives on numpy arrays, CPU backend, threads mode: NCCL's semantics in
and out of place, every dtype numpy has, every op, raw-pointer keywords, async calls
from one thread."""
import ctypes

import numpy as np
import pytest

import ccl
from conftest import run_ranks

N = 4


def data(r, n, dtype, base=1):
    return (np.arange(n) % 7 + r + base).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int32, np.int64, np.uint8, np.int8,
                                   np.uint32, np.uint64])
@pytest.mark.parametrize("op", ["sum", "prod", "min", "max", "avg"])
def test_all_reduce_dtypes_ops(comms4, dtype, op):
    n = 37
    xs = [data(r, n, dtype) for r in range(N)]
    stack = np.stack([x.astype(np.float64) for x in xs])
    want = {"sum": stack.sum(0), "prod": stack.prod(0), "min": stack.min(0), "max": stack.max(0),
            "avg": stack.sum(0) / N}[op]
    if np.issubdtype(dtype, np.integer):
        want = want.astype(np.int64)
        if op == "avg":
            want = stack.sum(0).astype(np.int64) // N
    outs = run_ranks(comms4, lambda r, c: c.all_reduce(xs[r].copy(), op, out=np.empty_like(xs[r])))
    for o in outs:
        np.testing.assert_array_equal(o, want.astype(dtype))


@pytest.mark.parametrize("dtype", [np.int8, np.uint32, np.uint64])
def test_new_integer_dtypes_sign_and_wrap(comms4, dtype):
    """i8 compares signed and wraps in 8 bits; u32 and u64 compare unsigned (values above
    the signed maximum are the largest, not negative) and wrap in their width."""
    info = np.iinfo(dtype)
    if dtype is np.int8:
        cols = [[-128, -1, 100, 5], [127, 3, 100, -7], [0, -2, 100, 9], [1, 4, -128, 2]]
    else:
        big = info.max - 1
        cols = [[big, 1, 2, 0], [3, big // 2 + 1, 1, 0], [0, 2, info.max, 7], [1, 0, 4, big]]
    xs = [np.array(c, dtype) for c in cols]
    wide = [[int(v) for v in c] for c in cols]
    mod = 1 << (8 * np.dtype(dtype).itemsize)

    def wrap(v):
        v %= mod
        return v - mod if info.min < 0 and v > info.max else v

    for op, f in (("sum", lambda vs: wrap(sum(vs))), ("min", min), ("max", max)):
        outs = run_ranks(comms4, lambda r, c: c.all_reduce(xs[r], op, out=np.empty_like(xs[r])))
        want = np.array([f([wide[r][i] for r in range(N)]) for i in range(4)], dtype)
        for o in outs:
            assert o.dtype == dtype
            np.testing.assert_array_equal(o, want, err_msg=op)


def test_new_dtype_names_and_interfaces(comms2):
    D = ccl.DType
    assert (D.I8.itemsize, D.U32.itemsize, D.U64.itemsize) == (1, 4, 8)
    # CCL's short names win where numpy's codes collide; numpy's dtype objects are numpy's.
    for name, want in (("i8", D.I8), ("int8", D.I8), ("u32", D.U32), ("uint32", D.U32), ("u64", D.U64),
                       ("uint64", D.U64), ("u8", D.U8), ("torch.uint32", D.U32)):
        assert ccl._types.to_dtype(name) is want, name
    for npt, want in ((np.int8, D.I8), (np.uint32, D.U32), (np.uint64, D.U64), (np.dtype("i8"), D.I64),
                      (np.dtype("u8"), D.U64), (np.dtype("u4"), D.U32)):
        assert ccl._types.to_dtype(npt) is want, npt
    from ccl._buffers import as_buf

    class AI:
        def __init__(self, a):
            self.a, self.__array_interface__ = a, a.__array_interface__

    class DL:
        def __init__(self, a):
            self.a = a

        def __dlpack__(self, stream=None):
            return self.a.__dlpack__()

        def __dlpack_device__(self):
            return self.a.__dlpack_device__()

    import array
    for a, want in ((np.zeros(3, np.int8), D.I8), (np.zeros(3, np.uint32), D.U32), (np.zeros(3, np.uint64), D.U64)):
        assert as_buf(AI(a), "x").dtype is want
        assert as_buf(DL(a), "x").dtype is want
    assert as_buf(array.array("b", [1]), "x").dtype is D.I8
    assert as_buf(array.array("I", [1]), "x").dtype is D.U32
    assert as_buf(array.array("Q", [1]), "x").dtype is D.U64
    # Symmetric arrays of the new dtypes, and a collective on them (datatype= by name).
    def body(r, c):
        a = c.empty(5, "u64")
        assert a.dtype == np.uint64
        a[:] = (1 << 63) + r
        c.all_reduce(a, "max")
        b = c.empty(4, np.int8)
        b[:] = -r - 1
        c.all_reduce(sendbuf=b.ctypes.data, recvbuf=b.ctypes.data, count=4, datatype="i8", op="min")
        return int(a[0]), int(b[0])

    assert run_ranks(comms2, body) == [((1 << 63) + 1, -2)] * 2


def test_all_reduce_in_place_returns_tensor(comms4):
    xs = [np.full(1001, r + 1, np.float32) for r in range(N)]
    outs = run_ranks(comms4, lambda r, c: c.all_reduce(xs[r]))
    for x, o in zip(xs, outs):
        assert o is x
        np.testing.assert_array_equal(x, np.full(1001, 10, np.float32))


def test_all_gather_out_of_place_allocates(comms4):
    xs = [np.full((2, 3), r, np.int32) for r in range(N)]
    outs = run_ranks(comms4, lambda r, c: c.all_gather(None, xs[r]))
    want = np.concatenate(xs)
    for o in outs:
        assert o.shape == (8, 3)
        np.testing.assert_array_equal(o, want)


def test_all_gather_in_place(comms4):
    bufs = [np.zeros(4 * 5, np.float64) for _ in range(N)]
    for r, b in enumerate(bufs):
        b[r * 5:(r + 1) * 5] = r + 0.5
    run_ranks(comms4, lambda r, c: c.all_gather(bufs[r]))
    want = np.repeat(np.arange(N) + 0.5, 5)
    for b in bufs:
        np.testing.assert_array_equal(b, want)


def test_reduce_scatter_out_and_in_place(comms4):
    xs = [np.arange(N * 6, dtype=np.float32) * (r + 1) for r in range(N)]
    total = sum(xs)
    outs = run_ranks(comms4, lambda r, c: c.reduce_scatter(None, xs[r]))
    for r, o in enumerate(outs):
        np.testing.assert_array_equal(o, total[r * 6:(r + 1) * 6])
    # NCCL's in place: output is this rank's part of input.
    ys = [x.copy() for x in xs]
    run_ranks(comms4, lambda r, c: c.reduce_scatter(ys[r][r * 6:(r + 1) * 6], ys[r], "max"))
    for r, y in enumerate(ys):
        np.testing.assert_array_equal(y[r * 6:(r + 1) * 6], xs[-1][r * 6:(r + 1) * 6])


def test_all_to_all(comms4):
    xs = [np.arange(N * 3, dtype=np.int64) + 100 * r for r in range(N)]
    outs = run_ranks(comms4, lambda r, c: c.all_to_all(None, xs[r]))
    for r, o in enumerate(outs):
        want = np.concatenate([xs[p][r * 3:(r + 1) * 3] for p in range(N)])
        np.testing.assert_array_equal(o, want)


@pytest.mark.parametrize("root", [0, 3])
def test_broadcast_and_reduce(comms4, root):
    xs = [np.full(50, r + 1, np.float32) for r in range(N)]
    run_ranks(comms4, lambda r, c: c.broadcast(xs[r], root))
    for x in xs:
        np.testing.assert_array_equal(x, np.full(50, root + 1, np.float32))
    ys = [np.full(50, r + 1, np.int32) for r in range(N)]
    outs = [np.zeros(50, np.int32) for _ in range(N)]
    run_ranks(comms4, lambda r, c: c.reduce(ys[r], root, "sum", out=outs[r]))
    np.testing.assert_array_equal(outs[root], np.full(50, 10, np.int32))


def test_mpi4py_style_keywords_with_raw_pointers(comms4):
    n = 64
    send = [np.full(n, r, np.float64) for r in range(N)]
    recv = [np.zeros(n * N, np.float64) for _ in range(N)]
    run_ranks(comms4, lambda r, c: c.Allgather(sendbuf=send[r].ctypes.data, recvbuf=recv[r].ctypes.data, count=n,
                                               datatype="f64"))
    for x in recv:
        np.testing.assert_array_equal(x, np.repeat(np.arange(N, dtype=np.float64), n))
    res = [np.zeros(n, np.float32) for _ in range(N)]
    src = [np.ones(n, np.float32) for _ in range(N)]
    run_ranks(comms4, lambda r, c: c.all_reduce(sendbuf=ctypes.c_void_p(src[r].ctypes.data), recvbuf=res[r].ctypes.data,
                                                count=n, datatype=np.float32, op=ccl.Op.SUM, stream=None))
    for x in res:
        np.testing.assert_array_equal(x, np.full(n, N, np.float32))


def test_async_from_one_thread(comms4):
    xs = [np.full(1000, r, np.float32) for r in range(N)]
    works = [c.all_reduce(x, async_op=True) for c, x in zip(comms4, xs)]
    for w in works:
        assert w.wait() is not None
    for x in xs:
        np.testing.assert_array_equal(x, np.full(1000, 6, np.float32))


def test_count_zero_and_array_interface(comms4):
    class Wrapped:
        def __init__(self, a):
            self.a = a
            self.__array_interface__ = a.__array_interface__

    xs = [np.full(9, 2, np.int32) for _ in range(N)]
    run_ranks(comms4, lambda r, c: c.all_reduce(Wrapped(xs[r]), "prod"))
    for x in xs:
        np.testing.assert_array_equal(x, np.full(9, 16, np.int32))
    run_ranks(comms4, lambda r, c: c.all_reduce(np.zeros(0, np.float32)))


def test_dlpack(comms2):
    class DL:
        def __init__(self, a):
            self.a = a

        def __dlpack__(self, stream=None):
            return self.a.__dlpack__()

        def __dlpack_device__(self):
            return self.a.__dlpack_device__()

    xs = [np.full(5, r + 1, np.float32) for r in range(2)]
    outs = [np.zeros(5, np.float32) for _ in range(2)]
    run_ranks(comms2, lambda r, c: c.all_reduce(DL(xs[r]), out=DL(outs[r])))
    for o in outs:
        np.testing.assert_array_equal(o, np.full(5, 3, np.float32))


def test_mixed_sizes_pick_and_explain(comms4):
    for n in (1, 1000, 100003):
        xs = [np.ones(n, np.float32) for _ in range(N)]
        run_ranks(comms4, lambda r, c: c.all_reduce(xs[r]))
        np.testing.assert_array_equal(xs[2], np.full(n, N, np.float32))
    why = comms4[0].explain_choice()
    assert why.startswith("allreduce 400012 B -> ") and ".ccl" in why
