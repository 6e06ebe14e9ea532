"""mpi4py's buffer methods take mpi4py's argument order (send buffer first) and write the
receive buffer, never the send buffer; IN_PLACE where MPI has it; mpi4py's buffer specs."""
import numpy as np
import pytest

import ccl
from conftest import run_ranks

N = 4


def test_allreduce_send_first_writes_recv(comms4):
    def body(r, c):
        s = np.arange(5, dtype=np.float32) + r
        rv = np.zeros(5, np.float32)
        assert c.Allreduce(s, rv, op="sum") is None
        return s, rv

    for r, (s, rv) in enumerate(run_ranks(comms4, body)):
        np.testing.assert_array_equal(s, np.arange(5) + r)            # the input is untouched
        np.testing.assert_array_equal(rv, 4 * np.arange(5) + 6)


def test_allreduce_in_place_and_default_op(comms4):
    bufs = [np.full(3, r + 1, np.int64) for r in range(N)]
    run_ranks(comms4, lambda r, c: c.Allreduce(ccl.IN_PLACE, bufs[r]))
    for b in bufs:
        np.testing.assert_array_equal(b, [10, 10, 10])


def test_alltoall_send_first_writes_recv(comms4):
    def body(r, c):
        s = np.array([10 * r + p for p in range(N)], np.int32)
        rv = np.full(N, -1, np.int32)
        c.Alltoall(s, rv)
        return s, rv

    for r, (s, rv) in enumerate(run_ranks(comms4, body)):
        np.testing.assert_array_equal(s, [10 * r + p for p in range(N)])
        np.testing.assert_array_equal(rv, [10 * p + r for p in range(N)])


def test_alltoall_in_place(comms4):
    bufs = [np.array([10 * r + p for p in range(N)], np.int32) for r in range(N)]
    run_ranks(comms4, lambda r, c: c.Alltoall(ccl.IN_PLACE, bufs[r]))
    for r, b in enumerate(bufs):
        np.testing.assert_array_equal(b, [10 * p + r for p in range(N)])


def test_reduce_scatter_block_send_first_writes_recv(comms4):
    def body(r, c):
        s = np.arange(2 * N, dtype=np.float64) + r
        rv = np.zeros(2, np.float64)
        c.Reduce_scatter_block(s, rv, op="max")
        return s, rv

    for r, (s, rv) in enumerate(run_ranks(comms4, body)):
        np.testing.assert_array_equal(s, np.arange(2 * N) + r)
        np.testing.assert_array_equal(rv, np.arange(2 * r, 2 * r + 2) + N - 1)


def test_reduce_scatter_block_in_place_result_at_start(comms4):
    bufs = [np.arange(2 * N, dtype=np.float32) + r for r in range(N)]
    run_ranks(comms4, lambda r, c: c.Reduce_scatter_block(ccl.IN_PLACE, bufs[r]))
    for r, b in enumerate(bufs):
        np.testing.assert_array_equal(b[:2], 4 * np.arange(2 * r, 2 * r + 2) + 6)


def test_allgather_and_in_place(comms4):
    outs = [np.zeros(2 * N, np.float32) for _ in range(N)]
    run_ranks(comms4, lambda r, c: c.Allgather(np.full(2, r, np.float32), outs[r]))
    inplace = [np.where(np.arange(2 * N) // 2 == r, r, -1).astype(np.float32) for r in range(N)]
    run_ranks(comms4, lambda r, c: c.Allgather(ccl.IN_PLACE, inplace[r]))
    for o in outs + inplace:
        np.testing.assert_array_equal(o, np.repeat(np.arange(N), 2))


def test_reduce_and_bcast(comms4):
    def body(r, c):
        rv = np.zeros(3, np.float32) if r == 2 else None
        c.Reduce(np.full(3, r, np.float32), rv, op="sum", root=2)
        b = np.full(3, 7.0 if r == 1 else 0.0)
        c.Bcast(b, root=1)
        return rv, b

    for r, (rv, b) in enumerate(run_ranks(comms4, body)):
        if r == 2:
            np.testing.assert_array_equal(rv, [6, 6, 6])
        np.testing.assert_array_equal(b, [7, 7, 7])


def test_reduce_in_place_only_at_root(comms2):
    def body(r, c):
        x = np.full(2, r + 1.0)
        if r == 0:
            c.Reduce(ccl.IN_PLACE, x, root=0)
        else:
            with pytest.raises(ccl.InvalidArgumentError, match="IN_PLACE on rank 1, which is not the root"):
                c.Reduce(ccl.IN_PLACE, x, root=0)
            c.Reduce(x, None, root=0)
        return x

    x0, x1 = run_ranks(comms2, body)
    np.testing.assert_array_equal(x0, [3, 3])
    np.testing.assert_array_equal(x1, [2, 2])


def test_buffer_specs(comms2):
    def body(r, c):
        s = np.arange(6, dtype=np.float32)
        rv = np.zeros(6, np.float32)
        c.Allreduce([s, "f32"], [rv, 4, "f32"])                   # count 4: the last two stay 0
        return rv

    for rv in run_ranks(comms2, body):
        np.testing.assert_array_equal(rv, [0, 2, 4, 6, 0, 0])

    def gather(r, c):                                              # MPI's count: elements per rank
        rv = np.zeros(6)
        c.Allgather([np.full(3, r + 1.0), 2, "f64"], [rv, 2, "f64"])
        return rv

    for rv in run_ranks(comms2, gather):
        np.testing.assert_array_equal(rv, [1, 1, 2, 2, 0, 0])


def test_allgatherv_alltoallv_specs(comms2):
    counts = [1, 3]

    def body(r, c):
        out = np.zeros(4, np.int32)
        c.Allgatherv(np.full(counts[r], r + 5, np.int32), [out, counts])
        inplace = np.full(4, -1, np.int32)
        inplace[[0] if r == 0 else [1, 2, 3]] = r + 5
        c.Allgatherv(ccl.IN_PLACE, [inplace, (counts, [0, 1]), "i32"])
        a2a = np.zeros(2, np.int64)
        c.Alltoallv([np.array([10 * r, 10 * r + 1]), [1, 1], [0, 1]], [a2a, [1, 1]])
        return out, inplace, a2a

    for r, (out, inplace, a2a) in enumerate(run_ranks(comms2, body)):
        np.testing.assert_array_equal(out, [5, 6, 6, 6])
        np.testing.assert_array_equal(inplace, [5, 6, 6, 6])
        np.testing.assert_array_equal(a2a, [r, 10 + r])


def test_send_recv(comms2):
    def body(r, c):
        if r == 0:
            c.Send(np.arange(4.0), dest=1)
            c.Send([np.arange(4.0), 2, "f64"], 1, tag=0)
            return None
        a, b = np.zeros(4), np.zeros(4)
        c.Recv(a, source=0)
        c.Recv([b, 2, "f64"], 0)
        return a, b

    _, (a, b) = run_ranks(comms2, body)
    np.testing.assert_array_equal(a, np.arange(4.0))
    np.testing.assert_array_equal(b, [0, 1, 0, 0])
    with pytest.raises(ccl.UnsupportedError, match="Send: tag 3: CCL matches messages in order, without tags"):
        comms2[0].Send(np.zeros(1), 1, tag=3)
    with pytest.raises(ccl.UnsupportedError, match="Recv: status="):
        comms2[1].Recv(np.zeros(1), 0, status=object())
