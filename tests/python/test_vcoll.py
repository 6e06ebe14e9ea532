"""allgatherv and alltoallv from Python (numpy, CPU backend): uneven and zero segments,
displacements with gaps, and counts that disagree across ranks."""
import numpy as np
import pytest

import ccl
from conftest import run_ranks


def test_all_gather_v_uneven_with_gaps(comms4):
    counts = [3, 0, 7, 1]
    displs = [20, 0, 5, 0]                           # out of rank order, with gaps
    outs = [np.full(23, -1.0, dtype=np.float32) for _ in range(4)]

    def body(r, c):
        x = np.arange(counts[r], dtype=np.float32) + 100 * r
        return c.all_gather_v(outs[r], x, counts, displs)

    run_ranks(comms4, body)
    want = np.full(23, -1.0, dtype=np.float32)
    for p in range(4):
        want[displs[p]:displs[p] + counts[p]] = np.arange(counts[p]) + 100 * p
    for o in outs:
        np.testing.assert_array_equal(o, want)


def test_all_to_all_v_matrix_packed(comms4):
    rng = np.random.default_rng(7)
    m = rng.integers(0, 5, size=(4, 4))              # m[r][p]: r sends p so many, zeros too

    def body(r, c):
        x = np.concatenate([np.full(m[r][p], 10 * r + p, dtype=np.int64) for p in range(4)])
        out = np.empty(int(m[:, r].sum()), dtype=np.int64)
        return c.all_to_all_v(out, x, list(m[r]), list(m[:, r]))

    outs = run_ranks(comms4, body)
    for r, o in enumerate(outs):
        want = np.concatenate([np.full(m[p][r], 10 * p + r, dtype=np.int64) for p in range(4)])
        np.testing.assert_array_equal(o, want)


def test_all_gather_v_counts_disagree_names_both(comms2):
    def body(r, c):
        counts = [2, 3] if r == 0 else [2, 4]        # rank 1 says it sends 4, rank 0 expects 3
        out = np.zeros(6, dtype=np.float64)
        with pytest.raises(ccl.CclError) as e:
            c.all_gather_v(out, np.ones(counts[r], dtype=np.float64), counts)
        return str(e.value), out

    (m0, o0), (m1, o1) = run_ranks(comms2, body)
    for m in (m0, m1):
        assert "rank 0" in m and "rank 1" in m, m
    assert not o0.any() and not o1.any()             # nothing written


def test_v_arguments_checked_here(comms2):
    c = comms2[0]
    with pytest.raises(ccl.InvalidArgumentError, match="recvcounts must have 2 entries"):
        c.all_gather_v(np.zeros(4), np.zeros(1), [1])
    with pytest.raises(ccl.InvalidArgumentError, match="output has 2 elements"):
        c.all_gather_v(np.zeros(2), np.zeros(1), [1, 2])
    with pytest.raises(ccl.InvalidArgumentError, match="one dtype"):
        c.all_to_all_v(np.zeros(2, dtype=np.float32), np.zeros(2), [1, 1], [1, 1])
