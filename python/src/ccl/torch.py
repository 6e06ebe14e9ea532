"""CCL's collectives as torch custom ops (``torch.library``, torch >= 2.4).

They work in eager mode, under ``torch.compile`` (no graph break: each op has a fake
implementation that gives the output's shape) and inside ``torch.cuda.graph`` capture
(the collective is enqueued on the current stream, which capture records). ``comm`` is a
:class:`ccl.Communicator` (or its ``handle``).

Functional ops return a new tensor, in-place ones (trailing underscore) mutate their
argument, as torch.distributed's functional collectives and ``dist.all_reduce`` do::

    import ccl, ccl.torch as cclt
    y = cclt.all_reduce(x, comm)          # out of place, like funcol.all_reduce(x, "sum", group)
    cclt.all_reduce_(x, comm, "avg")      # in place, like dist.all_reduce(x, op=AVG)
    g = cclt.all_gather(x, comm)          # (N * x.shape[0], *x.shape[1:])
    s = cclt.reduce_scatter(g, comm)      # (g.shape[0] // N, ...)
    a = cclt.all_to_all(x, comm)
    cclt.broadcast_(x, comm, root=0); cclt.reduce_(x, comm, root=0, op="sum")
    v = cclt.all_gather_v(x, comm, [2, 5])          # rank p gives rows [p]: (7, *x.shape[1:])
    w = cclt.all_to_all_v(x, comm, out_splits, in_splits)   # as all_to_all_single's splits
    cclt.send(x, comm, peer=1); cclt.recv_(y, comm, peer=0)

The registered ops are ``torch.ops.ccl.<name>`` with ``comm`` as an int handle (and, for
all_gather and reduce_scatter, the rank count after it). In eager mode on plain tensors
the functions here skip torch's dispatcher and call the communicator directly (same work,
same result, a few microseconds less per call, and no trip through C++ that lets another
thread take the GIL); under torch.compile, fake tensors or other dispatch modes they go
through ``torch.ops.ccl``.
"""
from __future__ import annotations

from typing import Any, Callable, Union

import torch

from ._comm import Communicator, communicator
from ._errors import InvalidArgumentError
from ._types import INT_MAX, INT_MIN, SIZE_MAX, int_arg, to_op

CommLike = Union[Communicator, int]


def _h(comm: CommLike) -> int:
    return comm.handle if isinstance(comm, Communicator) else int(comm)


def _n(comm: CommLike) -> int:
    return comm.size if isinstance(comm, Communicator) else communicator(int(comm)).size


def _c(handle: int) -> Communicator:
    return communicator(handle)


# ---- the work, shared by the ops and the eager fast path ----

def _do_all_reduce(c: Communicator, input: torch.Tensor, op: str) -> torch.Tensor:
    out = torch.empty_like(input, memory_format=torch.contiguous_format)
    c.all_reduce(input.contiguous(), op, out=out)
    return out


def _gathered(input: torch.Tensor, n: Any) -> tuple:
    return (input.shape[0] * n,) + tuple(input.shape[1:]) if input.dim() else (n,)


def _do_all_gather(c: Communicator, input: torch.Tensor) -> torch.Tensor:
    out = input.new_empty(_gathered(input, c.size))
    c.all_gather(out, input.contiguous())
    return out


def _do_reduce_scatter(c: Communicator, input: torch.Tensor, op: str) -> torch.Tensor:
    out = input.new_empty((input.shape[0] // c.size,) + tuple(input.shape[1:]))
    c.reduce_scatter(out, input.contiguous(), op)
    return out


def _do_all_to_all(c: Communicator, input: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(input, memory_format=torch.contiguous_format)
    c.all_to_all(out, input.contiguous())
    return out


def _do_broadcast(c: Communicator, input: torch.Tensor, root: int) -> torch.Tensor:
    out = torch.empty_like(input, memory_format=torch.contiguous_format)
    c.broadcast(input.contiguous(), root, out=out)
    return out


def _do_reduce(c: Communicator, input: torch.Tensor, root: int, op: str) -> torch.Tensor:
    out = torch.empty_like(input, memory_format=torch.contiguous_format)
    c.reduce(input.contiguous(), root, op, out=out)
    return out


def _row(input: torch.Tensor) -> int:
    """Elements per row of dim 0 (the v-collectives count rows, as torch's splits do)."""
    return _prod(input.shape[1:]) if input.dim() else 1


def _prod(shape: Any) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def _rows(input: torch.Tensor) -> int:
    return input.shape[0] if input.dim() else 1


def _do_all_gather_v(c: Communicator, input: torch.Tensor, recvcounts: Any) -> torch.Tensor:
    counts = [int_arg("all_gather_v", f"recvcounts[{i}]", n, 0, SIZE_MAX, "rows") for i, n in enumerate(recvcounts)]
    if len(counts) == c.size and _rows(input) != counts[c.rank]:
        raise InvalidArgumentError(f"all_gather_v: rank {c.rank}'s input has {_rows(input)} rows, but "
                                   f"recvcounts[{c.rank}] is {counts[c.rank]}")
    out = input.new_empty((sum(counts),) + tuple(input.shape[1:]))
    row = _row(input)
    c.all_gather_v(out, input.contiguous(), [n * row for n in counts])
    return out


def _do_all_to_all_v(c: Communicator, input: torch.Tensor, out_splits: Any, in_splits: Any) -> torch.Tensor:
    outs = [int_arg("all_to_all_v", f"output_split_sizes[{i}]", n, 0, SIZE_MAX, "rows")
            for i, n in enumerate(out_splits)]
    ins = [int_arg("all_to_all_v", f"input_split_sizes[{i}]", n, 0, SIZE_MAX, "rows") for i, n in enumerate(in_splits)]
    if sum(ins) != _rows(input):
        raise InvalidArgumentError(f"all_to_all_v: input_split_sizes add up to {sum(ins)} rows, but the input has "
                                   f"{_rows(input)}")
    out = input.new_empty((sum(outs),) + tuple(input.shape[1:]))
    row = _row(input)
    c.all_to_all_v(out, input.contiguous(), [n * row for n in ins], [n * row for n in outs])
    return out


# ---- the registered ops ----
#
# torch.library.Library + define + impl, not torch.library.custom_op: custom_op puts a
# Python kernel on the Autograd key (and, for an in-place op, on ADInplaceOrView) as well
# as the backend's, three trips from C++ into Python per in-place call (measured on CPU:
# 9.9 us against 2.3 us for one, with an empty kernel; docs/python.md). Here an op has one Python kernel, for every
# device (CompositeExplicitAutograd), and a fake one for torch.compile and fake tensors.
# What custom_op's extra kernels did that still matters, the in-place kernels do
# themselves: they bump the mutated tensor's version counter, so autograd still refuses a
# backward through a tensor saved before the collective overwrote it. No op has an
# autograd formula: through torch.ops, a functional op's output on an input that requires
# grad now gets torch's fallback, which warns at backward (custom_op's kernel raised
# there); the eager functions give outputs that do not require grad, as before.

_lib = torch.library.Library("ccl", "FRAGMENT")
_increment_version = torch.autograd.graph.increment_version


def _bump(t: torch.Tensor) -> None:
    """A new version of t, as torch's in-place ops give. Tensors made under
    torch.inference_mode have no version counter (older torch raises on them)."""
    if not t.is_inference():
        _increment_version(t)


def _define(schema: str, kernel: Callable[..., Any], fake: Callable[..., Any]) -> None:
    name = schema.split("(", 1)[0]
    _lib.define(schema)
    _lib.impl(name, kernel, "CompositeExplicitAutograd")
    torch.library.register_fake(f"ccl::{name}", fake, lib=_lib)


def _like(input: torch.Tensor, *args: Any) -> torch.Tensor:
    return torch.empty_like(input, memory_format=torch.contiguous_format)


def _none(*args: Any) -> None:
    return None


# Out of place (functional). The handle is a SymInt, as custom_op declared it: under
# torch.compile an int argument may be symbolic. all_gather and reduce_scatter take the
# rank count too: their fake implementations compute the output's shape from it, and a
# symbolic handle cannot be looked up.
def _all_reduce(input: torch.Tensor, comm: int, op: str) -> torch.Tensor:
    return _do_all_reduce(_c(comm), input, op)


def _all_gather(input: torch.Tensor, comm: int, nranks: int) -> torch.Tensor:
    return _do_all_gather(_c(comm), input)


def _all_gather_fake(input: torch.Tensor, comm: int, nranks: int) -> torch.Tensor:
    return input.new_empty(_gathered(input, nranks))


def _reduce_scatter(input: torch.Tensor, comm: int, nranks: int, op: str) -> torch.Tensor:
    return _do_reduce_scatter(_c(comm), input, op)


def _reduce_scatter_fake(input: torch.Tensor, comm: int, nranks: int, op: str) -> torch.Tensor:
    return input.new_empty((input.shape[0] // nranks,) + tuple(input.shape[1:]))


def _all_to_all(input: torch.Tensor, comm: int) -> torch.Tensor:
    return _do_all_to_all(_c(comm), input)


def _broadcast(input: torch.Tensor, comm: int, root: int) -> torch.Tensor:
    return _do_broadcast(_c(comm), input, root)


def _reduce(input: torch.Tensor, comm: int, root: int, op: str) -> torch.Tensor:
    return _do_reduce(_c(comm), input, root, op)


def _all_gather_v(input: torch.Tensor, comm: int, recvcounts: list[int]) -> torch.Tensor:
    return _do_all_gather_v(_c(comm), input, recvcounts)


def _all_gather_v_fake(input: torch.Tensor, comm: int, recvcounts: list[int]) -> torch.Tensor:
    return input.new_empty((sum(recvcounts),) + tuple(input.shape[1:]))


def _all_to_all_v(input: torch.Tensor, comm: int, out_splits: list[int], in_splits: list[int]) -> torch.Tensor:
    return _do_all_to_all_v(_c(comm), input, out_splits, in_splits)


def _all_to_all_v_fake(input: torch.Tensor, comm: int, out_splits: list[int], in_splits: list[int]) -> torch.Tensor:
    return input.new_empty((sum(out_splits),) + tuple(input.shape[1:]))


_define("all_reduce(Tensor input, SymInt comm, str op) -> Tensor", _all_reduce, _like)
_define("all_gather(Tensor input, SymInt comm, SymInt nranks) -> Tensor", _all_gather, _all_gather_fake)
_define("reduce_scatter(Tensor input, SymInt comm, SymInt nranks, str op) -> Tensor", _reduce_scatter,
        _reduce_scatter_fake)
_define("all_to_all(Tensor input, SymInt comm) -> Tensor", _all_to_all, _like)
_define("broadcast(Tensor input, SymInt comm, SymInt root) -> Tensor", _broadcast, _like)
_define("all_gather_v(Tensor input, SymInt comm, SymInt[] recvcounts) -> Tensor", _all_gather_v,
        _all_gather_v_fake)
_define("all_to_all_v(Tensor input, SymInt comm, SymInt[] output_split_sizes, SymInt[] input_split_sizes) -> Tensor",
        _all_to_all_v, _all_to_all_v_fake)
_define("reduce(Tensor input, SymInt comm, SymInt root, str op) -> Tensor", _reduce, _like)


# In place (the mutated tensor must be contiguous).
def _all_reduce_(tensor: torch.Tensor, comm: int, op: str) -> None:
    _c(comm).all_reduce(tensor, op)
    _bump(tensor)


def _broadcast_(tensor: torch.Tensor, comm: int, root: int) -> None:
    _c(comm).broadcast(tensor, root)
    _bump(tensor)


def _reduce_(tensor: torch.Tensor, comm: int, root: int, op: str) -> None:
    _c(comm).reduce(tensor, root, op)
    _bump(tensor)


def _all_gather_into_(output: torch.Tensor, input: torch.Tensor, comm: int) -> None:
    _c(comm).all_gather(output, input.contiguous())
    _bump(output)


def _reduce_scatter_into_(output: torch.Tensor, input: torch.Tensor, comm: int, op: str) -> None:
    _c(comm).reduce_scatter(output, input.contiguous(), op)
    _bump(output)


def _send(tensor: torch.Tensor, comm: int, peer: int) -> None:
    _c(comm).send(tensor.contiguous(), peer)


def _recv_(tensor: torch.Tensor, comm: int, peer: int) -> None:
    _c(comm).recv(tensor, peer)
    _bump(tensor)


_define("all_reduce_(Tensor(a0!) tensor, SymInt comm, str op) -> ()", _all_reduce_, _none)
# send declares its tensor mutated though it only reads it: an op with no output and no
# mutation is one torch.compile may drop as dead code or move; this keeps it in place.
_define("send(Tensor(a0!) tensor, SymInt comm, SymInt peer) -> ()", _send, _none)
_define("recv_(Tensor(a0!) tensor, SymInt comm, SymInt peer) -> ()", _recv_, _none)
_define("broadcast_(Tensor(a0!) tensor, SymInt comm, SymInt root) -> ()", _broadcast_, _none)
_define("reduce_(Tensor(a0!) tensor, SymInt comm, SymInt root, str op) -> ()", _reduce_, _none)
_define("all_gather_into_(Tensor(a0!) output, Tensor input, SymInt comm) -> ()", _all_gather_into_, _none)
_define("reduce_scatter_into_(Tensor(a0!) output, Tensor input, SymInt comm, str op) -> ()",
        _reduce_scatter_into_, _none)


_OP_NAMES = frozenset(("sum", "prod", "min", "max", "avg"))


def _op(op: Any) -> str:
    if op in _OP_NAMES:
        return op
    return to_op(op).name.lower()


_Plain = torch.Tensor
try:
    from torch.utils._python_dispatch import _get_current_dispatch_mode
except ImportError:  # pragma: no cover - older torch
    def _get_current_dispatch_mode() -> Any:
        return True


_is_compiling = torch.compiler.is_compiling  # torch.compile knows the function, not the name


def _eager(*tensors: torch.Tensor) -> bool:
    """Whether the call can skip torch's dispatcher: plain tensors, no torch.compile
    tracing, no dispatch mode (fake tensors, proxies, ...). The work and its result are the
    same either way (the in-place functions bump the version counter as the ops do); only
    torch.ops.ccl.* can be traced."""
    if _force_ops or _is_compiling() or _get_current_dispatch_mode() is not None:
        return False
    for t in tensors:
        if type(t) is not _Plain:
            return False
    return True


# Tests set this to route every call through torch.ops.ccl.*.
_force_ops = False


def _root(fn: str, root: Any) -> int:
    """A root for torch.ops.ccl: an integer a C int holds (no float, no bool); the kernel's
    communicator checks that it is one of its ranks."""
    return int_arg(f"ccl.torch.{fn}", "root", root, INT_MIN, INT_MAX, "a C int")


def _comm(comm: CommLike) -> Communicator:
    return comm if isinstance(comm, Communicator) else communicator(int(comm))


def all_reduce(input: torch.Tensor, comm: CommLike, op: Any = "sum") -> torch.Tensor:
    """Out-of-place all-reduce: a new tensor with the reduction over all ranks."""
    if _eager(input):
        return _do_all_reduce(_comm(comm), input, _op(op))
    return torch.ops.ccl.all_reduce(input, _h(comm), _op(op))


def all_reduce_(tensor: torch.Tensor, comm: CommLike, op: Any = "sum") -> torch.Tensor:
    """In-place all-reduce (as ``torch.distributed.all_reduce``); returns ``tensor``."""
    if _eager(tensor):
        _comm(comm).all_reduce(tensor, op)
        _bump(tensor)
    else:
        torch.ops.ccl.all_reduce_(tensor, _h(comm), _op(op))
    return tensor


def all_gather(input: torch.Tensor, comm: CommLike) -> torch.Tensor:
    """Every rank's ``input`` concatenated along dim 0 (``all_gather_into_tensor``)."""
    if _eager(input):
        return _do_all_gather(_comm(comm), input)
    return torch.ops.ccl.all_gather(input, _h(comm), _n(comm))


def all_gather_into_(output: torch.Tensor, input: torch.Tensor, comm: CommLike) -> torch.Tensor:
    if _eager(output, input):
        _comm(comm).all_gather(output, input.contiguous())
        _bump(output)
    else:
        torch.ops.ccl.all_gather_into_(output, input, _h(comm))
    return output


def reduce_scatter(input: torch.Tensor, comm: CommLike, op: Any = "sum") -> torch.Tensor:
    """Reduce over ranks, then rank r keeps part r of dim 0 (``reduce_scatter_tensor``)."""
    if _eager(input):
        return _do_reduce_scatter(_comm(comm), input, _op(op))
    return torch.ops.ccl.reduce_scatter(input, _h(comm), _n(comm), _op(op))


def reduce_scatter_into_(output: torch.Tensor, input: torch.Tensor, comm: CommLike, op: Any = "sum") -> torch.Tensor:
    if _eager(output, input):
        _comm(comm).reduce_scatter(output, input.contiguous(), op)
        _bump(output)
    else:
        torch.ops.ccl.reduce_scatter_into_(output, input, _h(comm), _op(op))
    return output


def all_to_all(input: torch.Tensor, comm: CommLike) -> torch.Tensor:
    """Part p of dim 0 goes to rank p (``all_to_all_single`` with equal splits)."""
    if _eager(input):
        return _do_all_to_all(_comm(comm), input)
    return torch.ops.ccl.all_to_all(input, _h(comm))


def broadcast(input: torch.Tensor, comm: CommLike, root: int = 0) -> torch.Tensor:
    if _eager(input):
        return _do_broadcast(_comm(comm), input, root)
    return torch.ops.ccl.broadcast(input, _h(comm), _root("broadcast", root))


def broadcast_(tensor: torch.Tensor, comm: CommLike, root: int = 0) -> torch.Tensor:
    if _eager(tensor):
        _comm(comm).broadcast(tensor, root)
        _bump(tensor)
    else:
        torch.ops.ccl.broadcast_(tensor, _h(comm), _root("broadcast_", root))
    return tensor


def reduce(input: torch.Tensor, comm: CommLike, root: int = 0, op: Any = "sum") -> torch.Tensor:
    """Out of place; the result is meaningful on ``root`` only."""
    if _eager(input):
        return _do_reduce(_comm(comm), input, root, _op(op))
    return torch.ops.ccl.reduce(input, _h(comm), _root("reduce", root), _op(op))


def reduce_(tensor: torch.Tensor, comm: CommLike, root: int = 0, op: Any = "sum") -> torch.Tensor:
    if _eager(tensor):
        _comm(comm).reduce(tensor, root, op)
        _bump(tensor)
    else:
        torch.ops.ccl.reduce_(tensor, _h(comm), _root("reduce_", root), _op(op))
    return tensor


def all_gather_v(input: torch.Tensor, comm: CommLike, recvcounts: Any) -> torch.Tensor:
    """Every rank's ``input`` concatenated along dim 0, rank p giving ``recvcounts[p]`` rows
    (its ``input.shape[0]``; every rank passes the same ``recvcounts``): MPI's Allgatherv
    by rows. Returns a new tensor of ``sum(recvcounts)`` rows."""
    counts = list(recvcounts)
    if _eager(input):
        return _do_all_gather_v(_comm(comm), input, counts)
    return torch.ops.ccl.all_gather_v(input, _h(comm), counts)


def all_to_all_v(input: torch.Tensor, comm: CommLike, output_split_sizes: Any,
                 input_split_sizes: Any) -> torch.Tensor:
    """``all_to_all_single`` with uneven splits: ``input_split_sizes[p]`` rows of ``input``
    (in order) go to rank p, which keeps them as its part r, of
    ``output_split_sizes[r]`` rows, of a new tensor."""
    outs, ins = list(output_split_sizes), list(input_split_sizes)
    if _eager(input):
        return _do_all_to_all_v(_comm(comm), input, outs, ins)
    return torch.ops.ccl.all_to_all_v(input, _h(comm), outs, ins)


def send(tensor: torch.Tensor, comm: CommLike, peer: int) -> None:
    """``tensor`` to rank ``peer`` (NCCL's ncclSend; Communicator.send)."""
    if _eager(tensor):
        _comm(comm).send(tensor.contiguous(), peer)
    else:
        torch.ops.ccl.send(tensor, _h(comm), _peer("send", peer))


def recv_(tensor: torch.Tensor, comm: CommLike, peer: int) -> torch.Tensor:
    """Fills ``tensor`` (contiguous) with what rank ``peer`` sends; returns it."""
    if _eager(tensor):
        _comm(comm).recv(tensor, peer)
        _bump(tensor)
    else:
        torch.ops.ccl.recv_(tensor, _h(comm), _peer("recv_", peer))
    return tensor


def _peer(fn: str, peer: Any) -> int:
    return int_arg(f"ccl.torch.{fn}", "peer", peer, INT_MIN, INT_MAX, "a C int")


# ---- a memory pool whose tensors peers reach in place ----

class MemPool:
    """The memory pool of :func:`mem_pool`: ``with pool:`` makes the CUDA tensors
    allocated inside the block come from ``pool.pool`` (a ``torch.cuda.MemPool``), whose
    memory libccl allocates (cuMemCreate, exportable) and registers on ``comm``, so that
    collectives on those tensors run zero-copy.

    The rule: allocation in the pool is collective, as ``ccl_mem_alloc`` is. Every rank
    makes the same tensors, of the same sizes, in the same order, under the pool (ranks
    that run the same program do), because each new segment torch's caching allocator
    asks the pool for is registered on every rank at once (a rank whose allocator asks
    for a segment that another's does not waits for it, and the timeout names it). Freeing
    is not: a segment torch gives back (``torch.cuda.empty_cache()``, the pool's end) is
    freed on that rank at once, and its mappings go once every rank has freed it."""

    def __init__(self, comm: Communicator):
        if not hasattr(torch.cuda, "MemPool"):
            raise InvalidArgumentError(f"ccl.torch.mem_pool: torch {torch.__version__} has no torch.cuda.MemPool "
                                       "(torch 2.5 or later); use comm.register(tensor) or comm.empty(...) instead")
        from torch.cuda.memory import CUDAPluggableAllocator

        from . import _lib

        L = _lib.lib()
        if not hasattr(L, "ccl_mem_pool_attach"):
            raise InvalidArgumentError("ccl.torch.mem_pool: this libccl has no ccl_mem_pool_attach (rebuild it)")
        r = L.ccl_mem_pool_attach(comm.handle)
        if r:
            from ._errors import error_for

            raise error_for(r, "ccl.torch.mem_pool: " + (L.ccl_comm_last_error(comm.handle) or b"").decode(errors="replace"))
        self.comm = comm
        self._allocator = CUDAPluggableAllocator(_lib.library_path(), "ccl_mem_pool_alloc", "ccl_mem_pool_free")
        self.pool = torch.cuda.MemPool(self._allocator.allocator())
        self._ctx: list = []

    def __enter__(self) -> "MemPool":
        use = getattr(torch.cuda, "use_mem_pool", None) or getattr(torch.cuda.memory, "use_mem_pool", None)
        if use is None:
            raise InvalidArgumentError(f"ccl.torch.mem_pool: torch {torch.__version__} has no "
                                       "torch.cuda.use_mem_pool (a newer torch has it)")
        ctx = use(self.pool)
        ctx.__enter__()
        self._ctx.append(ctx)
        return self

    def __exit__(self, *exc: Any) -> None:
        self._ctx.pop().__exit__(*exc)


def mem_pool(comm: CommLike) -> MemPool:
    """The memory pool of ``comm`` (made at the first call, the same one after): CUDA
    tensors made under ``with ccl.torch.mem_pool(comm):`` are registered on ``comm``, so
    collectives on them run zero-copy::

        with ccl.torch.mem_pool(comm):
            x = torch.empty(1 << 20, device="cuda")   # every rank, the same tensors
        cclt.all_reduce_(x, comm)                      # no staging copy

    Allocation under the pool is collective (:class:`MemPool` says the rule). One
    communicator per GPU serves a pool (ranks sharing a GPU cannot); the GPU backend only.
    After the communicator is destroyed the pool's tensors stay valid (no longer
    registered), and new allocations in it fail."""
    c = _comm(comm)
    pool = getattr(c, "_ccl_pool", None)
    if pool is None:
        pool = MemPool(c)
        c._ccl_pool = pool
    return pool
