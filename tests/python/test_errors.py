"""Errors are exceptions of the result's class carrying libccl's message; timeouts end."""
import re
import time

import numpy as np
import pytest

import ccl
from conftest import run_ranks


def test_exception_classes():
    assert issubclass(ccl.InvalidArgumentError, ValueError)
    assert issubclass(ccl.TimeoutError, TimeoutError)
    assert issubclass(ccl.OutOfMemoryError, MemoryError)
    for cls in (ccl.CompileError, ccl.NoAlgorithmError, ccl.NotSymmetricError, ccl.PeerFailedError):
        assert issubclass(cls, ccl.CclError)
    assert ccl.CompileError.result_name == "CCL_ERR_COMPILE"


def test_init_errors():
    with pytest.raises(ccl.InvalidArgumentError, match="init_all: nranks is 0, out of range: expected 1"):
        ccl.init_all(0, backend="cpu")
    with pytest.raises(ccl.InvalidArgumentError, match="heap_bytes"):
        ccl.init_all(2, backend="cpu", heap_bytes=4096)
    with pytest.raises(ValueError, match="backend 'tpu'"):
        ccl.init_all(2, backend="tpu")


def test_argument_errors(comms2):
    c = comms2[0]
    with pytest.raises(ccl.InvalidArgumentError, match="recvbuf has 3 elements, fewer than the 4"):
        c.all_reduce(np.ones(4, np.float32), out=np.ones(3, np.float32))
    with pytest.raises(ccl.InvalidArgumentError, match="recvbuf holds f64, not f32"):
        c.all_reduce(np.ones(4, np.float32), out=np.ones(4, np.float64))
    with pytest.raises(ccl.InvalidArgumentError, match="datatype= is needed"):
        c.all_reduce(sendbuf=1234, recvbuf=5678, count=4)
    with pytest.raises(ValueError, match="not C-contiguous"):
        c.all_reduce(np.ones((4, 4), np.float32)[:, 1])
    with pytest.raises(ValueError, match="no CCL equivalent"):
        c.all_reduce(np.ones(4, np.complex64))
    with pytest.raises(ValueError, match="unknown op 'xor'"):
        c.all_reduce(np.ones(4, np.float32), "xor")
    with pytest.raises(TypeError, match="not a buffer"):
        c.all_reduce([1.0, 2.0])
    with pytest.raises(ccl.InvalidArgumentError, match=r"broadcast: root is 7, out of range: expected 0..1 "
                                                       r"\(a rank of this communicator of 2\)"):
        c.broadcast(np.ones(4, np.float32), root=7)


def test_timeout_never_hangs():
    cs = ccl.init_all(2, backend="cpu", timeout_ms=300)
    x = np.ones(1000, np.float32)
    t0 = time.monotonic()
    with pytest.raises((ccl.TimeoutError, ccl.PeerFailedError)) as e:
        cs[0].all_reduce(x)  # rank 1 never calls
    assert time.monotonic() - t0 < 10
    assert "timed out" in str(e.value) or "ms" in str(e.value)
    with pytest.raises(ccl.CclError, match="failed earlier"):
        cs[0].all_reduce(x)
    for c in cs:
        c.destroy()


def test_destroyed_communicator():
    cs = ccl.init_all(2, backend="cpu")
    for c in cs:
        c.destroy()
    with pytest.raises(ccl.InvalidArgumentError, match="destroyed"):
        cs[0].all_reduce(np.ones(2, np.float32))
    cs[0].destroy()  # a second destroy does nothing
    assert "destroyed" in repr(cs[0])


def test_context_manager_and_repr():
    cs = ccl.init_all(2, backend="cpu")
    with cs[0] as c0, cs[1]:
        assert repr(c0) == "<ccl.Communicator rank 0 of 2, cpu>"
        assert c0.size == 2 and c0.rank == 0 and c0.backend == "cpu"
        assert ccl.communicator(c0.handle) is c0
    with pytest.raises(ccl.InvalidArgumentError):
        ccl.communicator(cs[0]._handle or 1)


def test_rank_disagreement_is_reported(comms2):
    fresh = ccl.init_all(2, backend="cpu", timeout_ms=2000)

    def call(r, c):
        try:
            c.all_reduce(np.ones(8 if r == 0 else 16, np.float32))
        except ccl.CclError as e:
            return e
        return None

    errs = run_ranks(fresh, call)
    assert any(isinstance(e, ccl.CclError) for e in errs)
    for c in fresh:
        c.destroy()


def test_auto_falling_back_to_the_cpu_warns_once(monkeypatch):
    import warnings

    from ccl import _comm

    monkeypatch.delenv("CCL_BACKEND", raising=False)
    monkeypatch.setattr(_comm, "_fell_back_warned", False)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        cs = ccl.init_all(1, backend="auto")
    if cs[0].backend != "cpu":
        cs[0].destroy()
        pytest.skip("a GPU is usable here: auto chose it")
    [w] = [w for w in rec if "fell back" in str(w.message)]
    assert w.category is RuntimeWarning and w.filename == __file__  # points at the caller's line
    assert re.match(r"ccl.init_all: backend 'auto' fell back to the CPU backend \(.*\); collectives run on host "
                    r"memory. Pass backend='cpu'", str(w.message)), str(w.message)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        more = ccl.init_all(1)                                      # once per process: quiet now
        quiet = ccl.init_all(1, backend="cpu")
    for c in cs + more + quiet:
        c.destroy()


def test_cpu_asked_does_not_warn(monkeypatch):
    import warnings

    from ccl import _comm

    monkeypatch.setattr(_comm, "_fell_back_warned", False)
    monkeypatch.setenv("CCL_BACKEND", "cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for c in ccl.init_all(1) + ccl.init_all(1, backend="cpu"):
            c.destroy()
