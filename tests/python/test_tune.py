"""ccl.tune runs ccl-tune and its table steers the standard collectives."""
import numpy as np

import ccl
from conftest import run_ranks

QUICK = ["--iters", "1", "--reps", "1", "--warmup", "0"]


def test_tune_and_apply(tmp_path):
    out = tmp_path / "t.tbl"
    table = ccl.tune("allreduce", "1K", "2K", ranks=2, backend="cpu", output=str(out), extra_args=QUICK)
    assert table.path == str(out) and "ccl-tune-table 1" in table.text
    assert [e.split()[:2] for e in table.entries()] == [["allreduce", "1024"], ["allreduce", "2048"]]
    try:
        table.apply()
        comms = ccl.init_all(2, backend="cpu")
        xs = [np.ones(256, np.float32) for _ in range(2)]
        run_ranks(comms, lambda r, c: c.all_reduce(xs[r]))
        assert str(out) in comms[0].explain_choice()
        np.testing.assert_array_equal(xs[0], np.full(256, 2, np.float32))
        for c in comms:
            c.destroy()
    finally:
        ccl.use_tune_table(None)


def test_tune_failure_is_an_error():
    import pytest

    with pytest.raises(ccl.CclError, match="ccl-tune failed"):
        ccl.tune("nonsense", ranks=2, backend="cpu")
