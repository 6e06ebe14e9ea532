"""mpi4py's buffer methods (``Allreduce``, ``Bcast``, ``Send``, ...) for code ported from
mpi4py: mpi4py's argument order, its ``IN_PLACE``, its buffer specs, and its results (the
receive buffer is written; the methods return None); and its ``Barrier`` and ``Split``.

The lowercase methods (``all_reduce(tensor, op, out=...)``) follow torch.distributed; these
follow mpi4py, which puts the send buffer first: ``comm.Allreduce(sendbuf, recvbuf,
op=MPI.SUM)``. A buffer is an array, a tensor or any object with the buffer protocol, or a
spec as mpi4py's: ``[buf, datatype]`` or ``[buf, count, datatype]``, where count is MPI's
count argument for the call (as NCCL's: Allgather's elements per rank, Alltoall's per peer,
Reduce_scatter_block's per block); without one it comes from the send buffer. The
v-collectives take ``[buf, counts]``, ``[buf, counts, displs]``, ``[buf, (counts, displs)]``,
each with an optional datatype last. ``count=`` and ``datatype=`` keywords (NCCL's) work
too, for raw pointers.

Where MPI allows it, ``sendbuf`` may be :data:`IN_PLACE` (or mpi4py's ``MPI.IN_PLACE``):
Allreduce, Allgather, Alltoall, Reduce_scatter_block (the whole input in ``recvbuf``, the
result at its start, as MPI has it; host memory only), Reduce (at the root) and Allgatherv.
"""
from __future__ import annotations

import ctypes
import functools
import sys
from typing import Any, Callable, Optional, TypeVar

from ._buffers import as_buf
from ._errors import InvalidArgumentError, UnsupportedError
from ._types import SIZE_MAX, Op, int_arg, to_dtype, to_op


F = TypeVar("F", bound=Callable[..., Any])


def exclusive(fn: F) -> F:
    """Makes a Communicator method hold the communicator for its call: a call from a
    second thread meanwhile raises (Communicator._enter)."""
    name = fn.__name__

    @functools.wraps(fn)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        self._enter(name)
        try:
            return fn(self, *args, **kwargs)
        finally:
            self._busy.release()

    return call  # type: ignore[return-value]


class _InPlace:
    """The marker for "the input is already in the receive buffer" (MPI_IN_PLACE)."""

    _instance: Optional["_InPlace"] = None

    def __new__(cls) -> "_InPlace":
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "ccl.IN_PLACE"


IN_PLACE = _InPlace()


def is_in_place(obj: Any) -> bool:
    """ccl.IN_PLACE, or mpi4py's MPI.IN_PLACE (compared as the object itself: it may be an
    int, which would otherwise read as a raw pointer)."""
    if obj is IN_PLACE:
        return True
    mpi = sys.modules.get("mpi4py.MPI")
    return mpi is not None and obj is getattr(mpi, "IN_PLACE", IN_PLACE)


def _spec(spec: Any, what: str, method: str) -> tuple[Any, Optional[int], Any]:
    """(buffer, count or None, datatype or None) from a buffer or an mpi4py spec."""
    if not isinstance(spec, (list, tuple)):
        return spec, None, None
    parts = list(spec)
    if len(parts) == 2:
        return parts[0], None, parts[1]
    if len(parts) == 3:
        count = parts[1]
        if isinstance(count, (list, tuple)):  # mpi4py's [buf, (count, displ), datatype]
            if len(count) != 2 or count[1] != 0:
                raise InvalidArgumentError(f"{method}: {what}: a displacement ({count!r}) is not supported; "
                                           f"pass a view that starts at the data")
            count = count[0]
        return parts[0], count, parts[2]
    raise InvalidArgumentError(f"{method}: {what} is a list of {len(parts)} items; expected a buffer, "
                               f"[buf, datatype] or [buf, count, datatype]")


def _vspec(spec: Any, what: str, method: str) -> tuple[Any, Any, Any, Any]:
    """(buffer, counts, displs or None, datatype or None) from an mpi4py v-spec."""
    if not isinstance(spec, (list, tuple)) or len(spec) not in (2, 3, 4):
        raise InvalidArgumentError(f"{method}: {what} must be [buf, counts], [buf, counts, displs] or "
                                   f"[buf, (counts, displs)], each with an optional datatype last")
    parts = list(spec)
    buf, rest = parts[0], parts[1:]
    dtype = None
    if len(rest) >= 2 and not isinstance(rest[-1], (list, tuple)) and not _is_int_table(rest[-1]):
        dtype = rest.pop()
    if len(rest) == 1 and isinstance(rest[0], tuple) and len(rest[0]) == 2 and \
            all(x is None or _is_int_table(x) for x in rest[0]):
        counts, displs = rest[0]
    elif len(rest) == 1:
        counts, displs = rest[0], None
    elif len(rest) == 2:
        counts, displs = rest
    else:
        raise InvalidArgumentError(f"{method}: {what}: cannot tell counts, displacements and datatype apart in "
                                   f"{spec!r}")
    return buf, counts, displs, dtype


def _is_int_table(x: Any) -> bool:
    return hasattr(x, "__len__") and not isinstance(x, (str, bytes))


class MpiStyle:
    """The mpi4py methods of :class:`ccl.Communicator` (see the module's docstring)."""

    # Provided by Communicator.
    rank: int
    size: int

    def _mpi_run(self, kind: str, method: str, sendbuf: Any, recvbuf: Any, op: Any, root: int, stream: Any,
                 send_per: int, recv_per: int, count: Optional[int], datatype: Any) -> None:
        send_obj, scount, sdt = _spec(sendbuf, "sendbuf", method) if not is_in_place(sendbuf) else \
            (sendbuf, None, None)
        recv_obj, rcount, rdt = _spec(recvbuf, "recvbuf", method)
        for given in (sdt, rdt):
            datatype = given if datatype is None else datatype
        for given in (scount, rcount):
            count = given if count is None else count
        opv = to_op(op) if op is not None else Op.SUM
        if is_in_place(send_obj):
            if recv_obj is None:
                raise InvalidArgumentError(f"{method}: sendbuf is IN_PLACE, so recvbuf must hold the data")
            send_obj = recv_obj
        # The root's broadcast reads its buffer only: it may be read-only.
        writes = not (kind == "broadcast" and root == self.rank)
        send, recv, n, dt = self._resolve(kind, send_obj, recv_obj, count, datatype, send_per,  # type: ignore
                                          recv_per, method=method, recv_writes=writes)
        self._go(kind, send, recv, n, dt, opv, root, stream, False, None, None)  # type: ignore[attr-defined]

    @exclusive
    def Allreduce(self, sendbuf: Any, recvbuf: Any, op: Any = None, *, count: Optional[int] = None,
            datatype: Any = None, stream: Any = None) -> None:
        """mpi4py's Allreduce: the reduction of every rank's ``sendbuf`` into ``recvbuf``
        (``sendbuf=IN_PLACE``: ``recvbuf`` holds the input); ``op`` defaults to SUM."""
        self._mpi_run("all_reduce", "Allreduce", sendbuf, recvbuf, op, 0, stream, 1, 1, count, datatype)

    @exclusive
    def Reduce(self, sendbuf: Any, recvbuf: Any = None, op: Any = None, root: int = 0, *, count: Optional[int] = None,
            datatype: Any = None, stream: Any = None) -> None:
        """mpi4py's Reduce: the reduction into the root's ``recvbuf`` (ignored elsewhere; may be
        None); ``sendbuf=IN_PLACE`` at the root: its ``recvbuf`` holds its input."""
        root = self._rank_arg("Reduce", "root", root)  # type: ignore[attr-defined]
        if is_in_place(sendbuf) and self.rank != root:
            raise InvalidArgumentError(f"Reduce: sendbuf is IN_PLACE on rank {self.rank}, which is not the root "
                                       f"({root}); only the root may pass IN_PLACE")
        self._mpi_run("reduce", "Reduce", sendbuf, recvbuf, op, root, stream, 1, 1, count, datatype)

    @exclusive
    def Bcast(self, buf: Any, root: int = 0, *, count: Optional[int] = None,
            datatype: Any = None, stream: Any = None) -> None:
        """mpi4py's Bcast: the root's ``buf`` into every rank's ``buf``."""
        root = self._rank_arg("Bcast", "root", root)  # type: ignore[attr-defined]
        self._mpi_run("broadcast", "Bcast", buf, buf, None, root, stream, 1, 1, count, datatype)

    @exclusive
    def Allgather(self, sendbuf: Any, recvbuf: Any, *, count: Optional[int] = None,
            datatype: Any = None, stream: Any = None) -> None:
        """mpi4py's Allgather: every rank's ``sendbuf`` into ``recvbuf``, in rank order
        (``sendbuf=IN_PLACE``: this rank's part is already in ``recvbuf``)."""
        if is_in_place(sendbuf):
            recv_obj, rcount, rdt = _spec(recvbuf, "recvbuf", "Allgather")
            r = as_buf(recv_obj, "recvbuf", writes=True)
            datatype = datatype if datatype is not None else rdt
            dt = to_dtype(datatype) if datatype is not None else r.dtype
            count = count if count is not None else rcount
            if dt is None or (count is None and r.numel < 0):
                raise InvalidArgumentError("Allgather: with IN_PLACE and a raw pointer, give count= and datatype=")
            if count is None:
                if r.numel % self.size:
                    raise InvalidArgumentError(f"Allgather: recvbuf's {r.numel} elements are not a multiple of "
                                               f"{self.size} (the rank count)")
                count = r.numel // self.size
            send = r.ptr + self.rank * count * dt.itemsize
            s, rb, n, dt = self._resolve("all_gather", send, recv_obj, count, dt, 1, self.size,  # type: ignore
                                         method="Allgather")
            self._go("all_gather", s, rb, n, dt, Op.SUM, 0, stream, False, None, None)  # type: ignore
            return
        self._mpi_run("all_gather", "Allgather", sendbuf, recvbuf, None, 0, stream, 1, self.size, count, datatype)

    @exclusive
    def Alltoall(self, sendbuf: Any, recvbuf: Any, *, count: Optional[int] = None,
            datatype: Any = None, stream: Any = None) -> None:
        """mpi4py's Alltoall: part p of ``sendbuf`` to rank p, which stores it as part r of its
        ``recvbuf`` (``sendbuf=IN_PLACE``: ``recvbuf`` holds the parts to send)."""
        self._mpi_run("all_to_all", "Alltoall", sendbuf, recvbuf, None, 0, stream, self.size, self.size, count,
                      datatype)

    @exclusive
    def Reduce_scatter_block(self, sendbuf: Any, recvbuf: Any, op: Any = None, *, count: Optional[int] = None,
            datatype: Any = None, stream: Any = None) -> None:
        """mpi4py's Reduce_scatter_block: ``sendbuf`` (N blocks) reduced over every rank; rank r
        gets block r in ``recvbuf``. ``sendbuf=IN_PLACE``: ``recvbuf`` holds the N blocks and
        gets the result in its first block (host memory)."""
        N = self.size
        if not is_in_place(sendbuf):
            self._mpi_run("reduce_scatter", "Reduce_scatter_block", sendbuf, recvbuf, op, 0, stream, N, 1, count,
                         datatype)
            return
        recv_obj, rcount, rdt = _spec(recvbuf, "recvbuf", "Reduce_scatter_block")
        r = as_buf(recv_obj, "recvbuf", writes=True)
        datatype = datatype if datatype is not None else rdt
        dt = to_dtype(datatype) if datatype is not None else r.dtype
        count = count if count is not None else rcount
        if dt is None or (count is None and r.numel < 0):
            raise InvalidArgumentError("Reduce_scatter_block: with IN_PLACE and a raw pointer, give count= and "
                                       "datatype=")
        if r.cuda:
            raise UnsupportedError("Reduce_scatter_block: IN_PLACE on device memory is not supported; pass a "
                                   "separate recvbuf")
        if count is None:
            if r.numel % N:
                raise InvalidArgumentError(f"Reduce_scatter_block: recvbuf's {r.numel} elements are not a multiple "
                                           f"of {N} (the rank count)")
            count = r.numel // N
        part = r.ptr + self.rank * count * dt.itemsize
        # NCCL's in-place form leaves block r at its own place; MPI wants it at the start.
        s, rb, n, dt = self._resolve("reduce_scatter", r.ptr, part, count, dt, N, 1,  # type: ignore[attr-defined]
                                     method="Reduce_scatter_block")
        self._go("reduce_scatter", s, rb, n, dt, to_op(op) if op is not None else Op.SUM, 0, stream,  # type: ignore
                 False, None, None)
        if self.rank:
            ctypes.memmove(r.ptr, part, count * dt.itemsize)

    @exclusive
    def Allgatherv(self, sendbuf: Any, recvbuf: Any, *, stream: Any = None) -> None:
        """mpi4py's Allgatherv: ``recvbuf`` is ``[buf, counts]``, ``[buf, counts, displs]`` or
        ``[buf, (counts, displs)]`` (optionally with a datatype last); rank p's ``sendbuf``
        lands at ``displs[p]`` (packed when None). ``sendbuf=IN_PLACE``: this rank's part is
        already in place."""
        buf, counts, displs, dt = _vspec(recvbuf, "recvbuf", "Allgatherv")
        if is_in_place(sendbuf):
            r = as_buf(buf, "recvbuf", writes=True)
            d = to_dtype(dt) if dt is not None else r.dtype
            if d is None or len(counts) != self.size:
                raise InvalidArgumentError(f"Allgatherv: with IN_PLACE, recvbuf must be an array and counts must "
                                           f"have {self.size} entries")
            table = displs if displs is not None else counts
            part = [int_arg("Allgatherv", "displs" if displs is not None else "counts", v, 0, SIZE_MAX, "elements")
                    for v in (table[self.rank:self.rank + 1] if displs is not None else table[:self.rank])]
            off = sum(part)
            sendbuf = r.ptr + off * d.itemsize
            dt = d
        else:
            sendbuf, _, sdt = _spec(sendbuf, "sendbuf", "Allgatherv")
            dt = dt if dt is not None else sdt
        self.all_gather_v(buf, sendbuf, counts, displs, stream=stream, datatype=dt,  # type: ignore[attr-defined]
                          method="Allgatherv")

    @exclusive
    def Alltoallv(self, sendbuf: Any, recvbuf: Any, *, stream: Any = None) -> None:
        """mpi4py's Alltoallv: both buffers are v-specs (``[buf, counts(, displs)]``)."""
        if is_in_place(sendbuf):
            raise UnsupportedError("Alltoallv: IN_PLACE is not supported; pass a separate sendbuf")
        sb, sc, sd, sdt = _vspec(sendbuf, "sendbuf", "Alltoallv")
        rb, rc, rd, rdt = _vspec(recvbuf, "recvbuf", "Alltoallv")
        self.all_to_all_v(rb, sb, sc, rc, sd, rd, stream=stream,  # type: ignore[attr-defined]
                          datatype=sdt if sdt is not None else rdt, method="Alltoallv")

    @exclusive
    def Send(self, buf: Any, dest: int, tag: int = 0, *, stream: Any = None) -> None:
        """mpi4py's Send (NCCL's matching: the k-th send to a rank meets its k-th receive from
        this rank; there are no tags, so ``tag`` must be 0)."""
        _no_tag("Send", tag, (0,))
        obj, count, dt = _spec(buf, "buf", "Send")
        self._p2p("send", obj, dest, stream, False, count=count, datatype=dt, method="Send")  # type: ignore

    @exclusive
    def Recv(self, buf: Any, source: int, tag: int = -1, status: Any = None, *, stream: Any = None) -> None:
        """mpi4py's Recv from rank ``source`` (required: no ANY_SOURCE); ``tag`` must be 0 or
        ANY_TAG, ``status`` None."""
        _no_tag("Recv", tag, (0, -1))
        if status is not None:
            raise UnsupportedError("Recv: status= is not supported (the message is the one this rank's next "
                                   "receive from source matches)")
        obj, count, dt = _spec(buf, "buf", "Recv")
        self._p2p("recv", obj, source, stream, False, count=count, datatype=dt, method="Recv")  # type: ignore

    def Barrier(self, *, stream: Any = None) -> None:
        """mpi4py's Barrier: :meth:`barrier`."""
        self.barrier(stream)  # type: ignore[attr-defined]

    def Split(self, color: Any = 0, key: int = 0) -> Any:
        """mpi4py's Split: :meth:`split`, with mpi4py's defaults. A ``color`` of
        ``MPI.UNDEFINED`` (or None) joins no new communicator and gets None, where mpi4py
        gives ``MPI.COMM_NULL``."""
        mpi = sys.modules.get("mpi4py.MPI")
        if mpi is not None and not isinstance(color, bool) and color == getattr(mpi, "UNDEFINED", None):
            color = None
        return self.split(color, key)  # type: ignore[attr-defined]


def _no_tag(method: str, tag: Any, ok: tuple) -> None:
    if isinstance(tag, bool) or not isinstance(tag, int) or tag not in ok:
        raise UnsupportedError(f"{method}: tag {tag!r}: CCL matches messages in order, without tags; pass tag=0")
