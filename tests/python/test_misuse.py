"""Misuse from Python (issue 29): every case must raise a clear error, its message
checked, before anything is written that the caller did not offer for writing.
Sections: read-only buffers; byte order and layout; integers (huge, negative,
fractional, bool); use after close; one thread at a time per communicator; GPU memory
on a CPU communicator; wrong sizes. make check runs it (tests/python/run.sh); the torch
cases skip where torch (or its CUDA) is missing."""
import os

import numpy as np
import pytest

import ccl
from conftest import ROOT, run_ranks


def frozen(values, dtype=np.float32):
    """A read-only array over an immutable bytes object (np.frombuffer), and the bytes."""
    raw = np.asarray(values, dtype).tobytes()
    return np.frombuffer(raw, dtype), raw


# ---- read-only buffers: every buffer a call writes is checked ----

class ReadOnlyInterface:
    """An object with only __array_interface__, which says read-only."""

    def __init__(self, a):
        self._a = a
        self.__array_interface__ = dict(a.__array_interface__, data=(a.ctypes.data, True))


class DLPackOnly:
    """An object with only __dlpack__ (numpy's: DLPack 1.0 capsules flag read-only arrays)."""

    def __init__(self, a):
        self._a = a

    def __dlpack__(self, **kw):
        return self._a.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


@pytest.fixture
def memmap_r(tmp_path):
    path = tmp_path / "ro.bin"
    np.arange(4, dtype=np.float32).tofile(path)
    return np.memmap(path, dtype=np.float32, mode="r"), path


def test_read_only_recvbuf_refused(comms2):
    c = comms2[0]
    ro, raw = frozen([1, 2, 3, 4])
    x = np.ones(4, np.float32)
    with pytest.raises(ccl.InvalidArgumentError, match=r"recvbuf is read-only \(numpy's flags.writeable is False\)"):
        c.all_reduce(x, out=ro)
    with pytest.raises(ccl.InvalidArgumentError, match="recvbuf is read-only"):
        c.all_reduce(ro)
    with pytest.raises(ccl.InvalidArgumentError, match="recvbuf is read-only"):
        c.Allreduce(x, ro)
    with pytest.raises(ccl.InvalidArgumentError, match="recvbuf is read-only"):
        c.all_gather(np.frombuffer(bytes(32), np.float32), x)
    with pytest.raises(ccl.InvalidArgumentError, match="output is read-only"):
        c.all_gather_v(ro, x[:2], [2, 2])
    with pytest.raises(ccl.InvalidArgumentError, match="output is read-only"):
        c.all_to_all_v(ro, x, [2, 2], [2, 2])
    with pytest.raises(ccl.InvalidArgumentError, match="dst is read-only"):
        c.copy(ro, x)
    assert raw == np.asarray([1, 2, 3, 4], np.float32).tobytes()     # the bytes object is as it was


def test_read_only_memmap_recv_is_an_error_not_a_crash(comms2, memmap_r):
    m, path = memmap_r
    with pytest.raises(ccl.InvalidArgumentError, match="tensor is read-only"):
        comms2[1].recv(m, 0)
    with pytest.raises(ccl.InvalidArgumentError, match="buf is read-only"):
        comms2[1].Recv(m, 0)
    with pytest.raises(ccl.InvalidArgumentError, match="tensor is read-only"):
        with ccl.group():
            comms2[1].recv(m, 0)
    np.testing.assert_array_equal(np.fromfile(path, np.float32), np.arange(4))


def test_read_only_interfaces_refused(comms2):
    c = comms2[0]
    base = np.zeros(4, np.float32)
    with pytest.raises(ccl.InvalidArgumentError, match="recvbuf is read-only .its array interface says so"):
        c.all_reduce(np.ones(4, np.float32), out=ReadOnlyInterface(base))
    ro = np.zeros(4, np.float32)
    ro.flags.writeable = False
    with pytest.raises(ccl.InvalidArgumentError, match="recvbuf is read-only .its DLPack capsule is flagged"):
        c.all_reduce(np.ones(4, np.float32), out=DLPackOnly(ro))
    assert not base.any() and not ro.any()


def test_read_only_input_still_read(comms2):
    # Inputs may be read-only, and so may the root's buffer of an in-place broadcast.
    def body(r, c):
        src, _ = frozen([r + 1.0] * 3)
        out = c.all_reduce(src, out=np.zeros(3, np.float32))
        b = frozen([5.0] * 3)[0] if r == 0 else np.zeros(3, np.float32)
        c.broadcast(b, root=0)
        c.Bcast(b, root=0)
        return out, b

    for out, b in run_ranks(comms2, body):
        np.testing.assert_array_equal(out, [3, 3, 3])
        np.testing.assert_array_equal(b, [5, 5, 5])


# ---- byte order and layout: never misread ----

def test_byte_swapped_refused(comms2):
    c = comms2[0]
    big = np.array([1, 2, 3], ">f4")
    keep = big.copy()
    msg = r"dtype >f4 is byte-swapped \(not this machine's little-endian order\)"
    with pytest.raises(ccl.InvalidArgumentError, match="recvbuf: " + msg):
        c.all_reduce(big)                                            # the fast road's array
    with pytest.raises(ccl.InvalidArgumentError, match="sendbuf: " + msg):
        c.all_reduce(big, out=np.zeros(3, np.float32))
    with pytest.raises(ccl.InvalidArgumentError, match="recvbuf: " + msg):
        c.Allreduce(np.zeros(3, np.float32), big)
    with pytest.raises(ccl.InvalidArgumentError, match="tensor: " + msg):
        c.send(big, 1)
    with pytest.raises(ValueError, match=msg):
        c.all_reduce(sendbuf=big.ctypes.data, recvbuf=big.ctypes.data, count=3, datatype=big.dtype)
    iface = ReadOnlyInterface(big)
    iface.__array_interface__["data"] = (big.ctypes.data, False)
    with pytest.raises(ccl.InvalidArgumentError, match="recvbuf: dtype >f4 is byte-swapped"):
        c.all_reduce(np.zeros(3, np.float32), out=iface)
    np.testing.assert_array_equal(big, keep)
    assert big.tobytes() == keep.tobytes()


def test_byte_swapped_three_ranks_never_gives_wrong_numbers():
    # The report: a 3-rank all_reduce of '>f4' ones..threes gave -1.5 instead of 6.0.
    cs = ccl.init_all(3, backend="cpu")
    try:
        def body(r, c):
            x = np.full(4, r + 1, ">f4")
            with pytest.raises(ccl.InvalidArgumentError, match="byte-swapped"):
                c.all_reduce(x)
            c.all_reduce(y := x.astype("=f4"))
            return y

        for y in run_ranks(cs, body):
            np.testing.assert_array_equal(y, [6, 6, 6, 6])
    finally:
        for c in cs:
            c.destroy()


def layouts():
    a = np.arange(16, dtype=np.float32).reshape(4, 4)
    return {"column": a[:, 1], "fortran": np.asfortranarray(a), "reversed": a.ravel()[::-1],
            "every other": a.ravel()[::2], "broadcast": np.broadcast_to(np.float32(1), (8,))}


@pytest.mark.parametrize("name", sorted(layouts()))
def test_non_contiguous_refused(comms2, name):
    c = comms2[0]
    x = layouts()[name]
    before = x.copy()
    with pytest.raises(ValueError, match="not C-contiguous"):
        c.all_reduce(x, out=np.zeros(x.size, np.float32))
    if x.flags.writeable:
        with pytest.raises(ValueError, match="recvbuf is not C-contiguous"):
            c.all_reduce(np.zeros(x.size, np.float32), out=x)
        with pytest.raises(ValueError, match="tensor is not C-contiguous"):
            c.recv(x, 1)
    np.testing.assert_array_equal(x, before)


def test_strided_interface_refused(comms2):
    a = np.arange(8, dtype=np.float32)

    class Strided:
        __array_interface__ = dict(a[::2].__array_interface__)

    with pytest.raises(ValueError, match=r"recvbuf is not contiguous \(strides \(8,\)\)"):
        comms2[0].all_reduce(np.zeros(4, np.float32), out=Strided())
    np.testing.assert_array_equal(a, np.arange(8))


def test_torch_layouts_refused(comms2):
    torch = pytest.importorskip("torch")
    c = comms2[0]
    t = torch.arange(16, dtype=torch.float32).reshape(4, 4)
    with pytest.raises(ValueError, match="recvbuf is not contiguous"):
        c.all_reduce(t.t())
    neg = torch._neg_view(torch.ones(4)) if hasattr(torch, "_neg_view") else None
    if neg is not None and neg.is_neg():
        with pytest.raises(ValueError, match="lazy negated or conjugated view"):
            c.all_reduce(neg)
    assert torch.equal(t, torch.arange(16, dtype=torch.float32).reshape(4, 4))


# ---- integers: checked before ctypes, which would wrap or truncate them ----

def test_huge_count_is_not_wrapped(comms2):
    c = comms2[0]
    x = np.arange(4, dtype=np.float32)
    out = np.full(4, -1, np.float32)
    with pytest.raises(ccl.InvalidArgumentError, match=r"all_reduce: count is 18446744073709551619, out of range: "
                                                        r"expected 0..18446744073709551615 \(elements\)"):
        c.all_reduce(sendbuf=x.ctypes.data, recvbuf=out.ctypes.data, count=2**64 + 3, datatype="f32")
    with pytest.raises(ccl.InvalidArgumentError, match="count is -1, out of range"):
        c.all_reduce(x, out=out, count=-1)
    with pytest.raises(ccl.InvalidArgumentError, match=r"all_gather_v: recvcounts\[1\] is 18446744073709551617"):
        c.all_gather_v(out, x[:1], [1, 2**64 + 1])
    with pytest.raises(ccl.InvalidArgumentError, match=r"all_to_all_v: rdispls\[0\] is -2"):
        c.all_to_all_v(out, x, [1, 1], [1, 1], rdispls=[-2, 0])
    with pytest.raises(ccl.InvalidArgumentError, match="copy: nbytes 17 is more than dst's 16 bytes"):
        c.copy(out, np.zeros(8, np.float32), 17)
    with pytest.raises(ccl.InvalidArgumentError, match="copy: nbytes is 18446744073709551632, out of range"):
        c.copy(out, x, 2**64 + 16)
    np.testing.assert_array_equal(out, [-1, -1, -1, -1])


@pytest.mark.parametrize("call, msg", [
    (lambda c, x: c.send(x, 2**32 + 1), r"send: peer is 4294967297, out of range: expected 0..1 "
                                        r"\(a rank of this communicator of 2\)"),
    (lambda c, x: c.recv(x, -1), "recv: peer is -1, out of range"),
    (lambda c, x: c.broadcast(x, root=2**32), "broadcast: root is 4294967296, out of range"),
    (lambda c, x: c.reduce(x, root=2**32), "reduce: root is 4294967296, out of range"),
    (lambda c, x: c.Bcast(x, root=2), "Bcast: root is 2, out of range"),
    (lambda c, x: c.Reduce(x, None, root=-1), "Reduce: root is -1, out of range"),
    (lambda c, x: c.Send(x, dest=3), "Send: dest is 3, out of range"),
    (lambda c, x: c.Recv(x, source=2**31), "Recv: source is 2147483648, out of range"),
])
def test_huge_ranks_are_not_wrapped(comms2, call, msg):
    x = np.full(4, 7, np.float32)
    with pytest.raises(ccl.InvalidArgumentError, match=msg):
        call(comms2[0], x)
    np.testing.assert_array_equal(x, [7, 7, 7, 7])


@pytest.mark.parametrize("call, msg", [
    (lambda c, x: c.all_reduce(x, count=1.9), "all_reduce: count must be an integer, not float 1.9"),
    (lambda c, x: c.all_reduce(x, count=True), "all_reduce: count must be an integer, not bool True"),
    (lambda c, x: c.broadcast(x, root=1.0), "broadcast: root must be an integer, not float 1.0"),
    (lambda c, x: c.reduce(x, root=np.float64(0)), "reduce: root must be an integer, not float64 0.0"),
    (lambda c, x: c.send(x, 1.9), "send: peer must be an integer, not float 1.9"),
    (lambda c, x: c.all_gather_v(x, x[:1], [1, 1.5]), r"all_gather_v: recvcounts\[1\] must be an integer"),
    (lambda c, x: c.empty(2.5), r"empty: shape\[0\] must be an integer, not float 2.5"),
    (lambda c, x: c.copy(x, x, nbytes=4.0), "copy: nbytes must be an integer"),
    (lambda c, x: c.use(None, 1.5), "use: min_bytes must be an integer"),
    (lambda c, x: c.load("allreduce/ring.ccl", root=0.5), "load: root must be an integer"),
])
def test_fractional_and_bool_integers_refused(comms2, call, msg):
    x = np.full(4, 7, np.float32)
    with pytest.raises(TypeError, match=msg):
        call(comms2[0], x)
    np.testing.assert_array_equal(x, [7, 7, 7, 7])


def test_numpy_integers_are_integers(comms2):
    def body(r, c):
        x = np.full(3, r + 1.0)
        c.broadcast(x, root=np.int64(1))
        return x

    for x in run_ranks(comms2, body):
        np.testing.assert_array_equal(x, [2, 2, 2])


def test_init_integers():
    with pytest.raises(TypeError, match="init_all: nranks must be an integer, not float 2.0"):
        ccl.init_all(2.0, backend="cpu")
    with pytest.raises(ccl.InvalidArgumentError, match="config: timeout_ms is 4294967296, out of range"):
        ccl.init_all(1, backend="cpu", timeout_ms=2**32)
    with pytest.raises(TypeError, match="config: heap_bytes must be an integer, not float"):
        ccl.init_all(1, backend="cpu", heap_bytes=1e9)
    with pytest.raises(ccl.InvalidArgumentError, match=r"init_all: devices\[0\] is -2, out of range"):
        ccl.init_all(1, backend="cpu", devices=[-2])
    with pytest.raises(TypeError, match="check: ranks must be an integer, not float 4.0"):
        ccl.check("allreduce/ring.ccl", ranks=4.0)


# ---- use after close ----

@pytest.mark.parametrize("call", [
    lambda c, x: c.all_reduce(x), lambda c, x: c.all_reduce(x, out=np.zeros(4, np.float32)),
    lambda c, x: c.Allreduce(np.ones(4, np.float32), x), lambda c, x: c.all_gather_v(x, x[:2], [2, 2]),
    lambda c, x: c.send(x, 1), lambda c, x: c.recv(x, 1), lambda c, x: c.copy(x, np.ones(4, np.float32)),
    lambda c, x: c.synchronize(), lambda c, x: c.explain_choice(), lambda c, x: c.empty(4),
    lambda c, x: c.load("allreduce/ring.ccl"),
])
def test_calls_on_a_closed_comm_raise(call):
    cs = ccl.init_all(2, backend="cpu")
    for c in cs:
        c.close()
    x = np.full(4, 7, np.float32)
    with pytest.raises(ccl.InvalidArgumentError, match="rank 0's communicator was destroyed"):
        call(cs[0], x)
    np.testing.assert_array_equal(x, [7, 7, 7, 7])


def test_algorithm_and_op_handle_after_close():
    cs = ccl.init_all(2, backend="cpu")
    alg = run_ranks(cs, lambda r, c: c.load(str(ROOT / "algorithms/allreduce/ring.ccl")))[0]
    h = cs[0].handle
    for c in cs:
        c.destroy()
    x = np.ones(4, np.float32)
    with pytest.raises(ccl.InvalidArgumentError, match="communicator was destroyed"):
        alg(x)
    with pytest.raises(ccl.InvalidArgumentError, match="was destroyed, and the algorithm with it"):
        alg.handle
    alg.free()                                                       # nothing left to free: no error
    with pytest.raises(ccl.InvalidArgumentError, match="no live ccl communicator with handle .*destroyed"):
        ccl.communicator(h)


def test_use_refuses_another_comms_algorithm(comms2):
    algs = run_ranks(comms2, lambda r, c: c.load(str(ROOT / "algorithms/allreduce/ring.ccl")))
    with pytest.raises(ccl.InvalidArgumentError, match="use: the algorithm must be one this communicator loaded"):
        comms2[0].use(algs[1])
    comms2[0].use(algs[0], 1 << 40, 1 << 41)     # its own is fine (for sizes no test uses)
    for a in algs:
        a.free()


EMPTY_AFTER_CLOSE = """
import gc, numpy as np, ccl
c = ccl.init_all(1, backend="cpu")[0]
a = c.empty(1000, "f32")
v = a[10:20]
c.destroy()
a[:] = 3.0                       # was a SIGSEGV: the heap was unmapped
v += 1
assert a.sum() == 3010.0 and c._pending
try:
    c.all_reduce(a)
except ccl.InvalidArgumentError as e:
    assert "destroyed" in str(e)
else:
    raise AssertionError("a call on a destroyed comm worked")
del a
gc.collect()
assert c._pending                # the view still holds the memory
del v
gc.collect()
assert not c._pending and c._live == 0
print("ok")
"""


def test_empty_array_outlives_its_comm():
    import subprocess
    import sys

    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    r = subprocess.run([sys.executable, "-c", EMPTY_AFTER_CLOSE], capture_output=True, text=True, env=env,
                       timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", (r.returncode, r.stdout, r.stderr[-2000:])


# ---- one thread at a time per communicator ----

def test_second_thread_on_a_busy_comm_raises():
    import threading

    cs = ccl.init_all(2, backend="cpu", timeout_ms=20000)
    try:
        first = np.full(4, 1, np.float32)
        started, done = threading.Event(), []

        def rank0():
            started.set()
            done.append(cs[0].all_reduce(first))                  # waits for rank 1

        t = threading.Thread(target=rank0, name="rank0-caller")
        t.start()
        started.wait()
        for _ in range(200):                                          # until rank 0's call holds the comm
            if cs[0]._busy_thread == "rank0-caller":
                break
            threading.Event().wait(0.01)
        other = np.full(4, 5, np.float32)
        with pytest.raises(ccl.InvalidUsageError, match="all_reduce: rank 0's communicator is in a call from "
                                                        "thread 'rank0-caller'; a communicator is used by one"):
            cs[0].all_reduce(other)
        with pytest.raises(ccl.InvalidUsageError, match="destroy: rank 0's communicator is in a call"):
            cs[0].destroy()
        with pytest.raises(ccl.InvalidUsageError, match="send: rank 0's communicator is in a call"):
            with ccl.group():
                cs[0].send(other, 1)
        np.testing.assert_array_equal(other, [5, 5, 5, 5])           # not written
        second = np.full(4, 2, np.float32)
        cs[1].all_reduce(second)                                     # rank 1 joins: rank 0's call ends
        t.join(30)
        np.testing.assert_array_equal(first, [3, 3, 3, 3])
        np.testing.assert_array_equal(second, [3, 3, 3, 3])
    finally:
        for c in cs:
            c.destroy()


# ---- wrong device: GPU memory on a CPU communicator ----

class FakeCudaArray:
    """An object that says it is CUDA memory (__cuda_array_interface__), over host memory
    here, so a call that took it would "work" without a crash: the test sees a refusal."""

    def __init__(self, a):
        self._a = a
        self.__cuda_array_interface__ = {"shape": a.shape, "typestr": a.dtype.str, "data": (a.ctypes.data, False),
                                         "version": 2, "strides": None}


@pytest.mark.parametrize("call, what", [
    (lambda c, g, h: c.all_reduce(g), "all_reduce: recvbuf"),
    (lambda c, g, h: c.all_reduce(h, out=g), "all_reduce: recvbuf"),
    (lambda c, g, h: c.all_reduce(g, out=h), "all_reduce: sendbuf"),
    (lambda c, g, h: c.Allreduce(g, h), "Allreduce: sendbuf"),
    (lambda c, g, h: c.all_gather_v(h, g, [2, 2]), "all_gather_v: input"),
    (lambda c, g, h: c.send(g, 1), "send: tensor"),
    (lambda c, g, h: c.copy(h, g), "copy: src"),
])
def test_gpu_memory_on_a_cpu_comm_refused(comms2, call, what):
    base = np.full(4, 7, np.float32)
    host = np.full(4, -1, np.float32)
    with pytest.raises(ccl.InvalidArgumentError, match=what + " is GPU memory, but rank 0's communicator runs the "
                                                              "CPU backend: pass host memory"):
        call(comms2[0], FakeCudaArray(base), host)
    np.testing.assert_array_equal(base, [7, 7, 7, 7])
    np.testing.assert_array_equal(host, [-1] * 4)


def test_cuda_tensor_on_a_cpu_comm_refused(comms2):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA device here (the __cuda_array_interface__ case is tested above)")
    t = torch.ones(4, device="cuda")
    with pytest.raises(ccl.InvalidArgumentError, match=r"all_reduce: recvbuf is GPU memory \(CUDA device 0\)"):
        comms2[0].all_reduce(t)
    assert bool((t == 1).all())


# ---- wrong sizes: refused before anything moves ----

@pytest.mark.parametrize("call, msg", [
    (lambda c, x, o: c.all_reduce(x, out=o[:3]), "all_reduce: recvbuf has 3 elements, fewer than the 4"),
    (lambda c, x, o: c.all_gather(o[:7], x), "all_gather: recvbuf has 7 elements, fewer than the 8"),
    (lambda c, x, o: c.reduce_scatter(o, x[:3]), "reduce_scatter: sendbuf's 3 elements are not a multiple of 2"),
    (lambda c, x, o: c.all_to_all(o[:2], x), "all_to_all: recvbuf has 2 elements, fewer than the 4"),
    (lambda c, x, o: c.Allreduce(x, o[:2]), "Allreduce: recvbuf has 2 elements, fewer than the 4"),
    (lambda c, x, o: c.Allreduce([x, 5, "f32"], o), "Allreduce: sendbuf has 4 elements, fewer than the 5"),
    (lambda c, x, o: c.Recv([o, 9, "f32"], 1), "Recv: count 9 is more than buf's 8 elements"),
    (lambda c, x, o: c.all_gather_v(o[:5], x[:2], [2, 4]), "all_gather_v: output has 5 elements, its counts"),
    (lambda c, x, o: c.all_to_all_v(o, x, [3, 3], [1, 1]), "all_to_all_v: input has 4 elements, its counts"),
])
def test_wrong_sizes_refused(comms2, call, msg):
    x = np.arange(4, dtype=np.float32)
    o = np.full(8, -1, np.float32)
    with pytest.raises(ccl.InvalidArgumentError, match=msg):
        call(comms2[0], x, o)
    np.testing.assert_array_equal(o, [-1] * 8)
    np.testing.assert_array_equal(x, np.arange(4))
