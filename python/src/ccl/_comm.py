"""Communicators, collectives, algorithms and symmetric memory over libccl.

Threads mode: ``ccl.init_all(n)`` gives n communicators in this process (drive each from
its own Python thread -- ctypes releases the GIL during every C call -- or issue every
rank's call with ``async_op=True`` from one thread). Process mode: ``ccl.init_rank()``
in each process of a torchrun/mpirun job (or with a store, a process group or an mpi4py
communicator); across nodes, ``ccl.init_rank(rank, nranks, unique_id=uid)`` with an id
from ``ccl.get_unique_id()`` (libccl's TCP bootstrap).
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import sys
import threading
import warnings
import weakref
from ctypes import byref, c_int, c_size_t, c_void_p
from typing import Any, Callable, Iterator, Optional, Sequence, Union

from . import _lib, _library
from ._bootstrap import (Bootstrap, GroupBootstrap, JobFolderBootstrap, MPIBootstrap, StoreBootstrap,
                         launcher_env)
from ._buffers import Buf, array_info, as_buf
from ._errors import CclError, CompileError, InvalidArgumentError, InvalidUsageError, error_for
from ._mpistyle import MpiStyle, exclusive
from ._types import INT_MAX, INT_MIN, SIZE_MAX, DType, DTypeLike, Op, OpLike, int_arg, to_dtype, to_op
from ._uniqueid import UniqueId

DEVICE_AUTO = -1
SPLIT_NOCOLOR = -1   # CCL_SPLIT_NOCOLOR: Communicator.split's color for a rank that joins none
# CCL_DEFAULT_TIMEOUT_MS: the bound on every wait when neither timeout_ms nor
# $CCL_TIMEOUT_MS says otherwise; the package's bootstraps wait as long.
DEFAULT_TIMEOUT_MS = 600000
_BACKENDS = {"auto": 0, "cpu": 1, "gpu": 2, "cuda": 2}
_BACKEND_NAMES = {0: "auto", 1: "cpu", 2: "gpu"}


def _raise(r: int, handle: Optional[int]) -> None:
    L = _lib.lib()
    msg = L.ccl_comm_last_error(handle)
    text = msg.decode(errors="replace") if msg else ""
    if not text:
        text = L.ccl_result_string(r).decode()
    raise error_for(r, text)


def _config(backend: Union[str, int, None], timeout_ms: Optional[int], heap_bytes: Optional[int],
            cache_dir: Optional[str]) -> _lib.ccl_config_t:
    cfg = _lib.ccl_config_t()
    if backend is not None:
        if isinstance(backend, str):
            if backend.lower() not in _BACKENDS:
                raise ValueError(f"backend '{backend}': expected 'cpu', 'gpu' or 'auto'")
            cfg.backend = _BACKENDS[backend.lower()]
        else:
            cfg.backend = int_arg("config", "backend", backend, 0, 2, "0 auto, 1 cpu, 2 gpu")
    cfg.timeout_ms = int_arg("config", "timeout_ms", timeout_ms or 0, 0, INT_MAX, "milliseconds")
    cfg.heap_bytes = int_arg("config", "heap_bytes", heap_bytes or 0, 0, SIZE_MAX, "bytes")
    cfg.cache_dir = os.fsencode(cache_dir) if cache_dir else None
    return cfg


def _optional(name: str) -> Any:
    """A C function that an older libccl may lack: raises, naming it, where it does."""
    f = getattr(_lib.lib(), name, None)
    if f is None:
        raise CclError(f"this libccl ({_lib.library_path()}) has no {name} (too old): rebuild it")
    return f


def _timeout_s(timeout_ms: Optional[int]) -> float:
    """The package's bootstrap waits, in seconds: timeout_ms, else $CCL_TIMEOUT_MS, else the
    library's default (10 minutes), as the communicator's own waits."""
    env = os.environ.get("CCL_TIMEOUT_MS", "")
    try:
        env_ms = max(int(env), 0) if env else 0
    except ValueError:
        env_ms = 0  # libccl names the bad value when it makes the communicator
    return (timeout_ms or env_ms or DEFAULT_TIMEOUT_MS) / 1000.0


def _torch_stream_getter() -> Callable[[int], int]:
    """torch's current CUDA stream of this thread on a device, as an int handle: the raw
    getter torch's own generated code uses (no torch.cuda.Stream built per call), else
    the public API."""
    import torch

    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return raw
    return lambda device: torch.cuda.current_stream(device).cuda_stream


_current_raw_stream: Optional[Callable[[int], int]] = None


def _current_stream(device: int) -> Optional[int]:
    """The handle of torch's current stream on CUDA device ``device`` (None: the legacy
    default stream)."""
    global _current_raw_stream
    f = _current_raw_stream
    if f is None:
        f = _current_raw_stream = _torch_stream_getter()
    return f(device) or None


def _stream_handle(stream: Any, send: Buf, recv: Buf) -> Optional[int]:
    """The CUstream to enqueue on: the given one, else torch's current stream on the device
    of the first CUDA torch tensor of (send, recv), else NULL."""
    if stream is None:
        for b in (send, recv):
            if b.torch_tensor is not None and b.cuda:
                return _current_stream(b.device)
        return None
    return _given_stream(stream)


def _given_stream(stream: Any) -> Optional[int]:
    if isinstance(stream, int):
        return stream or None
    for attr in ("cuda_stream", "ptr", "handle"):  # torch.cuda.Stream, CuPy, others
        v = getattr(stream, attr, None)
        if isinstance(v, int):
            return v or None
    if isinstance(stream, c_void_p):
        return stream.value
    raise TypeError(f"stream: {type(stream).__name__} is not a CUDA stream (an int handle, a torch.cuda.Stream, "
                    "or an object with .cuda_stream or .ptr)")


class _P2pCall:
    """One held send or recv: what it needs to be issued, and what it keeps alive."""

    def __init__(self, comm: "Communicator", kind: str, buf: Buf, peer: int, stream: Optional[int], obj: Any):
        self.comm, self.kind, self.buf, self.peer, self.stream, self.obj = comm, kind, buf, peer, stream, obj

    def issue(self) -> int:
        L = _lib.lib()
        fn = L.ccl_send if self.kind == "send" else L.ccl_recv
        return fn(self.buf.ptr or None, self.buf.numel, int(self.buf.dtype), self.peer, self.comm.handle, self.stream)


class _OpenGroup(threading.local):
    """The calling thread's open :func:`group`: its held calls (None: no group is open)."""

    calls: Optional[list] = None


_open_group = _OpenGroup()


@contextlib.contextmanager
def group(*, async_op: bool = False) -> Iterator[None]:
    """NCCL's ncclGroupStart/ncclGroupEnd as a ``with`` block: the ``send`` and ``recv``
    calls made inside it (on any communicator, from this thread) are launched together
    when the block ends, all progressing at once, so any exchange pattern completes (a
    ring, an all-to-all). Nested blocks join the outermost. If the block raises, nothing
    of it is launched. Unless ``async_op``, the CPU backend's communicators of the group
    are synchronized at the end (their errors raised), as a single call is."""
    if _open_group.calls is not None:
        yield
        return
    _open_group.calls = []
    try:
        yield
        calls = _open_group.calls
    finally:
        _open_group.calls = None
    L = _lib.lib()
    comms = list(dict.fromkeys(c.comm for c in calls))
    held: list = []
    try:
        for comm in comms:  # every comm of the group, held for its launch (Communicator._enter)
            comm._enter("group")
            held.append(comm)
        L.ccl_group_start()
        for c in calls:
            r = c.issue()
            if r:
                L.ccl_group_end()  # launches nothing: one of its calls failed
                _raise(r, c.comm.handle)
        r = L.ccl_group_end()
    finally:
        for comm in held:
            comm._busy.release()
    if r:
        _raise(r, None)
    if not async_op:
        for comm in comms:
            if comm.backend == "cpu":
                comm.synchronize()


# What Communicator._quick returns when the general road must decide.
_MISS: Any = object()


class Work:
    """What ``async_op=True`` returns: ``wait()`` waits for the communicator's enqueued work
    (CPU backend) and raises its first asynchronous error. On the GPU backend the work is
    ordered on its stream; ``wait()`` then synchronizes the communicator too."""

    def __init__(self, comm: "Communicator", result: Any):
        self.comm, self.result = comm, result

    def wait(self) -> Any:
        self.comm.synchronize()
        return self.result


def _empty_like(obj: Any, shape: tuple[int, ...]) -> Any:
    """A new buffer of obj's kind (torch tensor or numpy array) with obj's dtype and device."""
    t = sys.modules.get("torch")
    if t is not None and isinstance(obj, t.Tensor):
        return t.empty(shape, dtype=obj.dtype, device=obj.device)
    np = sys.modules.get("numpy")
    if np is not None and isinstance(obj, np.ndarray):
        return np.empty(shape, dtype=obj.dtype)
    raise TypeError("give the output buffer (only torch tensors and numpy arrays can be allocated for you)")


def _shape(obj: Any) -> tuple[int, ...]:
    shape = getattr(obj, "shape", None)
    if shape is None:
        raise TypeError(f"give the output buffer (only torch tensors and numpy arrays can be allocated for you, "
                        f"not {type(obj).__name__})")
    return tuple(shape)


class Algorithm:
    """A loaded CCL program (``comm.load``). ``alg(...)`` / ``alg.run(...)`` take the same
    arguments as the communicator's method for its collective (``all_reduce`` for an
    allreduce program, ...) and run this program."""

    _METHODS = {"allreduce": "all_reduce", "allgather": "all_gather", "reduce_scatter": "reduce_scatter",
                "alltoall": "all_to_all", "broadcast": "broadcast", "reduce": "reduce"}

    def __init__(self, comm: "Communicator", handle: int, root: int):
        self.comm, self._handle, self.root = comm, handle, root
        L = _lib.lib()
        self.name: str = L.ccl_algorithm_name(handle).decode()
        self.collective: str = L.ccl_algorithm_collective(handle).decode()

    def run(self, *args: Any, **kwargs: Any) -> Any:
        if self.collective not in self._METHODS:  # allgatherv, alltoallv: C only so far
            raise NotImplementedError(f"{self.name} is an {self.collective} program, which Python cannot run yet "
                                      "(from C: ccl_algorithm_run_v)")
        method = getattr(self.comm, self._METHODS[self.collective])
        if self.collective in ("broadcast", "reduce"):
            kwargs.setdefault("root", self.root)
        return method(*args, algorithm=self, **kwargs)

    __call__ = run

    @property
    def handle(self) -> int:
        if not self._handle:
            raise InvalidArgumentError(f"algorithm '{self.name}' was freed")
        if not self.comm._handle:  # its destroy freed it
            raise InvalidArgumentError(f"algorithm '{self.name}': rank {self.comm.rank}'s communicator was "
                                       "destroyed, and the algorithm with it")
        return self._handle

    def free(self) -> None:
        """Frees it (every rank, in the same order); the communicator's destroy frees the rest."""
        if self._handle and self.comm._handle:
            r = _lib.lib().ccl_algorithm_free(self._handle)
            self._handle = 0
            if r:
                _raise(r, self.comm._handle)
        self._handle = 0

    def __repr__(self) -> str:
        return f"<ccl.Algorithm {self.name}: {self.collective} on rank {self.comm.rank}/{self.comm.size}>"


class Proof(str):
    """What ``ccl.check`` proved: the text of ``cclc check --explain``."""


class Communicator(MpiStyle):
    """One rank of a communicator. Collectives follow NCCL's semantics and
    torch.distributed's argument order; each also takes NCCL-style keywords
    (``sendbuf=, recvbuf=, count=, datatype=, op=, stream=``) with raw pointers. The
    capitalized methods (``Allreduce(sendbuf, recvbuf, op)``, ...) are mpi4py's, in its
    argument order (ccl/_mpistyle.py).

    On the CPU backend a collective returns when its result is in place (unless
    ``async_op=True``: then it returns a :class:`Work`). On the GPU backend it is enqueued
    on ``stream`` (default: torch's current stream for CUDA tensors) and returns at once,
    as NCCL's do.
    """

    def __init__(self, handle: int, group: Optional[list] = None):
        self._handle = handle
        L = _lib.lib()
        v = c_int()
        if L.ccl_comm_rank(handle, byref(v)):
            _raise(1, None)
        self.rank: int = v.value
        L.ccl_comm_size(handle, byref(v))
        self.size: int = v.value
        L.ccl_comm_backend(handle, byref(v))
        self.backend: str = _BACKEND_NAMES.get(v.value, "?")
        self._group = group  # threads mode: the comms created together (destroy order)
        # One thread at a time in a call (libccl's rule): a second thread's call raises.
        # Reentrant: a call may call another (the mpi4py methods do).
        self._busy = threading.RLock()
        self._busy_thread = ""
        # Arrays from empty() still alive, and the handle a destroy left to the last of
        # them (their memory is the communicator's heap); both under _mem_lock.
        self._mem_lock = threading.Lock()
        self._live = 0
        self._pending = 0
        self._sync_each = self.backend == "cpu"  # CPU backend: a call returns when its result is in place
        self._L = L

    # ---- lifetime ----

    @property
    def handle(self) -> int:
        """The ccl_comm_t* as an int (for C code and the torch custom ops)."""
        if not self._handle:
            raise InvalidArgumentError(f"rank {self.rank}'s communicator was destroyed (destroy() or close()); "
                                       "make a new one")
        return self._handle

    def _enter(self, fn: str) -> None:
        """Takes the communicator for a call of this thread, or raises when another thread
        is in a call on it (libccl's rule: one host thread at a time; two at once would
        interleave their calls differently on different ranks)."""
        if not self._busy.acquire(False):
            raise InvalidUsageError(f"{fn}: rank {self.rank}'s communicator is in a call from thread "
                                    f"'{self._busy_thread}'; a communicator is used by one thread at a time "
                                    "(give each thread its own communicator, or wait for that call)")
        self._busy_thread = threading.current_thread().name

    def destroy(self) -> None:
        """Waits for its work, then frees it with its algorithms; every later call raises.
        Arrays from :meth:`empty` stay valid: while any of them is alive the communicator's
        memory is kept (it is freed with the last of them), as a numpy view keeps its base."""
        if not self._handle:
            return
        self._enter("destroy")
        try:
            with self._mem_lock:
                h, self._handle = self._handle, 0
                keep = self._live > 0
                if keep:
                    self._pending = h
            if not h:
                return
            _registry.pop(h, None)
            if keep:
                # Its work done now, as a destroy's; the handle is freed by the last array.
                self._L.ccl_comm_synchronize(h)
                return
            r = self._L.ccl_comm_destroy(h)
            if r:
                _raise(r, None)
        finally:
            self._busy.release()

    def _adopt(self, holder: Any, ptr: int) -> Any:
        """Frees ptr (a ccl_mem_alloc buffer) when holder is collected; counts it as live
        until then. Returns the finalizer."""
        with self._mem_lock:
            self._live += 1
        return weakref.finalize(holder, _mem_free, self, ptr)

    close = destroy

    def __enter__(self) -> "Communicator":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.destroy()

    def __del__(self) -> None:
        try:
            if self._handle and not sys.is_finalizing():
                self.destroy()
        except Exception:  # noqa: BLE001 - nothing to report to from a finalizer
            pass

    def __repr__(self) -> str:
        state = "" if self._handle else " (destroyed)"
        return f"<ccl.Communicator rank {self.rank} of {self.size}, {self.backend}{state}>"

    @exclusive
    def synchronize(self) -> None:
        """Waits for everything enqueued on this communicator; raises its first
        asynchronous error (a timeout naming rank, block, statement and peer, ...)."""
        r = _lib.lib().ccl_comm_synchronize(self.handle)
        if r:
            _raise(r, self._handle)

    @exclusive
    def barrier(self, stream: Any = None, *, async_op: bool = False) -> Any:
        """``ccl_barrier``: every rank calls it, in the same place of its sequence of calls,
        as a collective. On the CPU backend it returns once every rank has reached it
        (``async_op=True``: a :class:`Work` whose ``wait()`` does), as
        ``torch.distributed.barrier`` and MPI's Barrier. On the GPU backend it is enqueued
        on ``stream`` (default: NULL, CUDA's legacy default stream) like a collective and
        returns at once: what is enqueued after it runs after every rank's work before it
        started, and :meth:`synchronize` after it returns once every rank is there."""
        fn = _optional("ccl_barrier")
        h = self.handle
        r = fn(h, _given_stream(stream) if stream is not None else None)
        return self._v_done(r, stream, async_op, None)

    @exclusive
    def split(self, color: Optional[int], key: Optional[int] = None, *, timeout_ms: Optional[int] = None,
              heap_bytes: Optional[int] = None, cache_dir: Optional[str] = None) -> "Optional[Communicator]":
        """``ccl_comm_split`` (NCCL's ncclCommSplit; what ``torch.distributed.new_group`` and
        ``split_group`` make): every rank of this communicator calls it, collectively and
        blocking like an init. The ranks that pass the same ``color`` (an int >= 0) get a
        new :class:`Communicator` of their own, ranked by ``key`` (default: this rank, so
        the order stays; ties broken by rank here). ``color=None`` (or
        ``ccl.SPLIT_NOCOLOR``) joins none and returns None. The new communicator has this
        one's settings (backend, timeout, cache folder, heap size), unless ``timeout_ms``,
        ``heap_bytes`` or ``cache_dir`` is given: then it has those, and the library's
        defaults for the ones not given. It is independent of this one (its own heap) and
        may outlive it.

        Threads mode (:func:`init_all`): call it from one thread per rank, or split every
        rank at once from one thread with :func:`split_all`."""
        if _open_group.calls is not None:
            raise InvalidUsageError("split: inside ccl.group(), which holds sends and recvs only: call split from "
                                    "one thread per rank, or ccl.split_all(comms, colors) from one thread")
        col, k, cfg = self._split_args("split", color, key, timeout_ms, heap_bytes, cache_dir)
        out = c_void_p()
        r = _optional("ccl_comm_split")(self.handle, col, k, byref(out), byref(cfg) if cfg is not None else None)
        if r:
            _raise(r, self._handle)
        return _register(Communicator(out.value)) if out.value else None

    def _split_args(self, fn: str, color: Optional[int], key: Optional[int], timeout_ms: Optional[int],
                    heap_bytes: Optional[int], cache_dir: Optional[str]) -> tuple:
        """(color, key, config or None) for ccl_comm_split, checked to fit a C int."""
        col = SPLIT_NOCOLOR if color is None else int_arg(fn, "color", color, INT_MIN, INT_MAX,
                                                          "a color >= 0, or None / ccl.SPLIT_NOCOLOR")
        if col < 0 and col != SPLIT_NOCOLOR:
            raise InvalidArgumentError(f"{fn}: color is {col} (a color is >= 0, or None / ccl.SPLIT_NOCOLOR for a "
                                       "rank that joins no new communicator)")
        k = self.rank if key is None else int_arg(fn, "key", key, INT_MIN, INT_MAX, "a C int")
        cfg = None
        if timeout_ms is not None or heap_bytes is not None or cache_dir is not None:
            cfg = _config(_BACKENDS[self.backend] if self.backend in _BACKENDS else None, timeout_ms, heap_bytes,
                          cache_dir)
        return col, k, cfg

    def _host_only(self, fn: str, *bufs: tuple[Buf, str]) -> None:
        """On the CPU backend every buffer must be host memory: a device pointer read from
        the host is a crash or garbage."""
        if self.backend != "cpu":
            return
        for b, what in bufs:
            if b.cuda:
                dev = f" (CUDA device {b.device})" if b.device >= 0 else ""
                raise InvalidArgumentError(f"{fn}: {what} is GPU memory{dev}, but rank {self.rank}'s communicator "
                                           "runs the CPU backend: pass host memory (tensor.cpu()) or make the "
                                           "communicator with backend='gpu'")

    def _rank_arg(self, fn: str, name: str, value: Any) -> int:
        """value checked as a rank of this communicator (a root, a peer)."""
        return int_arg(fn, name, value, 0, self.size - 1, f"a rank of this communicator of {self.size}")

    def last_error(self) -> str:
        m = _lib.lib().ccl_comm_last_error(self._handle or None)
        return m.decode(errors="replace") if m else ""

    # ---- the collectives ----

    def _go(self, kind: str, send: Buf, recv: Buf, count: int, dtype: DType, op: Op, root: int, stream: Any,
            async_op: bool, algorithm: Optional[Algorithm], result: Any) -> Any:
        L = _lib.lib()
        h = self.handle
        s = _stream_handle(stream, send, recv)
        sp, rp = send.ptr or None, recv.ptr or None
        if algorithm is not None:
            if algorithm.comm is not self:
                raise InvalidArgumentError(f"algorithm '{algorithm.name}' was loaded on another communicator")
            if Algorithm._METHODS[algorithm.collective] != kind:
                raise InvalidArgumentError(f"algorithm '{algorithm.name}' is a {algorithm.collective}, not a {kind}")
            r = L.ccl_algorithm_run(algorithm.handle, sp, rp, count, dtype, op, s)
        elif kind == "all_reduce":
            r = L.ccl_all_reduce(sp, rp, count, dtype, op, h, s)
        elif kind == "all_gather":
            r = L.ccl_all_gather(sp, rp, count, dtype, h, s)
        elif kind == "reduce_scatter":
            r = L.ccl_reduce_scatter(sp, rp, count, dtype, op, h, s)
        elif kind == "all_to_all":
            r = L.ccl_all_to_all(sp, rp, count, dtype, h, s)
        elif kind == "broadcast":
            r = L.ccl_broadcast(sp, rp, count, dtype, root, h, s)
        else:
            r = L.ccl_reduce(sp, rp, count, dtype, op, root, h, s)
        if r:
            _raise(r, h)
        if async_op:
            return Work(self, result)
        if self.backend == "cpu":
            r = L.ccl_comm_synchronize(h)
            if r:
                _raise(r, h)
        return result

    def _quick(self, fn: Any, send_obj: Any, recv_obj: Any, send_per: int, recv_per: int, extra: tuple,
               stream: Any, async_op: bool) -> Any:
        """The per-call fast road for arrays (``array_info``) with nothing given but the
        buffers, the op or root, the stream and async_op: ``fn(send, recv, count, dtype,
        *extra, comm, stream)``. Returns _MISS, having called nothing, where the general
        road (``_resolve``, ``_go``) must decide: other objects, dtypes that differ, sizes
        that do not fit (it then raises with its message), a destroyed communicator."""
        s = array_info(send_obj)
        if s is None:
            return _MISS
        r = s if recv_obj is send_obj else array_info(recv_obj)
        if r is None or r[2] is not s[2]:
            return _MISS
        n = s[1] // send_per
        h = self._handle
        if n * send_per != s[1] or r[1] < n * recv_per or not h:
            return _MISS
        if stream is None:
            dev = s[3] if s[3] >= 0 else r[3]
            if dev >= 0 and self._sync_each:  # device memory on the CPU backend: as_buf's road says so
                return _MISS
            st = _current_stream(dev) if dev >= 0 else None
        else:
            if (s[3] >= 0 or r[3] >= 0) and self._sync_each:
                return _MISS
            st = _given_stream(stream)
        e = fn(s[0], r[0], n, s[2], *extra, h, st)
        if e:
            _raise(e, h)
        if async_op:
            return Work(self, recv_obj)
        if self._sync_each:
            e = self._L.ccl_comm_synchronize(h)
            if e:
                _raise(e, h)
        return recv_obj

    def _resolve(self, kind: str, send_obj: Any, recv_obj: Any, count: Optional[int], datatype: Optional[DTypeLike],
                 send_per: int, recv_per: int, method: Optional[str] = None,
                 recv_writes: bool = True) -> tuple[Buf, Buf, int, DType]:
        """Buffers, count and dtype for a collective whose send buffer holds send_per * count
        elements and whose receive buffer holds recv_per * count. Messages name ``method``
        (the caller's name for the call), by default ``kind``. ``recv_writes``: the call
        writes the receive buffer (all but the root's in-place broadcast)."""
        kind = method or kind
        recv = as_buf(recv_obj, "recvbuf", writes=recv_writes)
        send = recv if send_obj is recv_obj else as_buf(send_obj, "sendbuf")
        dtype = to_dtype(datatype) if datatype is not None else (send.dtype if send.dtype is not None else recv.dtype)
        if dtype is None:
            raise InvalidArgumentError(f"{kind}: datatype= is needed with raw pointers")
        for b, name in ((send, "sendbuf"), (recv, "recvbuf")):
            if b.dtype is not None and b.dtype != dtype and b.numel > 0:
                raise InvalidArgumentError(f"{kind}: {name} holds {b.dtype.name.lower()}, not "
                                           f"{dtype.name.lower()}")
        if count is None:
            if send.numel >= 0 and send_obj is not None:
                if send.numel % send_per:
                    raise InvalidArgumentError(f"{kind}: sendbuf's {send.numel} elements are not a multiple of "
                                               f"{send_per} (the rank count)")
                count = send.numel // send_per
            elif recv.numel >= 0:
                if recv.numel % recv_per:
                    raise InvalidArgumentError(f"{kind}: recvbuf's {recv.numel} elements are not a multiple of "
                                               f"{recv_per} (the rank count)")
                count = recv.numel // recv_per
            else:
                raise InvalidArgumentError(f"{kind}: count= is needed with raw pointers")
        count = int_arg(kind, "count", count, 0, SIZE_MAX, "elements")
        for b, per, name in ((send, send_per, "sendbuf"), (recv, recv_per, "recvbuf")):
            if b.numel >= 0 and b.ptr and b.numel < per * count:
                raise InvalidArgumentError(f"{kind}: {name} has {b.numel} elements, fewer than the {per * count} "
                                           f"it needs (count {count})")
        self._host_only(kind, (recv, "recvbuf"), (send, "sendbuf"))
        return send, recv, count, dtype

    @exclusive
    def all_reduce(self, tensor: Any = None, op: OpLike = "sum", *, out: Any = None, sendbuf: Any = None,
                   recvbuf: Any = None, count: Optional[int] = None, datatype: Optional[DTypeLike] = None,
                   stream: Any = None, async_op: bool = False, algorithm: Optional[Algorithm] = None) -> Any:
        """Reduces ``tensor`` over all ranks: in place, or into ``out``. Returns the result
        buffer (a :class:`Work` with ``async_op=True``)."""
        if sendbuf is None and recvbuf is None and count is None and datatype is None and algorithm is None:
            res = self._quick(self._L.ccl_all_reduce, tensor, tensor if out is None else out, 1, 1, (to_op(op),),
                              stream, async_op)
            if res is not _MISS:
                return res
        send_obj = sendbuf if sendbuf is not None else tensor
        recv_obj = recvbuf if recvbuf is not None else (out if out is not None else send_obj)
        send, recv, n, dt = self._resolve("all_reduce", send_obj, recv_obj, count, datatype, 1, 1)
        return self._go("all_reduce", send, recv, n, dt, to_op(op), 0, stream, async_op, algorithm, recv_obj)

    @exclusive
    def all_gather(self, output: Any = None, input: Any = None, *, sendbuf: Any = None, recvbuf: Any = None,
                   count: Optional[int] = None, datatype: Optional[DTypeLike] = None, stream: Any = None,
                   async_op: bool = False, algorithm: Optional[Algorithm] = None) -> Any:
        """Gathers every rank's ``input`` into ``output`` (rank order along the first
        dimension, as ``torch.distributed.all_gather_into_tensor``). ``output=None``
        allocates it; ``input=None`` is in place: this rank's part of ``output``."""
        N = self.size
        if (output is not None and input is not None and sendbuf is None and recvbuf is None and count is None
                and datatype is None and algorithm is None):
            res = self._quick(self._L.ccl_all_gather, input, output, 1, N, (), stream, async_op)
            if res is not _MISS:
                return res
        send_obj = sendbuf if sendbuf is not None else input
        recv_obj = recvbuf if recvbuf is not None else output
        if recv_obj is None:
            if send_obj is None:
                raise InvalidArgumentError("all_gather: give output, input or both")
            shp = _shape(send_obj)
            recv_obj = _empty_like(send_obj, ((shp[0] * N,) + shp[1:]) if shp else (N,))
        if send_obj is None:  # in place: NCCL's sendbuf = recvbuf + rank * count
            r = as_buf(recv_obj, "recvbuf", writes=True)
            dt = to_dtype(datatype) if datatype is not None else r.dtype
            if count is None:
                if r.numel < 0:
                    raise InvalidArgumentError("all_gather: count= is needed with raw pointers")
                count = r.numel // N
            assert dt is not None
            count = int_arg("all_gather", "count", count, 0, SIZE_MAX, "elements")
            send_obj = r.ptr + self.rank * count * dt.itemsize
            send, recv, n, dt = self._resolve("all_gather", send_obj, recv_obj, count, dt, 1, N)
        else:
            send, recv, n, dt = self._resolve("all_gather", send_obj, recv_obj, count, datatype, 1, N)
        return self._go("all_gather", send, recv, n, dt, Op.SUM, 0, stream, async_op, algorithm, recv_obj)

    @exclusive
    def reduce_scatter(self, output: Any = None, input: Any = None, op: OpLike = "sum", *, sendbuf: Any = None,
                       recvbuf: Any = None, count: Optional[int] = None, datatype: Optional[DTypeLike] = None,
                       stream: Any = None, async_op: bool = False, algorithm: Optional[Algorithm] = None) -> Any:
        """Reduces ``input`` (N * count elements) over all ranks; rank r gets part r in
        ``output`` (count elements; ``None`` allocates it). As
        ``torch.distributed.reduce_scatter_tensor``; in place when ``output`` is this
        rank's part of ``input``."""
        N = self.size
        if (output is not None and sendbuf is None and recvbuf is None and count is None and datatype is None
                and algorithm is None):
            res = self._quick(self._L.ccl_reduce_scatter, input, output, N, 1, (to_op(op),), stream, async_op)
            if res is not _MISS:
                return res
        send_obj = sendbuf if sendbuf is not None else input
        recv_obj = recvbuf if recvbuf is not None else output
        if send_obj is None:
            raise InvalidArgumentError("reduce_scatter: input (sendbuf) is needed")
        if recv_obj is None:
            shp = _shape(send_obj)
            if not shp or shp[0] % N:
                raise InvalidArgumentError(f"reduce_scatter: input's first dimension {shp[:1]} is not a multiple "
                                           f"of {N}")
            recv_obj = _empty_like(send_obj, (shp[0] // N,) + shp[1:])
        send, recv, n, dt = self._resolve("reduce_scatter", send_obj, recv_obj, count, datatype, N, 1)
        return self._go("reduce_scatter", send, recv, n, dt, to_op(op), 0, stream, async_op, algorithm, recv_obj)

    @exclusive
    def all_to_all(self, output: Any = None, input: Any = None, *, sendbuf: Any = None, recvbuf: Any = None,
                   count: Optional[int] = None, datatype: Optional[DTypeLike] = None, stream: Any = None,
                   async_op: bool = False, algorithm: Optional[Algorithm] = None) -> Any:
        """Part p of ``input`` (N equal parts) goes to rank p, which stores it as part r of
        its ``output`` (``None`` allocates it); as ``torch.distributed.all_to_all_single``."""
        N = self.size
        if (output is not None and sendbuf is None and recvbuf is None and count is None and datatype is None
                and algorithm is None):
            res = self._quick(self._L.ccl_all_to_all, input, output, N, N, (), stream, async_op)
            if res is not _MISS:
                return res
        send_obj = sendbuf if sendbuf is not None else input
        recv_obj = recvbuf if recvbuf is not None else output
        if send_obj is None:
            raise InvalidArgumentError("all_to_all: input (sendbuf) is needed")
        if recv_obj is None:
            recv_obj = _empty_like(send_obj, _shape(send_obj))
        send, recv, n, dt = self._resolve("all_to_all", send_obj, recv_obj, count, datatype, N, N)
        return self._go("all_to_all", send, recv, n, dt, Op.SUM, 0, stream, async_op, algorithm, recv_obj)

    def _v_args(self, name: str, output: Any, input: Any, sendcounts: Sequence[int], recvcounts: Sequence[int],
                sdispls: Optional[Sequence[int]], rdispls: Optional[Sequence[int]],
                datatype: Optional[DTypeLike] = None) -> tuple:
        """Checks a v-collective's buffers and tables against each other (this rank's view;
        the library checks them across ranks) and returns (send, recv, dtype, the four
        size_t arrays or None)."""
        send, recv = as_buf(input, "input"), as_buf(output, "output", writes=True)
        self._host_only(name, (send, "input"), (recv, "output"))
        dt = to_dtype(datatype) if datatype is not None else None
        if dt is not None:
            for b, what in ((send, "input"), (recv, "output")):
                if b.dtype is not None and b.dtype != dt:
                    raise InvalidArgumentError(f"{name}: {what} holds {b.dtype.name.lower()}, not "
                                               f"{dt.name.lower()}")
            send.dtype = send.dtype or dt
            recv.dtype = recv.dtype or dt
        if send.dtype is None or recv.dtype is None or send.dtype != recv.dtype:
            raise InvalidArgumentError(f"{name}: input and output need one dtype, not {send.dtype} and {recv.dtype}")

        def ints(what: str, vals: Optional[Sequence[int]], n: int) -> Optional[list[int]]:
            if vals is None:
                return None
            if len(vals) != n:
                raise InvalidArgumentError(f"{name}: {what} must have {n} entries, got {len(vals)}")
            return [int_arg(name, f"{what}[{i}]", v, 0, SIZE_MAX, "elements") for i, v in enumerate(vals)]

        sendcounts, recvcounts = ints("sendcounts", sendcounts, len(sendcounts)), ints("recvcounts", recvcounts,
                                                                                        self.size)
        sdispls, rdispls = ints("sdispls", sdispls, len(sendcounts or ())), ints("rdispls", rdispls, self.size)

        def table(vals: Optional[list[int]]) -> Any:
            return None if vals is None else (c_size_t * len(vals))(*vals)

        def extent(counts: Sequence[int], displs: Optional[Sequence[int]]) -> int:
            if displs is None:
                return sum(counts)
            return max((d + c for c, d in zip(counts, displs)), default=0)

        for what, buf, counts, displs in (("input", send, sendcounts, sdispls), ("output", recv, recvcounts, rdispls)):
            assert counts is not None
            need = extent(counts, displs)
            if buf.numel >= 0 and buf.numel < need:
                raise InvalidArgumentError(f"{name}: {what} has {buf.numel} elements, its counts and displacements "
                                           f"reach element {need}")
        return (send, recv, send.dtype, table(sendcounts), table(sdispls), table(recvcounts), table(rdispls))

    def _v_done(self, r: int, stream: Any, async_op: bool, result: Any) -> Any:
        if r:
            _raise(r, self.handle)
        if async_op:
            return Work(self, result)
        if self.backend == "cpu":
            r = _lib.lib().ccl_comm_synchronize(self.handle)
            if r:
                _raise(r, self.handle)
        return result

    @exclusive
    def all_gather_v(self, output: Any, input: Any, recvcounts: Sequence[int], displs: Optional[Sequence[int]] = None,
                     *, datatype: Optional[DTypeLike] = None, stream: Any = None, async_op: bool = False,
                     method: str = "all_gather_v") -> Any:
        """MPI's Allgatherv: rank p's ``input`` (``recvcounts[p]`` elements, so this rank's
        holds ``recvcounts[rank]``) lands in every rank's ``output`` at element
        ``displs[p]`` (packed in rank order when ``displs`` is None). Every rank passes the
        same ``recvcounts``; a rank that disagrees makes every rank raise, naming both (on
        the GPU backend at the next synchronize, like any failure there)."""
        N = self.size
        if len(recvcounts) != N:
            raise InvalidArgumentError(f"{method}: recvcounts must have {N} entries, got {len(recvcounts)}")
        mine = int_arg(method, f"recvcounts[{self.rank}]", recvcounts[self.rank], 0, SIZE_MAX, "elements")
        send, recv, dt, _, _, rc, rd = self._v_args(method, output, input, [mine], recvcounts, None, displs, datatype)
        s = _stream_handle(stream, send, recv)
        r = _lib.lib().ccl_all_gather_v(send.ptr or None, mine, recv.ptr or None, rc, rd, dt, self.handle, s)
        return self._v_done(r, stream, async_op, output)

    @exclusive
    def all_to_all_v(self, output: Any, input: Any, sendcounts: Sequence[int], recvcounts: Sequence[int],
                     sdispls: Optional[Sequence[int]] = None, rdispls: Optional[Sequence[int]] = None, *,
                     datatype: Optional[DTypeLike] = None, stream: Any = None, async_op: bool = False,
                     method: str = "all_to_all_v") -> Any:
        """MPI's Alltoallv: ``sendcounts[p]`` elements of ``input`` from ``sdispls[p]`` go to
        rank p, which stores them in its ``output`` at ``rdispls[r]`` (``recvcounts[r]``
        elements); displacements None mean packed in rank order. A rank whose
        ``recvcounts[p]`` differs from rank p's ``sendcounts[r]`` makes every rank raise,
        naming both (on the GPU backend at the next synchronize, like any failure there)."""
        N = self.size
        if len(sendcounts) != N:
            raise InvalidArgumentError(f"{method}: sendcounts must have {N} entries, got {len(sendcounts)}")
        send, recv, dt, sc, sd, rc, rd = self._v_args(method, output, input, sendcounts, recvcounts,
                                                      sdispls, rdispls, datatype)
        s = _stream_handle(stream, send, recv)
        r = _lib.lib().ccl_all_to_all_v(send.ptr or None, sc, sd, recv.ptr or None, rc, rd, dt, self.handle, s)
        return self._v_done(r, stream, async_op, output)

    @exclusive
    def send(self, tensor: Any, peer: int, *, stream: Any = None, async_op: bool = False) -> Any:
        """``tensor`` to rank ``peer`` (NCCL's ncclSend): the k-th send from this rank to
        ``peer`` meets the k-th :meth:`recv` on ``peer`` from this rank, which must name the
        same count and dtype. Inside :func:`ccl.group` the call is held and launched with
        the group (returns None); outside it waits for the receiver (CPU backend) unless
        ``async_op``."""
        return self._p2p("send", tensor, peer, stream, async_op)

    @exclusive
    def recv(self, tensor: Any, peer: int, *, stream: Any = None, async_op: bool = False) -> Any:
        """Fills ``tensor`` with what rank ``peer`` sends this rank (NCCL's ncclRecv); see
        :meth:`send`. Returns ``tensor`` (None inside a group)."""
        return self._p2p("recv", tensor, peer, stream, async_op)

    def _p2p(self, kind: str, obj: Any, peer: int, stream: Any, async_op: bool, count: Optional[int] = None,
             datatype: Optional[DTypeLike] = None, method: Optional[str] = None) -> Any:
        """send or recv of ``obj`` (``count`` elements of ``datatype`` when given: the
        mpi4py methods' [buf, count, datatype])."""
        name = method or kind
        what = "buf" if method else "tensor"
        buf = as_buf(obj, what, writes=kind == "recv")
        self._host_only(name, (buf, what))
        if datatype is not None:
            dt = to_dtype(datatype)
            if buf.dtype is not None and buf.dtype != dt:
                raise InvalidArgumentError(f"{name}: {what} holds {buf.dtype.name.lower()}, not {dt.name.lower()}")
            buf.dtype = dt
        if buf.dtype is None:
            raise InvalidArgumentError(f"{name}: {what} has no dtype CCL knows (give a datatype)")
        if count is not None:
            count = int_arg(name, "count", count, 0, SIZE_MAX, "elements")
            if buf.numel >= 0 and count > buf.numel:
                raise InvalidArgumentError(f"{name}: count {count} is more than {what}'s {buf.numel} elements")
            buf.numel = count
        if buf.numel < 0:
            raise InvalidArgumentError(f"{name}: a raw pointer needs [buf, count, datatype]")
        peer = self._rank_arg(name, "dest" if method == "Send" else "source" if method else "peer", peer)
        call = _P2pCall(self, kind, buf, peer, _stream_handle(stream, buf, buf), obj)
        if _open_group.calls is not None:
            _open_group.calls.append(call)
            return None
        r = call.issue()
        return self._v_done(r, stream, async_op, obj)

    @exclusive
    def broadcast(self, tensor: Any = None, root: int = 0, *, out: Any = None, sendbuf: Any = None,
                  recvbuf: Any = None, count: Optional[int] = None, datatype: Optional[DTypeLike] = None,
                  stream: Any = None, async_op: bool = False, algorithm: Optional[Algorithm] = None) -> Any:
        """Root's ``tensor`` to every rank: in place (``tensor`` is the input on the root and
        the output elsewhere), or into ``out``."""
        if type(root) is not int or not 0 <= root < self.size:
            root = self._rank_arg("broadcast", "root", root)
        if sendbuf is None and recvbuf is None and count is None and datatype is None and algorithm is None:
            res = self._quick(self._L.ccl_broadcast, tensor, tensor if out is None else out, 1, 1, (root,),
                              stream, async_op)
            if res is not _MISS:
                return res
        send_obj = sendbuf if sendbuf is not None else tensor
        recv_obj = recvbuf if recvbuf is not None else (out if out is not None else send_obj)
        # The root's in-place broadcast reads its buffer only: it may be read-only.
        ro_ok = send_obj is recv_obj and root == self.rank
        send, recv, n, dt = self._resolve("broadcast", send_obj, recv_obj, count, datatype, 1, 1,
                                          recv_writes=not ro_ok)
        return self._go("broadcast", send, recv, n, dt, Op.SUM, root, stream, async_op, algorithm, recv_obj)

    @exclusive
    def reduce(self, tensor: Any = None, root: int = 0, op: OpLike = "sum", *, out: Any = None,
               sendbuf: Any = None, recvbuf: Any = None, count: Optional[int] = None,
               datatype: Optional[DTypeLike] = None, stream: Any = None, async_op: bool = False,
               algorithm: Optional[Algorithm] = None) -> Any:
        """Reduces ``tensor`` over all ranks into root's ``tensor`` (in place) or ``out``."""
        if type(root) is not int or not 0 <= root < self.size:
            root = self._rank_arg("reduce", "root", root)
        if sendbuf is None and recvbuf is None and count is None and datatype is None and algorithm is None:
            res = self._quick(self._L.ccl_reduce, tensor, tensor if out is None else out, 1, 1,
                              (to_op(op), root), stream, async_op)
            if res is not _MISS:
                return res
        send_obj = sendbuf if sendbuf is not None else tensor
        recv_obj = recvbuf if recvbuf is not None else (out if out is not None else send_obj)
        send, recv, n, dt = self._resolve("reduce", send_obj, recv_obj, count, datatype, 1, 1)
        return self._go("reduce", send, recv, n, dt, to_op(op), root, stream, async_op, algorithm, recv_obj)

    # ---- algorithms ----

    @exclusive
    def load(self, path_or_source: Union[str, os.PathLike], root: int = 0) -> Algorithm:
        """Compiles (and proves) a CCL program for this communicator: a file path, source
        text starting with ``algorithm``, or a shipped algorithm's name (``"allreduce/ring"``:
        :func:`ccl.algorithms` lists them). Every rank loads the same programs in the same
        order. Raises :class:`ccl.CompileError` with the compiler's located diagnostics."""
        h = self.handle
        root = self._rank_arg("load", "root", root)
        src = _library.resolve("load", os.fspath(path_or_source))
        out = c_void_p()
        r = _lib.lib().ccl_algorithm_load(h, src.encode(), root, byref(out))
        if r:
            _raise(r, self._handle)
        return Algorithm(self, out.value or 0, root)

    @exclusive
    def use(self, algorithm: Algorithm, min_bytes: int = 0, max_bytes: int = 0) -> None:
        """Makes the standard collective of the algorithm's kind run it for messages of
        [min_bytes, max_bytes] bytes (0, 0: every size); later registrations win."""
        lo = int_arg("use", "min_bytes", min_bytes, 0, SIZE_MAX, "bytes")
        hi = int_arg("use", "max_bytes", max_bytes, 0, SIZE_MAX, "bytes")
        if not isinstance(algorithm, Algorithm) or algorithm.comm is not self:
            raise InvalidArgumentError(f"use: the algorithm must be one this communicator loaded (comm.load), "
                                       f"not {algorithm!r}")
        r = _lib.lib().ccl_comm_use_algorithm(self.handle, algorithm.handle, lo, hi)
        if r:
            _raise(r, self._handle)

    @exclusive
    def explain_choice(self) -> str:
        """What the last standard collective ran (algorithm file, launch shape) and why."""
        buf = ctypes.create_string_buffer(4096)
        r = _lib.lib().ccl_comm_explain_choice(self.handle, buf, len(buf))
        if r:
            _raise(r, self._handle)
        return buf.value.decode(errors="replace")

    # ---- symmetric memory ----

    @exclusive
    def empty(self, shape: Union[int, Sequence[int]], dtype: DTypeLike = "f32", *, like: Optional[str] = None) -> Any:
        """A buffer in this rank's symmetric heap (zero-copy collectives), as an ordinary
        tensor: a torch tensor when ``dtype`` is a torch dtype, ``like='torch'`` or on the
        GPU backend; else a numpy array. Allocate (and drop) symmetric buffers in the same
        order on every rank: the memory goes back to the heap when the tensor and all its
        views are garbage-collected (``ccl_mem_free`` waits for the communicator's work).
        The array keeps the communicator's memory alive: after :meth:`destroy` it is still
        an ordinary array, and the communicator is freed with the last such array."""
        dims = list(shape) if isinstance(shape, (list, tuple)) else [shape]
        shp = tuple(int_arg("empty", f"shape[{i}]", s, 0, SIZE_MAX, "elements") for i, s in enumerate(dims))
        torch_dtype = dtype if type(dtype).__module__.startswith("torch") else None
        dt = to_dtype(dtype)
        numel = 1
        for s in shp:
            numel *= s
        int_arg("empty", "the size", numel * dt.itemsize, 0, SIZE_MAX, "bytes")
        nbytes = max(numel * dt.itemsize, 1)
        want_torch = torch_dtype is not None or like == "torch" or self.backend == "gpu"
        if want_torch:  # imported before the allocation: nothing to undo if it fails
            import torch
        else:
            import numpy as np

            np_dtype = _numpy_dtype(dt)
        ptr = c_void_p()
        r = self._L.ccl_mem_alloc(self.handle, byref(ptr), nbytes)
        if r:
            _raise(r, self._handle)
        p = ptr.value or 0
        # From here the holder's finalizer owns the buffer: an error below drops the
        # holder, which frees it.
        if self.backend == "gpu":
            holder: Any = _SymmetricCuda(p, nbytes, torch.cuda.current_device())
            self._adopt(holder, p)
            return _cuda_tensor(holder, shp, dt, torch_dtype)
        holder = (ctypes.c_uint8 * nbytes).from_address(p)
        self._adopt(holder, p)
        if want_torch:
            tdt = torch_dtype if torch_dtype is not None else _torch_dtype(dt)
            t = torch.frombuffer(holder, dtype=torch.uint8)[: numel * dt.itemsize]
            return t.view(tdt).reshape(shp)
        return np.frombuffer(holder, dtype=np.uint8)[: numel * dt.itemsize].view(np_dtype).reshape(shp)

    @exclusive
    def copy(self, dst: Any, src: Any, nbytes: Optional[int] = None) -> None:
        """``ccl_mem_copy``: bytes between host memory and this backend's memory, after the
        communicator's queued work."""
        d, s = as_buf(dst, "dst", writes=True), as_buf(src, "src")
        self._host_only("copy", (d, "dst"), (s, "src"))
        known = [(x.nbytes, what) for x, what in ((d, "dst"), (s, "src")) if x.numel >= 0]
        if nbytes is None:
            if not known:
                raise InvalidArgumentError("copy: nbytes= is needed with two raw pointers")
            n = min(k[0] for k in known)
        else:
            n = int_arg("copy", "nbytes", nbytes, 0, SIZE_MAX, "bytes")
            for size, what in known:
                if n > size:
                    raise InvalidArgumentError(f"copy: nbytes {n} is more than {what}'s {size} bytes")
        r = _lib.lib().ccl_mem_copy(self.handle, d.ptr, s.ptr, n)
        if r:
            _raise(r, self._handle)


    # ---- registered memory ----

    @exclusive
    def register(self, buf: Any, nbytes: Optional[int] = None) -> "Registration":
        """``ccl_mem_register``: makes ``buf``'s memory reachable by every peer in place, so
        that collectives on it (or on any tensor inside it) run zero-copy, as on
        :meth:`empty` tensors. Collective: every rank calls it, in the same order, with the
        same number of bytes; every rank raises alike (naming the rank at fault) when one
        cannot register. ``buf`` is a tensor or array (its bytes), or a raw pointer with
        ``nbytes``. What qualifies (docs/python.md, "Registered memory"): on GPUs, CUDA
        tensors from torch's expandable segments (``PYTORCH_CUDA_ALLOC_CONF=
        expandable_segments:True`` before CUDA starts; across processes torch 2.5 or later)
        or from :func:`ccl.torch.mem_pool`, and :meth:`empty` tensors; on the CPU backend in
        one process anything (recorded only). Other memory (torch's default caching
        allocator, host memory) raises, saying why and what to do; unregistered it still
        works, staged. Registering a range registered already (or inside one) costs no
        exchange: the same registration, one more reference.

        Returns a :class:`Registration`, a context manager that deregisters on exit; it
        keeps ``buf`` alive until then (memory must not be freed while registered)."""
        L = self._L
        if not hasattr(L, "ccl_mem_register"):
            raise InvalidUsageError("register: this libccl has no ccl_mem_register (rebuild it)")
        if isinstance(buf, int):
            if nbytes is None:
                raise InvalidArgumentError("register: a raw pointer needs nbytes=")
            ptr, keep = buf, None
        else:
            b = as_buf(buf, "buf")
            ptr, keep = b.ptr, buf
            if nbytes is None:
                nbytes = b.nbytes
            elif nbytes > b.nbytes:
                raise InvalidArgumentError(f"register: nbytes {nbytes} is more than buf's {b.nbytes} bytes")
        n = int_arg("register", "nbytes", nbytes, 0, SIZE_MAX, "bytes")
        h = c_void_p()
        r = L.ccl_mem_register(self.handle, ptr, n, byref(h))
        if r:
            _raise(r, self._handle)
        return Registration(self, h.value or 0, ptr, n, keep)

    @exclusive
    def deregister(self, reg: "Registration") -> None:
        """``ccl_mem_deregister``: drops one reference of ``reg``; the last is collective
        (every rank deregisters the same registration at the same point of its calls): it
        waits for this communicator's work and unmaps the memory on every rank. CUDA graphs
        that captured calls on it must not be replayed afterwards."""
        if not isinstance(reg, Registration) or reg._comm is not self:
            raise InvalidArgumentError(f"deregister: argument 'reg' is {type(reg).__name__}, not a Registration of "
                                       f"rank {self.rank}'s communicator")
        if reg._handle is None:
            raise InvalidUsageError("deregister: this Registration was deregistered already")
        h, reg._handle = reg._handle, None
        r = self._L.ccl_mem_deregister(self.handle, h)
        reg._keep = None
        if r:
            _raise(r, self._handle)


class Registration:
    """A registration from :meth:`Communicator.register`: ``with comm.register(t): ...``
    deregisters at the end of the block (collectively: every rank leaves its block at the
    same point), as does :meth:`deregister`. ``ptr`` and ``nbytes`` say what it covers."""

    def __init__(self, comm: Communicator, handle: int, ptr: int, nbytes: int, keep: Any):
        self._comm = comm
        self._handle: Optional[int] = handle
        self._keep = keep
        self.ptr = ptr
        self.nbytes = nbytes

    @property
    def registered(self) -> bool:
        return self._handle is not None

    def deregister(self) -> None:
        self._comm.deregister(self)

    def __enter__(self) -> "Registration":
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._handle is not None and self._comm._handle:
            self.deregister()

    def __repr__(self) -> str:
        state = "" if self._handle is not None else ", deregistered"
        return f"<ccl.Registration {self.nbytes} bytes at {self.ptr:#x} on rank {self._comm.rank}{state}>"


class _SymmetricCuda:
    """Holds a symmetric device buffer for torch (``__cuda_array_interface__``); its
    finalizer frees the buffer when the last tensor over it dies."""

    def __init__(self, ptr: int, nbytes: int, device: int):
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (ptr, False),
                                         "version": 2, "strides": None}
        self.device = device


def _cuda_tensor(holder: _SymmetricCuda, shape: tuple[int, ...], dt: DType, torch_dtype: Any) -> Any:
    import torch

    raw = torch.as_tensor(holder, device="cuda")
    tdt = torch_dtype if torch_dtype is not None else _torch_dtype(dt)
    return raw[: _prod(shape) * dt.itemsize].view(tdt).reshape(shape)


def _prod(shape: tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def _mem_free(comm: Communicator, ptr: int) -> None:
    """The finalizer of an array from empty(): frees its buffer, or, on a destroyed
    communicator, destroys it once the last array is gone."""
    with comm._mem_lock:
        comm._live -= 1
        h, pending = comm._handle, comm._pending if comm._live == 0 else 0
        if pending:
            comm._pending = 0
    if sys.is_finalizing():
        return
    if h:
        comm._L.ccl_mem_free(h, ptr)
    elif pending:
        comm._L.ccl_comm_destroy(pending)


def _torch_dtype(dt: DType) -> Any:
    import torch

    t = {DType.F32: torch.float32, DType.F64: torch.float64, DType.F16: torch.float16,
         DType.BF16: torch.bfloat16, DType.I32: torch.int32, DType.I64: torch.int64, DType.U8: torch.uint8,
         DType.FP8_E4M3: getattr(torch, "float8_e4m3fn", None), DType.FP8_E5M2: getattr(torch, "float8_e5m2", None),
         DType.I8: torch.int8, DType.U32: getattr(torch, "uint32", None),
         DType.U64: getattr(torch, "uint64", None)}[dt]
    if t is None:
        raise ValueError(f"torch {torch.__version__} has no {dt.name.lower()} dtype (torch 2.3 added uint32 and "
                         "uint64; float8 came in 2.1)")
    return t


def _numpy_dtype(dt: DType) -> Any:
    import numpy as np

    simple = {DType.F32: np.float32, DType.F64: np.float64, DType.F16: np.float16, DType.I32: np.int32,
              DType.I64: np.int64, DType.U8: np.uint8, DType.I8: np.int8, DType.U32: np.uint32,
              DType.U64: np.uint64}
    if dt in simple:
        return simple[dt]
    try:
        import ml_dtypes  # type: ignore[import-not-found]

        return {DType.BF16: ml_dtypes.bfloat16, DType.FP8_E4M3: ml_dtypes.float8_e4m3fn,
                DType.FP8_E5M2: ml_dtypes.float8_e5m2}[dt]
    except ImportError:
        raise ValueError(f"numpy has no {dt.name.lower()} without the ml_dtypes package; use a torch dtype") from None


# Live communicators by handle, for the torch custom ops (which take the handle as an int).
_registry: "weakref.WeakValueDictionary[int, Communicator]" = weakref.WeakValueDictionary()


def _register(c: Communicator) -> Communicator:
    _registry[c._handle] = c
    return c


def communicator(handle: int) -> Communicator:
    """The live Communicator with this handle."""
    c = _registry.get(handle)
    if c is None:
        raise InvalidArgumentError(f"no live ccl communicator with handle {handle:#x} (destroyed, or not a "
                                   "communicator's handle)")
    return c


def init_all(nranks: int, *, backend: Union[str, int, None] = None, devices: Optional[Sequence[int]] = None,
             timeout_ms: Optional[int] = None, heap_bytes: Optional[int] = None,
             cache_dir: Optional[str] = None) -> list[Communicator]:
    """``nranks`` communicators in this process (threads mode): element i is rank i, on GPU
    ``devices[i]`` (default: rank i modulo the GPU count). ``backend``: 'cpu', 'gpu' or
    'auto' (default: ``$CCL_BACKEND``, else the GPU when one is usable)."""
    nranks = int_arg("init_all", "nranks", nranks, 1, INT_MAX, "ranks")
    cfg = _config(backend, timeout_ms, heap_bytes, cache_dir)
    L = _lib.lib()
    handles = (c_void_p * nranks)()
    if devices is not None and len(devices) != nranks:
        raise InvalidArgumentError(f"init_all: {len(devices)} devices for {nranks} ranks")
    devs = (c_int * nranks)(*(int_arg("init_all", f"devices[{i}]", d, DEVICE_AUTO, INT_MAX, "a GPU index or "
                                      "DEVICE_AUTO") for i, d in enumerate(devices))) if devices is not None else None
    r = L.ccl_comm_init_all(ctypes.cast(handles, ctypes.POINTER(c_void_p)), nranks, devs, byref(cfg))
    if r:
        _raise(r, None)
    group: list = []
    comms = [_register(Communicator(h, group)) for h in handles]
    group.extend(weakref.ref(c) for c in comms)
    if comms:
        _warn_if_auto_fell_back(cfg.backend, comms[0].backend, "init_all")
    if comms and comms[0].backend == "gpu":
        _warn_if_lazy_on_shared_gpu(nranks, devices)
    return comms


def split_all(comms: Sequence[Communicator], colors: Sequence[Optional[int]], keys: Optional[Sequence[int]] = None,
              *, timeout_ms: Optional[int] = None, heap_bytes: Optional[int] = None,
              cache_dir: Optional[str] = None) -> "list[Optional[Communicator]]":
    """Splits every rank of a threads-mode communicator from this one thread (NCCL's way:
    every rank's ncclCommSplit between ncclGroupStart and ncclGroupEnd): ``comms[i]``
    calls :meth:`Communicator.split` with ``colors[i]`` and ``keys[i]`` (default: its
    rank). Returns the new communicators in the order of ``comms`` (None where the color
    was None). ``comms`` must hold every rank of their communicator, as :func:`init_all`
    gave them; a call that fails its checks makes none."""
    comms = list(comms)
    if len(colors) != len(comms) or (keys is not None and len(keys) != len(comms)):
        raise InvalidArgumentError(f"split_all: {len(comms)} comms, {len(colors)} colors"
                                   + (f", {len(keys)} keys" if keys is not None else "") + ": one each")
    if len({id(c) for c in comms}) != len(comms):
        raise InvalidArgumentError("split_all: a communicator is given twice")
    args = [c._split_args("split_all", colors[i], None if keys is None else keys[i], timeout_ms, heap_bytes,
                          cache_dir) for i, c in enumerate(comms)]
    fn = _optional("ccl_comm_split")
    L = _lib.lib()
    outs = [c_void_p() for _ in comms]
    held: list = []
    try:
        for c in comms:
            c._enter("split_all")
            held.append(c)
        L.ccl_group_start()
        for c, (col, k, cfg), out in zip(comms, args, outs):
            r = fn(c.handle, col, k, byref(out), byref(cfg) if cfg is not None else None)
            if r:
                L.ccl_group_end()  # makes nothing: one of its calls failed
                _raise(r, c.handle)
        r = L.ccl_group_end()
        if r:
            _raise(r, None)
    finally:
        for c in held:
            c._busy.release()
    return [_register(Communicator(o.value)) if o.value else None for o in outs]


_fell_back_warned = False


def _warn_if_auto_fell_back(asked: int, got: str, fn: str) -> None:
    """Says once per process that backend 'auto' (asked, or the default with $CCL_BACKEND
    unset) gave the CPU backend: code written for GPUs would otherwise run on the host
    without a word. libccl keeps the reason to itself; backend='gpu' makes it an error
    that gives it."""
    global _fell_back_warned
    env = os.environ.get("CCL_BACKEND", "")
    if _fell_back_warned or asked != _BACKENDS["auto"] or env in ("cpu", "gpu") or got != "cpu":
        return
    _fell_back_warned = True
    where = "no NVIDIA GPU device here (/dev/nvidia0)" if not os.path.exists("/dev/nvidia0") else \
        "the GPU backend is missing from this libccl or cannot use the GPU"
    warnings.warn(f"ccl.{fn}: backend 'auto' fell back to the CPU backend ({where}); collectives run on host "
                  "memory. Pass backend='cpu' (or set CCL_BACKEND=cpu) to choose it and silence this warning, or "
                  "backend='gpu' for an error that says why the GPU backend is unusable", RuntimeWarning,
                  stacklevel=3)


def _warn_if_lazy_on_shared_gpu(nranks: int, devices: Optional[Sequence[int]]) -> None:
    """Rank threads sharing a GPU hang when one of them loads a CUDA module lazily (the
    first use of a torch kernel) while a peer's collective runs: a module load waits for
    every running kernel. Says so once, where torch is in use and loading is lazy."""
    torch = sys.modules.get("torch")
    if torch is None or os.environ.get("CUDA_MODULE_LOADING", "").upper() == "EAGER":
        return
    if devices is not None:
        shared = len(set(devices)) < nranks
    else:
        shared = torch.cuda.is_available() and torch.cuda.device_count() < nranks
    if shared:
        warnings.warn(
            "ccl.init_all: ranks share a GPU and CUDA loads modules lazily; the first use of a torch kernel "
            "in a rank thread waits for a peer's running collective, which waits for that rank (a hang until "
            "the timeout). Start Python with CUDA_MODULE_LOADING=EAGER, or run every torch op once before the "
            "first collective (docs/python.md, threads mode)", RuntimeWarning, stacklevel=3)


_store_rounds: dict[int, int] = {}


def init_rank(rank: Optional[int] = None, nranks: Optional[int] = None, *, unique_id: Any = None,
              ranks_per_node: Optional[int] = None, store: Any = None, process_group: Any = None,
              mpi_comm: Any = None, bootstrap: Optional[Bootstrap] = None, device: Optional[int] = None,
              backend: Union[str, int, None] = None, timeout_ms: Optional[int] = None,
              heap_bytes: Optional[int] = None, cache_dir: Optional[str] = None) -> Communicator:
    """This process's rank of a communicator of one process per rank; every process calls
    it. ``unique_id=`` (with ``rank`` and ``nranks``, else the launcher's): a
    :class:`ccl.UniqueId`, or its bytes, that :func:`ccl.get_unique_id` made in one process
    and that every rank was handed; libccl's own bootstrap over TCP
    (``ccl_comm_init_rank_id``), the one whose communicator may span several nodes:
    ``ranks_per_node`` consecutive ranks on each (default: ``$CCL_RANKS_PER_NODE``, else
    each host a node; several nodes on the CPU backend only). Otherwise the bootstrap
    (used only during this call; one node) is, first match wins:

    - ``bootstrap=``: a :class:`ccl.Bootstrap`;
    - ``mpi_comm=``: an mpi4py communicator (its rank and size);
    - ``process_group=``: a torch.distributed process group (or ``True``: the default one);
    - ``store=`` with ``rank`` and ``nranks``: a torch.distributed Store or :class:`ccl.FileStore`;
    - otherwise the launcher's environment: torch.distributed's default store when it is
      initialized; under torchrun, its TCP store (MASTER_ADDR/MASTER_PORT); under mpirun
      or Slurm, a folder store named after the job (``CCL_JOB_ID`` overrides the job id).

    ``device``: the GPU (default CCL_DEVICE_AUTO: the rank's index among the ranks on its
    host, which is the launcher's local rank, modulo the GPU count; processes that would
    share a GPU are all refused, with a message)."""
    if unique_id is not None:
        given = [k for k, v in (("store", store), ("process_group", process_group), ("mpi_comm", mpi_comm),
                                ("bootstrap", bootstrap)) if v is not None]
        if given:
            raise InvalidArgumentError(f"init_rank: unique_id= and {given[0]}= are two bootstraps: give one (to hand "
                                       f"the id to every rank over a {given[0]}, share bytes(uid) through it first)")
        return _init_rank_id(unique_id, rank, nranks, ranks_per_node, device,
                             _config(backend, timeout_ms, heap_bytes, cache_dir))
    if ranks_per_node is not None:
        raise InvalidArgumentError("init_rank: ranks_per_node= needs unique_id= (only libccl's TCP bootstrap, from "
                                   "ccl.get_unique_id(), makes a communicator of several nodes; the others make one "
                                   "node)")
    env = launcher_env()
    timeout_s = _timeout_s(timeout_ms)
    if bootstrap is not None:
        boot = bootstrap
    elif mpi_comm is not None:
        boot = MPIBootstrap(mpi_comm)
    elif process_group is not None:
        boot = GroupBootstrap(None if process_group is True else process_group)
    elif store is not None:
        if rank is None or nranks is None:
            raise InvalidArgumentError("init_rank: store= needs rank and nranks")
        k = _store_rounds.get(id(store), 0)
        _store_rounds[id(store)] = k + 1
        nranks = int_arg("init_rank", "nranks", nranks, 1, INT_MAX, "ranks")
        rank = int_arg("init_rank", "rank", rank, 0, nranks - 1, "a rank of the job")
        boot = StoreBootstrap(store, rank, nranks, prefix=f"ccl/{k}")
    else:
        if env is None and (rank is None or nranks is None):
            raise InvalidArgumentError("init_rank: not under a launcher (no RANK/WORLD_SIZE, OMPI_COMM_WORLD_*, "
                                       "PMI_* or SLURM_* in the environment): give a store, process group, mpi4py "
                                       "communicator or bootstrap, or use ccl.init_all for threads")
        er, en, _, job = env if env is not None else (rank, nranks, -1, "")
        nranks = int_arg("init_rank", "nranks", en if nranks is None else nranks, 1, INT_MAX, "ranks")
        rank = int_arg("init_rank", "rank", er if rank is None else rank, 0, nranks - 1, "a rank of the job")
        boot = _env_bootstrap(rank, nranks, job, timeout_s)
    device = int_arg("init_rank", "device", DEVICE_AUTO if device is None else device, DEVICE_AUTO, INT_MAX,
                     "a GPU index or DEVICE_AUTO")
    cfg = _config(backend, timeout_ms, heap_bytes, cache_dir)
    c_boot, errors, keep = boot.as_c()
    out = c_void_p()
    try:
        r = _lib.lib().ccl_comm_init_rank(byref(out), byref(c_boot), device, byref(cfg))
    finally:
        boot.close()
    del keep
    if r:
        try:
            _raise(r, None)
        except CclError as e:
            if errors:
                raise e from errors[0]
            raise
    comm = _register(Communicator(out.value or 0))
    _warn_if_auto_fell_back(cfg.backend, comm.backend, "init_rank")
    return comm


def get_unique_id() -> UniqueId:
    """A new id for one communicator (``ccl_get_unique_id``, NCCL's ``ncclGetUniqueId``):
    call it in one process, hand the id to every rank (``bytes(uid)`` or pickle: a file, a
    pipe, torch.distributed's store, mpi4py's ``bcast``), and every rank calls
    ``ccl.init_rank(rank, nranks, unique_id=uid)``. It opens the root, a TCP port served by
    a thread of this process, which must keep running until every rank has joined; the
    root waits ``$CCL_TIMEOUT_MS`` (default 10 minutes) for the first rank. Where it
    listens: ``$CCL_BOOTSTRAP_ADDR`` ("host", "host:port"), else the first interface
    ``$CCL_SOCKET_IFNAME`` admits, else this host's first non-loopback IPv4 address, else
    127.0.0.1 (docs/multinode.md). One id serves one communicator."""
    fn = _optional("ccl_get_unique_id")
    c = _lib.ccl_unique_id_t()
    r = fn(byref(c))
    if r:
        _raise(r, None)
    return UniqueId(bytes(c))


def _init_rank_id(unique_id: Any, rank: Optional[int], nranks: Optional[int], ranks_per_node: Optional[int],
                  device: Optional[int], cfg: _lib.ccl_config_t) -> Communicator:
    """init_rank(unique_id=...): ccl_comm_init_rank_id."""
    uid = unique_id if isinstance(unique_id, UniqueId) else UniqueId(unique_id)
    if rank is None or nranks is None:
        env = launcher_env()
        if env is None:
            raise InvalidArgumentError("init_rank: unique_id= needs rank and nranks (or a launcher's environment: "
                                       "RANK/WORLD_SIZE, OMPI_COMM_WORLD_*, PMI_* or SLURM_*)")
        rank = env[0] if rank is None else rank
        nranks = env[1] if nranks is None else nranks
    # C ints here; libccl checks their ranges, and its messages name them.
    nranks = int_arg("init_rank", "nranks", nranks, INT_MIN, INT_MAX, "a C int")
    rank = int_arg("init_rank", "rank", rank, INT_MIN, INT_MAX, "a C int")
    rpn = int_arg("init_rank", "ranks_per_node", 0 if ranks_per_node is None else ranks_per_node, INT_MIN, INT_MAX,
                  "a C int; 0: $CCL_RANKS_PER_NODE, else each host a node")
    device = int_arg("init_rank", "device", DEVICE_AUTO if device is None else device, DEVICE_AUTO, INT_MAX,
                     "a GPU index or DEVICE_AUTO")
    fn = _optional("ccl_comm_init_rank_id")
    out = c_void_p()
    r = fn(byref(out), nranks, uid._c(), rank, rpn, device, byref(cfg))
    if r:
        _raise(r, None)
    comm = _register(Communicator(out.value or 0))
    _warn_if_auto_fell_back(cfg.backend, comm.backend, "init_rank")
    return comm


def _env_bootstrap(rank: int, nranks: int, job: str, timeout_s: float) -> Bootstrap:
    td = sys.modules.get("torch.distributed")
    if td is not None and td.is_available() and td.is_initialized():
        return GroupBootstrap(None)
    e = os.environ
    if "TORCHELASTIC_RUN_ID" in e and e.get("MASTER_ADDR") and e.get("MASTER_PORT"):
        import datetime

        import torch.distributed as dist

        agent = e.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true"
        store = dist.TCPStore(e["MASTER_ADDR"], int(e["MASTER_PORT"]), nranks, is_master=(rank == 0 and not agent),
                              timeout=datetime.timedelta(seconds=timeout_s))
        k = _store_rounds.get(0, 0)
        _store_rounds[0] = k + 1
        restart = e.get("TORCHELASTIC_RESTART_COUNT", "0")
        return StoreBootstrap(store, rank, nranks, prefix=f"ccl/{restart}/{k}")
    if not job:
        raise InvalidArgumentError("init_rank: cannot tell this job from others (no PMIX_NAMESPACE, "
                                   "OMPI_MCA_ess_base_jobid, SLURM_JOB_ID or MASTER_PORT); set CCL_JOB_ID")
    k = _store_rounds.get(1, 0)
    _store_rounds[1] = k + 1
    return JobFolderBootstrap(rank, nranks, f"{job}-{k}" if k else job, timeout_s)


def check(path_or_source: Union[str, os.PathLike], ranks: int, root: int = 0) -> Proof:
    """Proves a CCL program (a path, source text or a shipped algorithm's name, as for
    ``comm.load``) for ``ranks`` ranks (as ``cclc check --explain``) and returns
    what was proved; raises :class:`ccl.CompileError` with the compiler's
    ``file:line:col: error:`` diagnostics (carets included) when it does not parse,
    expand or prove, or when its ``ranks``/``where`` lines do not admit ``ranks``."""
    L = _lib.lib()
    fn = getattr(L, "ccl_algorithm_check", None)
    if fn is None:
        raise CclError("this libccl has no ccl_algorithm_check (too old): rebuild it")
    src = _library.resolve("check", os.fspath(path_or_source)).encode()
    # libccl checks the ranges (its message names them); here only what a C int holds.
    ranks = int_arg("check", "ranks", ranks, INT_MIN, INT_MAX, "a C int")
    root = int_arg("check", "root", root, INT_MIN, INT_MAX, "a C int")
    needed = c_size_t()
    buf = ctypes.create_string_buffer(1 << 16)
    r = fn(src, ranks, root, buf, len(buf), byref(needed))
    if needed.value > len(buf):
        buf = ctypes.create_string_buffer(needed.value)
        r = fn(src, ranks, root, buf, len(buf), byref(needed))
    text = buf.value.decode(errors="replace")
    if r == 0:
        return Proof(text)
    if r in (1, 3) and text and not text.startswith("ccl_algorithm_check:"):
        raise CompileError(text.rstrip("\n"), r)
    _raise(r, None)
    raise AssertionError("unreachable")
