"""Shared fixtures for the Python package's tests (tests/python/run.sh runs them for make
check; `python -m pytest tests/python -m gpu` runs the GPU ones).

The package is imported from python/src unless it is installed; libccl comes from
$CCL_LIBRARY (run.sh sets it to the build folder's libccl.so) and the shipped algorithms
from $CCL_ALGORITHM_DIR (set here to the repository's algorithms/ when unset)."""
import os
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if "CCL_ALGORITHM_DIR" not in os.environ:
    os.environ["CCL_ALGORITHM_DIR"] = str(ROOT / "algorithms")
try:
    import ccl  # noqa: F401
except ImportError:
    sys.path.insert(0, str(ROOT / "python" / "src"))
os.environ.setdefault("CCL_TIMEOUT_MS", "20000")


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU and torch with CUDA (skipped without)")
    config.addinivalue_line("markers", "torch: needs torch (skipped without)")


def have_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    cuda = have_cuda()
    for item in items:
        if "gpu" in item.keywords and not cuda:
            item.add_marker(pytest.mark.skip(reason="no CUDA GPU (or torch without CUDA)"))


def run_ranks(comms, fn, timeout=60.0):
    """fn(rank, comm) on one thread per rank; the results in rank order; re-raises the
    first rank's exception."""
    n = len(comms)
    results, errors = [None] * n, [None] * n

    def body(r):
        try:
            results[r] = fn(r, comms[r])
        except BaseException as e:  # noqa: BLE001
            errors[r] = e

    threads = [threading.Thread(target=body, args=(r,), daemon=True) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
        assert not t.is_alive(), "a rank's thread did not finish (hang)"
    for e in errors:
        if e is not None:
            raise e
    return results


@pytest.fixture(scope="module")
def comms4():
    import ccl

    cs = ccl.init_all(4, backend="cpu")
    yield cs
    for c in cs:
        c.destroy()


@pytest.fixture(scope="module")
def comms2():
    import ccl

    cs = ccl.init_all(2, backend="cpu")
    yield cs
    for c in cs:
        c.destroy()
