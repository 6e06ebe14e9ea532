"""comm.split / ccl.split_all (ccl_comm_split) and comm.barrier (ccl_barrier) on the CPU
backend, threads mode; test_process.py runs both across processes (proc_worker.py)."""
import time

import numpy as np
import pytest

import ccl
from conftest import run_ranks

N = 4


def test_split_by_color_and_key(comms4):
    # Colors 0 (ranks 0, 2) and 1 (ranks 1, 3); keys reverse the order within a color.
    kids = run_ranks(comms4, lambda r, c: c.split(r % 2, key=-r))
    try:
        for r, k in enumerate(kids):
            assert isinstance(k, ccl.Communicator) and k.size == 2 and k.backend == "cpu"
            assert k.rank == (0 if r >= 2 else 1), (r, k.rank)
        # Each child reduces over its color only: 1 + 3 and 2 + 4.
        xs = [np.full(5, r + 1, np.int32) for r in range(N)]
        run_ranks(comms4, lambda r, c: kids[r].all_reduce(xs[r]))
        for r, x in enumerate(xs):
            np.testing.assert_array_equal(x, np.full(5, 4 if r % 2 == 0 else 6, np.int32))
        # The parent still works alongside its children.
        ys = [np.ones(3, np.float32) for _ in range(N)]
        run_ranks(comms4, lambda r, c: c.all_reduce(ys[r]))
        np.testing.assert_array_equal(ys[3], np.full(3, N, np.float32))
    finally:
        for k in kids:
            k.destroy()


def test_split_default_key_keeps_order_and_nocolor(comms4):
    # Rank 1 joins none (None, and ccl.SPLIT_NOCOLOR on rank 3's behalf below).
    def body(r, c):
        return c.split(None if r == 1 else 0)

    kids = run_ranks(comms4, body)
    assert kids[1] is None
    assert [k.rank for k in kids if k is not None] == [0, 1, 2]
    assert all(k.size == 3 for k in kids if k is not None)
    got = run_ranks([kids[r] for r in (0, 2, 3)], lambda i, k: k.all_gather(None, np.array([10 * k.rank], np.int64)))
    for g in got:
        np.testing.assert_array_equal(g, [0, 10, 20])
    for k in kids:
        if k is not None:
            k.destroy()
    kids = run_ranks(comms4, lambda r, c: c.split(ccl.SPLIT_NOCOLOR if r == 3 else 7, key=0))
    assert kids[3] is None and [k.rank for k in kids[:3]] == [0, 1, 2]
    for k in kids[:3]:
        k.destroy()


def test_split_all_from_one_thread(comms4):
    kids = ccl.split_all(comms4, [1, 0, 1, None], keys=[5, 0, 2, 0])
    assert kids[3] is None
    assert (kids[0].size, kids[0].rank, kids[2].rank, kids[1].size, kids[1].rank) == (2, 1, 0, 1, 0)
    # async from one thread, as init_all's comms.
    xs = {0: np.full(4, 2.0, np.float64), 2: np.full(4, 5.0, np.float64)}
    works = [kids[r].all_reduce(xs[r], async_op=True) for r in (0, 2)]
    for w in works:
        w.wait()
    np.testing.assert_array_equal(xs[0], np.full(4, 7.0))
    assert kids[1].all_reduce(np.ones(2, np.float32))[0] == 1.0   # a communicator of one
    for k in kids[:3]:
        k.destroy()


def test_split_with_settings_and_outliving_parent():
    comms = ccl.init_all(2, backend="cpu")
    kids = ccl.split_all(comms, [0, 0], timeout_ms=5000, heap_bytes=8 << 20)
    for c in comms:
        c.destroy()
    xs = [np.full(3, r + 1, np.int32) for r in range(2)]
    run_ranks(kids, lambda r, k: k.all_reduce(xs[r]))
    np.testing.assert_array_equal(xs[0], [3, 3, 3])
    for k in kids:
        k.destroy()


def test_split_errors(comms4):
    c = comms4[0]
    with pytest.raises(ccl.InvalidArgumentError, match=r"split: color is -5 \(a color is >= 0, or None"):
        c.split(-5)
    with pytest.raises(ccl.InvalidArgumentError, match=r"split: key is 1099511627776, out of range"):
        c.split(0, key=1 << 40)
    with pytest.raises(TypeError, match="split: color must be an integer, not float"):
        c.split(1.0)
    with pytest.raises(ccl.InvalidUsageError, match=r"split: inside ccl.group\(\)"):
        with ccl.group():
            c.split(0)
    with pytest.raises(ccl.InvalidArgumentError, match="split_all: 4 comms, 3 colors: one each"):
        ccl.split_all(comms4, [0, 0, 0])
    with pytest.raises(ccl.InvalidArgumentError, match="split_all: a communicator is given twice"):
        ccl.split_all([comms4[0], comms4[0]], [0, 0])
    with pytest.raises(ccl.InvalidArgumentError, match=r"split_all: color is -2"):
        ccl.split_all(comms4, [0, 0, -2, 0])
    # Nothing was made or held: the communicators still work.
    xs = [np.ones(2, np.float32) for _ in range(N)]
    run_ranks(comms4, lambda r, c: c.all_reduce(xs[r]))
    np.testing.assert_array_equal(xs[0], [4, 4])


def test_split_destroyed_parent_raises():
    c = ccl.init_all(1, backend="cpu")[0]
    c.destroy()
    with pytest.raises(ccl.InvalidArgumentError, match="communicator was destroyed"):
        c.split(0)


def test_barrier_waits_for_the_last_rank(comms4):
    arrived, left = [0.0] * N, [0.0] * N

    def body(r, c):
        if r == 2:
            time.sleep(0.3)
        arrived[r] = time.monotonic()
        assert c.barrier() is None
        left[r] = time.monotonic()

    run_ranks(comms4, body)
    assert min(left) >= max(arrived), (arrived, left)


def test_barrier_async_and_mpi_style(comms4):
    works = [c.barrier(async_op=True) for c in comms4]
    for w in works:
        assert isinstance(w, ccl.Work)
        w.wait()
    run_ranks(comms4, lambda r, c: c.Barrier())
    kids = run_ranks(comms4, lambda r, c: c.Split(r // 2, key=r))
    assert [(k.size, k.rank) for k in kids] == [(2, 0), (2, 1), (2, 0), (2, 1)]
    run_ranks(kids, lambda r, k: k.barrier())
    for k in kids:
        k.destroy()


def test_barrier_one_rank_and_a_missing_rank():
    one = ccl.init_all(1, backend="cpu")[0]
    one.barrier()
    one.destroy()
    comms = ccl.init_all(2, backend="cpu", timeout_ms=400)
    with pytest.raises(ccl.TimeoutError, match="rank 1 did not start"):
        comms[0].barrier()   # rank 1 never comes
    for c in comms:
        c.destroy()


def test_default_timeout_is_the_librarys(tmp_path, monkeypatch):
    from ccl._comm import _timeout_s

    header = (ccl._lib.PACKAGE_DIR.parents[2] / "runtime" / "include" / "ccl.h")
    if header.exists():
        assert f"#define CCL_DEFAULT_TIMEOUT_MS {ccl.DEFAULT_TIMEOUT_MS}\n" in header.read_text()
    assert ccl.DEFAULT_TIMEOUT_MS == 600000
    assert ccl.FileStore(str(tmp_path / "s")).timeout == 600.0
    monkeypatch.delenv("CCL_TIMEOUT_MS", raising=False)
    assert _timeout_s(None) == 600.0
    assert _timeout_s(1500) == 1.5
    monkeypatch.setenv("CCL_TIMEOUT_MS", "2500")
    assert _timeout_s(None) == 2.5 and _timeout_s(100) == 0.1
