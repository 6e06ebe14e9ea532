"""send, recv and groups from Python (numpy, CPU backend): a ring in a group per rank, a
group spanning every rank's communicator from one thread, calls outside groups, a block
that raises (nothing launched), and counts that disagree."""
import numpy as np
import pytest

import ccl
from conftest import run_ranks


def test_ring_in_groups(comms4):
    n = 4

    def body(r, c):
        x = np.arange(10 * r + 3, dtype=np.float32) + 1000 * r
        left = (r - 1) % n
        out = np.full(10 * left + 3, -1, dtype=np.float32)
        with ccl.group():
            c.send(x, (r + 1) % n)
            c.recv(out, left)
        return out

    for r, out in enumerate(run_ranks(comms4, body)):
        left = (r - 1) % n
        np.testing.assert_array_equal(out, np.arange(10 * left + 3, dtype=np.float32) + 1000 * left)


def test_one_group_over_every_comm_from_one_thread(comms4):
    # All-to-all with self, zero sizes included: every rank's calls in one group.
    m = np.array([[(3 * q + p) % 4 for p in range(4)] for q in range(4)])
    outs = [[np.full(m[q][p], -1, dtype=np.int32) for q in range(4)] for p in range(4)]
    with ccl.group():
        for r, c in enumerate(comms4):
            for p in range(4):
                c.send(np.full(m[r][p], 10 * r + p, dtype=np.int32), p)
                c.recv(outs[r][p], p)
    for p in range(4):
        for q in range(4):
            np.testing.assert_array_equal(outs[p][q], np.full(m[q][p], 10 * q + p, dtype=np.int32))


def test_outside_groups_round_trip(comms2):
    def body(r, c):
        if r == 0:
            c.send(np.arange(5, dtype=np.float64), 1)
            return c.recv(np.zeros(5), 1)
        got = c.recv(np.zeros(5), 0)
        c.send(got * 2, 0)
        return got

    back, got = run_ranks(comms2, body)
    np.testing.assert_array_equal(got, np.arange(5))
    np.testing.assert_array_equal(back, 2 * np.arange(5))


def test_block_that_raises_launches_nothing(comms2):
    with pytest.raises(RuntimeError, match="user code"):
        with ccl.group():
            comms2[0].send(np.ones(3), 1)
            raise RuntimeError("user code")
    # Nothing was sent: a fresh exchange matches message for message.
    out = np.zeros(2)
    with ccl.group():
        comms2[0].send(np.full(2, 7.0), 1)
        comms2[1].recv(out, 0)
    np.testing.assert_array_equal(out, [7.0, 7.0])


def test_bad_peer_raises_in_the_group(comms2):
    # Checked at the call (before libccl): the block raises and launches nothing.
    with pytest.raises(ccl.InvalidArgumentError, match="send: peer is 5, out of range: expected 0..1"):
        with ccl.group():
            comms2[0].send(np.ones(3), 5)


def test_counts_disagree_names_both():
    cs = ccl.init_all(2, backend="cpu")
    try:
        out = np.full(4, -1.0)
        with pytest.raises(ccl.PeerFailedError, match="rank 1 failed"):
            with ccl.group():                        # synchronizes rank 0 first
                cs[0].send(np.ones(3), 1)
                cs[1].recv(out, 0)
        with pytest.raises(ccl.InvalidArgumentError) as e:
            cs[1].synchronize()
        assert "4 f64" in str(e.value) and "3 f64" in str(e.value), str(e.value)
        assert (out == -1).all()                     # nothing written
    finally:
        for c in cs:
            c.destroy()
