"""The warning init_all gives where rank threads share a GPU under lazy CUDA module
loading (a hang otherwise: docs/python.md). Checked without a GPU through a stand-in
torch module."""
import sys
import types

import pytest

from ccl import _comm


def fake_torch(gpus: int) -> types.ModuleType:
    t = types.ModuleType("torch")
    t.cuda = types.SimpleNamespace(is_available=lambda: gpus > 0, device_count=lambda: gpus)
    return t


def test_warns_when_ranks_share_a_gpu_lazily(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", fake_torch(1))
    monkeypatch.delenv("CUDA_MODULE_LOADING", raising=False)
    with pytest.warns(RuntimeWarning, match="CUDA_MODULE_LOADING=EAGER"):
        _comm._warn_if_lazy_on_shared_gpu(2, None)
    with pytest.warns(RuntimeWarning):
        _comm._warn_if_lazy_on_shared_gpu(2, [0, 0])


@pytest.mark.parametrize("env, gpus, devices", [("EAGER", 1, None), ("", 2, None), ("", 1, [0, 1])])
def test_quiet_when_eager_or_one_gpu_per_rank(monkeypatch, recwarn, env, gpus, devices):
    monkeypatch.setitem(sys.modules, "torch", fake_torch(gpus))
    monkeypatch.setenv("CUDA_MODULE_LOADING", env)
    _comm._warn_if_lazy_on_shared_gpu(2, devices)
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]
