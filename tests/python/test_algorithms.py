"""comm.load, Algorithm.run, comm.use, explain_choice and ccl.check."""
from pathlib import Path

import numpy as np
import pytest

import ccl
from conftest import ROOT, run_ranks

STAR = ROOT / "examples" / "star.ccl"
BAD = "algorithm x : allreduce\nranks N in 2..4\nchunks N\nfor r in 0..N on r tb 0 {\n  put out@r[0] in[0]\n}\n"


def test_load_run_and_use(comms4):
    algs = run_ranks(comms4, lambda r, c: c.load(STAR))
    assert algs[0].name == "star" and algs[0].collective == "allreduce"
    xs = [np.full(100, r + 1.0, np.float32) for r in range(4)]
    outs = run_ranks(comms4, lambda r, c: algs[r](xs[r], out=np.empty_like(xs[r])))
    for o in outs:
        np.testing.assert_array_equal(o, np.full(100, 10.0, np.float32))
    run_ranks(comms4, lambda r, c: c.use(algs[r], 0, 1 << 20))
    run_ranks(comms4, lambda r, c: c.all_reduce(xs[r]))
    np.testing.assert_array_equal(xs[1], np.full(100, 10.0, np.float32))
    why = comms4[0].explain_choice()
    assert "star.ccl" in why and "regist" in why, why
    # Bigger than the registered range: the library's choice again.
    big = [np.ones(1 << 19, np.float32) for _ in range(4)]
    run_ranks(comms4, lambda r, c: c.all_reduce(big[r]))
    assert "star.ccl" not in comms4[0].explain_choice()
    run_ranks(comms4, lambda r, c: algs[r].free())
    with pytest.raises(ccl.InvalidArgumentError, match="freed"):
        algs[0].run(xs[0])


def test_load_source_text_and_wrong_collective(comms2):
    src = STAR.read_text()
    algs = run_ranks(comms2, lambda r, c: c.load(src))
    assert algs[0].name == "star"
    with pytest.raises(ccl.InvalidArgumentError, match="not a all_gather|is a allreduce"):
        comms2[0].all_gather(None, np.ones(3, np.float32), algorithm=algs[0])


def test_v_collective_program_is_refused_clearly(comms2):
    """allgatherv programs load (the proof is the same) but run from C only, so far."""
    algs = run_ranks(comms2, lambda r, c: c.load(ROOT / "algorithms" / "allgatherv" / "ring.ccl"))
    assert algs[0].collective == "allgatherv"
    with pytest.raises(NotImplementedError, match="ccl_algorithm_run_v"):
        algs[0](np.ones(3, np.float32))


def test_load_compile_error_has_located_diagnostics(comms2):
    def load(r, c):
        with pytest.raises(ccl.CompileError) as e:
            c.load(BAD)
        return str(e.value)

    msgs = run_ranks(comms2, load)
    assert "<string>:5:16: error: unexpected 'in', expected '<-'" in msgs[0]
    assert "^~" in msgs[0]


def test_check_proof_and_errors(tmp_path):
    proof = ccl.check(ROOT / "algorithms" / "allreduce" / "ring.ccl", ranks=4)
    assert isinstance(proof, ccl.Proof)
    assert "postcondition:    proved" in proof and "no deadlock:      proved" in proof
    with pytest.raises(ccl.CompileError) as e:
        ccl.check(BAD, ranks=2)
    assert str(e.value).startswith("<string>:5:16: error:")
    f = tmp_path / "bad.ccl"
    f.write_text(BAD)
    with pytest.raises(ccl.CompileError, match=str(f) + ":5:16: error"):
        ccl.check(f, ranks=3)
    with pytest.raises(ccl.CompileError, match="error"):  # ranks 2..4 does not admit 8
        ccl.check(BAD.replace("in[0]", "<- in[0]"), ranks=8)
    with pytest.raises(ccl.InvalidArgumentError, match="cannot read"):
        ccl.check(tmp_path / "missing.ccl", ranks=2)
    with pytest.raises(ccl.InvalidArgumentError, match="'nranks'"):
        ccl.check(STAR, ranks=0)


def test_check_rooted(tmp_path):
    p = next(Path(ROOT / "algorithms" / "broadcast").glob("*.ccl"))
    assert "proved" in ccl.check(p, ranks=4, root=3)
