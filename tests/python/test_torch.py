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
