"""torch CPU tensors and the custom ops (eager, torch.compile). Skipped without torch."""
import pytest

torch = pytest.importorskip("torch")

import ccl  # noqa: E402
import ccl.torch as cclt  # noqa: E402
from conftest import run_ranks  # noqa: E402

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64, torch.uint8]


@pytest.mark.parametrize("dtype", DTYPES)
def test_all_reduce_torch_dtypes(comms2, dtype):
    xs = [torch.arange(10).to(dtype) + r for r in range(2)]
    want = xs[0].double() + xs[1].double()
    outs = run_ranks(comms2, lambda r, c: c.all_reduce(xs[r].clone()))
    for o in outs:
        assert o.dtype == dtype
        assert torch.equal(o.double(), want)


@pytest.mark.parametrize("name", ["int8", "uint32", "uint64"])
def test_new_integer_dtypes(comms2, name):
    """torch.int8, and torch.uint32 and torch.uint64 where this torch has them (2.3+, with
    few kernels: the values are built and read back through Python lists)."""
    dtype = getattr(torch, name, None)
    if dtype is None:
        pytest.skip(f"no torch.{name} in torch {torch.__version__}")
    assert ccl.DType[{"int8": "I8", "uint32": "U32", "uint64": "U64"}[name]] is ccl._types.to_dtype(dtype)
    hi = {"int8": 127, "uint32": (1 << 32) - 1, "uint64": (1 << 64) - 1}[name]
    lo = -128 if name == "int8" else 0
    cols = [[hi, lo, 5], [lo + 1, hi - 1, 6]]
    xs = [torch.tensor(c, dtype=dtype) for c in cols]
    outs = run_ranks(comms2, lambda r, c: c.all_reduce(xs[r], "max", out=torch.empty_like(xs[r])))
    for o in outs:
        assert o.dtype == dtype and o.tolist() == [hi, hi - 1, 6]
    ys = run_ranks(comms2, lambda r, c: cclt.all_reduce(xs[r], c, "min"))
    for y in ys:
        assert y.tolist() == [lo + 1, lo, 5]
    got = run_ranks(comms2, lambda r, c: (lambda e: (e.dtype, tuple(e.shape)))(c.empty(3, dtype)))
    assert got == [(dtype, (3,))] * 2


def test_fp8(comms2):
    if not hasattr(torch, "float8_e4m3fn"):
        pytest.skip("no float8 in this torch")
    xs = [torch.full((8,), 2.0).to(torch.float8_e4m3fn) for _ in range(2)]
    run_ranks(comms2, lambda r, c: c.all_reduce(xs[r]))
    assert torch.equal(xs[0].float(), torch.full((8,), 4.0))


def test_torch_collectives_shapes(comms2):
    def body(r, c):
        x = torch.full((3, 4), float(r + 1))
        g = c.all_gather(None, x)
        s = c.reduce_scatter(None, torch.ones(4, 5) * (r + 1))
        a = c.all_to_all(None, torch.arange(4.0) + 10 * r)
        b = c.broadcast(torch.full((2,), float(r)), root=1)
        return g, s, a, b

    (g0, s0, a0, b0), (g1, s1, a1, b1) = run_ranks(comms2, body)
    assert g0.shape == (6, 4) and torch.equal(g0[3:], torch.full((3, 4), 2.0))
    assert s0.shape == (2, 5) and torch.equal(s1, torch.full((2, 5), 3.0))
    assert torch.equal(a1, torch.tensor([2.0, 3.0, 12.0, 13.0]))
    assert torch.equal(b0, torch.full((2,), 1.0))


def test_non_contiguous_refused(comms2):
    with pytest.raises(ValueError, match="not contiguous"):
        comms2[0].all_reduce(torch.ones(4, 4).t())


@pytest.fixture(params=["fast path", "torch.ops"])
def route(request):
    """Runs a test with ccl.torch's eager fast path, then with every call through torch.ops.ccl."""
    cclt._force_ops = request.param == "torch.ops"
    yield request.param
    cclt._force_ops = False


def test_custom_ops_eager(comms2, route):
    def body(r, c):
        x = torch.arange(6.0).reshape(2, 3) + r
        y = cclt.all_reduce(x, c)
        assert y.data_ptr() != x.data_ptr()
        cclt.all_reduce_(x, c, "max")
        g = cclt.all_gather(torch.full((2,), float(r)), c)
        s = cclt.reduce_scatter(torch.ones(4), c)
        a = cclt.all_to_all(torch.arange(2.0) + 10 * r, c)
        b = cclt.broadcast(torch.full((3,), float(r)), c, root=1)
        d = cclt.reduce(torch.ones(3), c, root=0)
        e = torch.zeros(4)
        cclt.all_gather_into_(e, torch.full((2,), float(r)), c)
        return y, x, g, s, a, b, d, e

    res = run_ranks(comms2, body)
    y, x, g, s, a, b, d, e = res[0]
    assert torch.equal(y, torch.arange(6.0).reshape(2, 3) * 2 + 1)
    assert torch.equal(x, torch.arange(6.0).reshape(2, 3) + 1)
    assert torch.equal(g, torch.tensor([0.0, 0.0, 1.0, 1.0])) and torch.equal(e, g)
    assert torch.equal(s, torch.full((2,), 2.0))
    assert torch.equal(a, torch.tensor([0.0, 10.0]))
    assert torch.equal(b, torch.full((3,), 1.0)) and torch.equal(d, torch.full((3,), 2.0))


def test_custom_ops_opcheck(comms2):
    # torch.library.opcheck runs each op's schema, fake and autograd-registration checks;
    # the op runs several times, so every rank runs the same opcheck.
    if not hasattr(torch.library, "opcheck"):
        pytest.skip("no torch.library.opcheck")
    tests = ("test_schema", "test_faketensor")

    def body(r, c):
        torch.library.opcheck(torch.ops.ccl.all_reduce.default, (torch.ones(4), c.handle, "sum"), test_utils=tests)
        torch.library.opcheck(torch.ops.ccl.all_gather.default, (torch.ones(2, 3), c.handle, c.size), test_utils=tests)
        torch.library.opcheck(torch.ops.ccl.all_reduce_.default, (torch.ones(4), c.handle, "sum"), test_utils=tests)
        return True

    assert all(run_ranks(comms2, body))


def test_torch_compile_no_graph_break(comms2):
    def body(r, c):
        @torch.compile(fullgraph=True, backend="eager")
        def layer(x, w):
            y = x @ w
            y = cclt.all_reduce(y, c)
            cclt.all_reduce_(y, c, "avg")
            return cclt.all_gather(y, c)

        x = torch.ones(2, 3) * (r + 1)
        return layer(x, torch.ones(3, 2))

    outs = run_ranks(comms2, body, timeout=300)
    assert outs[0].shape == (4, 2)
    assert torch.equal(outs[0], torch.full((4, 2), 9.0))


def test_init_from_torch_store(tmp_path):
    import torch.distributed as dist

    if not dist.is_available():
        pytest.skip("torch.distributed not available")
    # One store object per rank, as in separate processes.
    stores = [dist.FileStore(str(tmp_path / "fs"), 2) for _ in range(2)]

    def body(r, _):
        return ccl.init_rank(r, 2, store=stores[r], backend="cpu")

    comms = run_ranks([None, None], body)
    xs = [torch.full((5,), r + 1.0) for r in range(2)]
    run_ranks(comms, lambda r, c: c.all_reduce(xs[r]))
    assert torch.equal(xs[0], torch.full((5,), 3.0))
    for c in comms:
        c.destroy()


def test_array_info_torch():
    from ccl._buffers import array_info

    x = torch.arange(6.0).reshape(2, 3)
    assert array_info(x) == (x.data_ptr(), 6, ccl.DType.F32, -1)
    p = torch.nn.Parameter(torch.ones(3, dtype=torch.bfloat16), requires_grad=False)
    assert array_info(p) == (p.data_ptr(), 3, ccl.DType.BF16, -1)

    class Sub(torch.Tensor):
        pass

    for other in (x.t(), torch.ones(2, dtype=torch.complex64), x.as_subclass(Sub)):
        assert array_info(other) is None  # as_buf decides (and says what is wrong)


def test_in_place_bumps_the_version_counter(comms2, route):
    # As torch's own in-place ops do, on both routes: autograd then refuses a backward
    # through a tensor saved before the collective overwrote it.
    def body(r, c):
        x, out = torch.ones(4), torch.zeros(4)
        versions = [x._version]
        cclt.all_reduce_(x, c)
        cclt.broadcast_(x, c, root=0)
        cclt.reduce_(x, c, root=0)
        versions.append(x._version)
        cclt.all_gather_into_(torch.zeros(8), torch.ones(4), c)
        cclt.reduce_scatter_into_(out, torch.ones(8), c)
        versions.append(out._version)
        w = torch.ones(4, requires_grad=True)
        y = torch.ones(4)
        z = (y * w).sum()  # saves y
        cclt.all_reduce_(y, c)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            z.backward()
        return versions

    for v in run_ranks(comms2, body):
        assert v[1] >= v[0] + 3 and v[2] >= 1


def test_custom_ops_full_opcheck():
    # Every check of torch.library.opcheck (schema, autograd registration, fake tensor,
    # AOT dispatch), each op on a communicator of one rank (opcheck runs an op many times).
    if not hasattr(torch.library, "opcheck"):
        pytest.skip("no torch.library.opcheck")
    (c,) = ccl.init_all(1, backend="cpu")
    h, x = c.handle, torch.arange(6.0).reshape(3, 2)
    ops = torch.ops.ccl
    for op, args in [(ops.all_reduce, (x, h, "sum")), (ops.all_gather, (x, h, 1)),
                     (ops.reduce_scatter, (x, h, 1, "max")), (ops.all_to_all, (x, h)), (ops.broadcast, (x, h, 0)),
                     (ops.reduce, (x, h, 0, "sum")), (ops.all_reduce_, (x.clone(), h, "sum")),
                     (ops.broadcast_, (x.clone(), h, 0)), (ops.reduce_, (x.clone(), h, 0, "sum")),
                     (ops.all_gather_into_, (torch.zeros(3, 2), x, h)),
                     (ops.reduce_scatter_into_, (torch.zeros(3, 2), x, h, "sum"))]:
        torch.library.opcheck(op.default, args)
    c.destroy()


def test_ops_have_one_python_kernel():
    # The per-call cost of torch.ops.ccl.* (docs/python.md): one Python kernel for every
    # device and none on the autograd keys, where torch.library.custom_op puts two more.
    for name in ("all_reduce", "all_reduce_", "all_gather_into_", "reduce_scatter"):
        q = f"ccl::{name}"
        assert torch._C._dispatch_has_kernel_for_dispatch_key(q, "CompositeExplicitAutograd")
        for key in ("Autograd", "ADInplaceOrView"):
            assert not torch._C._dispatch_has_kernel_for_dispatch_key(q, key), (q, key)


def test_in_place_under_inference_mode(comms2, route):
    # Inference tensors have no version counter: the in-place ops leave it alone there.
    def body(r, c):
        with torch.inference_mode():
            x = torch.full((3,), float(r + 1))
            cclt.all_reduce_(x, c)
            cclt.broadcast_(x, c, root=1)
        return x

    for x in run_ranks(comms2, body):
        assert torch.equal(x, torch.full((3,), 3.0))


class _ReduceFromTensorParallel(torch.autograd.Function):
    """docs/python.md's recipe: the row-parallel layer's all-reduce, whose output every rank
    holds whole, so its gradient passes through unchanged (Megatron's
    reduce_from_tensor_model_parallel_region; dist.all_reduce in place acts the same)."""

    @staticmethod
    def forward(ctx, y, comm):
        return cclt.all_reduce(y, comm)

    @staticmethod
    def backward(ctx, grad):
        return grad, None


def test_tensor_parallel_recipe_trains(comms2):
    """The recipe's row-parallel linear gives each rank the gradient of its weight shard
    that the whole layer on one process gives that slice."""
    torch.manual_seed(0)
    x, w = torch.randn(5, 8), torch.randn(3, 8)
    shards = [slice(0, 4), slice(4, 8)]

    def body(r, c):
        wr = w[:, shards[r]].clone().requires_grad_()
        y = _ReduceFromTensorParallel.apply(x[:, shards[r]] @ wr.t(), c)
        (y * y).sum().backward()
        return y.detach(), wr.grad

    (y0, g0), (y1, g1) = run_ranks(comms2, body)
    wf = w.clone().requires_grad_()
    yf = x @ wf.t()
    (yf * yf).sum().backward()
    assert torch.allclose(y0, yf.detach(), atol=1e-5) and torch.allclose(y1, yf.detach(), atol=1e-5)
    assert torch.allclose(g0, wf.grad[:, shards[0]], atol=1e-4)
    assert torch.allclose(g1, wf.grad[:, shards[1]], atol=1e-4)


def test_v_collectives_and_p2p_ops(comms2, route):
    counts = [1, 3]

    def body(r, c):
        x = torch.full((counts[r], 2), float(r + 1))
        g = cclt.all_gather_v(x, c, counts)
        splits = [2, 1] if r == 0 else [1, 2]                 # here symmetric: out splits = in splits
        a = cclt.all_to_all_v(torch.arange(3.0) + 10 * r, c, splits, splits)
        got = torch.zeros(3, dtype=torch.int64)
        with ccl.group():
            cclt.send(torch.arange(3) + 100 * r, c, 1 - r)
            cclt.recv_(got, c, 1 - r)
        if r == 0:
            cclt.send(torch.ones(2), c, peer=1)
            back = None
        else:
            back = cclt.recv_(torch.zeros(2), c, peer=0)
        return g, a, got, back

    (g0, a0, p0, _), (g1, a1, p1, back) = run_ranks(comms2, body)
    want = torch.tensor([[1.0, 1.0], [2.0, 2.0], [2.0, 2.0], [2.0, 2.0]])
    assert torch.equal(g0, want) and torch.equal(g1, want)
    assert torch.equal(a0, torch.tensor([0.0, 1.0, 10.0]))
    assert torch.equal(a1, torch.tensor([2.0, 11.0, 12.0]))
    assert torch.equal(p0, torch.arange(3) + 100) and torch.equal(p1, torch.arange(3))
    assert torch.equal(back, torch.ones(2))


def test_v_ops_checks(comms2):
    with pytest.raises(ccl.InvalidArgumentError, match="all_gather_v: rank 0's input has 2 rows, but recvcounts"):
        cclt.all_gather_v(torch.ones(2), comms2[0], [1, 1])
    with pytest.raises(ccl.InvalidArgumentError, match="input_split_sizes add up to 3 rows, but the input has 2"):
        cclt.all_to_all_v(torch.ones(2), comms2[0], [1, 1], [1, 2])
    with pytest.raises(TypeError, match="recvcounts.1. must be an integer, not float"):
        cclt.all_gather_v(torch.ones(1), comms2[0], [1, 1.5])


def test_v_ops_opcheck(comms2):
    if not hasattr(torch.library, "opcheck"):
        pytest.skip("no torch.library.opcheck")
    tests = ("test_schema", "test_faketensor")

    def body(r, c):
        torch.library.opcheck(torch.ops.ccl.all_gather_v.default, (torch.ones(r + 1, 2), c.handle, [1, 2]),
                              test_utils=tests)
        torch.library.opcheck(torch.ops.ccl.all_to_all_v.default, (torch.ones(2, 3), c.handle, [1, 1], [1, 1]),
                              test_utils=tests)
        return True

    assert all(run_ranks(comms2, body))


def test_v_and_p2p_ops_compile(comms2):
    def body(r, c):
        @torch.compile(fullgraph=True, backend="eager")
        def step(x):
            g = cclt.all_gather_v(x, c, [2, 2])
            a = cclt.all_to_all_v(g, c, [2, 2], [2, 2])
            buf = torch.zeros(4)
            if r == 0:
                cclt.send(a, c, 1)
                cclt.recv_(buf, c, 1)
            else:
                cclt.recv_(buf, c, 0)
                cclt.send(a * 10, c, 0)
            return a, buf

        return step(torch.full((2,), float(r + 1)))

    (a0, b0), (a1, b1) = run_ranks(comms2, body, timeout=300)
    assert torch.equal(a0, torch.tensor([1.0, 1.0, 1.0, 1.0])) and torch.equal(a1, torch.tensor([2.0, 2.0, 2.0, 2.0]))
    assert torch.equal(b1, a0) and torch.equal(b0, a1 * 10)
