"""GPU tests: torch CUDA tensors, streams, CUDA graph capture, the custom ops, symmetric
tensors, torch.compile, process mode under torchrun. Marked `gpu`; skipped without a
CUDA GPU. Run them with

    CCL_LIBRARY=build/libccl.so python -m pytest tests/python -m gpu

(tests/python/run.sh BUILD gpu does that; make check-gpu calls it). On one GPU, the ranks of
a threads-mode communicator share it (each rank thread on its own stream)."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")

import ccl  # noqa: E402
import ccl.torch as cclt  # noqa: E402
from conftest import run_ranks  # noqa: E402

N = 2


@pytest.fixture(scope="module")
def gcomms():
    # A long timeout: a rank may wait in a collective while its peer's thread is still
    # compiling (torch.compile, the first load of an algorithm).
    cs = ccl.init_all(N, backend="gpu", timeout_ms=180000)
    yield cs
    for c in cs:
        c.destroy()


def on_stream(fn):
    """Runs fn(r, c) with a rank-private CUDA stream current (ranks may share a GPU)."""

    def body(r, c):
        dev = r % torch.cuda.device_count()
        torch.cuda.set_device(dev)
        s = torch.cuda.Stream(dev)
        with torch.cuda.stream(s):
            out = fn(r, c)
        s.synchronize()
        return out

    return body


def test_backend_is_gpu(gcomms):
    assert gcomms[0].backend == "gpu"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.int32, torch.float64])
def test_all_reduce_cuda(gcomms, dtype):
    def fn(r, c):
        x = (torch.arange(1 << 16, device="cuda") % 5 + r).to(dtype)
        y = torch.empty_like(x)
        c.all_reduce(x, out=y)
        c.all_reduce(x, "max")
        return y.cpu(), x.cpu()

    outs = run_ranks(gcomms, on_stream(fn))
    base = torch.arange(1 << 16) % 5
    for y, x in outs:
        assert torch.equal(y.double(), (2 * base + 1).double())
        assert torch.equal(x.double(), (base + 1).double())


def test_six_collectives_cuda(gcomms):
    def fn(r, c):
        g = c.all_gather(None, torch.full((3,), float(r), device="cuda"))
        s = c.reduce_scatter(None, torch.ones(2 * N, device="cuda") * (r + 1))
        a = c.all_to_all(None, torch.arange(float(N), device="cuda") + 10 * r)
        b = torch.full((4,), float(r), device="cuda")
        c.broadcast(b, root=N - 1)
        d = c.reduce(torch.ones(4, device="cuda"), root=0, out=torch.zeros(4, device="cuda"))
        return [t.cpu() for t in (g, s, a, b, d)]

    outs = run_ranks(gcomms, on_stream(fn))
    g, s, a, b, d = outs[0]
    assert torch.equal(g, torch.arange(float(N)).repeat_interleave(3))
    assert torch.equal(s, torch.full((2,), float(N * (N + 1) // 2)))
    assert torch.equal(a, torch.arange(float(N)) * 10)
    assert torch.equal(b, torch.full((4,), float(N - 1)))
    assert torch.equal(d, torch.full((4,), float(N)))


def test_given_stream_and_cuda_array_interface(gcomms):
    class CAI:
        def __init__(self, t):
            self.t = t
            self.__cuda_array_interface__ = t.__cuda_array_interface__

    def body(r, c):
        torch.cuda.set_device(r % torch.cuda.device_count())
        s = torch.cuda.Stream()
        x = torch.full((1000,), float(r + 1), device="cuda")
        torch.cuda.synchronize()
        c.all_reduce(CAI(x), stream=s)
        s.synchronize()
        return x.cpu()

    for x in run_ranks(gcomms, body):
        assert torch.equal(x, torch.full((1000,), 3.0))


def test_fast_road_takes_torchs_current_stream(gcomms):
    # The fast road reads the device and the current stream without a torch.cuda.Stream:
    # torch._C._cuda_getCurrentRawStream, this thread's current stream of that device.
    from ccl._buffers import array_info
    from ccl._comm import _current_stream

    dev = torch.cuda.device_count() - 1
    x = torch.ones(4, device=f"cuda:{dev}")
    assert array_info(x) == (x.data_ptr(), 4, ccl.DType.F32, dev)
    s = torch.cuda.Stream(dev)
    with torch.cuda.stream(s):
        assert _current_stream(dev) == s.cuda_stream
    assert _current_stream(dev) == (torch.cuda.current_stream(dev).cuda_stream or None)


@pytest.fixture(params=["fast path", "torch.ops"])
def route(request):
    cclt._force_ops = request.param == "torch.ops"
    yield request.param
    cclt._force_ops = False


def test_custom_ops_cuda(gcomms, route):
    def fn(r, c):
        x = torch.full((8, 4), float(r + 1), device="cuda")
        y = cclt.all_reduce(x, c)
        g = cclt.all_gather(x, c)
        cclt.all_reduce_(x, c, "avg")
        return y.cpu(), g.cpu(), x.cpu()

    y, g, x = run_ranks(gcomms, on_stream(fn))[1]
    assert torch.equal(y, torch.full((8, 4), 3.0))
    assert g.shape == (16, 4) and torch.equal(x, torch.full((8, 4), 1.5))


def test_cuda_graph_capture(gcomms, route):
    def body(r, c):
        torch.cuda.set_device(r % torch.cuda.device_count())
        s = torch.cuda.Stream()
        x = torch.zeros(4096, device="cuda")
        with torch.cuda.stream(s):
            cclt.all_reduce_(x, c)  # warm up: loads the algorithm outside capture
        s.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=s, capture_error_mode="thread_local"):
            cclt.all_reduce_(x, c)
        results = []
        for k in range(3):
            with torch.cuda.stream(s):
                x.fill_(float(r + k))
                g.replay()
            s.synchronize()
            results.append(x[:4].cpu())
        return results

    outs = run_ranks(gcomms, body)
    for k in range(3):
        assert torch.equal(outs[0][k], torch.full((4,), float(1 + 2 * k)))


def test_symmetric_tensor(gcomms):
    def fn(r, c):
        t = c.empty((256, 4), torch.bfloat16)
        assert t.is_cuda and t.dtype == torch.bfloat16 and t.shape == (256, 4)
        t.fill_(r + 1)
        c.all_reduce(t)
        return t.float().cpu()

    for t in run_ranks(gcomms, on_stream(fn)):
        assert torch.equal(t, torch.full((256, 4), 3.0))


def test_send_recv_cuda(gcomms):
    # A ring of CUDA tensors in one group per rank, then a round trip outside groups.
    def fn(r, c):
        x = torch.arange(100000, device="cuda", dtype=torch.float32) + 1000 * r
        y = torch.empty(100000, device="cuda", dtype=torch.float32)
        with ccl.group():
            c.send(x, (r + 1) % N)
            c.recv(y, (r - 1) % N)
        return y.cpu()

    for r, y in enumerate(run_ranks(gcomms, on_stream(fn))):
        assert torch.equal(y, torch.arange(100000, dtype=torch.float32) + 1000 * ((r - 1) % N))


def test_torch_compile_cuda(gcomms):
    def fn(r, c):
        @torch.compile(fullgraph=True)
        def f(x):
            return cclt.all_reduce(x * 2, c) + 1

        return f(torch.ones(64, device="cuda")).cpu()

    for y in run_ranks(gcomms, on_stream(fn), timeout=600):
        assert torch.equal(y, torch.full((64,), 5.0))


def test_torchrun_process_mode(tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(
        "import os, sys, torch, ccl\n"
        "torch.cuda.set_device(int(os.environ['LOCAL_RANK']) % torch.cuda.device_count())\n"
        "try:\n"
        "    comm = ccl.init_rank(backend='gpu')\n"
        "except ccl.CclError as e:\n"
        "    print('refused:', type(e).__name__, e, flush=True); sys.exit(7)\n"
        "x = torch.full((1 << 20,), float(comm.rank + 1), device='cuda')\n"
        "comm.all_reduce(x); torch.cuda.synchronize()\n"
        "assert torch.equal(x, torch.full_like(x, 3.0)), x[:4]\n"
        "print('ok rank', comm.rank, flush=True)\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    p = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                        str(script)], env=env, capture_output=True, text=True, timeout=300)
    out = p.stdout + p.stderr
    if torch.cuda.device_count() >= 2:
        assert p.returncode == 0 and "ok rank 0" in out and "ok rank 1" in out, out
    else:
        # Separate processes never share a GPU: both ranks are refused, with a message.
        assert "refused:" in out and "ok rank" not in out, out


@pytest.mark.parametrize("example", ["topk_allreduce.py", "topk_allreduce.py --method tree", "custom_algorithm.py"],
                         ids=["topk_gather", "topk_tree", "custom_algorithm"])
def test_examples_gpu(example):
    from conftest import ROOT

    script, *more = example.split()
    p = subprocess.run([sys.executable, str(ROOT / "examples" / "python" / script), "--ranks", "2", "--backend",
                        "gpu"] + more, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and (": ok" in p.stdout or "every element right" in p.stdout), p.stdout + p.stderr
    assert "gpu" in p.stdout


def test_overhead_bench_gpu():
    from conftest import ROOT

    p = subprocess.run([sys.executable, str(ROOT / "bench" / "python_overhead.py"), "--backend", "gpu", "--ranks", "2",
                        "--iters", "200"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and "CUDA graph" in p.stdout, p.stdout + p.stderr
    print(p.stdout)
