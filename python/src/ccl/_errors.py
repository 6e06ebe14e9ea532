"""Exceptions: one class per ccl_result_t, each carrying the library's message.

Every failed call raises the subclass for its result; ``str(e)`` is the library's
``ccl_comm_last_error`` text ("ccl_all_reduce: argument 'recvbuf' ..."), ``e.result`` the
numeric ``ccl_result_t`` and ``e.result_name`` its C name.
"""
from __future__ import annotations

import builtins


class CclError(RuntimeError):
    """Base class of every error libccl reports."""

    result: int = -1
    result_name: str = "CCL_ERR_?"

    def __init__(self, message: str, result: int | None = None):
        super().__init__(message)
        if result is not None:
            self.result = result
        self.message = message


class InvalidArgumentError(CclError, ValueError):
    result, result_name = 1, "CCL_ERR_INVALID_ARGUMENT"


class InvalidUsageError(CclError):
    result, result_name = 2, "CCL_ERR_INVALID_USAGE"


class CompileError(CclError):
    """The algorithm does not parse, expand or prove; ``str(e)`` holds the compiler's
    ``file:line:col: error:`` diagnostics with carets."""

    result, result_name = 3, "CCL_ERR_COMPILE"


class NoAlgorithmError(CclError):
    result, result_name = 4, "CCL_ERR_NO_ALGORITHM"


class UnsupportedError(CclError):
    result, result_name = 5, "CCL_ERR_UNSUPPORTED"


class NotSymmetricError(CclError):
    result, result_name = 6, "CCL_ERR_NOT_SYMMETRIC"


class OutOfMemoryError(CclError, MemoryError):
    result, result_name = 7, "CCL_ERR_OUT_OF_MEMORY"


class TimeoutError(CclError, builtins.TimeoutError):
    """A wait exceeded the communicator's timeout (a peer is dead, slow, or the plan is
    wrong); the message names rank, thread block, statement and peer."""

    result, result_name = 8, "CCL_ERR_TIMEOUT"


class PeerFailedError(CclError):
    result, result_name = 9, "CCL_ERR_PEER_FAILED"


class CudaError(CclError):
    result, result_name = 10, "CCL_ERR_CUDA"


class NvrtcError(CclError):
    result, result_name = 11, "CCL_ERR_NVRTC"


class SystemError(CclError, OSError):  # noqa: A001 - the C name; ccl.SystemError, not builtins'
    result, result_name = 12, "CCL_ERR_SYSTEM"


class InternalError(CclError):
    result, result_name = 13, "CCL_ERR_INTERNAL"


_BY_RESULT: dict[int, type[CclError]] = {
    c.result: c
    for c in (InvalidArgumentError, InvalidUsageError, CompileError, NoAlgorithmError, UnsupportedError,
              NotSymmetricError, OutOfMemoryError, TimeoutError, PeerFailedError, CudaError, NvrtcError,
              SystemError, InternalError)
}


def error_for(result: int, message: str) -> CclError:
    cls = _BY_RESULT.get(result, CclError)
    return cls(message, result)
