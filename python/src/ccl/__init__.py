"""ccl: CCL's collectives, algorithms and symmetric memory from Python (numpy, torch, any
``__cuda_array_interface__``/DLPack buffer), over libccl through ctypes.

    import ccl, numpy as np, threading
    comms = ccl.init_all(4, backend="cpu")          # 4 ranks in this process
    xs = [np.full(1000, r, np.float32) for r in range(4)]
    ts = [threading.Thread(target=c.all_reduce, args=(x,)) for c, x in zip(comms, xs)]
    ...

docs/python.md has the whole story: process mode (torchrun, mpirun, mpi4py; several
nodes from ``ccl.get_unique_id()``), torch
custom ops (``ccl.torch``), custom algorithms (``comm.load``, ``ccl.check``), symmetric
tensors (``comm.empty``), sub-communicators (``comm.split``, ``ccl.split_all``), the tuner
(``ccl.tune``), mpi4py's methods (``comm.Allreduce``, ``ccl.IN_PLACE``) and the shipped
algorithms (``ccl.algorithms()``).
"""
from __future__ import annotations

from ._bootstrap import (Bootstrap, FileStore, GroupBootstrap, MPIBootstrap, StoreBootstrap)
from ._comm import (DEFAULT_TIMEOUT_MS, DEVICE_AUTO, SPLIT_NOCOLOR, Algorithm, Communicator, Proof, Registration,
                    Work, check, communicator, get_unique_id, group, init_all, init_rank, split_all)
from ._errors import (CclError, CompileError, CudaError, InternalError, InvalidArgumentError, InvalidUsageError,
                      NoAlgorithmError, NotSymmetricError, NvrtcError, OutOfMemoryError, PeerFailedError,
                      SystemError, TimeoutError, UnsupportedError)
from ._lib import library_path
from ._library import algorithm_dir, algorithms
from ._mpistyle import IN_PLACE
from ._tune import TuneTable, tune, use_tune_table
from ._types import DType, Op
from ._uniqueid import UNIQUE_ID_BYTES, UniqueId

__version__ = "0.1.0"

__all__ = [
    "Algorithm", "Bootstrap", "CclError", "Communicator", "CompileError", "CudaError", "DEFAULT_TIMEOUT_MS",
    "DEVICE_AUTO", "DType", "FileStore", "GroupBootstrap", "IN_PLACE", "InternalError", "InvalidArgumentError",
    "InvalidUsageError", "MPIBootstrap", "NoAlgorithmError", "NotSymmetricError", "NvrtcError", "Op",
    "OutOfMemoryError", "PeerFailedError", "Proof", "Registration", "SPLIT_NOCOLOR", "StoreBootstrap", "SystemError",
    "TimeoutError", "TuneTable", "UNIQUE_ID_BYTES", "UniqueId", "UnsupportedError", "Work", "algorithm_dir",
    "algorithms", "check", "communicator", "get_unique_id", "group", "init_all", "init_rank", "library_path",
    "library_version", "split_all", "synchronize", "tune", "use_tune_table",
]


def synchronize(comms: "list[Communicator] | Communicator") -> None:
    """Waits for every communicator given (threads mode: after async_op=True calls)."""
    for c in comms if isinstance(comms, (list, tuple)) else [comms]:
        c.synchronize()


def library_version() -> str:
    """libccl's version ("0.1.0"), from ccl_version() where the library has it."""
    from . import _lib

    L = _lib.lib()
    f = getattr(L, "ccl_version", None)
    if f is None:
        return "unknown"
    v = f()
    return v.decode() if isinstance(v, bytes) else str(v)
